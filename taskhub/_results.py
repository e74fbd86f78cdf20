"""Run directories: ``run.json`` + ``episodes.jsonl``, read and written only here, and summaries.

``episodes.jsonl`` is append-only, one ``EpisodeRecord`` per line, each line written with one
``write`` and flushed, so a killed run loses at most the line being written. Readers drop a torn
last line; ``--resume`` truncates it before appending.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from 3.12

from taskhub._errors import ResultsError
from taskhub._results_table import EPISODES as EPISODES
from taskhub._results_table import MISSING_GROUP as MISSING_GROUP
from taskhub._results_table import IndexWriter, task_field_column
from taskhub._results_table import task_field as task_field
from taskhub._schema import OUTCOMES, Comparability, EpisodeRecord, RunManifest
from taskhub._stats import interval, pass_at_k, success_interval

if TYPE_CHECKING:
    import pyarrow

logger = logging.getLogger(__name__)

MANIFEST = "run.json"


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    """Write ``run.json`` atomically (a reader never sees half a manifest)."""
    tmp = run_dir / f".{MANIFEST}.tmp"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, run_dir / MANIFEST)
    except OSError as exc:
        raise ResultsError(f"cannot write {run_dir / MANIFEST}: {exc.strerror or exc}") from None


def read_manifest(run_dir: Path) -> RunManifest:
    """Read ``run.json``.

    Raises:
        ResultsError: The folder is not a run directory or the manifest does not validate.
    """
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise ResultsError(f"{run_dir} is not a run directory: it has no {MANIFEST}")
    try:
        return RunManifest.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ResultsError(f"{path}: field {field!r}: {first['msg']}") from None


class ResultsWriter:
    """Appends episode records to ``episodes.jsonl``, one flushed line each, and their index.

    The index (``episodes.index.csv``, see ``taskhub._results_table``) gets each record's row
    right after its line, so that large runs are read fast without parsing every trajectory.
    """

    def __init__(self, path: Path) -> None:
        """Open ``path`` for appending (created if missing)."""
        self.path = path
        self._file: IO[bytes] = path.open("ab")
        self._offset = self._file.tell()
        self._index = IndexWriter(path)

    def write(self, record: EpisodeRecord, line: str | None = None) -> None:
        """Append one record and flush it to the OS.

        Args:
            record: The record (its index row is read from it).
            line: Its JSON, when it was serialized already (``record.model_dump_json()``, in
                the process that played it): written as it is. ``record`` may then be its
                summary row, without the trajectory, which the index does not read.

        Raises:
            ValueError: The record cannot be serialized (nothing was written).
            ResultsError: The file cannot be written (disk full...).
        """
        data = ((record.model_dump_json() if line is None else line) + "\n").encode("utf-8")
        try:
            self._file.write(data)
            self._file.flush()
            self._index.write(record, self._offset, len(data))
        except OSError as exc:
            raise ResultsError(
                f"cannot write {self.path}: {exc.strerror or exc}; the episodes written so far "
                "are kept: free the space, then finish with `taskhub eval --resume "
                f"{self.path.parent}`"
            ) from None
        self._offset += len(data)

    def close(self) -> None:
        """Close the file."""
        self._file.close()
        self._index.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_results(path: Path, records: Iterable[EpisodeRecord]) -> int:
    """Append ``records`` to a JSONL results file; returns how many were written."""
    count = 0
    with ResultsWriter(Path(path)) as writer:
        for record in records:
            writer.write(record)
            count += 1
    return count


def iter_results(path: Path) -> Iterator[EpisodeRecord]:
    """Yield the records of a results file (``episodes.jsonl`` or a run directory).

    A last line without its newline is torn (the run was killed while writing it) and skipped.

    Raises:
        ResultsError: A complete line is not a valid record (its number is named).
    """
    path = Path(path)
    if path.is_dir():
        path = path / EPISODES
    if not path.is_file():
        return
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return
            if not line.strip():
                continue
            try:
                yield EpisodeRecord.model_validate_json(line)
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise ResultsError(
                    f"{path} line {number}: field {field!r}: {first['msg']}"
                ) from None


@dataclass(frozen=True)
class Deduplicated:
    """Records with one per (task, sample), and what was dropped to get there."""

    records: list[EpisodeRecord]
    """The record kept for each (task, sample), in file order."""
    duplicates: int = 0
    """Extra records of an episode that already had a usable one (two writers at once)."""
    retried: int = 0
    """``infra_error`` records that a later attempt of the same episode replaced (history)."""


def deduplicate(records: Iterable[EpisodeRecord]) -> Deduplicated:
    """Keep one record per (task, sample): the newest usable one, else the newest.

    An ``infra_error`` followed by another attempt (``--resume --retry infra``) is history and
    counts as ``retried``; two usable records of one episode (two writers of one run) count as
    ``duplicates``. Neither is ever counted twice.
    """
    kept: dict[tuple[str, int], EpisodeRecord] = {}
    order: dict[tuple[str, int], int] = {}
    duplicates = retried = 0
    for index, record in enumerate(records):
        key = record.key()
        old = kept.get(key)
        if old is None:
            kept[key], order[key] = record, index
            continue
        if old.outcome == "infra_error":
            retried += 1
            kept[key], order[key] = record, index
        elif record.outcome == "infra_error":
            retried += 1
        else:
            duplicates += 1
            kept[key], order[key] = record, index
    ordered = sorted(kept, key=order.__getitem__)
    return Deduplicated([kept[key] for key in ordered], duplicates, retried)


def read_results(path: Path) -> list[EpisodeRecord]:
    """Return the records of a results file or run directory, one per (task, sample).

    ``iter_results`` yields every line as written (history included); this keeps the record
    ``deduplicate`` keeps, and logs a warning when it dropped duplicates.
    """
    result = deduplicate(iter_results(path))
    _report_dropped(Path(path), result.duplicates, result.retried)
    return result.records


def _report_dropped(path: Path, duplicates: int, retried: int) -> None:
    if duplicates:
        logger.warning(
            "%s: dropped %d duplicate record(s) of episodes recorded twice (two writers at "
            "once?); each episode counts once",
            path,
            duplicates,
        )
    if retried:
        logger.info("%s: %d infra-error attempt(s) replaced by a retry", path, retried)


def repair_results(path: Path) -> int:
    """Cut a torn last line off ``episodes.jsonl`` before appending to it; return bytes cut.

    Reads the file from its end, as far back as its last line break: a run of a million
    episodes is not read whole to repair it.
    """
    if not path.is_file():
        return 0
    with path.open("r+b") as f:
        end = f.seek(0, os.SEEK_END)
        position = end
        while position > 0:
            start = max(0, position - _TAIL_BYTES)
            f.seek(start)
            found = f.read(position - start).rfind(b"\n")
            if found >= 0:
                keep = start + found + 1
                break
            position = start
        else:
            keep = 0
        if keep < end:
            f.truncate(keep)
    return end - keep


#: How much of a results file ``repair_results`` reads at a time, from its end.
_TAIL_BYTES = 1 << 16


@dataclass(frozen=True)
class Run:
    """A run directory read back: its manifest and records."""

    path: Path
    manifest: RunManifest
    records: list[EpisodeRecord]
    #: Records dropped because their episode was recorded twice (see ``deduplicate``).
    duplicates: int = 0
    #: Infra-error attempts replaced by a retry (kept in the file as history).
    retried: int = 0


def read_run(run_dir: Path) -> Run:
    """Read a run directory.

    Raises:
        ResultsError: The folder is not a valid run directory.
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    result = deduplicate(iter_results(run_dir))
    _report_dropped(run_dir, result.duplicates, result.retried)
    return Run(run_dir, manifest, result.records, result.duplicates, result.retried)


class TaskSummary(BaseModel):
    """Per-task numbers of a run."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    n: int
    scored: int
    mean_reward: float | None
    successes: int
    pass_rate: float | None


_TASK_SUMMARIES = TypeAdapter(list[TaskSummary])


class _TaskRow(TypedDict):
    """A ``TaskSummary`` as a plain row (``summarize_rows``), serialized as the model is."""

    task_id: str
    n: int
    scored: int
    mean_reward: float | None
    successes: int
    pass_rate: float | None


_TASK_ROWS = TypeAdapter(list[_TaskRow])


class ComponentSummary(BaseModel):
    """One reward component of a run: its mean and interval beside the total's."""

    model_config = ConfigDict(extra="forbid")

    name: str
    weight: float = 1.0
    gate: bool = False
    range: tuple[float, float] | None = None
    n: int
    errors: int = 0
    mean: float | None = None
    stderr: float | None = None
    ci95: tuple[float, float] | None = None


def component_summaries(
    names: Sequence[str],
    values: Sequence[float | None],
    errored: Sequence[bool],
    tasks: Sequence[str],
    weights: Sequence[float],
    gates: Sequence[bool],
    ranges: dict[str, tuple[float, float] | None] | None = None,
) -> list[ComponentSummary]:
    """Summarize reward components given as flat columns (one entry per component value).

    Args:
        names: Each value's component (its spec).
        values: The value, None when it was not computed or did not apply.
        errored: Whether the component failed on that episode.
        tasks: The task of the episode it belongs to (intervals are clustered by task).
        weights: The component's weight.
        gates: Whether the component is a gate.
        ranges: Declared range of each component, by spec (bounded intervals where known).

    Returns:
        One summary per component, sorted by name.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(names)
    if not len(values) == len(errored) == len(tasks) == len(weights) == len(gates) == count:
        raise ValueError("component_summaries needs columns of one length")
    task_codes = pc.dictionary_encode(pa.array(list(tasks), pa.string())).indices
    return _component_summaries(
        pa.array(list(names), pa.string()),
        pa.array(list(values), pa.float64()),
        np.asarray(errored, dtype=bool).reshape(count),
        task_codes.to_numpy(zero_copy_only=False),
        np.asarray(weights, dtype=np.float64).reshape(count),
        np.asarray(gates, dtype=bool).reshape(count),
        ranges or {},
    )


def _component_summaries(
    names: pyarrow.Array,
    values: pyarrow.Array,
    errored: Any,
    clusters: Any,
    weights: Any,
    gates: Any,
    ranges: dict[str, tuple[float, float] | None],
) -> list[ComponentSummary]:
    """``component_summaries`` of Arrow and numpy columns (``clusters``: task codes)."""
    import numpy as np
    import pyarrow.compute as pc

    if len(names) == 0:
        return []
    encoded = pc.dictionary_encode(names)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    labels: list[str] = encoded.dictionary.to_pylist()
    computed = values.is_valid().to_numpy(zero_copy_only=False) & ~errored
    numbers = pc.fill_null(values, 0.0).to_numpy(zero_copy_only=False)
    out = []
    for code in sorted(range(len(labels)), key=labels.__getitem__):
        rows = codes == code
        first = int(np.argmax(rows))  # weight and gate as the component's first value has them
        picked = rows & computed
        bounds = ranges.get(labels[code])
        mean, stderr, low, high = interval(
            numbers[picked].tolist(), clusters[picked].tolist(), bounds
        )
        out.append(
            ComponentSummary(
                name=labels[code],
                weight=float(weights[first]),
                gate=bool(gates[first]),
                range=bounds,
                n=int(picked.sum()),
                errors=int((rows & errored).sum()),
                mean=mean,
                stderr=stderr,
                ci95=(low, high) if low is not None and high is not None else None,
            )
        )
    return out


class RunSummary(BaseModel):
    """What a run measured, with the denominators that make the numbers honest.

    ``mean_reward`` averages every episode that has a reward: scored episodes and agent errors
    (a model that cannot produce an action earns what the env gave it, usually 0). Infra and
    reward errors are nobody's score: they are excluded and reported as rates.

    ``stderr``, ``ci95`` and ``success_ci95`` treat tasks, not episodes, as the independent
    draws once a task has several samples (cluster-robust, see ``mean_ci``); with one sample per
    task they are the usual i.i.d. interval and the Wilson interval of the success rate. When
    the total reward has a known range (``reward_range``: its components declare theirs),
    ``ci95`` is the bounded interval of ``taskhub._stats.bounded_mean_ci``, which stays inside
    it (``interval`` says which method gave ``ci95``: ``t`` or ``bounded``). ``model_cache``
    counts the model calls answered from the model-call cache and those it did not hold, when
    the run used one.
    """

    model_config = ConfigDict(extra="forbid")

    n_episodes: int
    n_planned: int | None = None
    n_tasks: int
    outcomes: dict[str, int]
    error_rates: dict[str, float]
    n_rewarded: int
    mean_reward: float | None
    stderr: float | None
    ci95: tuple[float, float] | None
    success_rate: float | None
    success_ci95: tuple[float, float] | None
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    samples_per_task: int | None = None
    mean_steps: float | None = None
    tokens: dict[str, int] = Field(default_factory=dict)
    mean_duration_s: float | None = None
    per_task: list[TaskSummary] = Field(default_factory=list)
    model_time_s: float = 0.0
    """Seconds the model worked, over every episode (queue wait not included)."""
    queue_time_s: float = 0.0
    """Seconds model calls waited for the model (a local model serves one call at a time)."""
    tokens_per_s: float | None = None
    """Completion tokens per second of model time; None without tokens or model time."""
    reward_range: tuple[float, float] | None = None
    interval: str = "t"
    components: list[ComponentSummary] = Field(default_factory=list)
    model_cache: dict[str, int] | None = None


def ranges_of(
    comparability: Comparability | None,
) -> tuple[tuple[float, float] | None, dict[str, tuple[float, float] | None]]:
    """The total's range and each component's declared range, from a run's comparability."""
    if comparability is None:
        return None, {}
    return comparability.reward_range, {r.spec: r.range for r in comparability.rewards}


#: Columns of ``read_results_table`` that ``summarize`` reads.
SUMMARY_COLUMNS = (
    "task_id",
    "outcome",
    "reward",
    "success",
    "num_steps",
    "prompt_tokens",
    "completion_tokens",
    "model_calls",
    "cache_hits",
    "cache_misses",
    "duration_s",
    "model_time_s",
    "queue_time_s",
    "reward_components",
)


def summary_values(record: EpisodeRecord) -> tuple[Any, ...]:
    """The values of ``record`` in ``SUMMARY_COLUMNS``, in their order."""
    usage = record.usage
    return (
        record.task_id,
        record.outcome,
        record.reward,
        record.success,
        record.num_steps,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.calls,
        usage.cache_hits,
        usage.cache_misses,
        record.duration_s,
        record.model_time_s,
        record.queue_time_s,
        [
            {"name": c.name, "value": c.value, "weight": c.weight, "gate": c.gate, "error": c.error}
            for c in record.reward_components
        ],
    )


def _values_table(rows: Sequence[tuple[Any, ...]]) -> pyarrow.Table:
    """A table of ``SUMMARY_COLUMNS`` from rows of ``summary_values``."""
    import pyarrow as pa

    from taskhub._results_table import results_schema

    schema = results_schema(SUMMARY_COLUMNS)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(SUMMARY_COLUMNS)
    return pa.Table.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, schema, strict=True)],
        schema=schema,
    )


def _summary_table(records: Sequence[EpisodeRecord] | pyarrow.Table) -> pyarrow.Table:
    """The columns ``summarize`` reads, from records or a results table."""
    from taskhub._results_table import results_schema

    if isinstance(records, Sequence):
        return _values_table([summary_values(r) for r in records])
    missing = [c for c in SUMMARY_COLUMNS if c not in records.column_names]
    if missing:
        raise ValueError(
            f"summarize needs the columns {list(SUMMARY_COLUMNS)} of a results table; this "
            f"one lacks {missing}: read it with read_results_table(path, "
            "columns=SUMMARY_COLUMNS)"
        )
    return records.select(list(SUMMARY_COLUMNS)).cast(results_schema(SUMMARY_COLUMNS))


class SummaryColumns:
    """What ``summarize`` reads of records that come one at a time, kept as Arrow columns.

    A run adds each record as it ends: a million take about 100 MB here, where the records
    themselves, even without their trajectories, would take gigabytes.
    """

    #: Records kept as Python values before they join the Arrow blocks.
    BLOCK = 8192

    def __init__(self, table: pyarrow.Table | None = None) -> None:
        """Start from ``table`` (a results table with ``SUMMARY_COLUMNS``), or from nothing."""
        self._blocks = [] if table is None or not table.num_rows else [_summary_table(table)]
        self._rows: list[tuple[Any, ...]] = []

    def append(self, record: EpisodeRecord) -> None:
        """Add the values of ``record``."""
        self._rows.append(summary_values(record))
        if len(self._rows) >= self.BLOCK:
            self._seal()

    def table(self) -> pyarrow.Table:
        """Every record added so far, as ``summarize`` reads them."""
        import pyarrow as pa

        self._seal()
        if not self._blocks:
            return _values_table([])
        return self._blocks[0] if len(self._blocks) == 1 else pa.concat_tables(self._blocks)

    def __len__(self) -> int:
        return sum(int(block.num_rows) for block in self._blocks) + len(self._rows)

    def _seal(self) -> None:
        if self._rows:
            self._blocks.append(_values_table(self._rows))
            self._rows = []


def summarize(
    records: Sequence[EpisodeRecord] | pyarrow.Table,
    *,
    n_planned: int | None = None,
    comparability: Comparability | None = None,
) -> RunSummary:
    """Compute the summary statistics of a run's records.

    pass@k is reported for k = 1 and every power of two up to the smallest number of rewarded
    samples any task has (so each task contributes to every k reported).

    Args:
        records: The records (of a run, or any records to pool), or their
            ``read_results_table`` (at least ``SUMMARY_COLUMNS``), which a run of any size fits
            in (no ``EpisodeRecord`` per episode).
        n_planned: Episodes planned, reported as is.
        comparability: The run's configuration (``taskhub.comparability``): its reward ranges
            keep the intervals inside them.

    Raises:
        ValueError: A table lacks one of ``SUMMARY_COLUMNS``.
    """
    summary, rows = summarize_rows(records, n_planned=n_planned, comparability=comparability)
    # Validated from plain rows in pydantic's core, 10k tasks at a time (a million-episode run
    # has 250k tasks: a model built per task from Python costs 4x as much); each chunk's rows
    # are let go as their models are made, so that both are never held whole.
    rows.reverse()
    while rows:
        chunk = rows[-10_000:]
        del rows[-10_000:]
        chunk.reverse()
        summary.per_task += _TASK_SUMMARIES.validate_python(chunk)
    return summary


def summary_json(summary: RunSummary, rows: list[dict[str, Any]], *, indent: int = 2) -> str:
    """The text of ``summary.model_dump_json(indent=indent)``, ``rows`` as its ``per_task``.

    ``rows`` are ``summarize_rows``'s: the text is the same without a model per task.
    """
    body = summary.model_dump_json(indent=indent)
    if not rows:
        return body
    if summary.per_task:
        raise ValueError("summary_json takes a summary whose per_task is left empty")
    tasks = _TASK_ROWS.dump_json(rows, indent=indent).decode()  # type: ignore[arg-type]
    tasks = tasks.replace("\n", "\n" + " " * indent)  # one level deeper, inside the summary
    return body.replace('"per_task": []', '"per_task": ' + tasks, 1)


def summarize_rows(
    records: Sequence[EpisodeRecord] | pyarrow.Table,
    *,
    n_planned: int | None = None,
    comparability: Comparability | None = None,
) -> tuple[RunSummary, list[dict[str, Any]]]:
    """``summarize``, its ``per_task`` left empty and given apart as plain rows (sorted by id).

    For a reader that only writes them out (``results show --json``): a quarter of a million
    ``TaskSummary`` models take seconds to build and hundreds of megabytes to hold.
    """
    import numpy as np
    import pyarrow.compute as pc

    table = _summary_table(records).combine_chunks()
    n = table.num_rows
    encoded = pc.dictionary_encode(table["task_id"]).chunk(0) if n else None
    codes = encoded.indices.to_numpy() if encoded is not None else np.zeros(0, np.int64)
    names = encoded.dictionary.to_pylist() if encoded is not None else []
    outcome = table["outcome"].to_numpy(zero_copy_only=False).astype(str)
    outcomes: dict[str, int] = {o: int((outcome == o).sum()) for o in OUTCOMES}
    has_reward = table["reward"].is_valid().to_numpy(zero_copy_only=False)
    reward = pc.fill_null(table["reward"], 0.0).to_numpy()
    judged = table["success"].is_valid().to_numpy(zero_copy_only=False)
    success = pc.fill_null(table["success"], False).to_numpy(zero_copy_only=False)
    total_range, component_ranges = ranges_of(comparability)
    # Tasks are the clusters of the intervals: their codes stand for their ids.
    rewarded = reward[has_reward].tolist()
    mean, stderr, low, high = interval(rewarded, codes[has_reward].tolist(), total_range)
    successes = int(success[judged].sum())
    s_low, s_high = success_interval(success[judged].astype(float).tolist(), codes[judged].tolist())
    tasks = len(names)
    count = np.bincount(codes, minlength=tasks)
    scored = np.bincount(codes, weights=outcome == "scored", minlength=tasks)
    task_rewarded = np.bincount(codes, weights=has_reward, minlength=tasks)
    reward_sum = np.bincount(codes, weights=np.where(has_reward, reward, 0.0), minlength=tasks)
    task_judged = np.bincount(codes, weights=judged, minlength=tasks).astype(np.int64)
    task_successes = np.bincount(codes, weights=judged & success, minlength=tasks).astype(np.int64)
    order = sorted(range(tasks), key=names.__getitem__)
    with np.errstate(invalid="ignore", divide="ignore"):  # no reward / no judged episode: None
        task_means = np.where(task_rewarded > 0, reward_sum / task_rewarded, np.nan)
        pass_rates = np.where(task_judged > 0, task_successes / task_judged, np.nan)
    rows = [
        {
            "task_id": names[i],
            "n": n_i,
            "scored": s_i,
            "mean_reward": None if math.isnan(m_i) else m_i,  # none rewarded
            "successes": c_i,
            "pass_rate": None if math.isnan(p_i) else p_i,  # none judged
        }
        for i, n_i, s_i, m_i, c_i, p_i in zip(
            order,
            count[order].tolist(),
            scored[order].astype(np.int64).tolist(),
            task_means[order].tolist(),
            task_successes[order].tolist(),
            pass_rates[order].tolist(),
            strict=True,
        )
    ]
    passk: dict[str, float] = {}
    usable = task_judged > 0
    if usable.any():
        # pass@k depends on a task's (samples, successes) only: computed once per distinct pair
        pairs = Counter(
            zip(task_judged[usable].tolist(), task_successes[usable].tolist(), strict=True)
        )
        max_k = int(task_judged[usable].min())
        k = 1
        while k <= max_k:
            values = [pass_at_k(nj, c, k) * times for (nj, c), times in pairs.items()]
            passk[f"pass@{k}"] = math.fsum(values) / int(usable.sum())
            k *= 2
    samples = set(np.unique(count).tolist())
    not_infra = outcome != "infra_error"
    steps = table["num_steps"].to_numpy()[not_infra]
    completion = int(pc.sum(table["completion_tokens"]).as_py() or 0)
    model_time = math.fsum(table["model_time_s"].to_numpy().tolist())
    summary = RunSummary(
        n_episodes=n,
        n_planned=n_planned,
        n_tasks=tasks,
        outcomes=outcomes,
        error_rates={o: outcomes[o] / n for o in OUTCOMES if o != "scored"} if n else {},
        n_rewarded=len(rewarded),
        mean_reward=mean,
        stderr=stderr,
        ci95=(low, high) if low is not None and high is not None else None,
        success_rate=successes / int(judged.sum()) if judged.any() else None,
        success_ci95=(s_low, s_high) if s_low is not None and s_high is not None else None,
        pass_at_k=passk,
        samples_per_task=samples.pop() if len(samples) == 1 else None,
        mean_steps=math.fsum(steps.tolist()) / len(steps) if len(steps) else None,
        tokens={
            "prompt": int(pc.sum(table["prompt_tokens"]).as_py() or 0),
            "completion": completion,
            "calls": int(pc.sum(table["model_calls"]).as_py() or 0),
        },
        mean_duration_s=math.fsum(table["duration_s"].to_numpy().tolist()) / n if n else None,
        model_time_s=model_time,
        queue_time_s=math.fsum(table["queue_time_s"].to_numpy().tolist()),
        tokens_per_s=completion / model_time if completion and model_time > 0 else None,
        reward_range=total_range,
        interval="t" if total_range is None else "bounded",
        components=_table_components(table, codes, component_ranges),
        model_cache=_cache_counts(table),
    )
    return summary, rows


def _cache_counts(table: pyarrow.Table) -> dict[str, int] | None:
    import pyarrow.compute as pc

    hits = int(pc.sum(table["cache_hits"]).as_py() or 0)
    misses = int(pc.sum(table["cache_misses"]).as_py() or 0)
    return {"hits": hits, "misses": misses} if hits or misses else None


def _table_components(
    table: pyarrow.Table, codes: Any, ranges: dict[str, tuple[float, float] | None]
) -> list[ComponentSummary]:
    """The summaries of the ``reward_components`` column (``codes``: each row's task code)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return []
    column = table["reward_components"]
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    values = pc.list_flatten(column)
    if len(values) == 0:
        return []
    rows = pc.list_parent_indices(column).to_numpy()
    return _component_summaries(
        pc.struct_field(values, "name"),
        pc.struct_field(values, "value"),
        pc.struct_field(values, "error").is_valid().to_numpy(zero_copy_only=False),
        codes[rows],
        pc.struct_field(values, "weight").to_numpy(zero_copy_only=False),
        pc.struct_field(values, "gate").to_numpy(zero_copy_only=False),
        ranges,
    )


class GroupSummary(BaseModel):
    """The numbers of the episodes whose task has one value of a field (``--by``)."""

    model_config = ConfigDict(extra="forbid")

    value: str
    n_tasks: int
    n_episodes: int
    n_rewarded: int
    mean_reward: float | None
    stderr: float | None
    ci95: tuple[float, float] | None
    success_rate: float | None
    success_ci95: tuple[float, float] | None


def _column(values: Sequence[Any] | pyarrow.Array | pyarrow.ChunkedArray, kind: Any) -> Any:
    """An Arrow array of ``kind`` from a sequence or an Arrow (chunked) array."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values.cast(kind)
    return pa.array(list(values), kind)


def group_summaries(
    keys: Sequence[str] | pyarrow.Array | pyarrow.ChunkedArray,
    tasks: Sequence[str] | pyarrow.Array | pyarrow.ChunkedArray,
    rewards: Sequence[float | None] | pyarrow.Array | pyarrow.ChunkedArray,
    successes: Sequence[bool | None] | pyarrow.Array | pyarrow.ChunkedArray,
    *,
    reward_range: tuple[float, float] | None = None,
) -> list[GroupSummary]:
    """Summarize episodes by group, given as columns (one entry per episode).

    Each group gets the mean reward with its interval (clustered by task, bounded when the
    range is known) and the success rate with its interval, as the run summary computes them.
    The columns may be sequences or Arrow arrays (a results table's columns).

    Args:
        keys: Each episode's group.
        tasks: Each episode's task id.
        rewards: Each episode's total reward (None: not rewarded).
        successes: Each episode's success (None: not judged).
        reward_range: The total reward's range.

    Returns:
        One summary per group, sorted by group label (``(none)`` last).

    Raises:
        ValueError: The columns differ in length.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    key_column = pc.fill_null(_column(keys, pa.string()), MISSING_GROUP)
    task_column = _column(tasks, pa.string())
    reward_column = _column(rewards, pa.float64())
    success_column = _column(successes, pa.bool_())
    n = len(key_column)
    if not len(task_column) == len(reward_column) == len(success_column) == n:
        raise ValueError("group_summaries needs columns of one length")
    if n == 0:
        return []
    encoded = pc.dictionary_encode(key_column)
    key_codes = encoded.indices.to_numpy(zero_copy_only=False)
    labels: list[str] = encoded.dictionary.to_pylist()
    task_codes = pc.dictionary_encode(task_column).indices.to_numpy(zero_copy_only=False)
    has_reward = reward_column.is_valid().to_numpy(zero_copy_only=False)
    reward = pc.fill_null(reward_column, 0.0).to_numpy(zero_copy_only=False)
    judged = success_column.is_valid().to_numpy(zero_copy_only=False)
    success = pc.fill_null(success_column, False).to_numpy(zero_copy_only=False)
    out = []
    for code in sorted(range(len(labels)), key=lambda c: (labels[c] == MISSING_GROUP, labels[c])):
        rows = key_codes == code
        picked = rows & has_reward
        mean, stderr, low, high = interval(
            reward[picked].tolist(), task_codes[picked].tolist(), reward_range
        )
        seen = rows & judged
        outcomes = success[seen].astype(float).tolist()
        s_low, s_high = success_interval(outcomes, task_codes[seen].tolist())
        out.append(
            GroupSummary(
                value=labels[code],
                n_tasks=len(np.unique(task_codes[rows])),
                n_episodes=int(rows.sum()),
                n_rewarded=int(picked.sum()),
                mean_reward=mean,
                stderr=stderr,
                ci95=(low, high) if low is not None and high is not None else None,
                success_rate=math.fsum(outcomes) / len(outcomes) if outcomes else None,
                success_ci95=(s_low, s_high) if s_low is not None and s_high is not None else None,
            )
        )
    return out


def summarize_groups(
    records: Sequence[EpisodeRecord] | pyarrow.Table,
    field: str,
    *,
    comparability: Comparability | None = None,
) -> list[GroupSummary]:
    """``group_summaries`` of a run's records by a task field (see ``task_field``).

    Args:
        records: The records, or their results table read with ``task_fields=[field]``
            (``read_results_table``: its ``task.FIELD`` column holds the groups).
        field: The task field (``metadata.family``, ``difficulty``...).
        comparability: The run's configuration: its reward range bounds the intervals.

    Raises:
        ValueError: A table has no ``task.FIELD`` column.
    """
    reward_range = comparability.reward_range if comparability else None
    if isinstance(records, Sequence):
        return group_summaries(
            [task_field(r.task, field) for r in records],
            [r.task_id for r in records],
            [r.reward for r in records],
            [r.success for r in records],
            reward_range=reward_range,
        )
    column = task_field_column(field)
    if column not in records.column_names:
        raise ValueError(
            f"the results table has no column {column!r}: read it with "
            f"read_results_table(path, task_fields=[{field!r}])"
        )
    return group_summaries(
        records[column],
        records["task_id"],
        records["reward"],
        records["success"],
        reward_range=reward_range,
    )


def dumps_summary(summary: RunSummary) -> str:
    """Serialize a summary as indented JSON."""
    return json.dumps(summary.model_dump(mode="json"), indent=2)
