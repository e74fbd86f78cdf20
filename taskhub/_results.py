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
from typing import IO, TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskhub._errors import ResultsError
from taskhub._results_table import EPISODES as EPISODES
from taskhub._results_table import IndexWriter
from taskhub._schema import OUTCOMES, EpisodeRecord, RunManifest
from taskhub._stats import mean_ci, pass_at_k, success_interval

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

    def write(self, record: EpisodeRecord) -> None:
        """Append one record and flush it to the OS.

        Raises:
            ValueError: The record cannot be serialized (nothing was written).
            ResultsError: The file cannot be written (disk full...).
        """
        line = (record.model_dump_json() + "\n").encode("utf-8")
        try:
            self._file.write(line)
            self._file.flush()
            self._index.write(record, self._offset, len(line))
        except OSError as exc:
            raise ResultsError(
                f"cannot write {self.path}: {exc.strerror or exc}; the episodes written so far "
                "are kept: free the space, then finish with `taskhub eval --resume "
                f"{self.path.parent}`"
            ) from None
        self._offset += len(line)

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
    """Cut a torn last line off ``episodes.jsonl`` before appending to it; return bytes cut."""
    if not path.is_file():
        return 0
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data.rfind(b"\n") + 1
    with path.open("r+b") as f:
        f.truncate(keep)
    return len(data) - keep


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


class RunSummary(BaseModel):
    """What a run measured, with the denominators that make the numbers honest.

    ``mean_reward`` averages every episode that has a reward: scored episodes and agent errors
    (a model that cannot produce an action earns what the env gave it, usually 0). Infra and
    reward errors are nobody's score: they are excluded and reported as rates.

    ``stderr``, ``ci95`` and ``success_ci95`` treat tasks, not episodes, as the independent
    draws once a task has several samples (cluster-robust, see ``mean_ci``); with one sample per
    task they are the usual i.i.d. interval and the Wilson interval of the success rate.
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
    "duration_s",
    "model_time_s",
    "queue_time_s",
)


def _summary_table(records: Sequence[EpisodeRecord] | pyarrow.Table) -> pyarrow.Table:
    """The columns ``summarize`` reads, from records or a results table."""
    import pyarrow as pa

    from taskhub._results_table import results_schema

    schema = results_schema(SUMMARY_COLUMNS)
    if not isinstance(records, Sequence):
        return records.select(list(SUMMARY_COLUMNS)).cast(schema)
    return pa.Table.from_pydict(
        {
            "task_id": [r.task_id for r in records],
            "outcome": [r.outcome for r in records],
            "reward": [r.reward for r in records],
            "success": [r.success for r in records],
            "num_steps": [r.num_steps for r in records],
            "prompt_tokens": [r.usage.prompt_tokens for r in records],
            "completion_tokens": [r.usage.completion_tokens for r in records],
            "model_calls": [r.usage.calls for r in records],
            "duration_s": [r.duration_s for r in records],
            "model_time_s": [r.model_time_s for r in records],
            "queue_time_s": [r.queue_time_s for r in records],
        },
        schema=schema,
    )


def summarize(
    records: Sequence[EpisodeRecord] | pyarrow.Table, *, n_planned: int | None = None
) -> RunSummary:
    """Compute the summary statistics of a run's records.

    pass@k is reported for k = 1 and every power of two up to the smallest number of rewarded
    samples any task has (so each task contributes to every k reported).

    Args:
        records: The records, or their ``read_results_table`` (at least ``SUMMARY_COLUMNS``),
            which a run of any size fits in (no ``EpisodeRecord`` per episode).
        n_planned: Episodes planned, reported as is.
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
    # Tasks are the clusters of the intervals: their codes stand for their ids.
    rewarded = reward[has_reward].tolist()
    mean, stderr, low, high = mean_ci(rewarded, codes[has_reward].tolist())
    successes = int(success[judged].sum())
    s_low, s_high = success_interval(success[judged].astype(float).tolist(), codes[judged].tolist())
    tasks = len(names)
    count = np.bincount(codes, minlength=tasks)
    scored = np.bincount(codes, weights=outcome == "scored", minlength=tasks)
    task_rewarded = np.bincount(codes, weights=has_reward, minlength=tasks)
    reward_sum = np.bincount(codes, weights=np.where(has_reward, reward, 0.0), minlength=tasks)
    task_judged = np.bincount(codes, weights=judged, minlength=tasks).astype(np.int64)
    task_successes = np.bincount(codes, weights=judged & success, minlength=tasks).astype(np.int64)
    per_task = []
    for i in sorted(range(tasks), key=names.__getitem__):
        per_task.append(
            TaskSummary.model_construct(
                task_id=names[i],
                n=int(count[i]),
                scored=int(scored[i]),
                mean_reward=float(reward_sum[i] / task_rewarded[i]) if task_rewarded[i] else None,
                successes=int(task_successes[i]),
                pass_rate=float(task_successes[i] / task_judged[i]) if task_judged[i] else None,
            )
        )
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
            values = [pass_at_k(nj, c, k) for (nj, c), times in pairs.items() for _ in range(times)]
            passk[f"pass@{k}"] = math.fsum(values) / int(usable.sum())
            k *= 2
    samples = set(np.unique(count).tolist())
    not_infra = outcome != "infra_error"
    steps = table["num_steps"].to_numpy()[not_infra]
    completion = int(pc.sum(table["completion_tokens"]).as_py() or 0)
    model_time = math.fsum(table["model_time_s"].to_numpy().tolist())
    return RunSummary(
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
        per_task=per_task,
        model_time_s=model_time,
        queue_time_s=math.fsum(table["queue_time_s"].to_numpy().tolist()),
        tokens_per_s=completion / model_time if completion and model_time > 0 else None,
    )


def dumps_summary(summary: RunSummary) -> str:
    """Serialize a summary as indented JSON."""
    return json.dumps(summary.model_dump(mode="json"), indent=2)
