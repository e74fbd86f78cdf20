"""Tasksets and results on the Hugging Face Hub: scaffold, publish, describe, profile, pull.

Everything that leaves the machine goes in one commit with ``parentCommit`` set to the head it
was built against, so a push is all or nothing and two concurrent pushes cannot clobber each
other (the Hub answers 412 to the later one, which is retried or reported). Results are
redacted before they are serialized: API-key shapes (``sk-…``, ``hf_…``, ``Bearer …``, JWTs,
cloud keys), values under secret-named keys, and the exact values of secrets passed in by the
caller. A value that cannot be inspected (an opaque encoded blob) stops the push: redaction
fails closed.

``huggingface_hub``, ``pyarrow`` and ``datasets`` are imported inside the functions that need
them, so ``import taskhub`` stays light.
"""

from __future__ import annotations

import base64
import binascii
import csv
import importlib
import importlib.util
import json
import logging
import math
import re
import shutil
import sys
import tempfile
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from taskhub._agent import Templates
from taskhub._errors import (
    ConfigError,
    ResultsError,
    TaskhubError,
    TasksetError,
    TasksetNotFound,
)
from taskhub._results import EPISODES, MANIFEST, read_run, summarize, write_manifest, write_results
from taskhub._schema import (
    MEASURED_FIELDS,
    EpisodeRecord,
    RunManifest,
    Task,
    TasksetCard,
    TasksetRef,
)
from taskhub._taskset import (
    DATA_SUFFIXES,
    Taskset,
    _check_unique_ids,
    _read_files,
    _Row,
    _validate_rows,
    data_files,
    load_taskset,
    read_card,
)

logger = logging.getLogger(__name__)

#: What a redacted value is replaced with.
REDACTED = "[REDACTED]"
#: Shortest secret value accepted for exact-value redaction (shorter ones match too much text).
MIN_SECRET_LENGTH = 8
#: Unbroken runs of base64/hex characters at least this long are opaque blobs to inspect.
OPAQUE_BLOB_LENGTH = 200
#: Attempts of a results push when another push lands first (HTTP 412).
PUSH_ATTEMPTS = 3
#: Header key of a profiled taskset's README.md that records which runs were used.
PROFILE_HEADER = "taskhub_profile"

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_RUN_ID = re.compile(r"^[\w.-]+$")
_SECRET_ENV_NAME = re.compile(
    r"(^|_)(KEY|APIKEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDENTIALS)$",
    re.IGNORECASE,
)
_SECRET_KEY = re.compile(
    r"^(.*[_-])?(api[_-]?key|apikey|access[_-]?key|secret([_-]?key)?|token|access[_-]?token|"
    r"refresh[_-]?token|auth[_-]?token|password|passwd|passphrase|authorization|cookie|"
    r"credentials?|private[_-]?key)$",
    re.IGNORECASE,
)
_NOT_REDACTED = r"(?!\[REDACTED\])"
#: (kind, pattern, replacement) of the secret shapes looked for in every string.
_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "private_key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        REDACTED,
    ),
    ("bearer", re.compile(r"(?i)\b(bearer|basic)(\s+)" + _NOT_REDACTED + r"[\w.~+/=-]{8,}"), ""),
    ("openai_key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED),
    ("github_token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})"), REDACTED),
    ("aws_key", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    ("google_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),
    ("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),
    ("jwt", re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}"), REDACTED),
    ("url_credentials", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"), REDACTED),
    (
        "assignment",
        re.compile(
            r"(?i)\b([\w-]*(?:api[_-]?key|apikey|token|secret|password|passwd))\b"
            r"(\s*[:=]\s*['\"]?)" + _NOT_REDACTED + r"([^\s'\",;&]{6,})"
        ),
        "",
    ),
)
_OPAQUE = re.compile(r"[A-Za-z0-9+/_-]{" + str(OPAQUE_BLOB_LENGTH) + r",}={0,2}")


# --------------------------------------------------------------------------------------------
# Hub plumbing


def _check_repo_id(repo_id: str, error: type[TaskhubError]) -> None:
    if not _REPO_ID.match(repo_id):
        raise error(f"{repo_id!r} is not a Hub repo id: use ORG/NAME (letters, digits, . _ -)")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (``…_KEY``, ``…TOKEN``…)."""
    return bool(_SECRET_ENV_NAME.search(name))


def _require_token(token: str | None, action: str, error: type[TaskhubError]) -> str:
    """Return the token to write with: ``token``, else huggingface_hub's own (``HF_TOKEN``)."""
    from huggingface_hub import get_token

    resolved = token or get_token()
    if not resolved:
        raise error(
            f"{action} needs a Hub token with write access: set HF_TOKEN, pass --token, or run "
            "`hf auth login`. Nothing was pushed."
        )
    return resolved


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


@contextmanager
def _hub_errors(what: str, error: type[TaskhubError]) -> Iterator[None]:
    """Turn huggingface_hub's errors into taskhub errors that say what to do."""
    from huggingface_hub.errors import (
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except RevisionNotFoundError as exc:
        raise TasksetNotFound(f"{what}: the revision does not exist on the Hub ({exc})") from None
    except RepositoryNotFoundError:
        raise error(
            f"{what}: the repo was not found on the Hub (or it is private and the token cannot "
            "read it)"
        ) from None
    except HfHubHTTPError as exc:
        status = _status(exc)
        if status == 401:
            raise error(
                f"{what}: the Hub refused the token (HTTP 401): check HF_TOKEN or --token"
            ) from None
        if status == 403:
            raise error(f"{what}: the token may not write to this repo (HTTP 403)") from None
        raise error(f"{what}: the Hub failed (HTTP {status}): {exc}") from None


def _whoami(api: Any, what: str, error: type[TaskhubError]) -> str:
    with _hub_errors(what, error):
        name = api.whoami().get("name")
    return str(name)


def _folder_files(folder: Path) -> list[str]:
    """Files of a folder to publish, as repo paths (hidden files and caches left out)."""
    files = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if path.is_file():
            files.append(rel.as_posix())
    return files


@dataclass(frozen=True)
class PushResult:
    """Where a push landed."""

    repo_id: str
    """The dataset repo."""
    commit_sha: str
    """The commit it created."""
    branch: str
    """The branch the commit is on."""
    tag: str | None
    """The tag created at the commit, if one was asked for."""
    url: str
    """The commit's page."""
    files: tuple[str, ...]
    """Paths added or replaced by the commit."""


# --------------------------------------------------------------------------------------------
# Tasksets: init, push, describe


def _import_generator(spec: str) -> Callable[..., Any]:
    """Import ``module:function`` or ``path/to/file.py:function``."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ConfigError(f"generator {spec!r} must be MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"generator file {str(path)!r} does not exist")
            name = f"taskhub_generator_{abs(hash(str(path)))}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise ConfigError(f"cannot import {str(path)!r}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ImportError as exc:
        raise ConfigError(f"generator {spec!r}: cannot import {target!r}: {exc}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"generator {spec!r}: {target!r} has no function {attr!r}")
    return function  # type: ignore[no-any-return]


def _generated_rows(
    function: Callable[..., Any], split: str, where: str
) -> dict[str, tuple[Task, ...]]:
    produced = function()
    groups: Mapping[str, Any] = produced if isinstance(produced, Mapping) else {split: produced}
    splits: dict[str, tuple[Task, ...]] = {}
    for name, rows in groups.items():
        if isinstance(rows, str | bytes) or not isinstance(rows, Iterable):
            raise ConfigError(
                f"generator {where} must return an iterable of rows or a mapping of split to "
                f"rows; split {name!r} is a {type(rows).__name__}"
            )

        def as_rows(items: Iterable[Any], split_name: str = str(name)) -> Iterator[_Row]:
            for index, item in enumerate(items):
                data = item.to_row() if isinstance(item, Task) else item
                yield _Row(f"{where} {split_name} item {index}", data)

        splits[str(name)] = _validate_rows(str(name), as_rows(rows))
    return splits


def _card_header(card: TasksetCard, split_files: Mapping[str, str]) -> dict[str, Any]:
    return {
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": s, "path": p} for s, p in split_files.items()],
            }
        ],
        "tags": ["openenv", "taskhub"],
        "taskhub": card.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        | {"env": card.env},
    }


def _render_readme(header: Mapping[str, Any], body: str) -> str:
    text = yaml.safe_dump(dict(header), sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{text}---\n\n{body.strip()}\n"


def _split_readme(text: str) -> tuple[dict[str, Any], str]:
    match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
    if not match:
        return {}, text
    header = yaml.safe_load(match.group(1)) or {}
    return (header if isinstance(header, dict) else {}), text[match.end() :]


def check_taskset(taskset: Taskset) -> None:
    """Check what loading does not: the card's templates compile and every reward spec resolves.

    Raises:
        ConfigError: A template does not compile or a reward spec does not parse.
        UnknownPluginError: A reward spec names no registered reward (with a "did you mean").
    """
    from taskhub._registry import registry
    from taskhub._rewards import RewardSpec

    Templates.from_card(taskset.card)
    specs = set(taskset.card.rewards)
    for tasks in taskset.splits.values():
        for task in tasks:
            specs.update(task.rewards or [])
    for spec in sorted(specs):
        registry.lookup("reward", RewardSpec.parse(spec).name)


def init_taskset(
    source: str | Path | Callable[..., Any],
    folder: str | Path,
    *,
    env: str,
    split: str = "train",
    card: TasksetCard | None = None,
    force: bool = False,
) -> Taskset:
    """Scaffold a taskset folder in Hub layout from a data file or a Python generator.

    The folder gets ``README.md`` (YAML ``configs:`` mapping each split to its data file, and
    the ``taskhub:`` block binding it to ``env``) and ``data/<split>.jsonl``. Every row is
    validated before anything is written.

    Args:
        source: A ``.jsonl``/``.json``/``.csv``/``.parquet`` file, a generator given as
            ``module:function`` or ``file.py:function``, or the function itself. A generator
            takes no arguments and returns rows (dicts or ``Task``), or a mapping of split name
            to rows.
        folder: The folder to create.
        env: The environment the tasks run on (built-in name, URL, Space id or folder).
        split: Split name of a data file or of a generator that returns a plain iterable.
        card: The rest of the ``taskhub:`` block (templates, rewards, max_steps...).
        force: Write into an existing non-empty folder (its data files are replaced).

    Returns:
        The new taskset, loaded back from the folder.

    Raises:
        SchemaError: A row does not match the schema (split, row and field named).
        ConfigError: The source or the folder cannot be used.
    """
    target = Path(folder)
    if target.exists() and any(target.iterdir()) and not force:
        raise ConfigError(f"{target} exists and is not empty; pass force=True (--force)")
    if not re.match(r"^[\w.-]+$", split):
        raise ConfigError(f"split name {split!r} must be letters, digits, '.', '_' or '-'")
    if callable(source):
        splits = _generated_rows(source, split, getattr(source, "__name__", "generator"))
    else:
        text = str(source)
        path = Path(text).expanduser()
        if path.is_file() and path.suffix in DATA_SUFFIXES:
            splits = {split: _validate_rows(split, _read_files([path]))}
        elif ":" in text and not path.exists():
            splits = _generated_rows(_import_generator(text), split, text)
        else:
            raise ConfigError(
                f"taskset source {text!r} is neither a data file ({', '.join(DATA_SUFFIXES)}) "
                "nor a generator MODULE:FUNCTION / FILE.py:FUNCTION"
            )
    if not splits or not any(splits.values()):
        raise ConfigError(f"taskset source {source!r} produced no rows")
    _check_unique_ids(splits)
    card = (card or TasksetCard()).model_copy(update={"env": env})
    probe = Taskset(
        TasksetRef(source="init", kind="local", name=card.name or target.name, fingerprint=""),
        card,
        splits,
    )
    check_taskset(probe)
    (target / "data").mkdir(parents=True, exist_ok=True)
    split_files = {}
    for name, tasks in splits.items():
        rel = f"data/{name}.jsonl"
        lines = "".join(json.dumps(t.to_row(), ensure_ascii=False) + "\n" for t in tasks)
        (target / rel).write_text(lines, encoding="utf-8")
        split_files[name] = rel
    title = card.name or target.name
    body = (
        f"# {title}\n\n{card.description or 'A taskhub taskset.'}\n\n"
        f"Each row parameterizes one `reset()` of the `{env}` environment. Evaluate it with "
        "`taskhub eval MODEL auto ORG/NAME@REVISION`; check it with `taskhub taskset check`.\n"
    )
    (target / "README.md").write_text(
        _render_readme(_card_header(card, split_files), body), encoding="utf-8"
    )
    return load_taskset(str(target))


def push_taskset(
    path: str | Path,
    repo_id: str,
    *,
    branch: str | None = None,
    tag: str | None = None,
    token: str | None = None,
    private: bool = False,
    commit_message: str | None = None,
    parent_commit: str | None = None,
) -> PushResult:
    """Publish a taskset folder as one commit of a Hub dataset repo.

    The folder is validated first (every row and the card); the commit makes the branch hold
    exactly the folder's files (files of the previous revision that the folder lacks are
    deleted). Nothing is published when validation, the token, or the tag check fails.

    Args:
        path: A taskset folder in Hub layout (``taskhub taskset init`` makes one).
        repo_id: ``org/name`` of the dataset repo (created when missing).
        branch: Branch to commit to (created from ``main`` when missing); ``main`` by default.
        tag: Tag to create at the new commit (must not exist yet).
        token: Hub token with write access (huggingface_hub's own ``HF_TOKEN`` otherwise).
        private: Create the repo private (an existing repo keeps its visibility).
        commit_message: Title of the commit.
        parent_commit: Commit the branch must still be at (the push fails otherwise).

    Returns:
        The new commit.

    Raises:
        TasksetError: The folder is not a valid taskset, there is no usable token, the tag
            exists, or the Hub refused the push.
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    folder = Path(path)
    if not folder.is_dir():
        raise TasksetError(
            f"{folder} is not a taskset folder; make one with `taskhub taskset init`"
        )
    taskset = load_taskset(str(folder))
    check_taskset(taskset)
    _check_repo_id(repo_id, TasksetError)
    files = _folder_files(folder)
    token = _require_token(token, "taskset push", TasksetError)
    api = HfApi(token=token)
    branch = branch or "main"
    what = f"taskset push to {repo_id}"
    _whoami(api, what, TasksetError)
    created_branch = False
    with _hub_errors(what, TasksetError):
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
        tags = {t.name: t.target_commit for t in refs.tags}
        if tag is not None and tag in tags:
            raise TasksetError(
                f"tag {tag!r} already exists on {repo_id} (at {tags[tag][:12]}); tags are never "
                "moved: pick another tag. Nothing was pushed."
            )
        if branch not in {b.name for b in refs.branches}:
            api.create_branch(repo_id, branch=branch, repo_type="dataset")
            created_branch = True
        head = api.dataset_info(repo_id, revision=branch).sha
    if parent_commit is not None and head != parent_commit:
        raise TasksetError(
            f"branch {branch!r} of {repo_id} is at {str(head)[:12]}, not at {parent_commit[:12]} "
            "which this push was built on: it would undo the commits in between. Nothing was "
            "pushed."
        )
    with _hub_errors(what, TasksetError):
        remote = set(api.list_repo_files(repo_id, repo_type="dataset", revision=head))
    operations: list[Any] = [CommitOperationAdd(rel, str(folder / rel)) for rel in files]
    operations += [
        CommitOperationDelete(rel) for rel in sorted(remote - set(files) - {".gitattributes"})
    ]
    try:
        with _hub_errors(what, TasksetError):
            try:
                info = api.create_commit(
                    repo_id,
                    operations,
                    commit_message=commit_message or f"Publish taskset {taskset.name}",
                    repo_type="dataset",
                    revision=branch,
                    parent_commit=head,
                )
            except Exception as exc:
                if _status(exc) == 412:
                    raise TasksetError(
                        f"{what}: branch {branch!r} moved while pushing; nothing was pushed: "
                        "pull the new revision and push again"
                    ) from None
                raise
    except BaseException:
        if created_branch:
            with _hub_errors(what, TasksetError):
                api.delete_branch(repo_id, branch=branch, repo_type="dataset")
        raise
    sha = str(info.oid)
    if tag is not None:
        with _hub_errors(
            f"{what} (commit {sha[:12]} was pushed; creating tag {tag!r})", TasksetError
        ):
            api.create_tag(repo_id, tag=tag, revision=sha, repo_type="dataset")
    logger.info("pushed taskset %s to %s@%s (%s)", taskset.name, repo_id, branch, sha)
    return PushResult(repo_id, sha, branch, tag, str(info.commit_url), tuple(files))


class SplitInfo(BaseModel):
    """One split of a taskset."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    rows: int
    """Number of tasks."""
    columns: list[str]
    """Task fields set by at least one row, in schema order."""
    metadata_keys: list[str]
    """Keys found under ``metadata``, sorted."""
    profiled: int = 0
    """Rows that carry a profile (``taskhub taskset profile``)."""


class TasksetInfo(BaseModel):
    """What ``taskhub taskset show`` prints."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """The taskset's name."""
    source: str
    """As given."""
    kind: str
    """``builtin``, ``local``, ``file`` or ``hub``."""
    repo_id: str | None = None
    """Hub repo, for Hub tasksets."""
    revision: str | None = None
    """The revision asked for."""
    commit_sha: str | None = None
    """The commit it resolved to."""
    fingerprint: str
    """sha256 over every task's content hash."""
    env: str | None = None
    """The environment the card binds it to."""
    description: str | None = None
    """The card's description."""
    default_split: str
    """The split evaluated when none is named."""
    rewards: list[str]
    """The card's default reward specs."""
    max_steps: int | None = None
    """The card's step limit."""
    splits: dict[str, SplitInfo]
    """Each split's size and columns."""
    profile: dict[str, Any] | None = None
    """The ``taskhub_profile`` header of a profiled taskset (runs and models used)."""


def describe_taskset(
    source: str, *, revision: str | None = None, token: str | None = None
) -> TasksetInfo:
    """Load a taskset (pinned to a commit for Hub sources) and describe it.

    Raises:
        TasksetNotFound: The taskset, its repo or revision does not exist.
        SchemaError: A row or the card is invalid.
    """
    taskset = load_taskset(source, revision=revision, token=token)
    splits = {}
    for name, tasks in taskset.splits.items():
        used = {key for task in tasks for key in task.model_dump(exclude_defaults=True)}
        keys = sorted({key for task in tasks for key in task.metadata})
        splits[name] = SplitInfo(
            rows=len(tasks),
            columns=[f for f in Task.model_fields if f in used],
            metadata_keys=keys,
            profiled=sum(1 for t in tasks if t.profile is not None),
        )
    header: dict[str, Any] = {}
    if taskset.ref.path and Path(taskset.ref.path).is_dir():
        header, _ = read_card(Path(taskset.ref.path))
    profile = header.get(PROFILE_HEADER)
    ref = taskset.ref
    return TasksetInfo(
        name=taskset.name,
        source=ref.source,
        kind=ref.kind,
        repo_id=ref.repo_id,
        revision=ref.revision,
        commit_sha=ref.commit_sha,
        fingerprint=ref.fingerprint,
        env=taskset.card.env,
        description=taskset.card.description,
        default_split=taskset.default_split(),
        rewards=list(taskset.card.rewards),
        max_steps=taskset.card.max_steps,
        splits=splits,
        profile=profile if isinstance(profile, dict) else None,
    )


# --------------------------------------------------------------------------------------------
# Profiles: per-task statistics written back into a new revision of the taskset


@dataclass
class _Tally:
    episodes: int = 0
    judged: int = 0
    successes: int = 0
    reward_sum: float = 0.0


@dataclass(frozen=True)
class ProfileResult:
    """A profiled taskset: where it was written and, when pushed, where it landed."""

    folder: Path
    """The profiled taskset folder."""
    profiles: dict[str, dict[str, Any]]
    """Each profiled task's measured columns (``pass_rate``, ``difficulty``, ``profile``), by
    task id."""
    models: list[str]
    """The models whose runs were used."""
    push: PushResult | None = None
    """The Hub commit, when the profile was pushed."""


def _task_profiles(runs: Sequence[Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    tallies: dict[str, dict[str, _Tally]] = defaultdict(lambda: defaultdict(_Tally))
    models: list[str] = []
    for run in runs:
        model = run.manifest.model.spec
        if model not in models:
            models.append(model)
        for record in run.records:
            if record.reward is None:  # infra and reward errors are nobody's score
                continue
            tally = tallies[record.task_id][model]
            tally.episodes += 1
            tally.reward_sum += record.reward
            if record.success is not None:
                tally.judged += 1
                tally.successes += int(record.success)
    profiles: dict[str, dict[str, Any]] = {}
    for task_id, by_model in tallies.items():
        pass_rate = {m: t.successes / t.judged for m, t in sorted(by_model.items()) if t.judged}
        mean_reward = {m: t.reward_sum / t.episodes for m, t in sorted(by_model.items())}
        overall = round(sum(pass_rate.values()) / len(pass_rate), 6) if pass_rate else None
        profiles[task_id] = {
            "pass_rate": overall,
            "difficulty": None if overall is None else round(1.0 - overall, 6),
            "profile": {
                "pass_rate": pass_rate,
                "mean_reward": mean_reward,
                "episodes": {m: t.episodes for m, t in sorted(by_model.items())},
            },
        }
    return profiles, models


def _with_profile(row: dict[str, Any], profiles: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The row with its measured columns set (or dropped, when the runs did not score it)."""
    updated = {k: v for k, v in row.items() if k not in MEASURED_FIELDS}
    updated.update(profiles.get(str(row.get("task_id")), {}))
    return updated


def _objects_as_text(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its ``metadata`` and ``profile`` objects as JSON text (table formats)."""
    return {
        k: json.dumps(v, ensure_ascii=False)
        if k in ("metadata", "profile") and isinstance(v, dict)
        else v
        for k, v in row.items()
    }


def _rewrite_data_file(path: Path, profiles: Mapping[str, dict[str, Any]]) -> None:
    if path.suffix in (".jsonl", ".json"):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" and text.lstrip().startswith("["):
            rows = [_with_profile(r, profiles) for r in json.loads(text)]
            path.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", "utf-8")
            return
        lines = [
            json.dumps(_with_profile(json.loads(line), profiles), ensure_ascii=False)
            for line in text.splitlines()
            if line.strip()
        ]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table_rows = pq.read_table(path).to_pylist()
        updated = []
        for row in table_rows:
            # nested objects as JSON text keep heterogeneous rows in one Arrow schema
            updated.append(_objects_as_text(_with_profile(row, profiles)))
        pq.write_table(pa.Table.from_pylist(updated), path)
    elif path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            csv_rows = list(reader)
        fields += [name for name in ("pass_rate", "difficulty", "profile") if name not in fields]
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            for row in csv_rows:
                raw = {k: v for k, v in row.items() if v not in ("", None)}
                writer.writerow(_objects_as_text(_with_profile(raw, profiles)))


def profile_taskset(
    run_dirs: Sequence[str | Path],
    *,
    output: str | Path | None = None,
    repo_id: str | None = None,
    branch: str | None = None,
    tag: str | None = None,
    token: str | None = None,
) -> ProfileResult:
    """Write per-task statistics of evaluation runs back into a new revision of their taskset.

    Each task that the runs scored gets three new columns: ``pass_rate`` (the mean over the
    models), ``difficulty`` (1 minus it) and ``profile`` (``pass_rate``, ``mean_reward`` and
    ``episodes`` per model). They are measurements, not part of the task: its content hash does
    not change. Columns from an earlier profile are replaced. The README header records the
    runs used under ``taskhub_profile``.

    Args:
        run_dirs: Run directories, all on the same taskset content (any splits, any models).
        output: Folder to write the profiled taskset to (a temporary one when pushing only).
        repo_id: Hub repo to push the profiled taskset to; for runs on a Hub taskset, None with
            no ``output`` pushes to the taskset's own repo.
        branch: Branch to push to (``main`` by default). It must still be at the commit the
            runs used, so the profile cannot undo later commits.
        tag: Tag to create at the new commit.
        token: Hub token with write access.

    Returns:
        The profiled folder, the profiles, and the push.

    Raises:
        ResultsError: No runs, or runs on different tasksets.
        TasksetError: The taskset cannot be loaded again or the push fails.
    """
    if not run_dirs:
        raise ResultsError("taskset profile needs at least one run directory")
    runs = [read_run(Path(d)) for d in run_dirs]
    refs = {run.manifest.taskset.fingerprint: run for run in runs}
    if len(refs) > 1:
        listing = ", ".join(
            f"{run.path} ({run.manifest.taskset.source}, {fp[:12]})" for fp, run in refs.items()
        )
        raise ResultsError(f"the runs are on different tasksets or revisions: {listing}")
    ref = runs[0].manifest.taskset
    if ref.kind == "hub" and ref.repo_id and ref.commit_sha:
        taskset = load_taskset(f"{ref.repo_id}@{ref.commit_sha}", token=token)
    else:
        taskset = load_taskset(ref.path or ref.source)
    if taskset.ref.fingerprint != ref.fingerprint or not taskset.ref.path:
        raise ResultsError(
            f"taskset {ref.source!r} changed since the runs (fingerprint {ref.fingerprint[:12]} "
            f"-> {taskset.ref.fingerprint[:12]}); profile runs of the current revision"
        )
    source_folder = Path(taskset.ref.path)
    if not source_folder.is_dir():
        raise ResultsError(
            f"taskset {ref.source!r} is a single data file; turn it into a folder with "
            "`taskhub taskset init` before profiling"
        )
    profiles, models = _task_profiles(runs)
    known = {t.task_id for tasks in taskset.splits.values() for t in tasks}
    profiles = {k: v for k, v in profiles.items() if k in known}
    push_repo = repo_id
    if push_repo is None and output is None:
        if ref.kind != "hub" or not ref.repo_id:
            raise ConfigError(
                "the runs used a local taskset: pass an output folder (--output) or a repo"
            )
        push_repo = ref.repo_id
    staging = Path(output) if output is not None else Path(tempfile.mkdtemp(prefix="taskhub-prof-"))
    if staging.exists() and any(staging.iterdir()):
        raise ConfigError(f"{staging} exists and is not empty")
    staging.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source_folder, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*"))
    header, _ = read_card(staging)
    for paths in data_files(staging, header).values():
        for path in paths:
            _rewrite_data_file(path, profiles)
    readme = staging / "README.md"
    if readme.is_file():
        full_header, body = _split_readme(readme.read_text(encoding="utf-8"))
        full_header[PROFILE_HEADER] = {
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "taskset_commit": ref.commit_sha,
            "models": models,
            "runs": [run.manifest.run_id for run in runs],
            "profiled_tasks": len(profiles),
        }
        readme.write_text(_render_readme(full_header, body), encoding="utf-8")
    load_taskset(str(staging))  # the profiled folder must still be a valid taskset
    pushed = None
    if push_repo is not None:
        same_repo = ref.kind == "hub" and push_repo == ref.repo_id
        pushed = push_taskset(
            staging,
            push_repo,
            branch=branch,
            tag=tag,
            token=token,
            commit_message=f"Profile {len(profiles)} tasks from {len(runs)} run(s)",
            parent_commit=ref.commit_sha if same_repo else None,
        )
    return ProfileResult(staging, profiles, models, pushed)


# --------------------------------------------------------------------------------------------
# Redaction


@dataclass
class RedactionReport:
    """What redaction replaced: counts by kind, and the fields touched (never the values)."""

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    fields: set[str] = field(default_factory=set)

    @property
    def total(self) -> int:
        """Number of replacements."""
        return sum(self.counts.values())


class Redactor:
    """Replaces secrets in JSON-like data, and refuses data it cannot inspect.

    Args:
        secrets: Exact secret values by name (for example the values of environment variables
            whose names look secret). Each value, URL-encoded and base64-encoded forms included,
            is replaced wherever it appears.

    Raises:
        ResultsError: A secret value is too short to be redacted without mangling other text.
    """

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        """Prepare the needles of the exact secret values."""
        self._needles: list[tuple[str, str]] = []
        for name, value in (secrets or {}).items():
            if not value:
                continue
            if len(value) < MIN_SECRET_LENGTH:
                raise ResultsError(
                    f"the value of secret {name!r} is {len(value)} characters long: too short "
                    f"to redact reliably (at least {MIN_SECRET_LENGTH}); unset it or leave it "
                    "out. Nothing was pushed."
                )
            forms = {
                value,
                urllib.parse.quote(value, safe=""),
                urllib.parse.quote_plus(value),
                base64.b64encode(value.encode()).decode().rstrip("="),
                base64.urlsafe_b64encode(value.encode()).decode().rstrip("="),
            }
            self._needles += [(name, form) for form in forms if len(form) >= MIN_SECRET_LENGTH]
        # longest first, so a value is replaced before a shorter one inside it
        self._needles.sort(key=lambda item: -len(item[1]))
        self.report = RedactionReport()

    def _text(self, text: str, where: str) -> str:
        out = text
        for name, needle in self._needles:
            if needle in out:
                self.report.counts[f"secret:{name}"] += out.count(needle)
                self.report.fields.add(where)
                out = out.replace(needle, REDACTED)
        for kind, pattern, replacement in _PATTERNS:

            def substitute(match: re.Match[str], kind: str = kind, repl: str = replacement) -> str:
                self.report.counts[kind] += 1
                self.report.fields.add(where)
                if repl:
                    return repl
                return match.group(1) + match.group(2) + REDACTED

            out = pattern.sub(substitute, out)
        self._check_opaque(out, where)
        return out

    def _check_opaque(self, text: str, where: str) -> None:
        for match in _OPAQUE.finditer(text):
            blob = match.group(0)
            if not _looks_encoded(blob):
                continue
            decoded = _decode_blob(blob)
            if decoded is None:
                raise ResultsError(
                    f"{where}: holds an opaque blob of {len(blob)} characters that cannot be "
                    "inspected for secrets (not text once decoded); redaction cannot be "
                    "guaranteed, so nothing was pushed. Remove the blob from the run first."
                )
            probe = Redactor.__new__(Redactor)
            probe._needles, probe.report = self._needles, RedactionReport()
            probe._text(decoded, where)
            if probe.report.total:
                raise ResultsError(
                    f"{where}: a secret is hidden inside an encoded blob ({len(blob)} characters) "
                    "and cannot be redacted in place; nothing was pushed."
                )

    def redact(self, value: Any, where: str = "$") -> Any:
        """Return ``value`` (JSON data: dicts, lists, strings, numbers) with secrets replaced.

        Raises:
            ResultsError: A value is not JSON data, or is an opaque blob that cannot be
                inspected (the field is named).
        """
        if isinstance(value, str):
            return self._text(value, where)
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, list | tuple):
            return [self.redact(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ResultsError(f"{where}: a non-text key {key!r} cannot be inspected")
                path = f"{where}.{key}"
                clean_key = self._text(key, f"{path} (key)")
                if _SECRET_KEY.match(key) and item not in (None, "", REDACTED):
                    self.report.counts["secret_field"] += 1
                    self.report.fields.add(path)
                    out[clean_key] = REDACTED
                else:
                    out[clean_key] = self.redact(item, path)
            return out
        raise ResultsError(
            f"{where}: a {type(value).__name__} value cannot be inspected for secrets; nothing "
            "was pushed"
        )

    def find(self, text: str) -> list[str]:
        """Return the kinds of secrets still present in ``text`` (a last check before upload)."""
        found = [f"secret:{name}" for name, needle in self._needles if needle in text]
        found += [kind for kind, pattern, _ in _PATTERNS if pattern.search(text)]
        return found


def _looks_encoded(blob: str) -> bool:
    """Whether a long unbroken run of characters looks like encoded data (base64 or hex).

    Long runs of one repeated character or of digits (a model's degenerate output, a big
    number) are text, not an encoding that could hide a secret.
    """
    if len(set(blob)) < 16:
        return False
    has_digit = any(c.isdigit() for c in blob)
    if re.fullmatch(r"[0-9a-fA-F]+", blob):
        return has_digit and any(c.isalpha() for c in blob)
    return has_digit and any(c.isupper() for c in blob) and any(c.islower() for c in blob)


def _decode_blob(blob: str) -> str | None:
    """Decode a base64 (or base64url) blob to text; None when it is not text."""
    padded = blob + "=" * (-len(blob) % 4)
    for decoder in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decoder(padded.encode())
        except (binascii.Error, ValueError):
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if all(c.isprintable() or c in "\n\r\t" for c in text):
            return text
    if re.fullmatch(r"[0-9a-fA-F]+", blob):
        try:
            text = bytes.fromhex(blob if len(blob) % 2 == 0 else blob[:-1]).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
        return text if text.isprintable() else None
    return None


def redact_run(
    manifest: RunManifest,
    records: Sequence[EpisodeRecord],
    secrets: Mapping[str, str] | None = None,
) -> tuple[RunManifest, list[EpisodeRecord], RedactionReport]:
    """Return a run's manifest and records with every secret replaced by ``[REDACTED]``.

    Every string field of every record and of the manifest is scanned. The result is checked
    once more after serialization; anything still found stops the push.

    Args:
        manifest: The run's manifest.
        records: Its episode records.
        secrets: Exact secret values by name (the CLI passes the values of environment
            variables whose names end in KEY, TOKEN, SECRET, PASSWORD...).

    Returns:
        The redacted manifest, the redacted records, and what was replaced.

    Raises:
        ResultsError: Redaction cannot be guaranteed for some field (it is named).
    """
    redactor = Redactor(secrets)
    try:
        clean_manifest = RunManifest.model_validate(
            redactor.redact(manifest.model_dump(mode="json"), "run.json")
        )
        clean_records = []
        for index, record in enumerate(records):
            where = f"episode {index} ({record.task_id}#{record.sample})"
            clean_records.append(
                EpisodeRecord.model_validate(redactor.redact(record.model_dump(mode="json"), where))
            )
    except ValidationError as exc:
        raise ResultsError(
            f"a redacted value no longer fits the record schema ({exc.errors()[0]['loc']}); "
            "redaction cannot be guaranteed, nothing was pushed"
        ) from None
    texts = [("run.json", clean_manifest.model_dump_json())] + [
        (f"episode {i}", r.model_dump_json()) for i, r in enumerate(clean_records)
    ]
    for where, text in texts:
        left = redactor.find(text)
        if left:
            raise ResultsError(
                f"{where}: {', '.join(sorted(set(left)))} still present after redaction; "
                "nothing was pushed"
            )
    return clean_manifest, clean_records, redactor.report


# --------------------------------------------------------------------------------------------
# Results: push a run directory to a results repo, pull runs back


def _episode_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("run_id", pa.string()),
            ("episode_id", pa.string()),
            ("task_id", pa.string()),
            ("split", pa.string()),
            ("sample", pa.int64()),
            ("seed", pa.int64()),
            ("model", pa.string()),
            ("taskset", pa.string()),
            ("taskset_commit", pa.string()),
            ("outcome", pa.string()),
            ("reward", pa.float64()),
            ("success", pa.bool_()),
            ("env_reward", pa.float64()),
            ("num_steps", pa.int64()),
            ("attempts", pa.int64()),
            ("error_type", pa.string()),
            ("error_message", pa.string()),
            ("started_at", pa.string()),
            ("duration_s", pa.float64()),
            (
                "messages",
                pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
            ),
            ("reward_components", pa.string()),
            ("record", pa.string()),
        ]
    )


def _episodes_parquet(manifest: RunManifest, records: Sequence[EpisodeRecord]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for r in records:
        data = r.model_dump(mode="json")
        rows.append(
            {
                "run_id": r.run_id,
                "episode_id": r.episode_id,
                "task_id": r.task_id,
                "split": r.split,
                "sample": r.sample,
                "seed": r.seed,
                "model": manifest.model.spec,
                "taskset": manifest.taskset.repo_id or manifest.taskset.name,
                "taskset_commit": manifest.taskset.commit_sha,
                "outcome": r.outcome,
                "reward": r.reward,
                "success": r.success,
                "env_reward": r.env_reward,
                "num_steps": r.num_steps,
                "attempts": r.attempts,
                "error_type": r.error.type if r.error else None,
                "error_message": r.error.message if r.error else None,
                "started_at": data["started_at"],
                "duration_s": r.duration_s,
                "messages": [{"role": m.role, "content": m.content} for m in r.messages],
                "reward_components": json.dumps(data["reward_components"], ensure_ascii=False),
                "record": r.model_dump_json(),
            }
        )
    table = pa.Table.from_pylist(rows, schema=_episode_schema())
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _results_card(
    repo_id: str, manifests: Sequence[RunManifest], summaries: Mapping[str, Any]
) -> str:
    header = {
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": "train", "path": "runs/*/episodes.parquet"}],
            }
        ],
        "tags": ["taskhub", "openenv", "evaluation"],
        "pretty_name": f"taskhub results: {repo_id}",
    }
    lines = [
        f"# taskhub results: {repo_id}",
        "",
        "Evaluation runs made with [taskhub](https://github.com/huggingface/OpenEnv) over OpenEnv "
        "environments. Each run is a folder `runs/<run_id>/` holding `run.json` (configuration "
        "and provenance) and `episodes.parquet` (one row per episode; the `record` column is the "
        "full episode record as JSON). Secrets were redacted before upload.",
        "",
        "Load every run locally with `taskhub.pull_results(repo_id, revision)`.",
        "",
        "| run | model | taskset | split | episodes | mean reward | success rate |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in sorted(manifests, key=lambda m: m.run_id):
        s = summaries.get(m.run_id, {})
        taskset = m.taskset.repo_id or m.taskset.name
        if m.taskset.commit_sha:
            taskset += f"@{m.taskset.commit_sha[:12]}"
        mean = s.get("mean_reward")
        rate = s.get("success_rate")
        lines.append(
            f"| `{m.run_id}` | `{m.model.spec}` | `{taskset}` | {m.split} | "
            f"{s.get('n_episodes', '?')} | {'-' if mean is None else f'{mean:.3f}'} | "
            f"{'-' if rate is None else f'{rate:.3f}'} |"
        )
    return _render_readme(header, "\n".join(lines))


def push_results(
    run_dir: str | Path,
    repo_id: str,
    *,
    token: str | None = None,
    secrets: Mapping[str, str] | None = None,
    private: bool = False,
) -> PushResult:
    """Publish a run directory to a results dataset repo, redacted, next to the runs it holds.

    The run lands in ``runs/<run_id>/`` (``run.json`` and ``episodes.parquet``), and the
    README card is regenerated so the dataset viewer shows every run's episodes. The commit is
    made against the head it was built on; when another push lands first, it is rebuilt and
    retried. A run id the repo already holds is refused.

    Args:
        run_dir: The run directory.
        repo_id: ``org/name`` of the results dataset repo (created when missing).
        token: Hub token with write access (huggingface_hub's own ``HF_TOKEN`` otherwise). It
            is redacted from the run too.
        secrets: Exact secret values by name to redact (values of secret environment variables).
        private: Create the repo private.

    Returns:
        The commit.

    Raises:
        ResultsError: The run is not readable, redaction cannot be guaranteed, the repo already
            holds the run, there is no usable token, or the Hub refused the push.
    """
    from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

    run = read_run(Path(run_dir))
    run_id = run.manifest.run_id
    if not _RUN_ID.match(run_id):
        raise ResultsError(f"run id {run_id!r} cannot be a folder name on the Hub")
    _check_repo_id(repo_id, ResultsError)
    resolved = _require_token(token, "results push", ResultsError)
    all_secrets = dict(secrets or {})
    all_secrets.setdefault("hub token", resolved)
    manifest, records, report = redact_run(run.manifest, run.records, all_secrets)
    if report.total:
        logger.warning(
            "redacted %d secret(s) from run %s in %d field(s)",
            report.total,
            run_id,
            len(report.fields),
        )
    run_json = (manifest.model_dump_json(indent=2) + "\n").encode()
    episodes = _episodes_parquet(manifest, records)
    summary = summarize(records, n_planned=manifest.n_planned).model_dump(mode="json")
    api = HfApi(token=resolved)
    what = f"results push to {repo_id}"
    _whoami(api, what, ResultsError)
    with _hub_errors(what, ResultsError):
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    for attempt in range(PUSH_ATTEMPTS):
        with _hub_errors(what, ResultsError):
            head = api.dataset_info(repo_id).sha
            files = api.list_repo_files(repo_id, repo_type="dataset", revision=head)
        existing = sorted(
            {f.split("/")[1] for f in files if f.startswith("runs/") and f.count("/") >= 2}
        )
        if run_id in existing:
            raise ResultsError(
                f"{repo_id} already holds a run with id {run_id!r} (at commit {str(head)[:12]}); "
                "runs are never overwritten. Nothing was pushed."
            )
        manifests = [manifest]
        summaries = {run_id: summary}
        for other in existing:
            if f"runs/{other}/{MANIFEST}" not in files:
                continue
            with _hub_errors(what, ResultsError):
                local = hf_hub_download(
                    repo_id, f"runs/{other}/{MANIFEST}", repo_type="dataset", revision=head
                )
            try:
                manifests.append(RunManifest.model_validate_json(Path(local).read_bytes()))
            except ValidationError:
                logger.warning(
                    "%s: runs/%s/run.json does not validate; left off the card", repo_id, other
                )
        card = _results_card(repo_id, manifests, summaries).encode()
        operations = [
            CommitOperationAdd(f"runs/{run_id}/{MANIFEST}", run_json),
            CommitOperationAdd(f"runs/{run_id}/episodes.parquet", episodes),
            CommitOperationAdd("README.md", card),
        ]
        try:
            with _hub_errors(what, ResultsError):
                try:
                    info = api.create_commit(
                        repo_id,
                        operations,
                        commit_message=f"Add run {run_id}",
                        repo_type="dataset",
                        parent_commit=head,
                    )
                except Exception as exc:
                    if _status(exc) == 412:
                        raise _StaleParent() from None
                    raise
        except _StaleParent:
            logger.info(
                "%s moved while pushing run %s; retrying (%d)", repo_id, run_id, attempt + 1
            )
            continue
        sha = str(info.oid)
        logger.info("pushed run %s to %s (%s)", run_id, repo_id, sha)
        return PushResult(
            repo_id,
            sha,
            "main",
            None,
            str(info.commit_url),
            (f"runs/{run_id}/{MANIFEST}", f"runs/{run_id}/episodes.parquet", "README.md"),
        )
    raise ResultsError(
        f"{what}: other pushes kept landing first ({PUSH_ATTEMPTS} attempts); nothing was pushed"
    )


class _StaleParent(Exception):
    """The branch moved between reading its head and committing."""


def pull_results(
    repo_id: str,
    revision: str | None = None,
    *,
    token: str | None = None,
    output_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
) -> list[Path]:
    """Materialize every run of a results repo as a local run directory, pinned by commit.

    The revision is resolved to a commit sha, that snapshot's ``runs/*/`` files are downloaded,
    and each run becomes ``<output_dir>/<run_id>/`` holding ``run.json`` and
    ``episodes.jsonl``: readable by ``taskhub.read_run``. Pulling the same commit again reuses
    what is there, offline included.

    Args:
        repo_id: ``org/name`` of the results dataset repo.
        revision: Branch, tag or commit (the default branch when None).
        token: Hub token for private repos (huggingface_hub's own ``HF_TOKEN`` otherwise).
        output_dir: Where the run directories go; by default
            ``$HF_HOME/taskhub/results/<org>--<name>/<sha>/``.
        cache_dir: huggingface_hub cache folder (its default otherwise).

    Returns:
        The run directories, sorted by run id.

    Raises:
        ResultsError: The repo or revision does not exist, or a run does not validate.
    """
    from huggingface_hub import HfApi, constants, snapshot_download

    _check_repo_id(repo_id, ResultsError)
    what = f"results pull of {repo_id}" + (f"@{revision}" if revision else "")
    try:
        with _hub_errors(what, ResultsError):
            if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
                sha = revision
            else:
                sha = str(HfApi(token=token).dataset_info(repo_id, revision=revision).sha)
            folder = Path(
                snapshot_download(
                    repo_id,
                    repo_type="dataset",
                    revision=sha,
                    token=token,
                    cache_dir=str(cache_dir) if cache_dir is not None else None,
                    allow_patterns=["runs/*/run.json", "runs/*/episodes.parquet"],
                )
            )
    except TasksetNotFound as exc:
        raise ResultsError(str(exc)) from None
    base = (
        Path(output_dir)
        if output_dir is not None
        else Path(constants.HF_HOME) / "taskhub" / "results" / repo_id.replace("/", "--") / sha
    )
    out = []
    for run_json in sorted((folder / "runs").glob(f"*/{MANIFEST}")):
        run_id = run_json.parent.name
        target = base / run_id
        out.append(target)
        if (target / MANIFEST).is_file() and (target / EPISODES).is_file():
            continue
        parquet = run_json.parent / "episodes.parquet"
        try:
            manifest = RunManifest.model_validate_json(run_json.read_bytes())
            records = _read_episodes_parquet(parquet) if parquet.is_file() else []
        except (ValidationError, ValueError) as exc:
            raise ResultsError(
                f"{repo_id}@{sha[:12]} runs/{run_id}: not a valid run: {exc}"
            ) from None
        staging = target.with_name(f".{run_id}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        write_results(staging / EPISODES, records)
        write_manifest(staging, manifest)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return out


def _read_episodes_parquet(path: Path) -> list[EpisodeRecord]:
    import pyarrow.parquet as pq

    column = pq.read_table(path, columns=["record"]).column("record").to_pylist()
    return [EpisodeRecord.model_validate_json(text) for text in column]
