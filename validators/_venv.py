"""An isolated virtual environment per submission: one's packages cannot break another's.

The venv is layered: it is created empty, taskhub's own environment (which provides the
OpenEnv server library and uvicorn) is appended to its ``sys.path`` through a ``.pth`` file,
and the submission's declared requirements are installed into the venv itself, where they
take precedence over the layer. A submission that pins a library differently gets its own
copy; nothing it installs is visible to any other submission or to taskhub.
"""

from __future__ import annotations

import asyncio
import sys
import sysconfig
import tomllib
from pathlib import Path

from taskhub import EnvLaunchError

#: The file that makes the host environment a read-only fallback layer of the venv.
LAYER_PTH = "_taskhub_layer.pth"


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


async def _run(argv: list[str], cwd: Path, timeout: float) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(timeout):
            out, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise EnvLaunchError(f"{' '.join(argv[:4])}... took longer than {timeout:g}s") from None
    text = out.decode(errors="replace")
    if process.returncode != 0:
        raise EnvLaunchError(f"{' '.join(argv[:5])}... failed:\n{text[-2000:]}")
    return text


async def prepare_venv(
    folder: Path, root: Path, *, offline: bool = False, timeout: float = 600.0
) -> Path:
    """Create ``root/venv`` and install the submission's requirements into it.

    Args:
        folder: The submission's env folder (requirement paths are relative to it).
        root: Where the venv goes.
        offline: Install from local paths only (``pip --no-index``).
        timeout: Deadline of the whole preparation.

    Returns:
        The venv's Python interpreter, to launch the env with.

    Raises:
        EnvLaunchError: The venv cannot be made or a requirement cannot be installed.
    """
    venv = root / "venv"
    await _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root, timeout)
    python = venv / "bin" / "python"
    site = Path(
        (
            await _run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                root,
                timeout,
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
        "--no-cache-dir",
        "--no-build-isolation",
        "-q",
    ]
    if offline:
        argv.append("--no-index")
    for path in files:
        argv += ["-r", str(path)]
    argv += extra
    await _run(argv, folder, timeout)
    return python
