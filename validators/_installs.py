"""What an env's build installs: the requirement files, lock files and packages it names.

Read from the Dockerfile's ``RUN`` commands without building anything: ``pip install -r
FILE`` (and ``uv pip``), ``pip install .`` (the project's dependencies), packages named on the
command line, and the commands that install from a lock file (``uv sync``, ``uv pip sync``,
``uv export``, ``poetry install``, ``pipenv sync``, ``pdm install``). A lock file that no
command installs from pins nothing the build uses. Constraints files the install uses
(``-c FILE`` on the command line or in a requirement file, ``PIP_CONSTRAINT`` for pip,
``UV_CONSTRAINT`` for ``uv pip``) pin what they name. Paths inside the image are traced back
to the folder through the Dockerfile's ``COPY`` instructions.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from taskhub.env import Dockerfile, ShellCommand, read_dockerfiles

LOCK_FILES = (
    "uv.lock",
    "poetry.lock",
    "pylock.toml",
    "Pipfile.lock",
    "requirements.lock",
    "pdm.lock",
)
#: Requirement files read when there is no Dockerfile to say which ones the build installs.
REQUIREMENT_FILES = ("requirements.txt", "server/requirements.txt")
#: How deep ``-r other.txt`` includes are followed.
MAX_INCLUDE_DEPTH = 3
#: Largest requirement file read.
MAX_REQUIREMENTS_BYTES = 512 * 1024
#: Packaging tools a build upgrades before installing the env (not the env's dependencies).
TOOLS = frozenset(
    {"pip", "setuptools", "wheel", "uv", "pip-tools", "poetry", "pipenv", "pdm", "hatch", "build"}
)
#: pip/uv options that take a value (``--index-url URL``), besides ``-r``/``-c``/``-e``.
_VALUE_OPTIONS = frozenset(
    {
        "-i",
        "--index-url",
        "--extra-index-url",
        "-f",
        "--find-links",
        "-t",
        "--target",
        "--prefix",
        "--root",
        "--upgrade-strategy",
        "--platform",
        "--python-version",
        "--implementation",
        "--abi",
        "--trusted-host",
        "--timeout",
        "--retries",
        "--cache-dir",
        "--src",
        "--progress-bar",
        "--no-binary",
        "--only-binary",
        "-C",
        "--config-settings",
        "--global-option",
        "--log",
        "--proxy",
        "--exists-action",
        "--report",
        "--python",
        "-p",
        "--index-strategy",
        "--extra",
        "--group",
        "--project",
        "--directory",
    }
)
_PIP = re.compile(r"pip\d*(\.\d+)?")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_VCS_PREFIXES = ("git+", "hg+", "svn+", "bzr+")


@dataclass(frozen=True)
class Requirement:
    """One requirement as written, and where."""

    source: str
    """The file it is written in, relative to the env folder (or the Dockerfile's name)."""
    line: int
    """Its line in that file (1-based; 0 when it cannot be told)."""
    text: str
    """The requirement as written (options such as ``--hash`` removed)."""
    hashed: bool = False
    """It carries ``--hash=...``: pip installs exactly that file."""
    constraint: Requirement | None = None
    """The line of a constraints file the install uses that names the same distribution."""

    @property
    def where(self) -> str:
        """``file:line`` (just the file when the line is unknown)."""
        return f"{self.source}:{self.line}" if self.line else self.source

    @property
    def name(self) -> str:
        """The distribution it names, normalized (``Foo_Bar`` is ``foo-bar``); empty for a path."""
        text = self.text.strip("\"'")
        if text.startswith((".", "/", "file:", "http:", "https:", *_VCS_PREFIXES)):
            return ""
        head = re.split(r"[\s\[<>=!~;@(]", text, maxsplit=1)[0]
        return re.sub(r"[-_.]+", "-", head).lower()


@dataclass
class RequirementFile:
    """What a pip requirements file (and the files it includes) says to install."""

    requirements: list[Requirement] = field(default_factory=list)
    """The requirements, in order."""
    projects: list[Path] = field(default_factory=list)
    """The project folders it installs (``.``, ``-e .``)."""
    constraints: list[Requirement] = field(default_factory=list)
    """The lines of the constraints files it names (``-c constraints.txt``)."""
    constraint_files: list[str] = field(default_factory=list)
    """Those files, relative to the env folder."""
    problems: list[str] = field(default_factory=list)
    """Files that could not be read."""

    def add(self, other: RequirementFile) -> None:
        """Add what an included file says."""
        self.requirements += other.requirements
        self.projects += other.projects
        self.constraints += other.constraints
        self.constraint_files += [
            f for f in other.constraint_files if f not in self.constraint_files
        ]
        self.problems += other.problems


def constrain(requirements: list[Requirement], constraints: list[Requirement]) -> list[Requirement]:
    """``requirements``, each with the constraint that names its distribution (the first)."""
    by_name: dict[str, Requirement] = {}
    for constraint in constraints:
        if constraint.name:
            by_name.setdefault(constraint.name, constraint)
    return [
        replace(r, constraint=by_name[r.name]) if r.name in by_name and not r.constraint else r
        for r in requirements
    ]


def vcs_revision(text: str) -> tuple[str, str | None] | None:
    """``(url, revision)`` of a VCS requirement (``pkg @ git+URL@rev``), else None.

    The revision is None when the URL names none (the default branch).
    """
    url = text.split(" @ ", 1)[1].strip() if " @ " in text else text.strip()
    url = url.split(";", 1)[0].strip()
    if not url.startswith(_VCS_PREFIXES):
        return None
    parts = urlsplit(url.split("+", 1)[1])
    path = parts.path
    revision = path.rsplit("@", 1)[1] if "@" in path else None
    return url, revision or None


def is_pinned_commit(revision: str | None) -> bool:
    """Whether a VCS revision is a full commit hash (a branch or tag can move)."""
    return revision is not None and bool(_COMMIT.fullmatch(revision))


def _strip_options(line: str) -> tuple[str, bool]:
    """The requirement of a line without its per-requirement options, and if it is hashed."""
    hashed = "--hash" in line
    text = re.split(r"\s+--?[A-Za-z]", " " + line, maxsplit=1)[0].strip()
    return text, hashed


def read_requirement_file(folder: Path, path: Path, depth: int = 0) -> RequirementFile:
    """What a pip requirements file installs, following ``-r`` includes and ``-c`` files."""
    read = RequirementFile()
    name = _relative(folder, path)
    try:
        if path.stat().st_size > MAX_REQUIREMENTS_BYTES:
            read.problems.append(f"{name} is over {MAX_REQUIREMENTS_BYTES} bytes: not read")
            return read
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        read.problems.append(f"cannot read {name}: {exc}")
        return read
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        include = _included(line, words, ("-r", "--requirement"))
        constraints = _included(line, words, ("-c", "--constraint"))
        if include is not None or constraints is not None:
            target = (path.parent / (include or constraints or "")).resolve()
            if depth < MAX_INCLUDE_DEPTH and target.is_file() and target.is_relative_to(folder):
                more = read_requirement_file(folder, target, depth + 1)
                if constraints is not None:  # a constraints file's lines only constrain
                    more = _as_constraints(folder, target, more)
                read.add(more)
            continue
        if words[0] in ("-e", "--editable") and len(words) > 1:
            line = words[1]
        elif line.startswith("-"):
            continue  # options such as --index-url
        local = _local_project(path.parent, line)
        if local is not None:
            read.projects.append(local)
            continue
        requirement, hashed = _strip_options(line)
        read.requirements.append(Requirement(name, number, requirement, hashed))
    return read


def _included(line: str, words: list[str], flags: tuple[str, str]) -> str | None:
    """The file of a ``-r FILE`` (or ``-c FILE``) line: ``-r FILE``, ``-rFILE``, ``--x=FILE``."""
    short, long = flags
    if words[0] in flags:
        return words[1] if len(words) > 1 else None
    if line.startswith(long + "="):
        return line.split("=", 1)[1].strip()
    if line.startswith(short) and not line.startswith("--"):
        return line.removeprefix(short).strip() or None
    return None


def _as_constraints(folder: Path, path: Path, read: RequirementFile) -> RequirementFile:
    """A requirements file read as a constraints file: its requirements constrain."""
    name = _relative(folder, path)
    files = [name, *[f for f in read.constraint_files if f != name]]
    return RequirementFile(
        constraints=[*read.constraints, *read.requirements],
        constraint_files=files,
        problems=read.problems,
    )


def _local_project(base: Path, target: str) -> Path | None:
    """The project folder a requirement names by path (``.``, ``./pkg[extra]``), if any."""
    if not target.startswith((".", "/", "file:")):
        return None
    path = target.removeprefix("file:").split("[", 1)[0]
    candidate = (base / path).resolve() if not path.startswith("/") else Path(path)
    return candidate if candidate.is_dir() else None


def _relative(folder: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return path.name


def project_requirements(folder: Path, project: Path) -> tuple[list[Requirement], list[str]]:
    """``[project].dependencies`` of a project folder's pyproject.toml, with their lines."""
    path = project / "pyproject.toml"
    if not path.is_file():
        return [], []
    name = _relative(folder, path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        return [], [f"{name} does not parse: {exc}"]
    deps = data.get("project", {}).get("dependencies", [])
    if not isinstance(deps, list):
        return [], [f"{name}: [project].dependencies is not a list"]
    lines = text.splitlines()
    out = []
    for dep in deps:
        if not isinstance(dep, str):
            continue
        number = next(
            (i for i, line in enumerate(lines, 1) if f'"{dep}"' in line or f"'{dep}'" in line), 0
        )
        out.append(Requirement(name, number, dep))
    return out, []


def declared_requirements(folder: Path) -> tuple[list[Requirement], list[str]]:
    """Every requirement the folder declares (requirement files and pyproject.toml)."""
    found: list[Requirement] = []
    problems: list[str] = []
    for name in REQUIREMENT_FILES:
        path = folder / name
        if path.is_file():
            read = read_requirement_file(folder, path)
            found += constrain(read.requirements, read.constraints)
            problems += read.problems
    requirements, trouble = project_requirements(folder, folder)
    return found + requirements, problems + trouble


def declared_constraint_files(folder: Path) -> list[str]:
    """The constraints files the declared requirement files name (``-c FILE``)."""
    files: list[str] = []
    for name in REQUIREMENT_FILES:
        if (folder / name).is_file():
            read = read_requirement_file(folder, folder / name)
            files += [f for f in read.constraint_files if f not in files]
    return files


@dataclass
class BuildInstalls:
    """What a folder's Dockerfiles install."""

    dockerfiles: list[str] = field(default_factory=list)
    """The Dockerfiles read."""
    commands: list[str] = field(default_factory=list)
    """The install commands found, as ``Dockerfile:LINE: command``."""
    requirements: list[Requirement] = field(default_factory=list)
    """What they install that no lock file pins: requirement files, projects, packages."""
    locks: list[str] = field(default_factory=list)
    """Lock files they install from."""
    installed_files: list[str] = field(default_factory=list)
    """Requirement files and projects they install, relative to the folder."""
    missing: list[str] = field(default_factory=list)
    """Files they install that are not in the folder (generated during the build)."""
    problems: list[str] = field(default_factory=list)
    """Files that could not be read."""
    constraint_files: list[str] = field(default_factory=list)
    """Constraints files the install commands use, relative to the folder."""


def build_installs(folder: Path) -> BuildInstalls | None:
    """What the folder's Dockerfiles install.

    None when there is no Dockerfile, or when it installs nothing of the env's that can be
    read (packaging tools at most: its dependencies come from the base image, or from a
    script this reading does not follow).
    """
    dockerfiles = read_dockerfiles(folder)
    build = BuildInstalls(dockerfiles=[d.name for d in dockerfiles])
    for dockerfile in dockerfiles:
        for command in dockerfile.runs:
            _Reader(folder, dockerfile, command, build).read()
    if not (build.requirements or build.locks or build.installed_files or build.missing):
        return None
    return build


class _Reader:
    """Reads one RUN command into a ``BuildInstalls``."""

    def __init__(
        self, folder: Path, dockerfile: Dockerfile, command: ShellCommand, build: BuildInstalls
    ) -> None:
        self.folder = folder.resolve()
        self.dockerfile = dockerfile
        self.command = command
        self.build = build
        self.constraints: list[Requirement] = []
        """The constraints the command installs with: they apply to what it installs."""

    def read(self) -> None:
        argv = list(self.command.argv)
        if not argv:
            return
        base = posixpath.basename(argv[0])
        if _PYTHON.fullmatch(base) and argv[1:3] == ["-m", "pip"]:
            tool, rest = "pip", argv[3:]
        elif _PIP.fullmatch(base):
            tool, rest = "pip", argv[1:]
        elif base == "uv" and "pip" in argv[1:3]:
            tool, rest = "uv pip", argv[argv.index("pip") + 1 :]
        elif base in ("uv", "poetry", "pipenv", "pdm", "pip-sync"):
            tool, rest = base, argv[1:]
        else:
            return
        words = [w for w in rest if not w.startswith("-")]
        verb = words[0] if words and tool != "pip-sync" else ("sync" if tool == "pip-sync" else "")
        before = len(self.build.requirements)
        handled = self._dispatch(tool, verb, rest)
        if self.constraints:
            added = self.build.requirements[before:]
            self.build.requirements[before:] = constrain(added, self.constraints)
        if handled:
            shown = " ".join(self.command.argv)[:200]
            self.build.commands.append(f"{self.dockerfile.name}:{self.command.line}: {shown}")

    def _dispatch(self, tool: str, verb: str, rest: list[str]) -> bool:
        if tool in ("pip", "uv pip") and verb == "install":
            variable = "UV_CONSTRAINT" if tool == "uv pip" else "PIP_CONSTRAINT"
            for word in self.command.environment.get(variable, "").split()[:8]:
                self._constraint_file(word)
            self._pip_install(rest[rest.index("install") + 1 :])
            return True
        if (tool == "uv pip" and verb == "sync") or tool == "pip-sync":
            args = rest[rest.index("sync") + 1 :] if "sync" in rest else rest
            for word in _positional(args):
                self._requirement_file(word, lock=True)
            return True
        lock = {"uv": "uv.lock", "poetry": "poetry.lock", "pipenv": "Pipfile.lock"}
        lock["pdm"] = "pdm.lock"
        verbs = {"uv": ("sync", "export"), "poetry": ("install", "sync", "export")}
        verbs |= {"pipenv": ("install", "sync"), "pdm": ("install", "sync", "export")}
        if tool in lock and verb in verbs[tool]:
            if tool == "pipenv" and verb == "install" and _positional(rest[1:]):
                return False  # pipenv install PKG adds a package, it does not install the lock
            self._project(self._project_dir(rest), lock[tool])
            return True
        return False

    def _pip_install(self, args: list[str]) -> None:
        index = 0
        no_deps = "--no-deps" in args
        while index < len(args):
            word = args[index]
            value = args[index + 1] if index + 1 < len(args) else None
            if word in ("-r", "--requirement") and value:
                self._requirement_file(value)
                index += 2
                continue
            if word in ("-c", "--constraint") and value:
                self._constraint_file(value)
                index += 2
                continue
            if word.startswith("--requirement="):
                self._requirement_file(word.split("=", 1)[1])
            elif word.startswith("--constraint="):
                self._constraint_file(word.split("=", 1)[1])
            elif word in _VALUE_OPTIONS:
                index += 2
                continue
            elif word in ("-e", "--editable") and value:
                self._target(value, no_deps)
                index += 2
                continue
            elif not word.startswith("-"):
                self._target(word, no_deps)
            index += 1

    def _target(self, word: str, no_deps: bool) -> None:
        """A positional of ``pip install``: a local project, or a requirement."""
        if word.startswith((".", "/")) or word == ".":
            path = word.split("[", 1)[0]
            source = self.dockerfile.source_of(path, self.command.workdir)
            if source is None or not source.is_dir():
                self.build.missing.append(word)
            elif not no_deps:
                self._project(source, None)
            return
        text = word.strip("\"'")
        name = re.split(r"[\s\[<>=!~;@]", text, maxsplit=1)[0].lower()
        if name in TOOLS or "$" in text:
            return
        where = self.dockerfile.name
        self.build.requirements.append(Requirement(where, self.command.line, text))

    def _requirement_file(self, word: str, *, lock: bool = False) -> None:
        source = self.dockerfile.source_of(word, self.command.workdir)
        if source is None or not source.is_file():
            self.build.missing.append(word)
            return
        name = _relative(self.folder, source)
        self.build.installed_files.append(name)
        if source.suffix == ".toml" or source.name == "Pipfile.lock":  # a lock, not pip's format
            self.build.locks.append(name)
            return
        if lock or source.name in LOCK_FILES:
            self.build.locks.append(name)
        read = read_requirement_file(self.folder, source)
        self.build.requirements += read.requirements
        self._use_constraints(read)
        for project in read.projects:
            self._project(project, None)

    def _constraint_file(self, word: str) -> None:
        """``-c FILE`` (or ``PIP_CONSTRAINT``): what the file names is pinned as it says."""
        source = self.dockerfile.source_of(word.strip("\"'"), self.command.workdir)
        if source is None or not source.is_file():
            self.build.missing.append(word)
            return
        read = read_requirement_file(self.folder, source)
        self._use_constraints(_as_constraints(self.folder, source, read))

    def _use_constraints(self, read: RequirementFile) -> None:
        self.constraints += read.constraints
        files = self.build.constraint_files
        files += [f for f in read.constraint_files if f not in files]
        self.build.problems += read.problems

    def _project_dir(self, rest: list[str]) -> Path:
        """The project a ``uv sync``/``poetry install`` installs: ``--project``, else WORKDIR."""
        for flag in ("--project", "--directory"):
            if flag in rest and rest.index(flag) + 1 < len(rest):
                found = self.dockerfile.source_of(rest[rest.index(flag) + 1], self.command.workdir)
                if found is not None and found.is_dir():
                    return found
        found = self.dockerfile.source_of(".", self.command.workdir)
        return found if found is not None and found.is_dir() else self.folder

    def _project(self, project: Path, lock: str | None) -> None:
        """A project installed with its dependencies: pinned by ``lock`` when it exists."""
        lock_path = project / lock if lock else None
        if lock_path is not None and lock_path.is_file():
            name = _relative(self.folder, lock_path)
            if name not in self.build.locks:
                self.build.locks.append(name)
            return
        pyproject = project / "pyproject.toml"
        if not pyproject.is_file():
            return
        name = _relative(self.folder, pyproject)
        if name in self.build.installed_files:
            return
        self.build.installed_files.append(name)
        requirements, problems = project_requirements(self.folder, project)
        self.build.requirements += requirements
        self.build.problems += problems


def _positional(words: list[str]) -> list[str]:
    out = []
    index = 0
    while index < len(words):
        word = words[index]
        if word in _VALUE_OPTIONS:
            index += 2
            continue
        if not word.startswith("-"):
            out.append(word)
        index += 1
    return out
