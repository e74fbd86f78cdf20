"""Run directories: ``run.json`` + ``episodes.jsonl``, read and written only here, and summaries.

``episodes.jsonl`` is append-only, one ``EpisodeRecord`` per line, each line written with one
``write`` and flushed, so a killed run loses at most the line being written. Readers drop a torn
last line; ``--resume`` truncates it before appending.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskhub._errors import ResultsError
from taskhub._schema import OUTCOMES, Comparability, EpisodeRecord, RunManifest, Task
from taskhub._stats import interval, pass_at_k, success_interval

if TYPE_CHECKING:
    import pyarrow

MANIFEST = "run.json"
EPISODES = "episodes.jsonl"


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    """Write ``run.json`` atomically (a reader never sees half a manifest)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{MANIFEST}.tmp"
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / MANIFEST)


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
    """Appends episode records to ``episodes.jsonl``, one flushed line each."""

    def __init__(self, path: Path) -> None:
        """Open ``path`` for appending (created if missing)."""
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: EpisodeRecord) -> None:
        """Append one record and flush it to the OS."""
        self._file.write(record.model_dump_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

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


def read_results(path: Path) -> list[EpisodeRecord]:
    """Return every record of a results file or run directory (see ``iter_results``)."""
    return list(iter_results(path))


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


def read_run(run_dir: Path) -> Run:
    """Read a run directory.

    Raises:
        ResultsError: The folder is not a valid run directory.
    """
    run_dir = Path(run_dir)
    return Run(run_dir, read_manifest(run_dir), read_results(run_dir))


class TaskSummary(BaseModel):
    """Per-task numbers of a run."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    n: int
    scored: int
    mean_reward: float | None
    successes: int
    pass_rate: float | None


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
    by_name: dict[str, tuple[list[float], list[str], list[int]]] = {}
    meta: dict[str, tuple[float, bool]] = {}
    for name, value, error, task, weight, gate in zip(
        names, values, errored, tasks, weights, gates, strict=True
    ):
        computed, clusters, counts = by_name.setdefault(name, ([], [], [0]))
        meta.setdefault(name, (weight, gate))
        if error:
            counts[0] += 1
        elif value is not None:
            computed.append(value)
            clusters.append(task)
    out = []
    for name in sorted(by_name):
        computed, clusters, counts = by_name[name]
        bounds = (ranges or {}).get(name)
        mean, stderr, low, high = interval(computed, clusters, bounds)
        out.append(
            ComponentSummary(
                name=name,
                weight=meta[name][0],
                gate=meta[name][1],
                range=bounds,
                n=len(computed),
                errors=counts[0],
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


def summarize(
    records: Sequence[EpisodeRecord],
    *,
    n_planned: int | None = None,
    comparability: Comparability | None = None,
) -> RunSummary:
    """Compute the summary statistics of a run's records.

    pass@k is reported for k = 1 and every power of two up to the smallest number of rewarded
    samples any task has (so each task contributes to every k reported).

    Args:
        records: The run's records (or any records to pool).
        n_planned: Episodes planned, reported as is.
        comparability: The run's configuration (``taskhub.comparability``): its reward ranges
            keep the intervals inside them.
    """
    outcomes: dict[str, int] = {o: 0 for o in OUTCOMES}
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        outcomes[record.outcome] += 1
        by_task[record.task_id].append(record)
    n = len(records)
    rewarded = [r for r in records if r.reward is not None]
    total_range, component_ranges = ranges_of(comparability)
    mean, stderr, low, high = interval(
        [r.reward for r in rewarded if r.reward is not None],
        [r.task_id for r in rewarded],
        total_range,
    )
    judged = [r for r in records if r.success is not None]
    successes = sum(1 for r in judged if r.success)
    s_low, s_high = success_interval(
        [1.0 if r.success else 0.0 for r in judged], [r.task_id for r in judged]
    )
    per_task = []
    task_counts: list[tuple[int, int]] = []
    for task_id in sorted(by_task):
        items = by_task[task_id]
        task_rewards = [r.reward for r in items if r.reward is not None]
        task_judged = [r for r in items if r.success is not None]
        task_successes = sum(1 for r in task_judged if r.success)
        per_task.append(
            TaskSummary(
                task_id=task_id,
                n=len(items),
                scored=sum(1 for r in items if r.outcome == "scored"),
                mean_reward=math.fsum(task_rewards) / len(task_rewards) if task_rewards else None,
                successes=task_successes,
                pass_rate=task_successes / len(task_judged) if task_judged else None,
            )
        )
        task_counts.append((len(task_judged), task_successes))
    passk: dict[str, float] = {}
    samples = {len(items) for items in by_task.values()}
    usable = [(nj, c) for nj, c in task_counts if nj > 0]
    if usable:
        max_k = min(nj for nj, _ in usable)
        k = 1
        while k <= max_k:
            passk[f"pass@{k}"] = math.fsum(pass_at_k(nj, c, k) for nj, c in usable) / len(usable)
            k *= 2
    steps = [r.num_steps for r in records if r.outcome != "infra_error"]
    return RunSummary(
        n_episodes=n,
        n_planned=n_planned,
        n_tasks=len(by_task),
        outcomes=outcomes,
        error_rates={o: outcomes[o] / n for o in OUTCOMES if o != "scored"} if n else {},
        n_rewarded=len(rewarded),
        mean_reward=mean,
        stderr=stderr,
        ci95=(low, high) if low is not None and high is not None else None,
        success_rate=successes / len(judged) if judged else None,
        success_ci95=(s_low, s_high) if s_low is not None and s_high is not None else None,
        pass_at_k=passk,
        samples_per_task=samples.pop() if len(samples) == 1 else None,
        mean_steps=math.fsum(steps) / len(steps) if steps else None,
        tokens={
            "prompt": sum(r.usage.prompt_tokens for r in records),
            "completion": sum(r.usage.completion_tokens for r in records),
            "calls": sum(r.usage.calls for r in records),
        },
        mean_duration_s=math.fsum(r.duration_s for r in records) / n if n else None,
        per_task=per_task,
        reward_range=total_range,
        interval="t" if total_range is None else "bounded",
        components=component_summaries(*_component_columns(records), ranges=component_ranges),
        model_cache=_cache_counts(records),
    )


def _cache_counts(records: Sequence[EpisodeRecord]) -> dict[str, int] | None:
    hits = sum(r.usage.cache_hits for r in records)
    misses = sum(r.usage.cache_misses for r in records)
    return {"hits": hits, "misses": misses} if hits or misses else None


def _component_columns(
    records: Sequence[EpisodeRecord],
) -> tuple[list[str], list[float | None], list[bool], list[str], list[float], list[bool]]:
    names: list[str] = []
    values: list[float | None] = []
    errored: list[bool] = []
    tasks: list[str] = []
    weights: list[float] = []
    gates: list[bool] = []
    for record in records:
        for c in record.reward_components:
            names.append(c.name)
            values.append(c.value)
            errored.append(c.error is not None)
            tasks.append(record.task_id)
            weights.append(c.weight)
            gates.append(c.gate)
    return names, values, errored, tasks, weights, gates


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


#: The group of tasks that lack the field.
MISSING_GROUP = "(none)"


def task_field(task: Task | Mapping[str, object], path: str) -> str:
    """The value of a task's field as a group label: ``metadata.family``, ``difficulty``...

    A dotted path into the task row; a path whose first part is not a task field is looked up
    under ``metadata``, then under ``reset`` (so ``family`` finds ``metadata.family`` or
    ``reset.family``). Values that are not text are given as JSON; a missing one is
    ``(none)``.
    """
    row = task.model_dump(mode="json") if isinstance(task, Task) else task
    parts = path.split(".")
    candidates = [parts] if parts[0] in row else [["metadata", *parts], ["reset", *parts]]
    for candidate in candidates:
        value: object = row
        for part in candidate:
            value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return MISSING_GROUP


def group_summaries(
    keys: Sequence[str],
    tasks: Sequence[str],
    rewards: Sequence[float | None],
    successes: Sequence[bool | None],
    *,
    reward_range: tuple[float, float] | None = None,
) -> list[GroupSummary]:
    """Summarize episodes by group, given as columns (one entry per episode).

    Each group gets the mean reward with its interval (clustered by task, bounded when the
    range is known) and the success rate with its interval, as the run summary computes them.

    Args:
        keys: Each episode's group.
        tasks: Each episode's task id.
        rewards: Each episode's total reward (None: not rewarded).
        successes: Each episode's success (None: not judged).
        reward_range: The total reward's range.

    Returns:
        One summary per group, sorted by group label (``(none)`` last).
    """
    groups: dict[str, tuple[set[str], list[float], list[str], list[float], list[str], list[int]]]
    groups = {}
    for key, task, reward_value, success in zip(keys, tasks, rewards, successes, strict=True):
        ids, values, value_tasks, judged, judged_tasks, count = groups.setdefault(
            key, (set(), [], [], [], [], [0])
        )
        ids.add(task)
        count[0] += 1
        if reward_value is not None:
            values.append(reward_value)
            value_tasks.append(task)
        if success is not None:
            judged.append(1.0 if success else 0.0)
            judged_tasks.append(task)
    out = []
    for key in sorted(groups, key=lambda k: (k == MISSING_GROUP, k)):
        ids, values, value_tasks, judged, judged_tasks, count = groups[key]
        mean, stderr, low, high = interval(values, value_tasks, reward_range)
        s_low, s_high = success_interval(judged, judged_tasks)
        out.append(
            GroupSummary(
                value=key,
                n_tasks=len(ids),
                n_episodes=count[0],
                n_rewarded=len(values),
                mean_reward=mean,
                stderr=stderr,
                ci95=(low, high) if low is not None and high is not None else None,
                success_rate=math.fsum(judged) / len(judged) if judged else None,
                success_ci95=(s_low, s_high) if s_low is not None and s_high is not None else None,
            )
        )
    return out


def summarize_groups(
    records: Sequence[EpisodeRecord],
    field: str,
    *,
    comparability: Comparability | None = None,
) -> list[GroupSummary]:
    """``group_summaries`` of a run's records by a task field (see ``task_field``)."""
    return group_summaries(
        [task_field(r.task, field) for r in records],
        [r.task_id for r in records],
        [r.reward for r in records],
        [r.success for r in records],
        reward_range=comparability.reward_range if comparability else None,
    )


def dumps_summary(summary: RunSummary) -> str:
    """Serialize a summary as indented JSON."""
    return json.dumps(summary.model_dump(mode="json"), indent=2)


def read_results_table(path: Path, *, validate: bool = False) -> pyarrow.Table:
    """Return the records of a results file or run directory as an Arrow table, in file order.

    The fast path for large runs: pyarrow's JSON reader parses the columns below straight from
    the file, a million records in seconds, where building an ``EpisodeRecord`` per line takes
    minutes. Lines are taken as ``read_results`` takes them (torn last line and blank lines
    skipped) and every column holds what ``read_results`` would give, defaults filled in.

    Columns: ``run_id``, ``episode_id``, ``task_id``, ``task_hash``, ``split``, ``sample``,
    ``seed``, ``outcome``, ``reward``, ``success``, ``env_reward``, ``error_type``,
    ``error_message``, ``attempts``, ``terminated``, ``truncated``, ``num_steps``,
    ``prompt_tokens``, ``completion_tokens``, ``model_calls``, ``duration_s``, ``env_time_s``,
    ``model_time_s``, ``reward_components`` (list of ``name``, ``value``, ``weight``, ``gate``,
    ``error``) and ``record_json``: the record's line as stored, without its line break.

    The fast path checks that the file is UTF-8 JSON, one object per line, and the types and
    presence of the fields it returns; a file that fails any of that goes through
    ``read_results`` instead, which raises its usual error. It does not check what it does not
    return (unknown keys, the steps, messages and task row): pass ``validate=True`` to validate
    every line as an ``EpisodeRecord``, exactly as ``read_results`` does (and as slowly).

    Args:
        path: An ``episodes.jsonl`` file or a run directory.
        validate: Validate every record in full.

    Returns:
        A ``pyarrow.Table``, one row per record; empty when the file does not exist.

    Raises:
        ResultsError: A complete line is not a valid record (its number is named).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    path = Path(path)
    if path.is_dir():
        path = path / EPISODES
    component = pa.struct(
        [
            ("name", pa.string()),
            ("value", pa.float64()),
            ("weight", pa.float64()),
            ("gate", pa.bool_()),
            ("error", pa.string()),
        ]
    )
    columns: list[tuple[str, pyarrow.DataType, object]] = [
        # (column, type, default filled in when the field is absent)
        ("run_id", pa.string(), None),
        ("episode_id", pa.string(), None),
        ("task_id", pa.string(), None),
        ("task_hash", pa.string(), None),
        ("split", pa.string(), None),
        ("sample", pa.int64(), None),
        ("seed", pa.int64(), None),
        ("outcome", pa.string(), None),
        ("reward", pa.float64(), None),
        ("success", pa.bool_(), None),
        ("env_reward", pa.float64(), None),
        ("error_type", pa.string(), None),
        ("error_message", pa.string(), None),
        ("attempts", pa.int64(), 1),
        ("terminated", pa.bool_(), False),
        ("truncated", pa.bool_(), False),
        ("num_steps", pa.int64(), 0),
        ("prompt_tokens", pa.int64(), 0),
        ("completion_tokens", pa.int64(), 0),
        ("model_calls", pa.int64(), 0),
        ("duration_s", pa.float64(), None),
        ("env_time_s", pa.float64(), 0.0),
        ("model_time_s", pa.float64(), 0.0),
        ("reward_components", pa.list_(component), None),
        ("record_json", pa.large_string(), None),
    ]
    schema = pa.schema([(name, kind) for name, kind, _ in columns])
    if not path.is_file() or path.stat().st_size == 0:
        return schema.empty_table()

    # Columns that are top-level fields of a record, copied as they are.
    direct = {name for name, _, _ in columns if name in EpisodeRecord.model_fields} - {
        "reward_components"
    }

    def validated() -> pyarrow.Table:
        records = read_results(path)  # raises exactly what read_results raises
        lines = []
        with path.open("rb") as f:
            for line in f:
                if line.endswith(b"\n") and line.strip():
                    lines.append(line.rstrip(b" \t\r\n").decode("utf-8"))
        rows = [
            {
                **record.model_dump(include=direct),
                "error_type": record.error.type if record.error else None,
                "error_message": record.error.message if record.error else None,
                "prompt_tokens": record.usage.prompt_tokens,
                "completion_tokens": record.usage.completion_tokens,
                "model_calls": record.usage.calls,
                "reward_components": [
                    c.model_dump(include={"name", "value", "weight", "gate", "error"})
                    for c in record.reward_components
                ],
                "record_json": line,
            }
            for record, line in zip(records, lines, strict=True)
        ]
        return pa.Table.from_pylist(rows, schema=schema)

    if validate:
        return validated()
    buffer = pa.memory_map(str(path)).read_buffer()
    view = np.frombuffer(buffer, dtype=np.uint8)
    # Line ends, found in slices so that no file-sized temporary is allocated.
    step = 1 << 26
    newlines = np.concatenate(
        [np.flatnonzero(view[i : i + step] == 10) + i for i in range(0, len(view), step)]
    )
    if len(newlines) == 0:
        return schema.empty_table()
    complete = buffer.slice(0, int(newlines[-1]) + 1)  # a torn last line is dropped
    offsets = np.concatenate([[0], newlines + 1]).astype(np.int64)
    lines = pa.LargeStringArray.from_buffers(len(newlines), pa.py_buffer(offsets), complete)
    try:
        lines.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return validated()
    lines = pc.utf8_rtrim(lines, characters=" \t\r\n")
    lengths = pc.binary_length(lines)
    if pc.min(lengths).as_py() == 0:
        lines = lines.filter(pc.greater(lengths, 0))
    longest = int(np.diff(offsets).max())
    parse = pa.schema(
        [
            ("run_id", pa.string()),
            ("episode_id", pa.string()),
            ("task_id", pa.string()),
            ("task_hash", pa.string()),
            ("split", pa.string()),
            ("sample", pa.int64()),
            ("seed", pa.int64()),
            ("outcome", pa.string()),
            ("reward", pa.float64()),
            ("success", pa.bool_()),
            ("env_reward", pa.float64()),
            ("error", pa.struct([("type", pa.string()), ("message", pa.string())])),
            ("attempts", pa.int64()),
            ("terminated", pa.bool_()),
            ("truncated", pa.bool_()),
            ("num_steps", pa.int64()),
            (
                "usage",
                pa.struct(
                    [
                        ("prompt_tokens", pa.int64()),
                        ("completion_tokens", pa.int64()),
                        ("calls", pa.int64()),
                    ]
                ),
            ),
            ("duration_s", pa.float64()),
            ("env_time_s", pa.float64()),
            ("model_time_s", pa.float64()),
            ("reward_components", pa.list_(component)),
            # Parsed only to check that these required fields are present.
            ("started_at", pa.string()),
            ("task", pa.struct([("task_id", pa.string())])),
        ]
    )
    try:
        parsed = pj.read_json(
            pa.BufferReader(complete),
            read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * longest)),
            parse_options=pj.ParseOptions(
                explicit_schema=parse, unexpected_field_behavior="ignore"
            ),
        ).combine_chunks()
    except pa.ArrowInvalid:
        return validated()
    required = (
        "run_id", "episode_id", "task_id", "task_hash", "split", "sample", "outcome",
        "duration_s", "started_at", "task",
    )  # fmt: skip
    if (
        parsed.num_rows != len(lines)
        or any(parsed[name].null_count for name in required)
        or not pc.all(pc.is_in(parsed["outcome"], pa.array(OUTCOMES))).as_py()
    ):
        return validated()
    error = parsed["error"].chunk(0) if parsed.num_rows else pa.array([], parse.field("error").type)
    usage = parsed["usage"].chunk(0) if parsed.num_rows else pa.array([], parse.field("usage").type)
    derived = {
        "error_type": pc.struct_field(error, "type"),
        "error_message": pc.struct_field(error, "message"),
        "prompt_tokens": pc.struct_field(usage, "prompt_tokens"),
        "completion_tokens": pc.struct_field(usage, "completion_tokens"),
        "model_calls": pc.struct_field(usage, "calls"),
        "record_json": lines,
    }
    arrays = []
    for name, kind, default in columns:
        array = derived[name] if name in derived else parsed[name]
        if default is not None:
            array = pc.fill_null(array, pa.scalar(default, kind))
        arrays.append(array)
    components = pc.fill_null(parsed["reward_components"], pa.scalar([], pa.list_(component)))
    if isinstance(components, pa.ChunkedArray):
        components = components.combine_chunks()
    values = components.flatten()  # relative to the array's first offset, as made relative below
    filled = pa.StructArray.from_arrays(
        [
            values.field("name"),
            values.field("value"),
            pc.fill_null(values.field("weight"), 1.0),
            pc.fill_null(values.field("gate"), False),
            values.field("error"),
        ],
        fields=list(component),
    )
    offsets = components.offsets
    arrays[schema.get_field_index("reward_components")] = pa.ListArray.from_arrays(
        pc.subtract(offsets, offsets[0]), filled
    )
    return pa.Table.from_arrays(arrays, schema=schema)
