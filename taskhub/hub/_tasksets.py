"""Tasksets on the Hub: scaffold a folder, check it, publish it, describe a published one."""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from taskhub._errors import ConfigError, TasksetError
from taskhub._schema import Task, TasksetCard, TasksetRef
from taskhub._taskset import (
    DATA_SUFFIXES,
    Row,
    Taskset,
    check_unique_ids,
    load_taskset,
    read_card,
    read_rows,
    validate_rows,
)
from taskhub._templates import Templates
from taskhub._trust import RemoteCode, find_remote_code
from taskhub.hub._common import (
    PROFILE_HEADER,
    PushResult,
    check_repo_id,
    folder_files,
    http_status,
    hub_errors,
    render_readme,
    require_token,
    whoami,
)
from taskhub.hub._environment import (
    ENVIRONMENT_FILE,
    declared_files,
    environment_declaration,
    render_environment,
    with_tags,
)

logger = logging.getLogger(__name__)


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

        def as_rows(items: Iterable[Any], split_name: str = str(name)) -> Iterator[Row]:
            for index, item in enumerate(items):
                data = item.to_row() if isinstance(item, Task) else item
                yield Row(f"{where} {split_name} item {index}", data)

        splits[str(name)] = validate_rows(str(name), as_rows(rows))
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


def check_taskset(taskset: Taskset) -> list[RemoteCode]:
    """Check what loading does not: the card's templates compile and every reward spec resolves.

    Nothing of the taskset's own code is imported (a reward plugin is looked up, not built).

    Returns:
        The specs of the card and rows that would run code (they need ``--trust-remote-code``).

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
    return find_remote_code(taskset)


def init_taskset(
    source: str | Path | Callable[..., Any],
    folder: str | Path,
    *,
    env: str,
    split: str = "train",
    card: TasksetCard | None = None,
    force: bool = False,
    space: str | None = None,
    image: str | None = None,
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
        space: The Hub Space serving the env, to declare the dataset as an RL environment
            (``environment.yaml``, see ``taskhub.hub._environment``); by default ``env`` when
            it is a Space id.
        image: The env's container image, to declare it instead of a Space.

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
            splits = {split: validate_rows(split, read_rows([path]))}
        elif ":" in text and not path.exists():
            splits = _generated_rows(_import_generator(text), split, text)
        else:
            raise ConfigError(
                f"taskset source {text!r} is neither a data file ({', '.join(DATA_SUFFIXES)}) "
                "nor a generator MODULE:FUNCTION / FILE.py:FUNCTION"
            )
    if not splits or not any(splits.values()):
        raise ConfigError(f"taskset source {source!r} produced no rows")
    check_unique_ids(splits)
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
    header = _card_header(card, split_files)
    declaration = environment_declaration(title, list(splits), env=env, space=space, image=image)
    if declaration is not None:
        header = with_tags(header)
        (target / ENVIRONMENT_FILE).write_text(render_environment(declaration), encoding="utf-8")
    (target / "README.md").write_text(render_readme(header, body), encoding="utf-8")
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
    space: str | None = None,
    image: str | None = None,
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
        space: The Hub Space serving the env: the commit declares the dataset as an RL
            environment (``environment.yaml`` and the card tags) when the folder does not.
        image: The env's container image, declared instead of a Space.

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
    check_repo_id(repo_id, TasksetError)
    files = folder_files(folder)
    token = require_token(token, "taskset push", TasksetError)
    api = HfApi(token=token)
    branch = branch or "main"
    what = f"taskset push to {repo_id}"
    whoami(api, what, TasksetError)
    created_branch = False
    with hub_errors(what, TasksetError):
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
    with hub_errors(what, TasksetError):
        remote = set(api.list_repo_files(repo_id, repo_type="dataset", revision=head))
    declared = declared_files(folder, taskset, space=space, image=image)
    operations: list[Any] = [
        CommitOperationAdd(rel, declared.get(rel, str(folder / rel))) for rel in files
    ]
    operations += [
        CommitOperationAdd(rel, data) for rel, data in declared.items() if rel not in files
    ]
    files = sorted({*files, *declared})
    operations += [
        CommitOperationDelete(rel) for rel in sorted(remote - set(files) - {".gitattributes"})
    ]
    try:
        with hub_errors(what, TasksetError):
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
                if http_status(exc) == 412:
                    raise TasksetError(
                        f"{what}: branch {branch!r} moved while pushing; nothing was pushed: "
                        "pull the new revision and push again"
                    ) from None
                raise
    except BaseException:
        if created_branch:
            with hub_errors(what, TasksetError):
                api.delete_branch(repo_id, branch=branch, repo_type="dataset")
        raise
    sha = str(info.oid)
    if tag is not None:
        with hub_errors(
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
    remote_code: list[str] = []
    """Specs of the card and rows that would run code (``card rewards: 'python:m:f' (imports
    module 'm')``): evaluating them needs ``--trust-remote-code``."""


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
        remote_code=[str(item) for item in find_remote_code(taskset)],
    )
