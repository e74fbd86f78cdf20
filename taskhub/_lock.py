"""One writer per run directory: an exclusive lock held while a run (or a resume) writes it.

The lock is an ``flock`` on ``<run_dir>/.lock``, which also holds who took it (pid, host, start
time). The kernel releases it when its process ends, however it ends: the lock of a killed run
is taken over by the next writer, while a live writer refuses a second one naming itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from taskhub._errors import ResultsError

LOCK_FILE = ".lock"


class RunLock:
    """The exclusive writer's lock of a run directory.

    Use it as a context manager::

        with RunLock(run_dir):
            ...  # append to episodes.jsonl, rewrite run.json
    """

    def __init__(self, run_dir: Path) -> None:
        """Prepare the lock of ``run_dir`` (nothing is taken before ``acquire``)."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock, creating the run directory if needed.

        Raises:
            ResultsError: Another live process holds it (its pid, host and start are named).
        """
        if self._fd is not None:
            return self
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ResultsError(f"cannot lock {self.run_dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(os.pread(fd, 4096, 0))
            os.close(fd)
            raise ResultsError(
                f"{self.run_dir} is being written by another taskhub process ({holder}); one "
                "writer per run directory: wait for it to finish (or stop it), then resume"
            ) from None
        # The previous holder, if any, is gone: its lock died with it. Say who holds it now.
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Let the lock go (the file stays; it is only a place to lock)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def remove_if_alone(self) -> None:
        """Remove the lock file, and the run directory if nothing else is in it."""
        self.release()
        try:
            self.path.unlink(missing_ok=True)
            self.run_dir.rmdir()
        except OSError:  # not empty, or gone: leave it
            pass

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _describe(raw: bytes) -> str:
    try:
        owner = json.loads(raw)
        return f"pid {owner['pid']} on host {owner['host']}, since {owner['started_at']}"
    except (ValueError, KeyError, TypeError):
        return "holder unknown"
