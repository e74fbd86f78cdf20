"""An isolated virtual environment per submission: one's packages cannot break another's.

The venv is layered: it is created empty, taskhub's own environment (which provides the
OpenEnv server library and uvicorn) is appended to its ``sys.path`` through a ``.pth`` file,
and the submission's declared requirements are installed into the venv itself, where they
take precedence over the layer. A submission that pins a library differently gets its own
copy; nothing it installs is visible to any other submission or to taskhub.

pip's output goes to the submission's log as it is written, the install has its own time
limit, and the wheels pip downloads or builds are kept in a cache shared by the batch's
submissions (pip's cache is safe to share between concurrent installs).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sys
import sysconfig
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from taskhub import EnvLaunchError

#: The file that makes the host environment a read-only fallback layer of the venv.
LAYER_PTH = "_taskhub_layer.pth"
#: Default time limit of one submission's install.
DEFAULT_INSTALL_TIMEOUT_S = 600.0
#: Lines of pip's output an install error quotes.
TAIL_LINES = 25
#: pip's lines an install error leaves out (they say nothing about what went wrong).
QUIET_PREFIXES = ("Requirement already satisfied:",)


class InstallError(EnvLaunchError):
    """Raised when a submission's requirements cannot be installed (or ran out of time)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def requirement_files(folder: Path) -> list[Path]:
    """The submission's requirement lists: requirements.txt files, else pyproject's deps."""
    found = [
        p
        for p in (folder / "requirements.txt", folder / "server" / "requirements.txt")
        if p.is_file()
    ]
    return found


def pyproject_dependencies(folder: Path) -> list[str]:
    """``[project].dependencies`` of the folder's pyproject.toml (empty when none)."""
    path = folder / "pyproject.toml"
    if not path.is_file():
        return []
    try:
        deps = (
            tomllib.loads(path.read_text(encoding="utf-8"))
            .get("project", {})
            .get("dependencies", [])
        )
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    return [d for d in deps if isinstance(d, str)]


async def _run(
    argv: list[str],
    cwd: Path,
    timeout: float,
    *,
    what: str,
    log: BinaryIO | None = None,
    on_start: Callable[[int], None] | None = None,
    limit: float | None = None,
) -> str:
    """Run ``argv``; its output is copied to ``log`` as it comes. Returns the output's tail.

    ``limit`` is the time limit an error names (the whole preparation's, of which
    ``timeout`` is what is left); ``timeout`` itself when None.

    The command leads its own process group (a build backend pip starts is killed with it);
    ``on_start`` receives its pid, so that a supervisor can kill the group too.

    Raises:
        InstallError: It failed, or it ran longer than ``timeout`` (then it is killed).
    """
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    if on_start is not None:
        on_start(process.pid)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    started = time.monotonic()

    async def pump() -> None:
        if process.stdout is not None:
            async for raw in process.stdout:
                if log is not None:
                    log.write(raw)
                    log.flush()
                line = raw.decode(errors="replace").rstrip()
                if not line.startswith(QUIET_PREFIXES):
                    tail.append(line)
        await process.wait()

    try:
        async with asyncio.timeout(timeout):
            await pump()
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        if not isinstance(exc, TimeoutError):
            raise
        raise InstallError(
            f"{what} ran out of its {limit or timeout:.0f}s time limit and was stopped. Its last "
            "lines:\n" + "\n".join(tail),
            timed_out=True,
        ) from None
    text = "\n".join(tail)
    if process.returncode != 0:
        raise InstallError(
            f"{what} failed (exit code {process.returncode}) after "
            f"{time.monotonic() - started:.0f}s. Its last lines:\n{text}"
        )
    return text


async def prepare_venv(
    folder: Path,
    root: Path,
    *,
    offline: bool = False,
    timeout: float = DEFAULT_INSTALL_TIMEOUT_S,
    cache_dir: Path | None = None,
    log: BinaryIO | None = None,
    on_start: Callable[[int], None] | None = None,
) -> Path:
    """Create ``root/venv`` and install the submission's requirements into it.

    Args:
        folder: The submission's env folder (requirement paths are relative to it).
        root: Where the venv goes.
        offline: Install from local paths only (``pip --no-index``).
        timeout: Time limit of the whole preparation (venv and install).
        cache_dir: pip's cache (shared by the submissions of a batch); none when None.
        log: Where pip's output is copied as it runs (the submission's log).
        on_start: Called with the pid of each command started (each leads its own process
            group), so that a supervisor can kill what is left if this process dies.

    Returns:
        The venv's Python interpreter, to launch the env with.

    Raises:
        InstallError: The venv cannot be made, a requirement cannot be installed, or the
            install ran out of ``timeout`` (``timed_out`` is then true).
    """
    deadline = time.monotonic() + timeout
    folder, root = folder.resolve(), root.resolve()  # pip runs in the folder

    def left() -> float:
        return max(deadline - time.monotonic(), 0.001)

    venv = root / "venv"
    await _run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        root,
        left(),
        what="creating the virtual environment",
    )
    python = venv / "bin" / "python"
    site = Path(
        (
            await _run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                root,
                left(),
                what="reading the virtual environment's site-packages",
            )
        ).strip()
    )
    layer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / LAYER_PTH).write_text("\n".join(sorted(layer)) + "\n", encoding="utf-8")
    files = requirement_files(folder)
    extra = [] if files else pyproject_dependencies(folder)
    if not files and not extra:
        return python
    argv = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "--no-build-isolation",
    ]
    argv += ["--cache-dir", str(cache_dir)] if cache_dir is not None else ["--no-cache-dir"]
    if offline:
        argv.append("--no-index")
    for path in files:
        argv += ["-r", str(path)]
    argv += extra
    what = (
        "installing the submission's requirements ("
        + (", ".join(str(p.relative_to(folder)) for p in files) or "pyproject.toml")
        + ")"
    )
    if log is not None:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
    await _run(argv, folder, left(), what=what, log=log, on_start=on_start, limit=timeout)
    return python
