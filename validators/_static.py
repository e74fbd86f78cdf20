"""Static checks: what the env folder says about itself, read without running any of it."""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._check import Finding, check, failed, passed, skipped
from ._installs import (
    LOCK_FILES,
    Requirement,
    build_installs,
    declared_constraint_files,
    declared_requirements,
    is_pinned_commit,
    vcs_revision,
)
from ._json import JsonObject
from ._subject import Subject

#: Folders never scanned (virtualenvs, VCS data, caches, tests of the env itself).
SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "__pycache__",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        "tests",
        "test",
        "build",
        "dist",
    }
)
#: Most Python files and bytes scanned for the implementation check.
MAX_FILES = 300
MAX_FILE_BYTES = 1_000_000
ARCHIVE_SUFFIXES = (
    ".zip",
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tar.xz",
    ".whl",
    ".7z",
    ".rar",
    ".egg",
)
#: Distributions of the OpenEnv server library (``openenv-core`` is the old name).
OPENENV_DISTS = frozenset({"openenv", "openenv-core", "openenv_core"})


def _files(folder: Path, pattern: str = "*") -> Iterator[Path]:
    for path in sorted(folder.rglob(pattern)):
        rel = path.relative_to(folder).parts
        if any(part in SKIP_DIRS for part in rel[:-1]):
            continue
        yield path


def python_sources(folder: Path) -> Iterator[tuple[Path, str, ast.Module]]:
    """``(path, text, tree)`` of the folder's Python files that parse, within the scan limits."""
    scanned = 0
    for path in _files(folder, "*.py"):
        if scanned >= MAX_FILES:
            return
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            tree = ast.parse(text)
        except (OSError, SyntaxError, ValueError):
            continue
        scanned += 1
        yield path, text, tree


# --- static.manifest ---------------------------------------------------------------------------


@check("static.manifest", level="static", needs=("folder",))
async def check_manifest(subject: Subject) -> Finding:
    """openenv.yaml is valid: a known format, an app that resolves, a well-formed 0.10 block."""
    manifest = subject.env.manifest
    if manifest is None:
        return _missing_manifest(subject)
    problems = list(manifest.problems)
    bounds = subject.policy.bounds
    if manifest.oracle_tolerance is not None and (
        manifest.oracle_tolerance > bounds.max_oracle_tolerance
    ):
        problems.append(
            f"oracle_tolerance {manifest.oracle_tolerance} exceeds the policy maximum "
            f"{bounds.max_oracle_tolerance}"
        )
    if manifest.floor_margin is not None and manifest.floor_margin < bounds.min_floor_margin:
        problems.append(
            f"floor_margin {manifest.floor_margin} is below the policy minimum "
            f"{bounds.min_floor_margin}"
        )
    if manifest.variance_tolerance is not None and (
        manifest.variance_tolerance > bounds.max_variance_tolerance
    ):
        problems.append(
            f"variance_tolerance {manifest.variance_tolerance} exceeds the policy maximum "
            f"{bounds.max_variance_tolerance}"
        )
    measured: JsonObject = {
        **manifest.summary(),
        "reward_range": list(manifest.reward_range) if manifest.reward_range else None,
        "oracle_tolerance": manifest.oracle_tolerance,
        "floor_margin": manifest.floor_margin,
    }
    evidence: list[Any] = [{"file": "openenv.yaml", "content": _excerpt(manifest.path)}]
    if problems:
        return failed(
            f"openenv.yaml has {len(problems)} problem(s): {problems[0]}",
            "Fix openenv.yaml: " + "; ".join(problems[:5]),
            measured=measured,
            evidence=[*problems, *evidence],
        )
    block = "with" if manifest.validation is not None else "without"
    return passed(
        f"openenv.yaml is a valid {manifest.format} manifest {block} a validation block; "
        f"app {manifest.app} resolves",
        measured=measured,
        evidence=evidence,
    )


#: The ``validation:`` block a new manifest starts from (what one episode of the env needs).
RESOURCES_TEMPLATE = (
    "validation:\n  resources:\n    cpu: 1\n    memory_mb: 1024\n    disk_mb: 512\n"
    "    episode_timeout_s: 300\n"
)
#: What the checks of a manifest's declarations say when there is no manifest at all.
NO_MANIFEST = "there is no openenv.yaml to declare it in (static.manifest reports it)"


def _missing_manifest(subject: Subject) -> Finding:
    """The finding of a folder that serves an app but has no openenv.yaml: what to write."""
    folder = subject.root
    served = subject.env.served_app
    app, found_by = (served.app, served.how) if served is not None else ("server.app:app", None)
    name = re.sub(r"[^a-z0-9]+", "_", folder.name.lower()).strip("_") or "my_env"
    manifest = (
        f"spec_version: 1\nname: {name}\ntype: space\nruntime: fastapi\napp: {app}\n"
        f"port: 8000\n{RESOURCES_TEMPLATE}"
    )
    where = f"; it was served as {app}, {found_by}" if found_by else ""
    return failed(
        f"openenv.yaml is missing: the folder is not packaged as an OpenEnv env{where}"[:900],
        "Add an openenv.yaml at the folder's root (`openenv init` writes one) that names the "
        "app the env serves and what one episode needs, for instance:\n" + manifest,
        measured={"manifest": False, "app": app if found_by else None, "app_found_by": found_by},
        evidence=[
            {"file": "openenv.yaml", "exists": False, "served_as": app if found_by else None}
        ],
    )


def _excerpt(path: Path, limit: int = 1500) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text if len(text) <= limit else text[:limit] + "..."


# --- static.layout -----------------------------------------------------------------------------


@check("static.layout", level="static", needs=("folder",))
async def check_layout(subject: Subject) -> Finding:
    """The OpenEnv project layout: server app, dependency list, Dockerfile; no archives."""
    folder = subject.root
    problems: list[str] = []
    present = {
        "openenv.yaml": (folder / "openenv.yaml").is_file(),
        "server/app.py": (folder / "server" / "app.py").is_file(),
        "models.py": (folder / "models.py").is_file(),
        "dependencies": any(
            (folder / p).is_file()
            for p in ("pyproject.toml", "requirements.txt", "server/requirements.txt")
        ),
        "Dockerfile": (folder / "server" / "Dockerfile").is_file()
        or (folder / "Dockerfile").is_file(),
    }
    for name in ("dependencies", "Dockerfile"):
        if not present[name]:
            problems.append(
                "no dependency list (pyproject.toml or requirements.txt)"
                if name == "dependencies"
                else "no Dockerfile (server/Dockerfile or Dockerfile)"
            )
    for shadow in sorted(OPENENV_DISTS):
        candidate = folder / shadow.replace("-", "_")
        if (candidate / "__init__.py").is_file() or (candidate.is_dir() and shadow == "openenv"):
            problems.append(
                f"a local {candidate.name}/ folder shadows the OpenEnv framework on import"
            )
    archives = [
        str(p.relative_to(folder))
        for p in _files(folder)
        if p.is_file() and p.name.lower().endswith(ARCHIVE_SUFFIXES)
    ]
    if archives:
        problems.append(f"archives in the package: {', '.join(archives[:5])}")
    escaping = [
        str(p.relative_to(folder))
        for p in _files(folder)
        if p.is_symlink() and not p.resolve().is_relative_to(folder.resolve())
    ]
    if escaping:
        problems.append(f"symlinks pointing outside the package: {', '.join(escaping[:5])}")
    measured: JsonObject = {"present": dict(present), "archives": archives[:20]}
    if problems:
        return failed(
            "; ".join(problems),
            "Follow the OpenEnv layout (openenv.yaml, models.py, server/app.py, "
            "server/requirements.txt, server/Dockerfile); keep sources unpacked and rename "
            "folders that shadow installed packages.",
            measured=measured,
            evidence=problems,
        )
    return passed("the folder follows the OpenEnv project layout", measured=measured)


# --- static.dependency_pinning -----------------------------------------------------------------


def classify_requirement(text: str) -> tuple[str, str]:
    """Return ``(distribution name, pin class)`` of one requirement line.

    Pin classes: ``exact`` (``==X``), ``bounded`` (an upper bound or ``~=``), ``lower``
    (only a lower bound), ``bare`` (no version at all), ``direct`` (a path or URL), ``vcs``
    (a VCS URL at a full commit), ``vcs_unpinned`` (a VCS URL at a branch, a tag or nothing),
    ``invalid``.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    vcs = vcs_revision(text)
    if vcs is not None:
        try:
            name = re.sub(r"[-_.]+", "-", Requirement(text).name).lower()
        except InvalidRequirement:  # a bare URL: git+https://...#egg=name
            name = text
        return name, "vcs" if is_pinned_commit(vcs[1]) else "vcs_unpinned"
    if text.startswith((".", "/", "file:", "http:", "https:")):
        return text, "direct"
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return text, "invalid"
    name = re.sub(r"[-_.]+", "-", requirement.name).lower()
    if requirement.url:
        return name, "direct"
    specs = list(requirement.specifier)
    if not specs:
        return name, "bare"
    operators = {s.operator for s in specs}
    if operators & {"==", "==="} and not any(s.version.endswith(".*") for s in specs):
        return name, "exact"
    if operators & {"<", "<=", "~=", "=="}:
        return name, "bounded"
    return name, "lower"


#: The OpenEnv library an env that declares none is told to pin.
CURRENT_OPENENV = "openenv==0.10.0"


def openenv_pin(frameworks: list[str], texts: dict[str, str]) -> str:
    """An exact pin of the OpenEnv library in the distribution and era the env declares.

    An env written for ``openenv-core>=0.2.2`` is told ``openenv-core==0.2.2`` (the version it
    was written for), not to move to another distribution; one that declares none, the
    current library.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    for framework in frameworks:
        try:
            requirement = Requirement(texts[framework])
        except (InvalidRequirement, KeyError):
            continue
        versions = [s.version for s in requirement.specifier if s.operator in (">=", "~=", "==")]
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        if versions:
            return f"{requirement.name}{extras}=={versions[0].removesuffix('.*')}"
        if requirement.name != "openenv":
            return f"{requirement.name}{extras}==<the release the env was written for>"
    return CURRENT_OPENENV


def _vcs_problem(requirement: Requirement) -> str:
    """What is wrong with a VCS requirement that names no commit, and how to pin it."""
    url, revision = vcs_revision(requirement.text) or (requirement.text, None)
    egg = re.search(r"#egg=([\w.-]+)", url)
    name = requirement.text.partition(" @ ")[0].strip() if " @ " in requirement.text else ""
    name = name or (egg.group(1) if egg else "<package>")
    at = f"at {revision!r}, a branch or tag that can move" if revision else "at no commit"
    base = url.split("#", 1)[0]
    base = base.rsplit("@", 1)[0] if revision else base
    return (
        f"{requirement.where}: {requirement.text} installs {at}: pin it to a commit "
        f"({name} @ {base}@<40-hex commit>) or to a released version ({name}==X.Y.Z)"
    )


def _installed_requirements(
    folder: Path,
) -> tuple[list[Requirement], list[str], list[str], list[str], JsonObject]:
    """What the build installs, as ``(requirements, locks, present, problems, basis)``.

    ``requirements`` are those no lock pins, ``locks`` the lock files the build installs
    from, ``present`` every lock file in the folder, ``basis`` how that was read (measured).
    With a Dockerfile that installs anything, its install commands decide; without one, the
    declared files and any lock file in the folder (what an author builds from).
    """
    present = [name for name in LOCK_FILES if (folder / name).is_file()]
    build = build_installs(folder)
    if build is None:
        requirements, problems = declared_requirements(folder)
        basis: JsonObject = {
            "basis": "declared files",
            "constraint_files": declared_constraint_files(folder),
        }
        return ([] if present else requirements), present, present, problems, basis
    basis = {
        "basis": "dockerfile",
        "dockerfiles": build.dockerfiles,
        "install_commands": build.commands[:10],
        "installed_files": build.installed_files,
        "constraint_files": build.constraint_files,
        "not_in_folder": build.missing[:10],
    }
    return build.requirements, build.locks, present, list(build.problems), basis


@check("static.dependency_pinning", level="static", needs=("folder",))
async def check_dependency_pinning(subject: Subject) -> Finding:
    """What the build installs is pinned: a lock it installs from, or exact pins.

    When a Dockerfile installs the env, its install commands say which files count: a lock
    file counts only if the build installs from it. The requirements no lock pins need an
    exact OpenEnv pin, a version on every other package, and VCS URLs at a full commit.
    """
    folder = subject.root
    judged, locks, present, problems, basis = _installed_requirements(folder)
    classes: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    texts: dict[str, str] = {}
    unpinned_vcs: list[Requirement] = []
    constrained: list[str] = []
    for requirement in judged:
        name, kind = classify_requirement(requirement.text)
        if requirement.hashed and kind in ("exact", "direct"):
            kind = "exact"
        pinned = _constrained_kind(kind, requirement.constraint)
        if pinned != kind and requirement.constraint is not None:
            constraint = requirement.constraint
            constrained.append(
                f"{requirement.where}: {requirement.text} is pinned by {constraint.where}: "
                f"{constraint.text}"
            )
            kind = pinned
        classes.setdefault(kind, []).append(f"{requirement.where}: {requirement.text}")
        if kind == "vcs_unpinned":
            unpinned_vcs.append(requirement)
        names[name] = kind if names.get(name) in (None, "exact") else names[name]
        texts.setdefault(name, requirement.text)
    unused = [lock for lock in present if lock not in locks]
    measured: JsonObject = {
        **basis,
        "lock_files": present,
        "locks_installed": locks,
        "requirements": len(judged),
        **{kind: len(items) for kind, items in sorted(classes.items())},
        "pinned_by_constraints": len(constrained),
    }
    frameworks = sorted(n for n in names if n in OPENENV_DISTS)
    # what the build does not install still says what the env is: both names is a defect
    declared = {classify_requirement(r.text)[0] for r in declared_requirements(folder)[0]}
    if len((set(frameworks) | declared) & {"openenv", "openenv-core"}) > 1:
        problems.append("declares both openenv and openenv-core (the same files under two names)")
    if not judged and not locks:
        problems.append("declares no dependencies at all")
    problems += [_vcs_problem(r) for r in unpinned_vcs]
    problems += [f"unversioned requirement {r}" for r in classes.get("bare", [])]
    problems += [f"unparseable requirement {r}" for r in classes.get("invalid", [])]
    for framework in frameworks:
        if names[framework] not in ("exact", "vcs", "vcs_unpinned"):
            problems.append(
                f"the OpenEnv library {framework!r} is not pinned to one version (==X.Y.Z): "
                f"{texts[framework]}"
            )
    if problems:
        installed = ", ".join(list(basis.get("installed_files") or []) or ["packages by name"])
        note = (
            f" ({', '.join(unused)} is present, but the Dockerfile installs {installed}, "
            "not the lock: it pins nothing the build uses)"
            if unused and basis["basis"] == "dockerfile"
            else ""
        )
        remedies = []
        if unpinned_vcs:
            remedies.append(
                "Pin every VCS requirement to a full commit (name @ git+URL@<40-hex commit>) "
                "or to a released version (name==X.Y.Z)."
            )
        if unused and basis["basis"] == "dockerfile":
            remedies.append(
                f"Install from the lock in the Dockerfile ({_lock_command(unused[0])}), or pin "
                "the files it installs."
            )
        remedies.append(
            f"Pin the OpenEnv library exactly ({openenv_pin(frameworks, texts)}), give every "
            "other requirement a version range, or install from a lock file (uv lock, then "
            "uv sync --frozen in the Dockerfile)."
        )
        return failed(
            f"{len(problems)} pinning problem(s): {problems[0]}{note}",
            " ".join(remedies),
            measured=measured,
            evidence=problems[:20],
        )
    if locks:
        by_build = " (the Dockerfile installs from it)" if basis["basis"] == "dockerfile" else ""
        how = f"lock file {locks[0]}{by_build}"
    elif frameworks:
        how = f"an exact {frameworks[0]} pin and versioned requirements"
    else:
        how = "versioned requirements"
    if constrained:
        files = ", ".join(str(f) for f in list(basis.get("constraint_files") or []))
        how += f" ({len(constrained)} of them pinned by the constraints file {files})"
    return passed(
        f"dependencies are pinned by {how}",
        measured=measured,
        evidence=[*constrained[:10], *classes.get("lower", [])[:10]],
    )


#: Pin classes from the loosest to the strictest, for a constraint that tightens one.
_PIN_STRENGTH = ("invalid", "bare", "lower", "bounded", "exact")


def _constrained_kind(kind: str, constraint: Requirement | None) -> str:
    """The pin class of a requirement that a constraints-file line also names.

    pip installs what satisfies both, so the stricter of the two decides
    (``requests`` with the constraint ``requests==2.32.3`` is exact). A direct or VCS
    requirement is judged by its URL alone.
    """
    if constraint is None or kind not in _PIN_STRENGTH:
        return kind
    limit = classify_requirement(constraint.text)[1]
    if constraint.hashed and limit in ("exact", "direct"):
        limit = "exact"
    if limit not in _PIN_STRENGTH:
        return kind
    return max(kind, limit, key=_PIN_STRENGTH.index)


def _lock_command(lock: str) -> str:
    """The Dockerfile command that installs from ``lock``."""
    commands = {
        "uv.lock": "uv sync --frozen",
        "poetry.lock": "poetry install --no-root",
        "Pipfile.lock": "pipenv install --deploy --system",
        "pdm.lock": "pdm install --frozen-lockfile",
        "pylock.toml": "uv pip sync pylock.toml",
    }
    return commands.get(Path(lock).name, f"pip install -r {lock}")


# --- static.resource_declaration, static.timeout_ceiling ---------------------------------------


@check("static.resource_declaration", level="static", needs=("folder",))
async def check_resource_declaration(subject: Subject) -> Finding:
    """validation.resources declares cpu, memory_mb, disk_mb and episode_timeout_s."""
    manifest = subject.env.manifest
    if manifest is None:
        return skipped(NO_MANIFEST, measured={"blocked_by": "static.manifest"})
    if manifest.resources is None:
        era = manifest.validation is None
        return failed(
            "openenv.yaml declares no resources"
            + (" (it predates the validation: block)" if era else ""),
            f"Add to openenv.yaml:\n{RESOURCES_TEMPLATE}(what one episode of the env needs).",
            measured={"pre_validation_manifest": era},
        )
    if manifest.resource_problems:
        return failed(
            "; ".join(manifest.resource_problems),
            "Give validation.resources positive cpu, memory_mb, disk_mb and episode_timeout_s.",
            measured={"resources": manifest.resources},
            evidence=manifest.resource_problems,
        )
    return passed("resources are declared", measured={"resources": manifest.resources})


@check("static.timeout_ceiling", level="static", needs=("folder",))
async def check_timeout_ceiling(subject: Subject) -> Finding:
    """An episode timeout is declared and stays under the policy's ceiling."""
    manifest = subject.env.manifest
    if manifest is None:
        return skipped(NO_MANIFEST, measured={"blocked_by": "static.manifest"})
    timeout = manifest.episode_timeout_s
    ceiling = subject.policy.bounds.max_episode_timeout_s
    measured: JsonObject = {"episode_timeout_s": timeout, "ceiling_s": ceiling}
    if timeout is None:
        measured["pre_validation_manifest"] = manifest.validation is None
        return failed(
            "no episode timeout is declared",
            "Add validation.resources.episode_timeout_s to openenv.yaml: the seconds one "
            f"episode may take (at most {ceiling:g}).",
            measured=measured,
        )
    if timeout > ceiling:
        return failed(
            f"episode_timeout_s {timeout:g} exceeds the ceiling {ceiling:g}",
            f"Keep episodes under {ceiling:g} seconds.",
            measured=measured,
        )
    return passed(f"episode timeout {timeout:g}s is under {ceiling:g}s", measured=measured)


# --- static.task_distribution_pinning ----------------------------------------------------------

#: Calls that fetch from the Hub, and the keyword naming what they fetch.
HUB_FETCHES = {
    "load_dataset": "path",
    "snapshot_download": "repo_id",
    "hf_hub_download": "repo_id",
}
#: ``load_dataset`` builders that read the files they are given, not a Hub repo.
FILE_BUILDERS = frozenset(
    {"json", "csv", "parquet", "text", "arrow", "pandas", "xml", "sql", "generator", "webdataset"}
    | {"imagefolder", "audiofolder", "videofolder"}
)
#: Suffixes of files that hold tasks (downloaded, or shipped in the folder).
DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".tsv", ".parquet", ".arrow", ".txt")
#: Shipped data files read to digest them (bytes, all files together).
MAX_DIGEST_BYTES = 64 * 1024 * 1024
_SHA = re.compile(r"[0-9a-f]{40}")
_URL = re.compile(r"https?://[^\s\"'<>]+")
_NOT_DATA = frozenset({"openenv.yaml", "package.json", "package-lock.json", "tsconfig.json"})
_NOT_DATA_NAMES = re.compile(
    r"(requirements|constraints|license|licence|notice|readme|changelog|authors)[\w.-]*$",
    re.IGNORECASE,
)


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """``NAME = "text"`` assignments at module and class level (revisions kept in constants)."""
    out: dict[str, str] = {}
    bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for node in body:
            value: ast.expr | None = None
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                value, targets = node.value, node.targets
            elif isinstance(node, ast.AnnAssign):
                value, targets = node.value, [node.target]
            if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    out[target.id] = value.value
                elif isinstance(target, ast.Attribute):
                    out[target.attr] = value.value
    return out


def _text(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    """The string an expression always has (a literal, or a constant it names), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr)
    return None


def _argument(call: ast.Call, keyword: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    return call.args[0] if call.args else None


def _hub_fetch(
    call: ast.Call, name: str, constants: dict[str, str], folder: Path
) -> JsonObject | None:
    """How one Hub fetch pins what it loads; None when it reads local files instead."""
    target_node = _argument(call, HUB_FETCHES[name])
    target = _text(target_node, constants)
    if name == "load_dataset" and target is not None:
        try:
            local = target.startswith((".", "/", "~")) or (folder / target).exists()
        except (OSError, ValueError):
            local = False
        if target in FILE_BUILDERS or local:
            return None  # a packaged builder over data_files, or a folder in the env
    revision_node = next((k.value for k in call.keywords if k.arg == "revision"), None)
    revision = _text(revision_node, constants)
    what = target if target is not None else ast.unparse(target_node or call.func)
    found: JsonObject = {"kind": "hub", "source": what, "revision": revision}
    if revision_node is None:
        found["problem"] = f"{name}({what!r}) has no revision: it loads whatever the repo holds now"
    elif revision is None:
        found["revision"] = ast.unparse(revision_node)
        found["problem"] = (
            f"{name}({what!r}) takes its revision from {ast.unparse(revision_node)}, which "
            "cannot be read without running the env"
        )
    elif not _SHA.fullmatch(revision):
        found["problem"] = (
            f"{name}({what!r}) loads revision {revision!r}, a branch or tag that can move"
        )
    return found


def _url_fetches(call: ast.Call) -> list[JsonObject]:
    """Data files a call downloads by a literal URL, and whether a commit or checksum pins them."""
    checksum = any(
        k.arg and any(word in k.arg.lower() for word in ("sha256", "checksum", "hash", "md5"))
        for k in call.keywords
    )
    found: list[JsonObject] = []
    values = list(call.args) + [k.value for k in call.keywords]
    for value in values:
        for node in ast.walk(value):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            for url in _URL.findall(node.value):
                path = url.split("?", 1)[0].split("#", 1)[0]
                if not path.lower().endswith(DATA_SUFFIXES):
                    continue
                item: JsonObject = {"kind": "url", "source": url}
                if not (checksum or _SHA.search(path)):
                    item["problem"] = (
                        f"downloads {url} with no commit in the URL and no checksum: the file "
                        "can change under the same URL"
                    )
                found.append(item)
    return found


def task_sources(folder: Path) -> tuple[list[JsonObject], int]:
    """Every remote task source in the folder's Python code, and the number of files read."""
    sources: list[JsonObject] = []
    scanned = 0
    for path, text, tree in python_sources(folder):
        scanned += 1
        constants = _string_constants(tree)
        lines = text.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            found = _url_fetches(node)
            if name in HUB_FETCHES:
                hub = _hub_fetch(node, name, constants, folder)
                found += [hub] if hub is not None else []
            for item in found:
                item["where"] = f"{path.relative_to(folder)}:{node.lineno}"
                item["line"] = lines[node.lineno - 1].strip()[:300]
                sources.append(item)
    return sources, scanned


def shipped_data(folder: Path) -> list[JsonObject]:
    """The data files shipped in the folder, with their sizes and sha256 digests."""
    files: list[JsonObject] = []
    budget = MAX_DIGEST_BYTES
    for path in _files(folder):
        rel = path.relative_to(folder)
        if not path.is_file() or path.name in _NOT_DATA or _NOT_DATA_NAMES.match(path.name):
            continue
        if not path.name.lower().endswith(DATA_SUFFIXES) or any(
            part.startswith(".") for part in rel.parts
        ):
            continue
        size = path.stat().st_size
        entry: JsonObject = {"path": str(rel), "bytes": size}
        if size <= budget:
            entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
            budget -= size
        files.append(entry)
    return files


@check("static.task_distribution_pinning", level="static", needs=("folder",))
async def check_task_distribution_pinning(subject: Subject) -> Finding:
    """The tasks the env serves cannot change under the same version of the env.

    Tasks generated from the reset arguments, or read from files shipped in the folder, are
    pinned by the folder itself (their digests are reported). A dataset loaded from the Hub
    must name a commit sha as its revision (a branch or tag can move), and a data file
    downloaded by URL needs a commit in the URL or a checksum.
    """
    folder = subject.root
    sources, scanned = task_sources(folder)
    shipped = shipped_data(folder)
    unpinned = [s for s in sources if "problem" in s]
    measured: JsonObject = {
        "files_scanned": scanned,
        "remote_sources": len(sources),
        "unpinned": len(unpinned),
        "shipped_data_files": shipped[:20],
    }
    if unpinned:
        return failed(
            f"{len(unpinned)} of {len(sources)} remote task source(s) are not pinned: "
            f"{unpinned[0]['where']} {unpinned[0]['problem']}",
            "Pin every task source to a commit: load_dataset(repo, revision=<40-hex sha>) and "
            "hf_hub_download(..., revision=<sha>), download files by a commit URL or check a "
            "sha256, or ship the task files in the env folder.",
            measured=measured,
            evidence=unpinned[:10],
        )
    if sources:
        return passed(
            f"{len(sources)} remote task source(s), each pinned to a commit or a checksum",
            measured=measured,
            evidence=sources[:10],
        )
    return passed(
        "no remote task source: tasks come from the reset arguments and "
        f"{len(shipped)} shipped data file(s), pinned by the folder itself",
        measured=measured,
    )


# --- static.env_implementation -----------------------------------------------------------------

_VERBS = ("reset", "step")
#: Method names that implement each verb (OpenEnv's async twins; MCP envs' ``_step_impl``).
_METHODS = {"reset": ("reset", "reset_async"), "step": ("step", "step_async", "_step_impl")}


def _verb_methods(
    node: ast.ClassDef,
) -> dict[str, tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] | None:
    """``verb -> (method name, method)`` of a class implementing both verbs, else None."""
    methods = {
        f.name: f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    found = {}
    for verb, names in _METHODS.items():
        name = next((n for n in names if n in methods), None)
        if name is None:
            return None
        found[verb] = (name, methods[name])
    return found


def _is_constant(node: ast.expr | None) -> bool:
    if node is None or isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Dict):
        return all(_is_constant(k) for k in node.keys if k is not None) and all(
            _is_constant(v) for v in node.values
        )
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(_is_constant(e) for e in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        # JSONResponse({"status": "ok"}), dict(status="ok")
        return all(_is_constant(a) for a in node.args) and all(
            _is_constant(k.value) for k in node.keywords
        )
    return False


def is_trivial(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a function does nothing: pass, ``...``, a constant return, NotImplementedError."""
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body:
        return True
    if len(body) != 1:
        return False
    statement = body[0]
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return True
    if isinstance(statement, ast.Return):
        return _is_constant(statement.value)
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def _route_verb(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """``reset``/``step`` when the function is an HTTP route ``POST /reset`` or ``/step``."""
    for decorator in function.decorator_list:
        if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)):
            continue
        if decorator.func.attr not in ("post", "get", "put", "api_route", "route"):
            continue
        if decorator.args and isinstance(decorator.args[0], ast.Constant):
            path = str(decorator.args[0].value).rstrip("/")
            for verb in _VERBS:
                if path.endswith("/" + verb):
                    return verb
    return None


@check("static.env_implementation", level="static", needs=("folder",))
async def check_env_implementation(subject: Subject) -> Finding:
    """Reset and step are really implemented, not endpoints that just return "ok"."""
    folder = subject.root
    real: dict[str, list[str]] = {verb: [] for verb in _VERBS}
    fake: list[JsonObject] = []
    scanned = 0
    for path, source, tree in python_sources(folder):
        scanned += 1
        rel = str(path.relative_to(folder))
        lines = source.splitlines()
        for node in ast.walk(tree):
            candidates: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, str]] = []
            if isinstance(node, ast.ClassDef):
                verbs = _verb_methods(node)
                if verbs is not None:
                    candidates += [
                        (verb, method, f"{node.name}.{name}")
                        for verb, (name, method) in verbs.items()
                    ]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                verb = _route_verb(node)
                if verb is not None:
                    candidates.append((verb, node, f"route {node.name}"))
            for verb, function, label in candidates:
                where = f"{rel}:{function.lineno} {label}"
                if is_trivial(function):
                    end = function.end_lineno or function.lineno
                    fake.append(
                        {
                            "where": where,
                            "source": "\n".join(lines[function.lineno - 1 : end])[:600],
                        }
                    )
                else:
                    real[verb].append(where)
    measured: JsonObject = {
        "files_scanned": scanned,
        "implementations": real,
        "trivial": [f["where"] for f in fake],
    }
    if fake:
        return failed(
            f"{len(fake)} reset/step implementation(s) do nothing: {fake[0]['where']}",
            "Implement reset() and step() for real: reset must build an episode from its "
            "arguments and step must apply the action and score it; an endpoint that returns "
            "a constant is not an environment.",
            measured=measured,
            evidence=fake[:5],
        )
    missing = [verb for verb in _VERBS if not real[verb]]
    if missing:
        return failed(
            f"no implementation of {' and '.join(missing)} found in {scanned} Python files",
            "Implement an Environment class with reset() and step() (openenv's Environment "
            "interface) and serve it with create_app.",
            measured=measured,
        )
    return passed(
        f"reset and step are implemented ({real['reset'][0]}, {real['step'][0]})",
        measured=measured,
    )


def reset_parameters(folder: Path) -> list[str] | None:
    """Names ``reset()`` accepts in the folder's Environment class, when they are knowable.

    None when no class with reset and step is found, or when ``reset`` takes ``**kwargs``
    (then every key reaches it). OpenEnv's server drops the other keys without a word.
    """
    for _, _, tree in python_sources(folder):
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            verbs = _verb_methods(node)
            if verbs is None or is_trivial(verbs["reset"][1]):
                continue
            reset = verbs["reset"][1]
            if reset.args.kwarg is not None:
                return None
            names = [
                a.arg for a in reset.args.posonlyargs + reset.args.args + reset.args.kwonlyargs
            ]
            return [n for n in names if n not in ("self", "cls")]
    return None
