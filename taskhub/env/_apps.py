"""Find the ASGI app an env folder serves, where its author says it is, without importing it.

The manifest comes first (``openenv.yaml``'s ``app:`` in every form seen in submissions).
Without one, an env is served the way its author runs it: the command of its Dockerfile
(``uvicorn module:app``, or ``python -m module`` / ``python path.py`` when that file runs
uvicorn), a ``[project.scripts]`` entry that runs a server, OpenEnv's default
``server/app.py``, else a bounded scan of its Python files for a module-level FastAPI app.
An app found through the Dockerfile is started where the image starts it: its ``WORKDIR``
(or ``cd``, ``--app-dir``, ``ENV PYTHONPATH``) traced back through the ``COPY`` lines to a
folder of the env, never outside it. Every source is parsed, never imported or run.
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from taskhub._errors import EnvLaunchError
from taskhub.env._dockerfile import Dockerfile, ShellCommand, read_dockerfiles

#: Where manifests seen in the wild name the ASGI app, besides ``app``.
_APP_KEYS = (("server", "entry_point"), ("server", "app"), ("environment", "app"), ("entry_point",))
#: ``module:attribute``, the form uvicorn and gunicorn take an app in.
_MODULE_ATTR = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
#: Servers that take the app as ``module:attribute``.
_SERVERS = frozenset({"uvicorn", "gunicorn", "hypercorn", "granian"})
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
#: Python options that take a value (``-X dev``, ``-W ignore``).
_PYTHON_VALUE_OPTIONS = frozenset({"-X", "-W", "--check-hash-based-pycs"})
#: Calls that build an ASGI app at module level (FastAPI, Starlette, OpenEnv's create_app).
APP_FACTORIES = frozenset({"FastAPI", "Starlette", "create_app", "create_fastapi_app"})

#: Bounds of the scan for a module-level app: folder depth, files parsed, bytes per file.
MAX_SCAN_DEPTH = 4
MAX_SCAN_FILES = 400
MAX_SCAN_FILE_BYTES = 512 * 1024
#: Folders the scan never enters: environments, caches, tests, docs and examples.
SCAN_SKIP = frozenset(
    {
        "venv",
        "site-packages",
        "node_modules",
        "__pycache__",
        "tests",
        "test",
        "docs",
        "examples",
        "example",
        "notebooks",
        "build",
        "dist",
    }
)
#: Read to prefer the app a README names (bytes).
MAX_README_BYTES = 64 * 1024

#: What ``find_app`` looks for when there is no openenv.yaml, for the error that none is there.
LOOKED_FOR = (
    "a uvicorn/gunicorn app or a Python server script in the Dockerfile's CMD/ENTRYPOINT, "
    "a [project.scripts] entry that runs uvicorn, server/app.py, or a module-level FastAPI "
    "app (app = FastAPI(...) or app = create_app(...)) in its Python files"
)


def read_manifest(folder: Path) -> dict[str, Any]:
    """Read and check a folder's ``openenv.yaml``.

    Raises:
        EnvLaunchError: The file is missing, not YAML, or not a mapping.
    """
    manifest = folder / "openenv.yaml"
    if not manifest.is_file():
        raise EnvLaunchError(f"{folder} has no openenv.yaml: not an OpenEnv env folder")
    try:
        data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise EnvLaunchError(f"{manifest} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise EnvLaunchError(f"{manifest} must be a mapping, got {type(data).__name__}")
    return data


def _module_path(folder: Path, module: str) -> Path | None:
    """The file of ``module`` (dotted) inside ``folder``: ``a/b.py`` or ``a/b/__init__.py``."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    base = folder.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_file(folder: Path, app: str) -> bool:
    return _module_path(folder, app.partition(":")[0]) is not None


def _module_name(folder: Path, path: Path) -> str | None:
    """The dotted module a Python file of ``folder`` is imported as from the folder."""
    try:
        relative = path.resolve().relative_to(folder.resolve())
    except ValueError:
        return None
    parts = list(relative.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def _parse(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > MAX_SCAN_FILE_BYTES:
            return None
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def _module_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The statements run at import time: the body, and inside top-level if/try blocks."""
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        yield node
        if isinstance(node, ast.If):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                pending += handler.body


def _call_name(node: ast.expr | None) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def module_apps(tree: ast.Module) -> list[str]:
    """Names bound at module level to an app factory's result (``app = FastAPI(...)``)."""
    names = []
    for node in _module_level(tree):
        targets: list[ast.expr]
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if _call_name(value) in APP_FACTORIES:
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def _bound_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in _module_level(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def _imported(tree: ast.Module, name: str, module: str) -> str | None:
    """``source_module:attr`` when ``name`` is imported at module level (relative too)."""
    package = module.rsplit(".", 1)[0] if "." in module else ""
    for node in _module_level(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            source = node.module or ""
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                source = ".".join([*base, source] if source else base)
            return f"{source}:{alias.name}" if source else None
    return None


def served_by(folder: Path, path: Path, module: str) -> str | None:
    """The app a Python file serves when run: the argument of its ``uvicorn.run(...)``.

    ``uvicorn.run("pkg.main:app")`` names it; ``uvicorn.run(app)`` passes an app bound in
    the file (``module:app``) or imported into it. None when the file runs no uvicorn.
    """
    tree = _parse(path)
    if tree is None:
        return None
    from_uvicorn = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "uvicorn"
        for alias in node.names
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        is_run = (
            isinstance(func, ast.Attribute)
            and func.attr == "run"
            and isinstance(func.value, ast.Name)
            and func.value.id == "uvicorn"
        ) or (isinstance(func, ast.Name) and func.id == "run" and "run" in from_uvicorn)
        if not is_run:
            continue
        target = node.args[0] if node.args else None
        target = next((k.value for k in node.keywords if k.arg == "app"), target)
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            text = target.value
            if _MODULE_ATTR.fullmatch(text) and _module_file(folder, text):
                return text
        elif isinstance(target, ast.Name):
            if target.id in _bound_names(tree):
                return f"{module}:{target.id}"
            source = _imported(tree, target.id, module)
            if source is not None and _module_file(folder, source):
                return source
    return None


@dataclass(frozen=True)
class ServedApp:
    """The ASGI app an env folder serves, and where its server starts, as its author runs it."""

    app: str
    """``module:attr``, as uvicorn takes it, imported from ``app_dir`` (else ``workdir``)."""
    how: str = ""
    """How it was found; empty when openenv.yaml's ``app:`` names it."""
    workdir: str = "."
    """The folder of the env the server starts in (relative, POSIX): the Dockerfile's
    ``WORKDIR`` or ``cd``, traced back through its ``COPY`` instructions."""
    app_dir: str | None = None
    """The folder of the env the app's module is imported from, when it is not ``workdir``
    (uvicorn's ``--app-dir``, the folder of a script run as ``python path.py``)."""
    pythonpath: tuple[str, ...] = ()
    """Folders of the env the Dockerfile puts on ``PYTHONPATH`` (``ENV PYTHONPATH=...``)."""


def _relative(folder: Path, path: Path) -> str:
    return path.resolve().relative_to(folder.resolve()).as_posix()


def _app_argument(folder: Path, words: tuple[str, ...]) -> str | None:
    """The first ``module:attr`` argument whose module is a file of ``folder``."""
    for word in words:
        if _MODULE_ATTR.fullmatch(word) and _module_file(folder, word):
            return word
    return None


def _python_target(words: tuple[str, ...]) -> tuple[str, str] | None:
    """What ``python [options] -m module`` or ``python [options] path.py`` runs."""
    index = 0
    while index < len(words):
        word = words[index]
        if word == "-m":
            return ("module", words[index + 1]) if index + 1 < len(words) else None
        if word == "-c":
            return None
        if word in _PYTHON_VALUE_OPTIONS:
            index += 2
            continue
        if word.startswith("-"):
            index += 1
            continue
        return "path", word
    return None


def _option(words: tuple[str, ...], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` among ``words``."""
    for index, word in enumerate(words):
        if word == name and index + 1 < len(words):
            return words[index + 1]
        if word.startswith(name + "="):
            return word.partition("=")[2]
    return None


@dataclass(frozen=True)
class _Command:
    """Where one start command of a Dockerfile runs, in the image and in the env folder."""

    folder: Path
    """The env folder (resolved)."""
    dockerfile: Dockerfile
    image_dir: str
    """The command's folder in the image (``WORKDIR``, then ``cd``)."""
    root: Path
    """That folder traced back to the env folder (the env folder when no COPY explains it)."""

    def inside(self, path: str) -> Path | None:
        """The env's folder that ``path`` (relative to the command's folder) names."""
        found = self.dockerfile.folder_of(path, self.image_dir)
        if found is None:
            candidate = (self.root / path).resolve()
            inside = candidate.is_relative_to(self.folder) and candidate.is_dir()
            found = candidate if inside else None
        return found

    def served(self, app: str, how: str, imported_from: Path | None = None) -> ServedApp:
        """``app``, served from this command's folder (``imported_from`` when it differs)."""
        workdir = _relative(self.folder, self.root)
        app_dir = None if imported_from in (None, self.root) else imported_from
        where = [f"run from {workdir}/"] if workdir != "." else []
        if app_dir is not None:
            where.append(f"imported from {_relative(self.folder, app_dir)}/")
        pythonpath = _pythonpath(self.dockerfile)
        if pythonpath:
            where.append(f"PYTHONPATH {':'.join(f'{p}/' for p in pythonpath)}")
        return ServedApp(
            app,
            how + (f" ({', '.join(where)}, as in its image)" if where else ""),
            workdir=workdir,
            app_dir=_relative(self.folder, app_dir) if app_dir is not None else None,
            pythonpath=pythonpath,
        )


def _pythonpath(dockerfile: Dockerfile) -> tuple[str, ...]:
    """The env folders the Dockerfile's ``ENV PYTHONPATH`` names (others left out)."""
    folder = dockerfile.context.resolve()
    found: list[str] = []
    for entry in dockerfile.environment.get("PYTHONPATH", "").split(":")[:16]:
        if not entry.startswith("/") or "$" in entry:
            continue
        source = dockerfile.folder_of(entry)
        relative = _relative(folder, source) if source is not None else None
        if relative is not None and relative not in found:
            found.append(relative)
    return tuple(found)


def _app_of_command(
    folder: Path, dockerfile: Dockerfile, command: ShellCommand
) -> ServedApp | None:
    """The app one start command of a Dockerfile serves, and the folder it runs from.

    The command's folder in the image is traced back to the env's folder it was copied
    from; a module that is not found there is looked for from the env's root, as before
    the folder was traced.
    """
    folder = folder.resolve()
    mapped = dockerfile.folder_of(".", command.workdir)
    roots = [mapped, folder] if mapped is not None and mapped != folder else [folder]
    for root in roots:
        start = _Command(folder, dockerfile, command.workdir, root)
        found = _app_run_by(start, command.argv)
        if found is not None:
            return found
    return None


def _app_run_by(start: _Command, argv: tuple[str, ...]) -> ServedApp | None:
    """The app ``argv`` serves when run in ``start``'s folder."""
    name = start.dockerfile.name
    for index, word in enumerate(argv):
        base = posixpath.basename(word)
        rest = argv[index + 1 :]
        if _PYTHON.fullmatch(base):
            target = _python_target(rest)
            if target is None:
                return None
            kind, value = target
            if kind == "module" and value in _SERVERS:
                base, rest = value, rest[rest.index("-m") + 2 :]
            elif kind == "module":
                path = _module_path(start.root, value)
                return _app_of_script(start, path, value, start.root, argv[index:])
            else:
                script = start.dockerfile.source_of(value, start.image_dir)
                parent = script.parent if script is not None else start.root
                module = _module_name(parent, script) if script is not None else None
                return _app_of_script(start, script, module, parent, argv[index:])
        if base in _SERVERS:
            return _app_of_server(start, base, rest)
        if base == "fastapi" and rest[:1] in (("run",), ("dev",)):
            paths = [w for w in rest[1:] if not w.startswith("-")]
            source = start.dockerfile.source_of(paths[0] if paths else "main.py", start.image_dir)
            top = _package_root(start.folder, source) if source else None
            module = _module_name(top, source) if source and top else None
            tree = _parse(source) if source and module else None
            apps = module_apps(tree) if tree else []
            if top is None or module is None or not apps:
                return None
            how = f"the app the {name}'s fastapi command serves"
            return start.served(f"{module}:{apps[0]}", how, top)
    return None


def _package_root(folder: Path, path: Path) -> Path:
    """The folder ``fastapi run path.py`` imports from: above the packages that hold it."""
    top = path.resolve().parent
    while top != folder and (top / "__init__.py").is_file() and top.parent.is_relative_to(folder):
        top = top.parent
    return top


def _app_of_server(start: _Command, server: str, rest: tuple[str, ...]) -> ServedApp | None:
    """The app of ``uvicorn``/``gunicorn ... module:attr``, with ``--app-dir``/``--chdir``."""
    chdir = _option(rest, "--chdir") if server == "gunicorn" else None
    if chdir is not None:
        moved = start.inside(chdir)
        if moved is None:
            return None
        image_dir = posixpath.normpath(posixpath.join(start.image_dir, chdir))
        start = _Command(start.folder, start.dockerfile, image_dir, moved)
    app_dir = _option(rest, "--app-dir") if server == "uvicorn" else None
    imported_from = start.inside(app_dir) if app_dir is not None else start.root
    if imported_from is None:
        return None
    app = _app_argument(imported_from, rest)
    how = f"the app the {start.dockerfile.name}'s {server} command serves"
    return start.served(app, how, imported_from) if app else None


def _app_of_script(
    start: _Command,
    path: Path | None,
    module: str | None,
    imported_from: Path,
    argv: tuple[str, ...],
) -> ServedApp | None:
    """The app a Python module or script passes to ``uvicorn.run``."""
    if path is None or module is None or not path.is_file():
        return None
    app = served_by(imported_from, path, module)
    if app is None and imported_from != start.root:  # uvicorn.run("pkg.main:app") from WORKDIR
        module = _module_name(start.root, path) or module
        imported_from, app = start.root, served_by(start.root, path, module)
    how = f"the app {module} passes to uvicorn.run, started by the {start.dockerfile.name}'s "
    how += f"command ({' '.join(argv[:4])})"
    return start.served(app, how, imported_from) if app else None


def _from_dockerfiles(folder: Path) -> ServedApp | None:
    for dockerfile in read_dockerfiles(folder):
        for command in dockerfile.start:
            found = _app_of_command(folder, dockerfile, command)
            if found is not None:
                return found
    return None


def _from_scripts(folder: Path) -> ServedApp | None:
    """A ``[project.scripts]`` (or Poetry) entry whose module runs uvicorn."""
    path = folder / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
        return None
    scripts = dict(data.get("project", {}).get("scripts", {}) or {})
    scripts.update(data.get("tool", {}).get("poetry", {}).get("scripts", {}) or {})
    for script, entry in sorted(scripts.items()):
        if not isinstance(entry, str):
            continue
        module = entry.partition(":")[0].strip()
        source = _module_path(folder, module)
        app = served_by(folder, source, module) if source is not None else None
        if app is not None:
            return ServedApp(app, f"the app pyproject.toml's script {script!r} serves")
    return None


def _python_files(folder: Path) -> Iterator[Path]:
    """The folder's importable Python files, breadth first, within the scan bounds."""
    root = folder.resolve()
    count = 0
    for current, dirs, files in os.walk(root):
        depth = len(Path(current).relative_to(root).parts)
        dirs[:] = sorted(
            d
            for d in dirs
            if depth < MAX_SCAN_DEPTH
            and d.isidentifier()
            and not d.startswith((".", "_"))
            and d.lower() not in SCAN_SKIP
        )
        for name in sorted(files):
            stem = name.removesuffix(".py")
            if not name.endswith(".py") or not stem.isidentifier():
                continue
            if stem.startswith("test_") or stem.endswith("_test") or stem == "conftest":
                continue
            count += 1
            if count > MAX_SCAN_FILES:
                return
            yield Path(current) / name


def _mentions(folder: Path) -> str:
    """The text of the folder's Dockerfiles and README, where authors name their app."""
    texts = []
    for name in ("Dockerfile", "server/Dockerfile", "README.md", "README.rst", "README"):
        path = folder / name
        try:
            if path.is_file():
                with path.open("rb") as handle:
                    texts.append(handle.read(MAX_README_BYTES).decode("utf-8", "replace"))
        except OSError:
            continue
    return "\n".join(texts)


def _from_scan(folder: Path) -> ServedApp | None:
    """A module-level FastAPI app: the one a Dockerfile or README names, else the shallowest."""
    found: list[tuple[str, str, str]] = []  # (module, attribute, relative path)
    for path in _python_files(folder):
        try:
            if path.stat().st_size > MAX_SCAN_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not any(f"{factory}(" in text for factory in APP_FACTORIES):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        module = _module_name(folder, path)
        if module is None:
            continue
        relative = path.resolve().relative_to(folder.resolve()).as_posix()
        found += [(module, name, relative) for name in module_apps(tree)]
    if not found:
        return None
    mentions = _mentions(folder)

    def rank(item: tuple[str, str, str]) -> tuple[bool, int, int, bool, str]:
        module, attribute, relative = item
        named = f"{module}:{attribute}" in mentions or relative in mentions
        return (not named, relative.count("/"), len(relative), attribute != "app", relative)

    best = min(found, key=rank)
    module, attribute, relative = best
    named = "" if rank(best)[0] else " (the one the README or Dockerfile names)"
    others = f", of {len(found)} found" if len(found) > 1 else ""
    return ServedApp(
        f"{module}:{attribute}",
        f"the module-level app {attribute} of {relative}{named}{others}",
    )


def _served(folder: Path, *, default: bool) -> ServedApp | None:
    """Where a folder without a usable manifest serves its app, in the documented order."""
    found = _from_dockerfiles(folder) or _from_scripts(folder)
    if found is None and default:
        tree = _parse(folder / "server" / "app.py")
        if tree is not None and "app" in _bound_names(tree) | _imports(tree):
            found = ServedApp("server.app:app", "OpenEnv's default app (server/app.py)")
    return found or _from_scan(folder)


def _imports(tree: ast.Module) -> set[str]:
    return {
        alias.asname or alias.name
        for node in _module_level(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def find_app(folder: Path) -> ServedApp:
    """The ASGI app to serve ``folder`` with, where to start it, and how that was found.

    ``openenv.yaml``'s ``app: module:attr`` is used as written. Failing that, the forms seen in
    submissions are read as their authors meant them (``static.manifest`` still reports them):
    a path (``app: server/app.py``), ``server.entry_point``, OpenEnv's default
    ``server.app:app`` when the manifest names none or does not parse, then where the author
    runs the server (the module docstring gives the order). A folder without a manifest is
    served the same way. An app found through the Dockerfile starts in the folder its
    ``WORKDIR`` (or ``cd``) copies, so is the ``app:`` of a manifest whose module is only
    found there (``WORKDIR /app/backend`` with ``app: main:app``).

    Returns:
        The app; its ``how`` is empty when the manifest's ``app:`` names it as it is served.

    Raises:
        EnvLaunchError: No app can be found (the message says what was looked for).
    """
    manifest_path = folder / "openenv.yaml"
    if not manifest_path.is_file():
        found = _served(folder, default=True)
        if found is not None:
            return found
        raise EnvLaunchError(
            f"{folder} has no openenv.yaml and no server to run: looked for {LOOKED_FOR}. "
            "Add an openenv.yaml that names the app (app: module:attr)."
        )
    try:
        manifest = read_manifest(folder)
        broken = ""
    except EnvLaunchError as exc:
        manifest, broken = {}, str(exc)
    app = manifest.get("app")
    if isinstance(app, str) and ":" in app:
        if not _module_file(folder, app):
            docker = _from_dockerfiles(folder)
            if docker is not None and docker.app == app and docker.workdir != ".":
                return docker
        return ServedApp(app)
    if isinstance(app, str) and app.endswith(".py"):  # a path: server/app.py
        module = app.removesuffix(".py").strip("./").replace("/", ".")
        if module and _module_file(folder, f"{module}:app"):
            how = f"openenv.yaml's app {app!r} is a path, read as {module}:app"
            return ServedApp(f"{module}:app", how)
    for keys in _APP_KEYS:
        value: Any = manifest
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and ":" in value and _module_file(folder, value):
            return ServedApp(value, f"the app named by openenv.yaml's {'.'.join(keys)}")
    if app is None and _module_file(folder, "server.app:app"):
        return ServedApp("server.app:app", f"OpenEnv's default app ({broken})" if broken else "")
    found = _served(folder, default=False)
    if found is not None:
        return found
    if broken:
        raise EnvLaunchError(broken)
    raise EnvLaunchError(
        f"{manifest_path}: app must be 'module:attr', got {app!r}"
        if app is not None
        else f"{manifest_path} names no app, and {folder} has no server/app.py"
    )
