"""Paired comparison of two runs on the same taskset: per task, and with paired statistics.

Two checkpoints evaluated on the same tasks are compared task by task, which is far sharper
than comparing their two intervals: what varies between tasks (some are hard for everyone)
cancels out. ``compare_runs`` refuses runs whose scores do not compare (another taskset commit
or split, other rewards, env or step limit: see ``taskhub.comparability``); different models
and sampling parameters are what one compares, and are reported.

Everything is computed from columns (task ids, samples, rewards, successes), so the same code
serves a list of records and the columns of a results table (a run of any size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from taskhub._comparability import comparability, describe_differences
from taskhub._errors import ResultsError
from taskhub._results import Run, read_manifest
from taskhub._results_table import read_results_table
from taskhub._schema import RunManifest

if TYPE_CHECKING:
    import pyarrow as pa
from taskhub._stats import mcnemar_exact, paired_difference, pass_at_k

Change = Literal["fixed", "regressed", "unchanged"]
_MODEL_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class TaskChange(BaseModel):
    """One task both runs ran: its numbers on each side and what changed."""

    model_config = _MODEL_CONFIG

    task_id: str
    """The task."""
    a_mean: float | None
    """Mean reward of run A's episodes of the task."""
    b_mean: float | None
    """Mean reward of run B's episodes of the task."""
    a_pass_rate: float | None
    """Share of run A's judged episodes of the task that succeeded."""
    b_pass_rate: float | None
    """Same for run B."""
    change: Change
    """``fixed``: B does better (pass rate, else mean reward); ``regressed``: worse."""


class PairedEstimate(BaseModel):
    """A paired difference ``B - A`` over the shared tasks, with its 95% interval."""

    model_config = _MODEL_CONFIG

    difference: float | None
    """Mean over tasks of the per-task difference of means."""
    stderr: float | None
    """Its standard error (tasks are the independent draws)."""
    ci95: tuple[float, float] | None
    """Student t interval with tasks - 1 degrees of freedom."""
    tasks: int
    """Tasks with a value on both sides."""


class McNemar(BaseModel):
    """McNemar's exact test on success, episodes paired by task and sample index."""

    model_config = _MODEL_CONFIG

    pairs: int
    """Episode pairs judged on both sides."""
    only_a: int
    """Pairs that succeeded in A only."""
    only_b: int
    """Pairs that succeeded in B only."""
    p_value: float
    """Two-sided exact p-value (1 when no pair is discordant)."""


class RunComparison(BaseModel):
    """``taskhub results compare RUN_A RUN_B``: what changed from A to B."""

    model_config = _MODEL_CONFIG

    run_a: str
    """Run id of A."""
    run_b: str
    """Run id of B."""
    model_a: str
    """Model of A."""
    model_b: str
    """Model of B."""
    taskset: str
    """The taskset identity both ran (``commit:<sha>`` or ``content:<fingerprint>``)."""
    split: str
    """The split both ran."""
    differences: list[str] = Field(default_factory=list)
    """Configuration that differs (sampling, format retries): reported, not refused."""
    shared_tasks: int
    """Tasks both runs ran."""
    only_a: list[str] = Field(default_factory=list)
    """Tasks only A ran (left out of every paired number)."""
    only_b: list[str] = Field(default_factory=list)
    """Tasks only B ran."""
    counts: dict[str, int] = Field(default_factory=dict)
    """Shared tasks per change: ``fixed``, ``regressed``, ``unchanged``."""
    reward: PairedEstimate
    """Paired difference of mean reward."""
    success: PairedEstimate
    """Paired difference of success rate (per-task pass rates)."""
    mcnemar: McNemar
    """McNemar's test on success."""
    pass_at_k: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Per k: ``a``, ``b`` and ``delta`` (B - A) of unbiased pass@k over the shared tasks."""
    tasks: list[TaskChange] = Field(default_factory=list)
    """Every shared task, regressions first, then fixes, then the unchanged, each by id."""


#: Columns of ``read_results_table`` a comparison reads.
COMPARE_COLUMNS = ("task_id", "sample", "reward", "success")
#: One run's columns: task ids, sample indices, total rewards, successes (sequences or Arrow).
Columns = tuple[Any, Any, Any, Any]


@dataclass(frozen=True)
class _Side:
    """One run's per-task numbers, from its columns."""

    table: pa.Table
    """Judged episodes: ``task_id``, ``sample``, ``success``."""
    means: dict[str, float | None]
    rates: dict[str, float | None]
    judged: dict[str, int]
    successes: dict[str, int]


def _arrow(values: Any, kind: pa.DataType) -> pa.Array:
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values.cast(kind)
    return pa.array(list(values), kind)


def _side(columns: Columns) -> _Side:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    tasks = _arrow(columns[0], pa.string())
    samples = _arrow(columns[1], pa.int64())
    rewards = _arrow(columns[2], pa.float64())
    successes = _arrow(columns[3], pa.bool_())
    if not len(tasks) == len(samples) == len(rewards) == len(successes):
        raise ValueError("a run's columns must have one length")
    encoded = pc.dictionary_encode(tasks)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    names: list[str] = encoded.dictionary.to_pylist()
    count = len(names)
    has_reward = rewards.is_valid().to_numpy(zero_copy_only=False)
    reward = pc.fill_null(rewards, 0.0).to_numpy(zero_copy_only=False)
    judged = successes.is_valid().to_numpy(zero_copy_only=False)
    success = pc.fill_null(successes, False).to_numpy(zero_copy_only=False)
    rewarded = np.bincount(codes, weights=has_reward, minlength=count)
    reward_sum = np.bincount(codes, weights=np.where(has_reward, reward, 0.0), minlength=count)
    task_judged = np.bincount(codes, weights=judged, minlength=count).astype(np.int64)
    task_successes = np.bincount(codes, weights=judged & success, minlength=count)
    task_successes = task_successes.astype(np.int64)
    return _Side(
        table=pa.table({"task_id": tasks, "sample": samples, "success": successes}).filter(
            pa.array(judged)
        ),
        means={
            name: float(reward_sum[i] / rewarded[i]) if rewarded[i] else None
            for i, name in enumerate(names)
        },
        rates={
            name: float(task_successes[i] / task_judged[i]) if task_judged[i] else None
            for i, name in enumerate(names)
        },
        judged=dict(zip(names, task_judged.tolist(), strict=True)),
        successes=dict(zip(names, task_successes.tolist(), strict=True)),
    )


def compare_columns(a: Columns, b: Columns) -> dict[str, object]:
    """The paired numbers of two runs given as columns.

    Args:
        a: Run A's ``(task ids, sample indices, total rewards, successes)``, one entry per
            episode (None: not rewarded, not judged): sequences, or Arrow arrays (the columns
            of a results table, so that a run of any size is compared without its records).
        b: Run B's, the same way.

    Returns:
        The fields of ``RunComparison`` that are numbers: ``shared_tasks``, ``only_a``,
        ``only_b``, ``counts``, ``reward``, ``success``, ``mcnemar``, ``pass_at_k``, ``tasks``.
    """
    import pyarrow.compute as pc

    side_a, side_b = _side(a), _side(b)
    shared = sorted(set(side_a.means) & set(side_b.means))
    changes = []
    for task in shared:
        rate_a, rate_b = side_a.rates[task], side_b.rates[task]
        mean_a, mean_b = side_a.means[task], side_b.means[task]
        left, right = (
            (rate_a, rate_b) if rate_a is not None and rate_b is not None else (mean_a, mean_b)
        )
        change: Change = "unchanged"
        if left is not None and right is not None and left != right:
            change = "fixed" if right > left else "regressed"
        changes.append(
            TaskChange(
                task_id=task,
                a_mean=mean_a,
                b_mean=mean_b,
                a_pass_rate=rate_a,
                b_pass_rate=rate_b,
                change=change,
            )
        )
    order = {"regressed": 0, "fixed": 1, "unchanged": 2}
    changes.sort(key=lambda c: (order[c.change], c.task_id))

    def estimate(field: str) -> PairedEstimate:
        values_a = {c.task_id: getattr(c, f"a_{field}") for c in changes}
        values_b = {c.task_id: getattr(c, f"b_{field}") for c in changes}
        diff, stderr, low, high, count = paired_difference(
            {k: v for k, v in values_a.items() if v is not None},
            {k: v for k, v in values_b.items() if v is not None},
        )
        ci = (low, high) if low is not None and high is not None else None
        return PairedEstimate(difference=diff, stderr=stderr, ci95=ci, tasks=count)

    # episodes paired by (task, sample), both judged
    pairs = side_a.table.join(
        side_b.table, keys=["task_id", "sample"], join_type="inner", right_suffix="_b"
    )
    left_success = pc.fill_null(pairs["success"], False).to_numpy(zero_copy_only=False)
    right_success = pc.fill_null(pairs["success_b"], False).to_numpy(zero_copy_only=False)
    only_a = int((left_success & ~right_success).sum())
    only_b = int((right_success & ~left_success).sum())

    passk: dict[str, dict[str, float]] = {}
    counted = [
        (side_a.judged[t], side_a.successes[t], side_b.judged[t], side_b.successes[t])
        for t in shared
    ]
    counted = [c for c in counted if c[0] and c[2]]
    if counted:
        max_k = min(min(c[0], c[2]) for c in counted)
        k = 1
        while k <= max_k:
            before = math.fsum(pass_at_k(n, c, k) for n, c, _, _ in counted) / len(counted)
            after = math.fsum(pass_at_k(n, c, k) for _, _, n, c in counted) / len(counted)
            passk[f"pass@{k}"] = {"a": before, "b": after, "delta": after - before}
            k *= 2
    return {
        "shared_tasks": len(shared),
        "only_a": sorted(set(side_a.means) - set(side_b.means)),
        "only_b": sorted(set(side_b.means) - set(side_a.means)),
        "counts": {
            name: sum(1 for c in changes if c.change == name)
            for name in ("fixed", "regressed", "unchanged")
        },
        "reward": estimate("mean"),
        "success": estimate("pass_rate"),
        "mcnemar": McNemar(
            pairs=pairs.num_rows,
            only_a=only_a,
            only_b=only_b,
            p_value=mcnemar_exact(only_a, only_b),
        ),
        "pass_at_k": passk,
        "tasks": changes,
    }


def _manifest(run: Run | Path | str) -> RunManifest:
    return run.manifest if isinstance(run, Run) else read_manifest(Path(run))


def _columns(run: Run | Path | str) -> Columns:
    if isinstance(run, Run):
        return (
            [r.task_id for r in run.records],
            [r.sample for r in run.records],
            [r.reward for r in run.records],
            [r.success for r in run.records],
        )
    table = read_results_table(Path(run), columns=COMPARE_COLUMNS)
    return table["task_id"], table["sample"], table["reward"], table["success"]


def compare_runs(a: Run | Path | str, b: Run | Path | str) -> RunComparison:
    """Compare run B against run A, task by task.

    Args:
        a: Run A: a run read with ``read_run``, or its directory (read as columns: a run of
            any size is compared without holding its records).
        b: Run B, the same way.

    Raises:
        ResultsError: The runs' scores do not compare: they ran another taskset commit or
            split, or scored with other rewards, env or step limit (the difference is named);
            or a directory is not a run.
    """
    manifest_a, manifest_b = _manifest(a), _manifest(b)
    config_a, config_b = comparability(manifest_a), comparability(manifest_b)
    refused = describe_differences(config_a, config_b, sampling=False)
    if refused:
        raise ResultsError(
            f"runs {manifest_a.run_id} and {manifest_b.run_id} do not compare: "
            + "; ".join(refused)
            + ". Compare runs of one taskset commit and split, scored the same way (re-score "
            "one with `taskhub rescore RUN --reward ...` to match the other's rewards)."
        )
    numbers = compare_columns(_columns(a), _columns(b))
    return RunComparison.model_validate(
        {
            "run_a": manifest_a.run_id,
            "run_b": manifest_b.run_id,
            "model_a": manifest_a.model.spec,
            "model_b": manifest_b.model.spec,
            "taskset": config_a.taskset,
            "split": config_a.split,
            "differences": describe_differences(config_a, config_b),
            **numbers,
        }
    )
