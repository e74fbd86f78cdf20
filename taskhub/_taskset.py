"""Load tasksets: built-in, a local folder in Hub layout, one data file, or a Hub repo@revision.

Every row is validated into a ``Task`` before any episode runs. Hub tasksets are pinned: the
revision is resolved to a commit sha, that exact snapshot is downloaded with
``snapshot_download(revision=sha)`` (which also works offline from the cache, where
``load_dataset(repo, revision=...)`` can silently return another revision), and the sha goes
into every result.

Data files are read directly rather than through ``datasets``' JSON builder: that builder
unifies nested objects across rows and fills the keys a row lacks with null, which would
change the ``reset`` kwargs sent to the env.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import importlib.util
import io
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from pydantic import ValidationError

from taskhub._errors import SchemaError, TasksetError, TasksetNotFound
from taskhub._limits import MAX_JSON_DEPTH, loads_bounded
from taskhub._rows import TaskRows, jsonl_rows, parquet_rows, read_parquet, task_ids
from taskhub._schema import Task, TasksetCard, TasksetRef

if TYPE_CHECKING:
    from taskhub.hub._environment import EnvironmentDeclaration

logger = logging.getLogger(__name__)

DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
_SHA = re.compile(r"^[0-9a-f]{40}$")
#: Most row errors listed in one SchemaError message.
MAX_REPORTED_ERRORS = 10


@dataclass(frozen=True)
class Taskset:
    """A loaded taskset: where it came from, its card, and its validated rows per split."""

    ref: TasksetRef
    card: TasksetCard
    splits: Mapping[str, Sequence[Task]]
    """Each split's rows: a tuple, or ``TaskRows`` (large files: ``Task`` objects built when
    read)."""
    environment: EnvironmentDeclaration | None = None
    """The dataset's ``environment.yaml`` (a Hub RL environment dataset), if it has one."""
    known_hashes: Mapping[int, str] = field(default_factory=dict, repr=False, compare=False)
    """Content hashes of the rows held as ``Task`` objects, by object id, computed at load."""

    def content_hash(self, task: Task) -> str:
        """``task.content_hash()``, already known for the taskset's own rows."""
        known = self.known_hashes.get(id(task))
        return known if known is not None else task.content_hash()

    @property
    def name(self) -> str:
        """The taskset's name."""
        return self.ref.name

    def default_split(self) -> str:
        """The card's ``default_split``, else ``test``, else the first split."""
        if self.card.default_split:
            return self.card.default_split
        return "test" if "test" in self.splits else next(iter(self.splits))

    def tasks(self, split: str | None = None) -> Sequence[Task]:
        """Return the rows of ``split`` (the default split when None).

        Raises:
            TasksetNotFound: The split does not exist.
        """
        name = split or self.default_split()
        try:
            return self.splits[name]
        except KeyError:
            raise TasksetNotFound(
                f"taskset {self.name!r} has no split {name!r}; splits: {', '.join(self.splits)}"
            ) from None


def builtin_tasksets() -> dict[str, Path]:
    """Return the tasksets shipped with taskhub, by name."""
    spec = importlib.util.find_spec("taskhub.tasksets")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    if not roots:  # a source checkout without an install
        roots = [Path(__file__).resolve().parent.parent / "tasksets"]
    return {
        p.parent.name: p.parent
        for root in roots
        for p in sorted(root.glob("*/README.md"))
        if (p.parent / "data").is_dir()
    }


def parse_source(source: str) -> tuple[str, str | None]:
    """Split ``org/name@revision`` into repo id and revision (None when absent)."""
    if "@" in source and not Path(source).exists():
        repo, _, revision = source.rpartition("@")
        return repo, revision or None
    return source, None


def load_taskset(
    source: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    cache_dir: str | None = None,
) -> Taskset:
    """Load and validate a taskset.

    Args:
        source: A built-in name (``arith``), a folder in Hub layout, a ``.jsonl``/``.parquet``/
            ``.csv`` file, a Hub dataset repo id, optionally ``org/name@revision``, or the URL
            of a running env that serves its own tasks over OpenEnv's Task API (rows reset by
            ``split`` and ``index``; the card binds them to that URL).
        revision: Branch, tag or commit of a Hub taskset (overrides ``@revision``).
        token: Hub token for private repos (huggingface_hub's own ``HF_TOKEN`` otherwise).
        cache_dir: Hub cache folder (huggingface_hub's default otherwise).

    A local folder or file (a Hub snapshot too) loaded again while none of its files changed
    gives the taskset loaded before, rows shared: treat them as read-only.

    Returns:
        The taskset, every row validated, with its resolved commit sha for Hub sources.

    Raises:
        TasksetNotFound: The taskset, revision or a data file does not exist.
        SchemaError: A row or the card does not match the schema (row index and field named).
    """
    if re.match(r"^https?://", source):
        return _load_env(source)
    path = Path(source).expanduser()
    if path.is_dir():
        return _load_folder(path, TasksetRefParts(source, "local", path.resolve().name))
    if path.is_file():
        return _load_file(path, source)
    builtins = builtin_tasksets()
    if source in builtins:
        return _load_folder(builtins[source], TasksetRefParts(source, "builtin", source))
    looks_local = source.startswith((".", "/", "~")) or path.suffix in DATA_SUFFIXES
    repo_id, at_revision = parse_source(source)
    if not looks_local and re.match(r"^[\w.-]+/[\w.-]+$", repo_id):
        return _load_hub(
            repo_id, revision or at_revision, token=token, cache_dir=cache_dir, source=source
        )
    if looks_local or "/" in source:
        raise TasksetNotFound(f"taskset file or folder {source!r} does not exist")
    import difflib

    close = difflib.get_close_matches(source, builtins, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise TasksetNotFound(
        f"taskset {source!r} is not a folder, a data file, a built-in taskset "
        f"({', '.join(builtins)}) or a Hub repo id (org/name[@revision]).{hint}"
    )


@dataclass(frozen=True)
class TasksetRefParts:
    """Identity of a taskset before its rows are read."""

    source: str
    kind: str
    name: str
    repo_id: str | None = None
    revision: str | None = None
    commit_sha: str | None = None


def _load_hub(
    repo_id: str, revision: str | None, *, token: str | None, cache_dir: str | None, source: str
) -> Taskset:
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    api = HfApi(token=token)
    what = f"{repo_id}@{revision}" if revision else repo_id
    try:
        if revision is not None and _SHA.match(revision):
            sha = revision  # already pinned: works offline from the cache
        else:
            sha = _retry_transient(lambda: api.dataset_info(repo_id, revision=revision).sha, what)
        if not sha:
            raise TasksetError(f"the Hub gave no commit sha for {what}")
        with quiet_downloads():
            folder = _retry_transient(
                lambda: snapshot_download(
                    repo_id, repo_type="dataset", revision=sha, token=token, cache_dir=cache_dir
                ),
                what,
            )
    except RevisionNotFoundError:
        raise TasksetNotFound(f"taskset {repo_id!r} has no revision {revision!r}") from None
    except GatedRepoError as exc:
        raise TasksetError(f"taskset {repo_id!r} is gated: {exc}") from None
    except RepositoryNotFoundError:
        raise TasksetNotFound(
            f"taskset repo {repo_id!r} was not found on the Hub (or it is private and no valid "
            "token was given: set HF_TOKEN or run `hf auth login`)"
        ) from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as exc:
        raise TasksetNotFound(
            f"taskset {what} is not in the local cache and the Hub cannot be reached: {exc}"
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            raise TasksetError(f"the Hub refused the token for {what}: {exc}") from None
        raise TasksetError(f"the Hub failed on {what}: {exc}") from None
    except Exception as exc:
        if not (unreachable(exc) or isinstance(exc, httpx.HTTPError | OSError)):
            raise
        raise TasksetError(
            f"cannot reach the Hub for taskset {what} ({type(exc).__name__}: {exc}): check "
            "the network (or HF_ENDPOINT); a revision pinned by its commit sha loads from the "
            "cache offline (HF_HUB_OFFLINE=1)"
        ) from None
    parts = TasksetRefParts(
        source, "hub", repo_id.split("/")[-1], repo_id=repo_id, revision=revision, commit_sha=sha
    )
    return _load_folder(Path(folder), parts)


@contextmanager
def quiet_downloads() -> Iterator[None]:
    """Hide huggingface_hub's progress bars while downloading, then restore them.

    They would clutter the CLI's output and training logs; bars hidden before stay hidden.
    """
    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    hidden = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not hidden:
            enable_progress_bars()


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the Hub could not be reached (no network, DNS, refused, timeout).

    huggingface_hub raises its HTTP client's transport errors as they are, and that client is
    ``httpx`` or its fork ``httpx2`` depending on the version: both are recognised by module.
    """
    if isinstance(exc, httpx.TransportError | ConnectionError | TimeoutError):
        return True
    return any(
        cls.__module__.split(".")[0] in ("httpx", "httpx2", "httpcore")
        and cls.__name__ in ("TransportError", "TimeoutException", "NetworkError")
        for cls in type(exc).__mro__
    )


def _retry_transient(call: Any, what: str, attempts: int = 4) -> Any:
    """Retry 429 and 5xx answers of the Hub; everything else is raised at once."""
    from huggingface_hub.errors import HfHubHTTPError

    for attempt in range(attempts):
        try:
            return call()
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status not in (429, 500, 502, 503, 504) or attempt == attempts - 1:
                raise
            delay = 2.0**attempt
            logger.warning("Hub answered %s for %s; retrying in %.0fs", status, what, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def read_card(folder: Path) -> tuple[dict[str, Any], TasksetCard]:
    """Read a folder's README.md YAML header: the whole header and its ``taskhub:`` card.

    Raises:
        SchemaError: The header is not YAML or the ``taskhub:`` block does not validate.
    """
    readme = folder / "README.md"
    if not readme.is_file():
        return {}, TasksetCard()
    text = readme.read_text(encoding="utf-8")
    header: dict[str, Any] = {}
    match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
    if match:
        try:
            loaded = yaml.safe_load(match.group(1))
        except yaml.YAMLError as exc:
            raise SchemaError(f"{readme}: the YAML header is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise SchemaError(f"{readme}: the YAML header must be a mapping")
        header = loaded or {}
    block = header.get("taskhub") or {}
    try:
        card = TasksetCard.model_validate(block)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise SchemaError(f"{readme}: taskhub.{field}: {first['msg']}", field=field) from None
    return header, card


def data_files(
    folder: Path, header: dict[str, Any], config_name: str = "default"
) -> dict[str, list[Path]]:
    """Map each split to its data files, from the card's ``configs:`` or the usual file names.

    Args:
        folder: The dataset folder.
        header: Its card's YAML header.
        config_name: The ``configs:`` entry to read (else the first).

    Raises:
        TasksetNotFound: A listed file does not exist, or no data file is found.
    """
    configs = header.get("configs")
    if isinstance(configs, list) and configs:
        config = next(
            (c for c in configs if isinstance(c, dict) and c.get("config_name") == config_name),
            configs[0],
        )
        spec = config.get("data_files") if isinstance(config, dict) else None
        entries: list[tuple[str, Any]]
        if isinstance(spec, list):
            entries = [
                (e.get("split", "train"), e.get("path")) for e in spec if isinstance(e, dict)
            ]
        elif isinstance(spec, dict):
            entries = list(spec.items())
        elif isinstance(spec, str):
            entries = [("train", spec)]
        else:
            raise SchemaError(f"{folder}/README.md: configs[0].data_files is missing")
        splits: dict[str, list[Path]] = {}
        for split, patterns in entries:
            for pattern in [patterns] if isinstance(patterns, str) else list(patterns or []):
                _check_pattern(folder, str(split), pattern)
                matched = sorted(folder.glob(pattern))
                if not matched:
                    raise TasksetNotFound(f"{folder}: split {split!r} file {pattern!r} not found")
                splits.setdefault(str(split), []).extend(
                    _inside(folder, path, f"split {split!r} file {pattern!r}") for path in matched
                )
        return splits
    found: dict[str, list[Path]] = {}
    for base in (folder / "data", folder):
        for file in sorted(base.glob("*")):
            if file.suffix in DATA_SUFFIXES and file.is_file():
                split = re.split(r"[-_.]", file.name)[0]
                if split in ("train", "test", "validation", "dev"):
                    found.setdefault(split, []).append(_inside(folder, file, "data file"))
        if found:
            return found
    raise TasksetNotFound(
        f"{folder} has no data files: add a README.md with `configs:` or data/train.jsonl, "
        "data/test.jsonl"
    )


def _check_pattern(folder: Path, split: str, pattern: Any) -> None:
    """Refuse a ``data_files`` entry that names something outside the taskset folder."""
    where = f"{folder}/README.md: split {split!r} data file {pattern!r}"
    if not isinstance(pattern, str) or not pattern.strip():
        raise SchemaError(f"{where}: a data file must be a path inside the taskset folder")
    if pattern.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", pattern):
        raise SchemaError(
            f"{where}: absolute paths are refused; data files are paths inside the taskset "
            "folder, such as data/test.jsonl"
        )
    if ".." in re.split(r"[/\\]", pattern) or "://" in pattern:
        raise SchemaError(f"{where}: leaves the taskset folder; data files must stay inside it")


def _inside(folder: Path, path: Path, what: str) -> Path:
    """Return ``path`` when it (symlinks followed) stays inside ``folder``; refuse it otherwise."""
    roots = [folder.resolve()]
    if folder.parent.name == "snapshots":  # a Hub cache snapshot links to the repo's blobs
        roots.append((folder.parent.parent / "blobs").resolve())
    resolved = path.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise SchemaError(
            f"{folder}: {what} {str(path.relative_to(folder))!r} leads outside the taskset "
            f"folder (to {str(resolved)!r}, through a symlink); refused"
        )
    return path


#: Tasksets kept by ``_LOADED``, and the rows they may hold between them.
LOADED_TASKSETS = 8
LOADED_ROWS = 200_000
#: A folder with more files than this is read again every time rather than kept.
_LOADED_MAX_FILES = 1000


class _Loaded:
    """The tasksets loaded lately in this process, kept while their files stay the same.

    Loading a folder again (an evaluation after another, a worker per run, a training loop)
    costs more than a short run's episodes: validating every row and hashing it. A kept taskset
    is returned as long as no file under its folder changed (path, size, modification and
    change times, inode: what ``os.stat`` says); any change, added or removed file loads it
    again. Its rows are shared by every load that returns it: treat them as read-only
    (``model_copy`` makes a changed one).
    """

    def __init__(self) -> None:
        self._kept: collections.OrderedDict[tuple[Any, ...], Taskset] = collections.OrderedDict()

    def get(self, root: Path, parts: TasksetRefParts, load: Callable[[], Taskset]) -> Taskset:
        key = self._key(root, parts)
        if key is None:
            return load()
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        taskset = load()
        # a big taskset is not kept: its rows would outlive the run that needed them
        if _rows(taskset) <= LOADED_ROWS and self._key(root, parts) == key:
            self._kept[key] = taskset
            while len(self._kept) > LOADED_TASKSETS or (
                sum(_rows(t) for t in self._kept.values()) > LOADED_ROWS
            ):
                self._kept.popitem(last=False)
        return taskset

    @staticmethod
    def _key(root: Path, parts: TasksetRefParts) -> tuple[Any, ...] | None:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        if len(files) > _LOADED_MAX_FILES:
            return None
        stats = []
        for path in files:
            st = path.stat()
            stats.append((str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        return (parts, str(root.resolve()), tuple(stats))


def _rows(taskset: Taskset) -> int:
    return sum(len(rows) for rows in taskset.splits.values())


_LOADED = _Loaded()


def _load_folder(folder: Path, parts: TasksetRefParts) -> Taskset:
    return _LOADED.get(folder, parts, lambda: _read_folder(folder, parts))


def _read_folder(folder: Path, parts: TasksetRefParts) -> Taskset:
    from taskhub.hub._environment import read_environment

    header, card = read_card(folder)
    environment = read_environment(folder)
    found = environment.openenv() if environment is not None else None
    config_name = (found[0].config_name if found else None) or "default"
    files = data_files(folder, header, config_name)
    splits = {split: _split_rows(split, paths) for split, paths in files.items()}
    _check_unique_ids(splits)
    name = card.name or parts.name
    if card.env is None and environment is not None and environment.env_spec is not None:
        # a Hub RL environment dataset names its env in environment.yaml
        card = card.model_copy(update={"env": environment.env_spec})
    hashes = _split_hashes(splits)
    ref = _ref(parts, name, splits, hashes, folder)
    return Taskset(ref, card, splits, environment, _known_hashes(splits, hashes))


def _load_env(url: str) -> Taskset:
    from taskhub.env._tasks import env_tasks

    name, rows = env_tasks(url)
    splits = {split: tuple(tasks) for split, tasks in rows.items() if tasks}
    if not splits:
        raise TasksetNotFound(f"{url} serves the Task API but lists no tasks")
    card = TasksetCard(name=name, env=url, description=f"The tasks {url} serves (Task API).")
    hashes = _split_hashes(splits)
    ref = TasksetRef(source=url, kind="env", name=name, fingerprint=_fingerprint(splits, hashes))
    return Taskset(ref, card, splits, None, _known_hashes(splits, hashes))


def _load_file(path: Path, source: str) -> Taskset:
    parts = TasksetRefParts(source, "file", path.stem)
    return _LOADED.get(path, parts, lambda: _read_file(path, source))


def _read_file(path: Path, source: str) -> Taskset:
    if path.suffix not in DATA_SUFFIXES:
        raise TasksetError(
            f"{path}: unsupported taskset file; use one of {', '.join(DATA_SUFFIXES)} or a folder"
        )
    splits = {"train": _split_rows("train", [path])}
    _check_unique_ids(splits)
    parts = TasksetRefParts(source, "file", path.stem)
    hashes = _split_hashes(splits)
    ref = _ref(parts, path.stem, splits, hashes, path)
    return Taskset(ref, TasksetCard(), splits, None, _known_hashes(splits, hashes))


#: JSON Lines splits smaller than this are checked row by row: below it, validating a few
#: thousand rows one at a time costs less than the bulk path's imports (numpy).
BULK_MIN_BYTES = 1 << 20


def _split_rows(split: str, paths: list[Path]) -> Sequence[Task]:
    """A split's validated rows: checked in bulk when the files allow it (see ``_rows``)."""
    rows = None
    if all(p.suffix == ".jsonl" for p in paths):
        if sum(p.stat().st_size for p in paths) >= BULK_MIN_BYTES:
            rows = jsonl_rows(split, paths)
    elif all(p.suffix == ".parquet" for p in paths):
        rows = parquet_rows(split, paths)
    # what the bulk checks cannot vouch for, Task validates row by row (and names the errors)
    return rows if rows is not None else _validate_rows(split, _read_files(paths))


def _split_hashes(splits: Mapping[str, Sequence[Task]]) -> dict[str, list[str]]:
    """The content hashes of the splits held as ``Task`` objects (``TaskRows`` keeps its own)."""
    return {
        split: [task.content_hash() for task in tasks]
        for split, tasks in splits.items()
        if not isinstance(tasks, TaskRows)
    }


def _known_hashes(
    splits: Mapping[str, Sequence[Task]], hashes: Mapping[str, list[str]]
) -> dict[int, str]:
    """The hashes of the rows held as ``Task`` objects, by object id."""
    return {
        id(task): digest
        for split, digests in hashes.items()
        for task, digest in zip(splits[split], digests, strict=True)
    }


def _fingerprint(splits: Mapping[str, Sequence[Task]], hashes: Mapping[str, list[str]]) -> str:
    digest = hashlib.sha256()
    for split, tasks in splits.items():
        digest.update(split.encode() + b"\n")
        if isinstance(tasks, TaskRows):
            for block in tasks.hash_lines():  # the hashes computed once, at load
                digest.update(block)
        else:
            digest.update("".join(h + "\n" for h in hashes[split]).encode())
    return digest.hexdigest()
    return digest.hexdigest()


def _ref(
    parts: TasksetRefParts,
    name: str,
    splits: Mapping[str, Sequence[Task]],
    hashes: Mapping[str, list[str]],
    path: Path,
) -> TasksetRef:
    return TasksetRef(
        source=parts.source,
        kind=parts.kind,  # type: ignore[arg-type]
        name=name,
        repo_id=parts.repo_id,
        revision=parts.revision,
        commit_sha=parts.commit_sha,
        fingerprint=_fingerprint(splits, hashes),
        path=str(path),
    )


@dataclass(frozen=True)
class _Row:
    where: str
    data: Any
    strip_nulls: bool = False


def _read_files(paths: list[Path]) -> Iterator[_Row]:
    for path in paths:
        if path.suffix in (".jsonl", ".json"):
            yield from _read_json(path)
        elif path.suffix == ".parquet":
            try:
                table = read_parquet(path)
            except Exception as exc:
                raise TasksetError(f"{path}: not a readable parquet file: {exc}") from None
            for index, row in enumerate(table.to_pylist()):
                # Arrow struct columns give every row every key, null where the row had none.
                yield _Row(f"{path.name} row {index}", row, strip_nulls=True)
        elif path.suffix == ".csv":
            with io.StringIO(_read_text(path), newline="") as f:
                for index, row in enumerate(csv.DictReader(f)):
                    cleaned = {k: v for k, v in row.items() if v not in ("", None)}
                    if "max_steps" in cleaned:
                        cleaned["max_steps"] = _int_or_text(cleaned["max_steps"])
                    yield _Row(f"{path.name} line {index + 2}", cleaned)
        else:
            raise TasksetError(f"{path}: unsupported data file type")


def _int_or_text(value: str) -> int | str:
    try:
        return int(value)
    except ValueError:
        return value


def _read_json(path: Path) -> Iterator[_Row]:
    text = _read_text(path)
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = loads_bounded(text, limit=MAX_JSON_DEPTH + 1, constants=True)
        except ValueError as exc:
            raise SchemaError(f"{path.name}: not valid JSON: {exc}") from None
        for index, row in enumerate(rows):
            yield _Row(f"{path.name} row {index}", row)
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads_bounded(line, constants=True)
        except ValueError as exc:
            raise SchemaError(f"{path.name} line {number}: not valid JSON: {exc}") from None
        yield _Row(f"{path.name} line {number}", row)


def _read_text(path: Path) -> str:
    """Read a data file as UTF-8; a byte that is not names its line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TasksetError(
            f"{path.name} line {line}: not UTF-8 text (byte {data[exc.start]:#04x} at offset "
            f"{exc.start}); save the file as UTF-8"
        ) from None


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _validate_rows(split: str, rows: Iterator[_Row]) -> tuple[Task, ...]:
    tasks: list[Task] = []
    errors: list[str] = []
    first: tuple[int, str | None] | None = None
    for index, row in enumerate(rows):
        data = row.data
        if row.strip_nulls and isinstance(data, dict):
            data = {
                k: _strip_nulls(v) if k in ("reset", "metadata", "oracle_actions") else v
                for k, v in data.items()
                if v is not None
            }
        if not isinstance(data, dict):
            errors.append(f"{split} row {index} ({row.where}): a row must be a JSON object")
            first = first or (index, None)
            continue
        try:
            tasks.append(Task.model_validate(data))
        except ValidationError as exc:
            for err in exc.errors():
                field = ".".join(str(p) for p in err["loc"]) or "(row)"
                task_id = data.get("task_id")
                who = f" (task_id={task_id!r})" if isinstance(task_id, str) else ""
                message = err["msg"]
                if err["type"] == "extra_forbidden":
                    message = (
                        "unknown field; Task fields are "
                        + ", ".join(Task.model_fields)
                        + " (put extra information under metadata)"
                    )
                errors.append(f"{split} row {index}{who} ({row.where}): field {field!r}: {message}")
                first = first or (index, field)
    if errors:
        shown = errors[:MAX_REPORTED_ERRORS]
        more = len(errors) - len(shown)
        text = "\n  ".join(shown) + (f"\n  ... and {more} more" if more else "")
        assert first is not None
        raise SchemaError(
            f"{len(errors)} invalid row field(s):\n  {text}",
            row=first[0],
            field=first[1],
            split=split,
        )
    return tuple(tasks)


def _check_unique_ids(splits: Mapping[str, Sequence[Task]]) -> None:
    every = {split: task_ids(tasks) for split, tasks in splits.items()}
    if len(set().union(*every.values())) == sum(len(ids) for ids in every.values()):
        return  # no duplicate: nothing to name
    seen: dict[str, tuple[str, int]] = {}
    for split, ids in every.items():
        for index, task_id in enumerate(ids):
            if task_id in seen:
                other_split, other_index = seen[task_id]
                raise SchemaError(
                    f"{split} row {index}: duplicate task_id {task_id!r} "
                    f"(already used by {other_split} row {other_index})",
                    row=index,
                    field="task_id",
                    split=split,
                )
            seen[task_id] = (split, index)


# --- readers for the modules that build tasksets (scaffolding from a file or a generator) -----

#: One raw row and where it came from (``data.jsonl line 3``), before validation.
Row = _Row


def read_rows(paths: list[Path]) -> Iterator[Row]:
    """Yield the raw rows of data files (``.jsonl``, ``.json``, ``.parquet``, ``.csv``).

    Raises:
        TasksetError: A file cannot be read (the file and line are named).
    """
    return _read_files(paths)


def validate_rows(split: str, rows: Iterator[Row]) -> tuple[Task, ...]:
    """Validate raw rows into tasks, as loading does.

    Raises:
        SchemaError: Rows do not match the schema (split, row, where and field named).
    """
    return _validate_rows(split, rows)


def check_unique_ids(splits: dict[str, tuple[Task, ...]]) -> None:
    """Refuse a task id used twice across the splits.

    Raises:
        SchemaError: A duplicate task id (both rows named).
    """
    _check_unique_ids(splits)
