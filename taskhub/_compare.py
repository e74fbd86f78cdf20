"""Paired comparison of two runs on the same taskset: per task, and with paired statistics.

Two checkpoints evaluated on the same tasks are compared task by task, which is far sharper
than comparing their two intervals: what varies between tasks (some are hard for everyone)
cancels out. ``compare_runs`` refuses runs whose scores do not compare (another taskset commit
or split, other rewards, env or step limit: see ``taskhub.comparability``); different models
and sampling parameters are what one compares, and are reported.

Everything is computed from columns (task ids, samples, rewards, successes), so the same code
serves a list of records and an Arrow table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from taskhub._comparability import comparability, describe_differences
from taskhub._errors import ResultsError
from taskhub._results import Run
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


def _per_task(
    tasks: Sequence[str], rewards: Sequence[float | None], successes: Sequence[bool | None]
) -> dict[str, tuple[list[float], list[bool]]]:
    out: dict[str, tuple[list[float], list[bool]]] = {}
    for task, reward_value, success in zip(tasks, rewards, successes, strict=True):
        values, judged = out.setdefault(task, ([], []))
        if reward_value is not None:
            values.append(reward_value)
        if success is not None:
            judged.append(success)
    return out


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def compare_columns(
    a: tuple[Sequence[str], Sequence[int], Sequence[float | None], Sequence[bool | None]],
    b: tuple[Sequence[str], Sequence[int], Sequence[float | None], Sequence[bool | None]],
) -> dict[str, object]:
    """The paired numbers of two runs given as columns.

    Args:
        a: Run A's ``(task ids, sample indices, total rewards, successes)``, one entry per
            episode (None: not rewarded, not judged).
        b: Run B's, the same way.

    Returns:
        The fields of ``RunComparison`` that are numbers: ``shared_tasks``, ``only_a``,
        ``only_b``, ``counts``, ``reward``, ``success``, ``mcnemar``, ``pass_at_k``, ``tasks``.
    """
    per_a = _per_task(a[0], a[2], a[3])
    per_b = _per_task(b[0], b[2], b[3])
    shared = sorted(set(per_a) & set(per_b))
    changes = []
    for task in shared:
        (values_a, judged_a), (values_b, judged_b) = per_a[task], per_b[task]
        rate_a = _mean([float(x) for x in judged_a])
        rate_b = _mean([float(x) for x in judged_b])
        mean_a, mean_b = _mean(values_a), _mean(values_b)
        left, right = (
            (rate_a, rate_b)
            if rate_a is not None and rate_b is not None
            else (
                mean_a,
                mean_b,
            )
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

    success_a = {(t, s): v for t, s, v in zip(a[0], a[1], a[3], strict=True) if v is not None}
    success_b = {(t, s): v for t, s, v in zip(b[0], b[1], b[3], strict=True) if v is not None}
    pairs = [(success_a[k], success_b[k]) for k in success_a if k in success_b]
    only_a = sum(1 for x, y in pairs if x and not y)
    only_b = sum(1 for x, y in pairs if y and not x)

    passk: dict[str, dict[str, float]] = {}
    counted = [
        (len(per_a[t][1]), sum(per_a[t][1]), len(per_b[t][1]), sum(per_b[t][1])) for t in shared
    ]
    counted = [c for c in counted if c[0] and c[2]]
    if counted:
        max_k = min(min(c[0], c[2]) for c in counted)
        k = 1
        while k <= max_k:
            left = math.fsum(pass_at_k(n, c, k) for n, c, _, _ in counted) / len(counted)
            right = math.fsum(pass_at_k(n, c, k) for _, _, n, c in counted) / len(counted)
            passk[f"pass@{k}"] = {"a": left, "b": right, "delta": right - left}
            k *= 2
    return {
        "shared_tasks": len(shared),
        "only_a": sorted(set(per_a) - set(per_b)),
        "only_b": sorted(set(per_b) - set(per_a)),
        "counts": {
            name: sum(1 for c in changes if c.change == name)
            for name in ("fixed", "regressed", "unchanged")
        },
        "reward": estimate("mean"),
        "success": estimate("pass_rate"),
        "mcnemar": McNemar(
            pairs=len(pairs), only_a=only_a, only_b=only_b, p_value=mcnemar_exact(only_a, only_b)
        ),
        "pass_at_k": passk,
        "tasks": changes,
    }


def compare_runs(a: Run, b: Run) -> RunComparison:
    """Compare run B against run A, task by task.

    Raises:
        ResultsError: The runs' scores do not compare: they ran another taskset commit or
            split, or scored with other rewards, env or step limit (the difference is named).
    """
    config_a, config_b = comparability(a.manifest), comparability(b.manifest)
    refused = describe_differences(config_a, config_b, sampling=False)
    if refused:
        raise ResultsError(
            f"runs {a.manifest.run_id} and {b.manifest.run_id} do not compare: "
            + "; ".join(refused)
            + ". Compare runs of one taskset commit and split, scored the same way (re-score "
            "one with `taskhub rescore RUN --reward ...` to match the other's rewards)."
        )

    def columns(
        run: Run,
    ) -> tuple[list[str], list[int], list[float | None], list[bool | None]]:
        return (
            [r.task_id for r in run.records],
            [r.sample for r in run.records],
            [r.reward for r in run.records],
            [r.success for r in run.records],
        )

    numbers = compare_columns(columns(a), columns(b))
    return RunComparison.model_validate(
        {
            "run_a": a.manifest.run_id,
            "run_b": b.manifest.run_id,
            "model_a": a.manifest.model.spec,
            "model_b": b.manifest.model.spec,
            "taskset": config_a.taskset,
            "split": config_a.split,
            "differences": describe_differences(config_a, config_b),
            **numbers,
        }
    )
