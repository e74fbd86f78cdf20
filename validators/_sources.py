"""Where a submission's code comes from: a folder, a git repository at a commit, a URL.

Git sources are written ``git+<url>@<commit>`` (``#subdirectory=<path>`` for an env inside
the repository), pip's syntax; a URL ending in ``.git`` needs no ``git+``. They are cloned into
a temporary folder, checked out at the commit, and the resolved sha is recorded. A batch
validates a folder submission in a copy (``copy_submission``), never in place: whatever the
env writes while it runs stays out of the submission.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskhub import EnvLaunchError

#: Folders left out of a source digest (and of a submission's copy).
DIGEST_SKIP = frozenset({".git", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache"})
#: Largest submission folder copied (all files together), and most files.
MAX_COPY_BYTES = 2 * 1024**3
MAX_COPY_FILES = 50_000
#: Most siblings of a submission folder linked beside its copy.
MAX_SIBLINGS = 200


@dataclass(frozen=True)
class GitSource:
    """A git repository at a revision, optionally a subfolder of it."""

    url: str
    revision: str | None = None
    subdirectory: str | None = None

    @property
    def spec(self) -> str:
        """The source written back in ``git+url@rev#subdirectory=`` form."""
        text = f"git+{self.url}"
        if self.revision:
            text += f"@{self.revision}"
        if self.subdirectory:
            text += f"#subdirectory={self.subdirectory}"
        return text


def parse_git(spec: str) -> GitSource | None:
    """Read ``git+URL[@REV][#subdirectory=PATH]`` (or ``URL.git[@REV]``); None otherwise."""
    text = spec.strip()
    if text.startswith("git+"):
        text = text[len("git+") :]
    elif not re.search(r"\.git(@[^/]*)?(#.*)?$", text):
        return None
    subdirectory = None
    if "#subdirectory=" in text:
        text, subdirectory = text.split("#subdirectory=", 1)
    revision = None
    at = text.rfind("@")
    if at > text.rfind("/"):
        text, revision = text[:at], text[at + 1 :]
    if not text:
        return None
    return GitSource(text, revision or None, subdirectory or None)


async def _git(*args: str, cwd: Path | None = None, timeout: float = 120.0) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    process = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise EnvLaunchError(f"git {args[0]} took longer than {timeout:g}s") from None
    if process.returncode != 0:
        raise EnvLaunchError(
            f"git {' '.join(args[:2])} failed: {err.decode(errors='replace').strip()[-500:]}"
        )
    return out.decode().strip()


async def clone(source: GitSource, into: Path, *, timeout: float = 120.0) -> tuple[Path, str]:
    """Clone ``source`` into ``into`` at its revision; return the env folder and the sha.

    Raises:
        EnvLaunchError: The clone or checkout failed, or the subfolder does not exist.
    """
    into.mkdir(parents=True, exist_ok=True)
    repo = into / "repo"
    await _git("clone", "--quiet", "--no-checkout", "--", source.url, str(repo), timeout=timeout)
    await _git(
        "checkout", "--quiet", "--detach", source.revision or "HEAD", cwd=repo, timeout=timeout
    )
    sha = await _git("rev-parse", "HEAD", cwd=repo)
    folder = repo / source.subdirectory if source.subdirectory else repo
    if not folder.resolve().is_relative_to(repo.resolve()) or not folder.is_dir():
        raise EnvLaunchError(f"{source.spec}: no folder {source.subdirectory!r} at {sha[:12]}")
    return folder, sha


def copy_submission(
    folder: Path,
    into: Path,
    *,
    max_bytes: int = MAX_COPY_BYTES,
    max_files: int = MAX_COPY_FILES,
    max_siblings: int = MAX_SIBLINGS,
) -> Path:
    """Copy a submission folder into the folder ``into`` (created); return the copy.

    Version control, caches and virtual environments (``DIGEST_SKIP``) are left out, and
    symbolic links are copied as links, never followed. The copy is ``into/<folder's name>``,
    beside links to the folder's siblings (up to ``max_siblings`` of them), so that an env
    that reads a folder next to its own (a module shared by several envs) still finds it.

    Raises:
        EnvLaunchError: The folder is larger than ``max_bytes`` or holds more than
            ``max_files`` files, or cannot be read.
    """
    total = files = 0
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(part in DIGEST_SKIP for part in rel.parts) or path.is_symlink():
            continue
        if path.is_file():
            files += 1
            total += path.stat().st_size
            if total > max_bytes or files > max_files:
                raise EnvLaunchError(
                    f"{folder} holds more than {max_bytes / 1024**2:.0f} MiB or {max_files} "
                    "files: too large to validate as a submission folder; leave data and "
                    "build outputs out of it"
                )

    def ignore(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n in DIGEST_SKIP]

    source = folder.resolve()
    copy = into / (source.name or "env")
    into.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(source, copy, symlinks=True, ignore=ignore)
    except (OSError, shutil.Error) as exc:
        raise EnvLaunchError(f"cannot copy the submission folder {folder}: {exc}") from None
    with contextlib.suppress(OSError):
        siblings = sorted(p for p in source.parent.iterdir() if p.name != source.name)
        for sibling in siblings[:max_siblings]:
            if not sibling.name.startswith("."):
                (into / sibling.name).symlink_to(sibling, target_is_directory=sibling.is_dir())
    return copy


def temp_workdir(prefix: str = "taskhub-validate-") -> Path:
    """A fresh temporary folder."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def remove_tree(path: Path) -> None:
    """Delete ``path`` even when git made files read-only."""

    def fix(function: Any, target: str, _exc: Any) -> None:
        os.chmod(target, stat.S_IWRITE)
        function(target)

    if not path.exists():
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=fix)
    else:  # pragma: no cover - Python 3.11
        shutil.rmtree(path, onerror=fix)


def source_digest(folder: Path, *, max_files: int = 5000) -> str:
    """sha256 over the folder's relative paths and file contents (VCS and caches left out)."""
    digest = hashlib.sha256()
    count = 0
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in DIGEST_SKIP for part in rel.parts) or path.is_symlink():
            continue
        if not path.is_file():
            continue
        count += 1
        if count > max_files:
            break
        digest.update(rel.as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()
