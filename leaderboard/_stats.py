"""Statistics of a group of episodes, vectorized, with the core's definitions and estimators.

``summarize_table`` computes what ``taskhub.summarize`` computes (same denominators, same
``mean_ci``, ``success_interval`` and ``pass_at_k``) from the columns of
``taskhub.read_results_table``, so that a million records need no ``EpisodeRecord`` each. The
site and ``taskhub results show`` therefore print the same numbers for the same run;
tests/leaderboard/test_stats.py holds them to it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from taskhub import (
    OUTCOMES,
    Comparability,
    RunSummary,
    bounded_mean_ci,
    component_summaries,
    mean_ci,
    paired_difference,
    pass_at_k,
    success_interval,
)

#: Columns of ``read_results_table`` the statistics read.
STAT_COLUMNS = (
    "task_id",
    "sample",
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
    "env_time_s",
    "model_time_s",
    "queue_time_s",
    "reward_components",
)


@dataclass(frozen=True)
class Stats:
    """The numbers of one group of episodes (a run, or a cell pooling runs)."""

    summary: RunSummary
    """What ``taskhub.summarize`` gives (its ``per_task`` left empty: see ``per_task``)."""
    per_task: pd.DataFrame
    """One row per task, sorted by id: ``task_id``, ``n``, ``scored``, ``rewarded``,
    ``mean_reward``, ``judged``, ``successes``, ``pass_rate``."""
    components: list[dict[str, Any]]
    """Per reward component: ``name``, ``weight``, ``gate``, ``range``, ``n`` (computed values),
    ``errors``, ``mean``, ``stderr``, ``ci95`` (as in ``RunSummary.components``)."""
    env_requests: int
    """Requests to the env (a reset and every step) of episodes that were not infra errors."""
    env_time_s: float
    """Seconds those requests took."""


def summarize_table(
    table: pa.Table,
    *,
    n_planned: int | None = None,
    comparability: Comparability | None = None,
) -> Stats:
    """Compute the statistics of the episodes in ``table``.

    Args:
        table: Rows of ``taskhub.read_results_table`` (at least ``STAT_COLUMNS``), from one run or
            several runs pooled (their samples of a task add up for pass@k).
        n_planned: Episodes planned, reported as is.
        comparability: The runs' configuration: its reward ranges bound the intervals.

    Returns:
        The statistics.
    """
    n = table.num_rows
    outcome = table["outcome"].to_numpy(zero_copy_only=False).astype(str)
    outcomes: dict[str, int] = {o: int((outcome == o).sum()) for o in OUTCOMES}
    task_ids = table["task_id"].to_numpy(zero_copy_only=False)
    # the intervals' clusters by code, as taskhub.summarize passes them (grouped at C speed)
    codes = pc.dictionary_encode(table["task_id"].combine_chunks()).indices.to_numpy()
    has_reward = _valid(table["reward"])
    reward = pc.fill_null(table["reward"], 0.0).to_numpy()
    rewarded = reward[has_reward].tolist()
    total_range = comparability.reward_range if comparability else None
    ranges = {r.spec: r.range for r in comparability.rewards} if comparability else {}
    if total_range is not None:
        mean, stderr, low, high = bounded_mean_ci(
            rewarded, codes[has_reward].tolist(), *total_range
        )
    else:
        mean, stderr, low, high = mean_ci(rewarded, codes[has_reward].tolist())
    judged = _valid(table["success"])
    success = pc.fill_null(table["success"], False).to_numpy(zero_copy_only=False)
    successes = int(success.sum())
    s_low, s_high = success_interval(success[judged].astype(float).tolist(), codes[judged].tolist())

    frame = pd.DataFrame(
        {
            "task_id": task_ids,
            "scored": outcome == "scored",
            "rewarded": has_reward,
            "reward": np.where(has_reward, reward, 0.0),
            "judged": judged,
            "successes": success,
        }
    )
    grouped = frame.groupby("task_id", sort=True)
    per_task = grouped.agg(
        n=("scored", "size"),
        scored=("scored", "sum"),
        rewarded=("rewarded", "sum"),
        reward_sum=("reward", "sum"),
        judged=("judged", "sum"),
        successes=("successes", "sum"),
    ).reset_index()
    per_task["mean_reward"] = (per_task["reward_sum"] / per_task["rewarded"]).where(
        per_task["rewarded"] > 0
    )
    per_task["pass_rate"] = (per_task["successes"] / per_task["judged"]).where(
        per_task["judged"] > 0
    )
    per_task = per_task[
        ["task_id", "n", "scored", "rewarded", "mean_reward", "judged", "successes", "pass_rate"]
    ]

    passk: dict[str, float] = {}
    usable = per_task[per_task["judged"] > 0]
    if len(usable):
        # pass@k depends on a task's (samples, successes) only: compute it once per distinct
        # pair and sum with math.fsum over the repeated values, as summarize does per task.
        pairs = usable.groupby(["judged", "successes"]).size()
        max_k = int(usable["judged"].min())
        k = 1
        while k <= max_k:
            values = itertools.chain.from_iterable(
                itertools.repeat(pass_at_k(int(nj), int(c), k), int(count))
                for (nj, c), count in zip(pairs.index.tolist(), pairs.tolist(), strict=True)
            )
            passk[f"pass@{k}"] = math.fsum(values) / len(usable)
            k *= 2
    sizes = set(per_task["n"].tolist())
    not_infra = outcome != "infra_error"
    steps = table["num_steps"].to_numpy()
    env_time = table["env_time_s"].to_numpy()
    model_time = math.fsum(table["model_time_s"].to_numpy().tolist())
    completion = int(pc.sum(table["completion_tokens"]).as_py() or 0)
    summary = RunSummary(
        n_episodes=n,
        n_planned=n_planned,
        n_tasks=len(per_task),
        outcomes=outcomes,
        error_rates={o: outcomes[o] / n for o in OUTCOMES if o != "scored"} if n else {},
        n_rewarded=len(rewarded),
        mean_reward=mean,
        stderr=stderr,
        ci95=(low, high) if low is not None and high is not None else None,
        success_rate=successes / int(judged.sum()) if judged.any() else None,
        success_ci95=(s_low, s_high) if s_low is not None and s_high is not None else None,
        pass_at_k=passk,
        samples_per_task=sizes.pop() if len(sizes) == 1 else None,
        mean_steps=(
            math.fsum(steps[not_infra].tolist()) / int(not_infra.sum()) if not_infra.any() else None
        ),
        tokens={
            "prompt": int(pc.sum(table["prompt_tokens"]).as_py() or 0),
            "completion": int(pc.sum(table["completion_tokens"]).as_py() or 0),
            "calls": int(pc.sum(table["model_calls"]).as_py() or 0),
        },
        mean_duration_s=math.fsum(table["duration_s"].to_numpy().tolist()) / n if n else None,
        model_time_s=model_time,
        queue_time_s=math.fsum(table["queue_time_s"].to_numpy().tolist()),
        tokens_per_s=completion / model_time if completion and model_time > 0 else None,
        reward_range=total_range,
        interval="t" if total_range is None else "bounded",
        components=_components(table, task_ids, ranges),
        model_cache=_cache(table),
    )
    return Stats(
        summary=summary,
        per_task=per_task,
        components=[c.model_dump(mode="json") for c in summary.components],
        env_requests=int((steps[not_infra] + 1).sum()),
        env_time_s=math.fsum(env_time[not_infra].tolist()),
    )


def _cache(table: pa.Table) -> dict[str, int] | None:
    hits = int(pc.sum(table["cache_hits"]).as_py() or 0)
    misses = int(pc.sum(table["cache_misses"]).as_py() or 0)
    return {"hits": hits, "misses": misses} if hits or misses else None


def _valid(column: pa.ChunkedArray | pa.Array) -> np.ndarray[Any, np.dtype[np.bool_]]:
    result: np.ndarray[Any, np.dtype[np.bool_]] = column.is_valid().to_numpy(zero_copy_only=False)
    return result


def _components(
    table: pa.Table,
    task_ids: np.ndarray[Any, Any],
    ranges: dict[str, tuple[float, float] | None],
) -> list[Any]:
    column = table["reward_components"]
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    values = pc.list_flatten(column)
    if len(values) == 0:
        return []
    rows = pc.list_parent_indices(column).to_numpy()
    names = pc.dictionary_encode(pc.struct_field(values, "name"))
    labels = np.asarray(names.dictionary.to_pylist() + [None], dtype=object)
    codes = pc.fill_null(names.indices, len(names.dictionary)).to_numpy()
    return component_summaries(
        labels[codes].tolist(),
        python_values(pc.struct_field(values, "value")),
        python_values(pc.struct_field(values, "error").is_valid()),
        task_ids[rows].tolist(),
        python_values(pc.struct_field(values, "weight")),
        python_values(pc.struct_field(values, "gate")),
        ranges=ranges,
    )


def python_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A numeric or boolean column as ``to_pylist`` gives it, through numpy (much faster).

    Nulls are None; every other value is the Python number or bool of the same value.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count == 0:
        values: list[Any] = column.to_numpy(zero_copy_only=False).tolist()
        return values
    filled = pc.fill_null(
        column, pa.scalar(False if pa.types.is_boolean(column.type) else 0, column.type)
    )
    values = filled.to_numpy(zero_copy_only=False).tolist()
    for at in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
        values[at] = None
    return values


def rank_with_ties(intervals: list[tuple[float | None, float | None, float | None]]) -> list[int]:
    """Rank entries by mean, counting only the entries that are better beyond doubt.

    An entry's rank is 1 plus the number of entries whose 95% interval lies entirely above its
    own: entries whose intervals overlap share a rank. An entry without an interval (one
    episode) is tied with every entry with a mean; one without a mean ranks after all of them.

    Args:
        intervals: ``(mean, ci_low, ci_high)`` per entry.

    Returns:
        The rank of each entry, in the order given (0 for an entry without a mean).
    """
    ranks = []
    for mean, _low, high in intervals:
        if mean is None:
            ranks.append(0)
            continue
        top = math.inf if high is None else high
        better = sum(1 for m, lo, _ in intervals if m is not None and lo is not None and lo > top)
        ranks.append(1 + better)
    return ranks


def overlaps(a: tuple[float | None, float | None], b: tuple[float | None, float | None]) -> bool:
    """Whether two 95% intervals overlap (a missing interval overlaps everything)."""
    (a_low, a_high), (b_low, b_high) = a, b
    if None in (a_low, a_high, b_low, b_high):
        return True
    assert a_low is not None and a_high is not None and b_low is not None and b_high is not None
    return a_low <= b_high and b_low <= a_high


@dataclass(frozen=True)
class Pair:
    """A paired comparison of two cells of one column: ``difference`` is ``first - second``."""

    first: int
    second: int
    difference: float | None
    ci95: tuple[float, float] | None
    tasks: int
    """Tasks both ran (paired when at least two)."""

    @property
    def paired(self) -> bool:
        """Whether the comparison is paired (else it compares the two intervals)."""
        return self.tasks >= 2 and self.ci95 is not None


def task_means(per_task: pd.DataFrame) -> dict[str, float]:
    """Task id -> mean reward of a ``Stats.per_task`` frame (tasks without a reward left out)."""
    known = per_task[per_task["rewarded"] > 0]
    return dict(
        zip(known["task_id"].tolist(), known["mean_reward"].astype(float).tolist(), strict=True)
    )


def rank_paired(
    means: list[dict[str, float]],
    intervals: list[tuple[float | None, float | None, float | None]],
) -> tuple[list[int], list[list[int]], list[Pair]]:
    """Rank entries that share tasks by paired differences, the others by their intervals.

    For two entries that both ran at least two of the same tasks, one is better beyond doubt
    when the 95% interval of the paired difference of per-task mean reward (``taskhub``'s
    ``paired_difference``: a t interval over the shared tasks) lies entirely above 0. Entries
    that share fewer tasks fall back to ``rank_with_ties``' rule (one interval entirely above
    the other). An entry's rank is 1 plus the number of entries better than it beyond doubt;
    it is tied with every entry neither better nor worse beyond doubt.

    Args:
        means: Per entry, its per-task mean rewards (``task_means``).
        intervals: Per entry, ``(mean, ci_low, ci_high)`` of its mean reward.

    Returns:
        The ranks (0 for an entry without a mean), each entry's tied entries (indices), and
        every pairwise comparison (first < second).
    """
    count = len(means)
    better = [[False] * count for _ in range(count)]  # better[i][j]: i beats j
    pairs: list[Pair] = []
    for i in range(count):
        for j in range(i + 1, count):
            if intervals[i][0] is None or intervals[j][0] is None:
                continue
            diff, _, low, high, shared = paired_difference(means[j], means[i])
            ci = (low, high) if low is not None and high is not None else None
            pair = Pair(i, j, diff, ci, shared)
            pairs.append(pair)
            if pair.paired:
                assert ci is not None
                better[i][j] = ci[0] > 0
                better[j][i] = ci[1] < 0
            else:
                (_, low_i, high_i), (_, low_j, high_j) = intervals[i], intervals[j]
                better[i][j] = low_i is not None and high_j is not None and low_i > high_j
                better[j][i] = low_j is not None and high_i is not None and low_j > high_i
    ranks: list[int] = []
    tied: list[list[int]] = []
    for i in range(count):
        if intervals[i][0] is None:
            ranks.append(0)
            tied.append([])
            continue
        ranks.append(1 + sum(1 for j in range(count) if better[j][i]))
        tied.append(
            [
                j
                for j in range(count)
                if j != i and intervals[j][0] is not None and not better[i][j] and not better[j][i]
            ]
        )
    return ranks, tied, pairs
