"""Read an env folder's ``openenv.yaml``: both formats seen in the wild, and the 0.10 block.

Two formats exist. The *served* format (``openenv init`` since PR #160): ``spec_version: 1``,
``name``, ``type: space``, ``runtime: fastapi``, ``app: server.app:app``, ``port: 8000``. The
older *descriptive* format: ``name``, ``version``, ``description`` and the ``action`` and
``observation`` class names, with the app at the conventional ``server.app:app``. OpenEnv 0.10
adds a ``validation:`` block (reward range and tolerances, resources, capabilities, tags) to
either. Reading is a pure parse: no code from the folder is imported or run.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ._json import JsonObject

ManifestFormat = Literal["served", "descriptive", "unknown"]

#: Keys the 0.10 ``validation:`` block may hold.
VALIDATION_KEYS = frozenset(
    {
        "reward",
        "resources",
        "capabilities",
        "types",
        "network",
        "judge",
        "task_distribution",
        "execution",
    }
)
_REWARD_KEYS = frozenset({"range", "oracle_tolerance", "floor_margin", "variance_tolerance"})
_RESOURCE_KEYS = frozenset(
    {"cpu", "memory_mb", "disk_mb", "episode_timeout_s", "gpus", "gpu_types"}
)
_REQUIRED_RESOURCES = ("cpu", "memory_mb", "disk_mb", "episode_timeout_s")
#: Largest manifest read; anything bigger is not a manifest.
MAX_MANIFEST_BYTES = 256 * 1024


@dataclass
class Manifest:
    """What an ``openenv.yaml`` says, and every problem found while reading it."""

    path: Path
    raw: dict[str, Any] | None = None
    format: ManifestFormat = "unknown"
    problems: list[str] = field(default_factory=list)
    name: str | None = None
    app: str = "server.app:app"
    validation: dict[str, Any] | None = None
    reward_range: tuple[float, float] | None = None
    oracle_tolerance: float | None = None
    floor_margin: float | None = None
    variance_tolerance: float | None = None
    resources: dict[str, Any] | None = None
    resource_problems: list[str] = field(default_factory=list)
    oracle: dict[str, Any] | None = None
    declared_sessions: int | None = None
    wild_reward_range: tuple[float, float] | None = None
    """A reward range under a key manifests use without a ``validation:`` block
    (``reward_range``, ``evaluation.reward_range``, ``reward.range``)."""
    tasks: list[str] = field(default_factory=list)
    """Task ids a ``tasks:`` list declares (strings, or mappings with ``id`` or ``name``)."""

    @property
    def episode_timeout_s(self) -> float | None:
        """The declared episode timeout, when resources declare a valid one."""
        value: Any = (self.resources or {}).get("episode_timeout_s")
        return float(value) if _is_number(value) and value > 0 else None

    @property
    def memory_mb(self) -> float | None:
        """The declared memory budget, when resources declare a valid one."""
        value: Any = (self.resources or {}).get("memory_mb")
        return float(value) if _is_number(value) and value > 0 else None

    def summary(self) -> JsonObject:
        """The manifest as JSON for reports (the raw mapping, trimmed of nothing)."""
        return {
            "format": self.format,
            "name": self.name,
            "app": self.app,
            "validation_block": self.validation is not None,
        }


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def read_manifest(folder: Path) -> Manifest:
    """Parse ``folder/openenv.yaml`` into a ``Manifest``; problems are collected, not raised.

    The caller must have checked that the file exists.
    """
    path = folder / "openenv.yaml"
    manifest = Manifest(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        manifest.problems.append(f"cannot read openenv.yaml: {exc}")
        return manifest
    if len(data) > MAX_MANIFEST_BYTES:
        manifest.problems.append(f"openenv.yaml is {len(data)} bytes: not a manifest")
        return manifest
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        manifest.problems.append(f"openenv.yaml is not valid YAML: {str(exc)[:300]}")
        return manifest
    if not isinstance(raw, dict):
        manifest.problems.append(
            f"openenv.yaml must be a mapping, got {type(raw).__name__}: {str(raw)[:100]!r}"
        )
        return manifest
    manifest.raw = raw
    _read_top_level(manifest, raw, folder)
    manifest.tasks = declared_tasks(raw)
    manifest.wild_reward_range = wild_reward_range(raw)
    validation = raw.get("validation")
    if validation is not None:
        if isinstance(validation, dict):
            manifest.validation = validation
            _read_validation(manifest, validation)
        else:
            manifest.problems.append("`validation:` must be a mapping")
    variables = raw.get("variables")
    if isinstance(variables, dict):
        sessions = variables.get("MAX_CONCURRENT_ENVS")
        try:
            manifest.declared_sessions = int(str(sessions)) if sessions is not None else None
        except ValueError:
            manifest.problems.append(f"variables.MAX_CONCURRENT_ENVS is {sessions!r}, not a number")
    return manifest


def _read_top_level(manifest: Manifest, raw: dict[str, Any], folder: Path) -> None:
    name = raw.get("name")
    if isinstance(name, str) and name.strip():
        manifest.name = name.strip()
    else:
        manifest.problems.append(f"`name` must be a non-empty string, got {name!r}")
    if "spec_version" in raw or "app" in raw or "runtime" in raw:
        manifest.format = "served"
        if raw.get("spec_version") not in (1, "1", None):
            manifest.problems.append(f"unknown spec_version {raw.get('spec_version')!r}")
        port = raw.get("port", 8000)
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            manifest.problems.append(f"`port` must be a TCP port number, got {port!r}")
    elif "action" in raw or "observation" in raw or "description" in raw:
        manifest.format = "descriptive"
        for key in ("action", "observation"):
            if key in raw and not isinstance(raw[key], str):
                manifest.problems.append(f"`{key}` must name a class, got {raw[key]!r}")
    app = raw.get("app", "server.app:app")
    if not isinstance(app, str) or ":" not in app:
        manifest.problems.append(f"`app` must be 'module:attribute', got {app!r}")
        return
    manifest.app = app
    problem = app_problem(folder, app)
    if problem:
        manifest.problems.append(problem)


def _as_range(value: Any) -> tuple[float, float] | None:
    if isinstance(value, dict):
        value = [value.get("min", value.get("low")), value.get("max", value.get("high"))]
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(_is_number(v) for v in value)
        and value[0] < value[1]
    ):
        return float(value[0]), float(value[1])
    return None


def wild_reward_range(raw: dict[str, Any]) -> tuple[float, float] | None:
    """The reward range of a manifest without a ``validation:`` block, under the keys seen."""
    evaluation, reward = raw.get("evaluation"), raw.get("reward")
    for value in (
        raw.get("reward_range"),
        evaluation.get("reward_range") if isinstance(evaluation, dict) else None,
        reward.get("range") if isinstance(reward, dict) else None,
    ):
        found = _as_range(value)
        if found is not None:
            return found
    return None


def declared_tasks(raw: dict[str, Any]) -> list[str]:
    """Task ids of a ``tasks:`` list, at the top level or under ``environment:``."""
    tasks = raw.get("tasks")
    environment = raw.get("environment")
    if tasks is None and isinstance(environment, dict):
        tasks = environment.get("tasks")
    if not isinstance(tasks, list):
        return []
    ids = []
    for item in tasks[:100]:
        if isinstance(item, str | int) and not isinstance(item, bool):
            ids.append(str(item))
        elif isinstance(item, dict):
            value = next((item[k] for k in ("id", "task_id", "name") if item.get(k)), None)
            if isinstance(value, str | int) and not isinstance(value, bool):
                ids.append(str(value))
    return ids


def app_problem(folder: Path, app: str) -> str | None:
    """Say why ``module:attr`` does not resolve inside ``folder`` (None when it does).

    The module must be a file of the folder and bind ``attr`` at its top level (assignment,
    function, class or import); nothing is imported.
    """
    module, _, attr = app.partition(":")
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts) or not attr.isidentifier():
        return f"app {app!r} is not 'package.module:attribute'"
    base = folder.joinpath(*parts)
    candidates = [base.with_suffix(".py"), base / "__init__.py"]
    source_path = next((p for p in candidates if p.is_file()), None)
    if source_path is None:
        return f"app {app!r} does not resolve: neither {parts[-1]}.py nor a package in {folder}"
    try:
        tree = ast.parse(source_path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError as exc:
        return f"{source_path.relative_to(folder)} does not parse: line {exc.lineno}: {exc.msg}"
    if attr not in _top_level_names(tree):
        return f"app {app!r} does not resolve: {source_path.relative_to(folder)} binds no {attr!r}"
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _read_validation(manifest: Manifest, block: dict[str, Any]) -> None:
    problems = manifest.problems
    unknown = sorted(set(block) - VALIDATION_KEYS)
    if unknown:
        problems.append(f"validation: unknown keys {unknown}")
    reward = block.get("reward")
    if reward is not None:
        if not isinstance(reward, dict):
            problems.append("validation.reward must be a mapping")
        else:
            _read_reward(manifest, reward)
    resources = block.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            manifest.resource_problems.append("validation.resources must be a mapping")
        else:
            manifest.resources = resources
            _read_resources(manifest, resources)
    capabilities = block.get("capabilities")
    if capabilities is not None:
        if not isinstance(capabilities, dict):
            problems.append("validation.capabilities must be a mapping")
        else:
            verifier = capabilities.get("verifier")
            kind = verifier.get("kind") if isinstance(verifier, dict) else None
            if kind not in ("reward_channel", "script"):
                problems.append(
                    "validation.capabilities.verifier.kind must be reward_channel or script, "
                    f"got {kind!r}"
                )
            oracle = capabilities.get("oracle")
            if oracle is not None:
                if isinstance(oracle, dict) and isinstance(oracle.get("location"), str):
                    manifest.oracle = oracle
                else:
                    problems.append("validation.capabilities.oracle needs form and location")
    types = block.get("types")
    if types is not None:
        tags = types.get("tags") if isinstance(types, dict) else None
        if not (isinstance(tags, list) and tags and all(isinstance(t, str) and t for t in tags)):
            problems.append("validation.types.tags must be a non-empty list of strings")


def _read_reward(manifest: Manifest, reward: dict[str, Any]) -> None:
    problems = manifest.problems
    unknown = sorted(set(reward) - _REWARD_KEYS)
    if unknown:
        problems.append(f"validation.reward: unknown keys {unknown}")
    value = reward.get("range", [0.0, 1.0])
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(_is_number(v) for v in value)
        and value[0] < value[1]
    ):
        manifest.reward_range = (float(value[0]), float(value[1]))
    else:
        problems.append(f"validation.reward.range must be [low, high] with low < high: {value!r}")
    for key in ("oracle_tolerance", "floor_margin", "variance_tolerance"):
        if key not in reward:
            continue
        number = reward[key]
        if not _is_number(number) or number < 0:
            problems.append(f"validation.reward.{key} must be a number >= 0, got {number!r}")
            continue
        setattr(manifest, key, float(number))
    if "floor_margin" not in reward:
        problems.append("validation.reward.floor_margin is required")


def _read_resources(manifest: Manifest, resources: dict[str, Any]) -> None:
    problems = manifest.resource_problems
    unknown = sorted(set(resources) - _RESOURCE_KEYS)
    if unknown:
        problems.append(f"validation.resources: unknown keys {unknown}")
    for key in _REQUIRED_RESOURCES:
        value = resources.get(key)
        if value is None:
            problems.append(f"validation.resources.{key} is missing")
        elif not _is_number(value) or value <= 0:
            problems.append(f"validation.resources.{key} must be a number > 0, got {value!r}")
