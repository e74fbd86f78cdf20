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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskhub._errors import ResultsError
from taskhub._schema import OUTCOMES, EpisodeRecord, RunManifest
from taskhub._stats import mean_ci, pass_at_k, wilson_interval

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


class RunSummary(BaseModel):
    """What a run measured, with the denominators that make the numbers honest.

    ``mean_reward`` averages every episode that has a reward: scored episodes and agent errors
    (a model that cannot produce an action earns what the env gave it, usually 0). Infra and
    reward errors are nobody's score: they are excluded and reported as rates.
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


def summarize(records: Sequence[EpisodeRecord], *, n_planned: int | None = None) -> RunSummary:
    """Compute the summary statistics of a run's records.

    pass@k is reported for k = 1 and every power of two up to the smallest number of rewarded
    samples any task has (so each task contributes to every k reported).
    """
    outcomes: dict[str, int] = {o: 0 for o in OUTCOMES}
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        outcomes[record.outcome] += 1
        by_task[record.task_id].append(record)
    n = len(records)
    rewarded = [r.reward for r in records if r.reward is not None]
    mean, stderr, low, high = mean_ci(rewarded)
    judged = [r for r in records if r.success is not None]
    successes = sum(1 for r in judged if r.success)
    s_low, s_high = wilson_interval(successes, len(judged))
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
    )


def dumps_summary(summary: RunSummary) -> str:
    """Serialize a summary as indented JSON."""
    return json.dumps(summary.model_dump(mode="json"), indent=2)
