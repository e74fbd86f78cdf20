"""Start env server processes with the standard library only (a Ray node's worker does, first).

``launch_server`` works out how an env folder is served (``server_command``: which app, from
where) and starts it through ``spawn_server``. Nothing here imports the rest of taskhub, so a
Ray node's worker, which receives this module by value (``taskhub._ray_node``), starts its env
servers before it imports the runner: the servers' start and the worker's imports overlap.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Largest WebSocket message the launched servers accept (uvicorn's ``--ws-max-size``).
WS_MAX_SIZE = 16 * 1024 * 1024


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    # PR_SET_PDEATHSIG fires when the thread that forked dies: launch from a thread that lives
    # as long as the process (the event loop's, the main one).
    # SIGKILL, not SIGTERM: a server stuck in its event loop never handles SIGTERM.
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


@dataclass(frozen=True)
class ServerCommand:
    """How an env folder is served by uvicorn, with every path relative to the folder."""

    app: str
    """``module:attr``, as uvicorn takes it."""
    workdir: str = "."
    """The folder the server starts in (relative, POSIX)."""
    app_dir: str | None = None
    """uvicorn's ``--app-dir`` (``..``: the folder's parent, for an env imported as a package)."""
    pythonpath: tuple[str, ...] = ()
    """Folders put first on ``PYTHONPATH``."""
    note: str = ""
    """How the app was found (the first line of the server's log); empty for the manifest's."""

    def argv(self, folder: Path, *, port: int, python: str | None = None) -> list[str]:
        """The command line that serves ``folder`` on loopback ``port``."""
        argv = [
            python or sys.executable,
            "-m",
            "uvicorn",
            self.app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--ws-max-size",
            str(WS_MAX_SIZE),
        ]
        if self.app_dir == "..":
            argv += ["--app-dir", str(folder.parent)]
        elif self.app_dir is not None:
            argv += ["--app-dir", str(folder / self.app_dir)]
        return argv


def spawn_server(
    folder: Path,
    command: ServerCommand,
    *,
    port: int,
    log_path: Path,
    max_sessions: int | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` serving ``folder`` on ``port``, its output going to ``log_path``.

    Args:
        folder: The env folder.
        command: How it is served.
        port: The loopback port to bind.
        log_path: The server's log (its folder is created).
        max_sessions: Exported as ``MAX_CONCURRENT_ENVS`` for envs that read it.
        python: Interpreter to run (this one by default).
        env: Variables set for the server on top of this process's environment.

    Returns:
        The server's process (not waited for: it may not answer yet). On Linux it is told to
        die with the thread that started it.
    """
    variables = {**os.environ, **(env or {})}
    if max_sessions is not None:
        variables["MAX_CONCURRENT_ENVS"] = str(max_sessions)
    variables.setdefault("PYTHONUNBUFFERED", "1")
    if command.pythonpath:  # the Dockerfile's ENV PYTHONPATH, as folders of this env
        paths = [str(folder / p) for p in command.pythonpath]
        variables["PYTHONPATH"] = os.pathsep.join(
            filter(None, [*paths, variables.get("PYTHONPATH")])
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if command.note:
        log_path.write_text(f"taskhub: serving {command.app}: {command.note}\n", encoding="utf-8")
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command.argv(folder, port=port, python=python),
            cwd=folder / command.workdir,
            env=variables,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
