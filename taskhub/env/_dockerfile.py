"""Read an env's Dockerfile without building it: what it runs, and where its files come from.

A pure, bounded parse. Continuation lines are joined and heredoc bodies set apart, ``WORKDIR``
(and a ``cd`` inside a command) is followed, ``COPY``/``ADD`` are recorded so that a path
inside the image can be traced back to the build context, the final stage's ``ENV`` is kept,
and every ``RUN``, ``CMD`` and ``ENTRYPOINT`` is split into simple commands
(``sh -c "cd /app && uvicorn app:app"`` is two of them, the second run in ``/app``).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

#: Where env folders keep their Dockerfile: the root (what a Hub Space builds), then
#: ``server/`` (OpenEnv's project layout).
DOCKERFILE_PATHS = ("Dockerfile", "server/Dockerfile")
#: Largest Dockerfile read; a bigger one is not read at all.
MAX_DOCKERFILE_BYTES = 256 * 1024

#: Shell control operators: they end one simple command.
_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "(", ")", "|&"})
#: Redirections: they and their target are not arguments of the command.
_REDIRECTS = re.compile(r"^\d*(>>?|<<?|>&|<&)$")
#: Words that lead a simple command without being it (``then uv sync``, ``exec uvicorn``).
_LEADING = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}"})
_LEADING |= frozenset({"exec", "time", "sudo", "nohup", "env", "command"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_]\w*)\1")
_NAME = re.compile(r"[A-Za-z_]\w*")
_SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env"})


@dataclass(frozen=True)
class ShellCommand:
    """One simple command of a ``RUN``, ``CMD`` or ``ENTRYPOINT`` instruction."""

    argv: tuple[str, ...]
    """The words of the command, unquoted (leading ``VAR=value`` and ``exec`` left out)."""
    line: int
    """Line of the instruction in the Dockerfile (1-based)."""
    workdir: str
    """The folder it runs in: the ``WORKDIR`` in effect (``/`` when none was set), then
    where a ``cd`` before it in the same instruction moved."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """The variables set for it: its stage's ``ENV`` so far, then its own ``VAR=value``."""


@dataclass(frozen=True)
class _Copy:
    sources: tuple[str, ...]
    dest: str


@dataclass
class Dockerfile:
    """What a Dockerfile runs, read without building it."""

    path: Path
    """The Dockerfile."""
    context: Path
    """The build context its ``COPY`` sources are relative to (the env folder)."""
    runs: list[ShellCommand] = field(default_factory=list)
    """Every simple command of every ``RUN``, all stages, in order."""
    start: list[ShellCommand] = field(default_factory=list)
    """The simple commands the image starts with (the final stage's ENTRYPOINT and CMD)."""
    environment: dict[str, str] = field(default_factory=dict)
    """The variables the final stage's ``ENV`` instructions set, as written (not expanded)."""
    copies: list[_Copy] = field(default_factory=list, repr=False)

    @property
    def name(self) -> str:
        """The Dockerfile's path inside the build context (``server/Dockerfile``)."""
        try:
            return self.path.relative_to(self.context).as_posix()
        except ValueError:
            return self.path.name

    def source_of(self, path: str, workdir: str = "/", *, guess: bool = True) -> Path | None:
        """The file or folder of the build context that ``path`` in the image came from.

        ``COPY`` instructions are read from the last to the first; a path no ``COPY`` explains
        is looked up, with ``guess``, by its longest tail that exists in the context
        (``/app/env/x.txt`` is ``x.txt``). None when nothing in the context matches.
        """
        target = posixpath.normpath(posixpath.join(workdir, path))
        context = self.context.resolve()
        for copy in reversed(self.copies):
            for source in copy.sources:
                found = self._copied(context, source, copy, target)
                if found is not None:
                    return found
        if not guess:
            return None
        parts = [p for p in target.split("/") if p]
        for start in range(len(parts)):
            candidate = _inside(context, "/".join(parts[start:]))
            if candidate is not None and candidate.exists():
                return candidate
        return None

    def folder_of(self, path: str, workdir: str = "/") -> Path | None:
        """The folder of the build context that folder ``path`` of the image holds.

        Only what a ``COPY`` explains counts (a folder is not guessed from its name): the
        ``WORKDIR /app/backend`` of an image built with ``COPY . /app`` is ``backend``. None
        when no ``COPY`` put a context folder there.
        """
        found = self.source_of(path, workdir, guess=False)
        return found if found is not None and found.is_dir() else None

    @staticmethod
    def _copied(context: Path, source: str, copy: _Copy, target: str) -> Path | None:
        dest = copy.dest
        if any(c in source for c in "*?["):
            name = posixpath.basename(target)
            if posixpath.dirname(target) == dest.rstrip("/") and fnmatch(
                name, posixpath.basename(source)
            ):
                directory = _inside(context, posixpath.dirname(source) or ".")
                candidate = directory / name if directory is not None else None
                return candidate if candidate is not None and candidate.is_file() else None
            return None
        origin = _inside(context, source)
        if origin is None or not origin.exists():
            return None
        if origin.is_dir():  # the folder's contents go into dest
            base = dest.rstrip("/") or "/"
            if target == base or target.startswith(base.rstrip("/") + "/"):
                rest = posixpath.relpath(target, base)
                candidate = origin if rest == "." else _inside(origin, rest)
                return candidate if candidate is not None and candidate.exists() else None
            return None
        single = len(copy.sources) == 1 and not dest.endswith("/")
        if not single and target == dest.rstrip("/"):
            return origin.parent  # the folder these files were copied into
        destinations = [posixpath.join(dest, posixpath.basename(source))]
        if single:
            destinations.append(posixpath.normpath(dest))
        return origin if target in destinations else None


def _inside(root: Path, relative: str) -> Path | None:
    """``root/relative`` when it stays inside ``root`` (no ``..`` or absolute escape)."""
    try:
        candidate = (root / relative.lstrip("/")).resolve()
    except (OSError, ValueError, RuntimeError):
        return None
    return candidate if candidate.is_relative_to(root) else None


def _logical_lines(text: str) -> list[tuple[int, str, list[str]]]:
    """``(line, instruction, heredoc bodies)``: continuations joined, comments dropped."""
    lines = text.splitlines()
    out: list[tuple[int, str, list[str]]] = []
    index = 0
    while index < len(lines):
        first = index + 1
        current = lines[index].strip()
        index += 1
        if not current or current.startswith("#"):
            continue
        parts = [current]
        while parts[-1].endswith("\\") and index < len(lines):
            parts[-1] = parts[-1][:-1].rstrip()
            following = lines[index].strip()
            index += 1
            if following.startswith("#"):  # a comment inside a continuation is dropped
                parts.append("\\")
                continue
            parts.append(following)
        joined = " ".join(p for p in parts if p and p != "\\")
        bodies: list[str] = []
        for marker in _HEREDOC.findall(joined):
            body: list[str] = []
            while index < len(lines) and lines[index].strip() != marker[1]:
                body.append(lines[index])
                index += 1
            index += 1
            bodies.append("\n".join(body))
        out.append((first, joined, bodies))
    return out


def split_commands(script: str) -> list[tuple[str, ...]]:
    """The simple commands of a shell script, each as its words (a best-effort parse)."""
    return [_assigned(words)[1] for words in _split(script)]


def _assigned(words: tuple[str, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The ``VAR=value`` words that lead a command, and the command without them."""
    index = 0
    while index < len(words) and _ASSIGNMENT.match(words[index]):
        index += 1
    pairs = (word.partition("=") for word in words[:index])
    return {key: value for key, _, value in pairs}, words[index:]


def _split(script: str) -> list[tuple[str, ...]]:
    """The simple commands of a script, the ``VAR=value`` words that lead them kept."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: read the words as they are
        tokens = script.split()
    commands: list[tuple[str, ...]] = []
    current: list[str] = []
    skip_next = False
    for token in [*tokens, ";"]:
        if skip_next:
            skip_next = False
            continue
        if token in _OPERATORS or token == "\n":
            assignments: list[str] = []
            words = current
            while words and (words[0] in _LEADING or _ASSIGNMENT.match(words[0])):
                if _ASSIGNMENT.match(words[0]):
                    assignments.append(words[0])
                words = words[1:]
            if words:
                commands.append((*assignments, *words))
            current = []
        elif _REDIRECTS.match(token):
            skip_next = True
        else:
            current.append(token)
    return commands


def _following_cd(
    commands: list[tuple[str, ...]], line: int, workdir: str, environment: dict[str, str]
) -> list[ShellCommand]:
    """The commands of one instruction, each with its folder and variables.

    ``cd backend && uvicorn main:app`` runs uvicorn in ``<WORKDIR>/backend``. A ``cd`` to a
    folder that is not written out (``cd $HOME``, ``cd -``, ``cd`` alone) leaves the
    folder unknown: the commands after it keep the last known one. A command's variables are
    the stage's ``ENV`` so far and its own leading ``VAR=value`` words.
    """
    found: list[ShellCommand] = []
    for words in commands:
        inline, argv = _assigned(words)
        if not argv:
            continue
        found.append(ShellCommand(argv, line, workdir, {**environment, **inline}))
        written = len(argv) == 2 and "$" not in argv[1] and not argv[1].startswith(("-", "~"))
        if argv[0] == "cd" and written:
            workdir = posixpath.normpath(posixpath.join(workdir, argv[1]))
    return found


def _exec_form(arguments: str) -> list[str] | None:
    if not arguments.startswith("["):
        return None
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _commands_of(arguments: str) -> list[tuple[str, ...]]:
    """The simple commands an instruction's arguments run (exec or shell form)."""
    argv = _exec_form(arguments)
    if argv is None:
        return _split(arguments)
    if argv and argv[0] in _SHELLS and "-c" in argv:
        script = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        return _split(script)
    return [tuple(argv)] if argv else []


def read_dockerfile(path: Path, context: Path | None = None) -> Dockerfile:
    """Read ``path`` (nothing is run). A file that cannot be read gives an empty Dockerfile.

    Args:
        path: The Dockerfile.
        context: The build context (the env folder); ``path``'s folder when None.
    """
    dockerfile = Dockerfile(path=path, context=context or path.parent)
    try:
        if path.stat().st_size > MAX_DOCKERFILE_BYTES:
            return dockerfile
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return dockerfile
    workdir = "/"
    stage = _Start()
    last = _Start()
    for line, instruction, bodies in _logical_lines(text):
        keyword, _, arguments = instruction.partition(" ")
        keyword, arguments = keyword.upper(), arguments.strip()
        if keyword == "FROM":
            last = stage if stage.line else last
            stage = _Start()
        elif keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, arguments.strip("\"'")))
        elif keyword in ("COPY", "ADD"):
            copy = _copy_of(arguments, workdir)
            if copy is not None:
                dockerfile.copies.append(copy)
        elif keyword == "RUN":
            script = _strip_run_flags(arguments)
            found = _commands_of(script)
            if script.startswith("<<") and bodies:  # RUN <<EOF: the body is the script
                found = [c for body in bodies for c in _split(body)]
            dockerfile.runs += _following_cd(found, line, workdir, stage.environment)
        elif keyword == "ENV":
            stage.environment.update(_assignments(arguments))
        elif keyword in ("CMD", "ENTRYPOINT"):
            setattr(stage, keyword.lower(), arguments)
            stage.line, stage.workdir = line, workdir
    final = stage if stage.line else last
    dockerfile.start = _following_cd(final.argvs(), final.line, final.workdir, final.environment)
    dockerfile.environment = dict(final.environment)
    return dockerfile


def _assignments(arguments: str) -> dict[str, str]:
    """The variables of an ``ENV`` instruction: ``K=V K2=V2``, or the old ``K V`` form."""
    try:
        words = shlex.split(arguments)
    except ValueError:
        words = arguments.split()
    if words and "=" not in words[0]:  # ENV KEY value with spaces
        return {words[0]: " ".join(words[1:])} if _NAME.fullmatch(words[0]) else {}
    pairs = (word.partition("=") for word in words)
    return {key: value for key, _, value in pairs if _NAME.fullmatch(key)}


@dataclass
class _Start:
    """The ENTRYPOINT and CMD of one stage, as written."""

    entrypoint: str | None = None
    cmd: str | None = None
    line: int = 0
    workdir: str = "/"
    environment: dict[str, str] = field(default_factory=dict)

    def argvs(self) -> list[tuple[str, ...]]:
        """The commands the stage starts: ENTRYPOINT + CMD in exec form, else the one given."""
        if self.entrypoint is None:
            return _commands_of(self.cmd) if self.cmd else []
        entry = _exec_form(self.entrypoint)
        if entry is None:  # shell form: CMD is ignored
            return _split(self.entrypoint)
        cmd = _exec_form(self.cmd) if self.cmd else None
        found = _commands_of(json.dumps(entry + (cmd or [])))
        if cmd:  # an entrypoint wrapper script that runs its arguments
            found += _commands_of(json.dumps(cmd))
        return found


def _strip_run_flags(arguments: str) -> str:
    """``RUN --mount=... --network=... cmd`` without its flags."""
    words = arguments.split(" ")
    while words and words[0].startswith("--"):
        words = words[1:]
    return " ".join(words)


def _copy_of(arguments: str, workdir: str) -> _Copy | None:
    words = _exec_form(arguments)
    if words is None:
        try:
            words = shlex.split(arguments)
        except ValueError:
            words = arguments.split()
    flags = [w for w in words if w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return None  # from another stage or image, not from the build context
    words = [w for w in words if not w.startswith("--")]
    if len(words) < 2:
        return None
    dest = words[-1]
    absolute = posixpath.normpath(posixpath.join(workdir, dest))
    if dest.endswith("/") or dest in (".", "./"):
        absolute = absolute.rstrip("/") + "/"
    return _Copy(tuple(words[:-1]), absolute)


def read_dockerfiles(folder: Path) -> list[Dockerfile]:
    """The Dockerfiles of an env folder (``Dockerfile``, then ``server/Dockerfile``), read."""
    return [
        read_dockerfile(folder / name, folder)
        for name in DOCKERFILE_PATHS
        if (folder / name).is_file()
    ]
