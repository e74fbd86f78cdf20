"""Statistical checks (RFC 008 level 4, left to operators): a model plays every task G times.

One evaluation run (``taskhub.evaluate_async``, the same runner as ``taskhub eval``) gives per
task pass rates ``p``; the checks read them: some task is solvable (reachability), not every
task is solved (headroom), the mean reward is precise (variance bound), and groups of G samples
disagree often enough for GRPO to learn from them (``1 - p^G - (1-p)^G``).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from taskhub import EpisodeRecord, EvalConfig, SamplingParams, evaluate_async, mean_ci, read_results

from ._check import Finding, check, failed, passed
from ._json import JsonObject
from ._subject import Product, Subject

STAT_NEEDS = ("episode", "taskset", "model")


@dataclass
class StatisticalRun:
    """The model's evaluation over the taskset: its scored records and where they are."""

    records: list[EpisodeRecord]
    run_dir: str
    outcomes: dict[str, int] = field(default_factory=dict)


async def run_model(subject: Subject) -> StatisticalRun:
    """Run the model over the taskset against the env; keep the scored records."""
    config = subject.config
    manifest = subject.env.manifest
    timeout = manifest.episode_timeout_s if manifest else None
    eval_config = EvalConfig(
        model=config.model or "",
        taskset=subject.env.taskset_source or "",
        env=subject.driver.url,
        base_url=config.base_url,
        api_key=SecretStr(config.api_key.get_secret_value()) if config.api_key else None,
        split=config.split,
        limit=config.stat_tasks,
        samples=config.samples,
        sampling=SamplingParams(temperature=config.temperature),
        concurrency=min(4, config.sessions) if subject.driver.transport == "ws" else 1,
        step_timeout_s=config.op_timeout_s,
        episode_timeout_s=timeout or 300.0,
        max_retries=1,
    )
    folder = subject.driver.log_dir or Path(tempfile.mkdtemp(prefix="taskhub-validate-"))
    run_dir = folder / "statistical-run"
    async with asyncio.timeout(config.stat_timeout_s):
        result = await evaluate_async(eval_config, run_dir=run_dir)
    records = [r for r in read_results(result.run_dir) if r.outcome != "infra_error"]
    return StatisticalRun(records, str(result.run_dir), dict(result.summary.outcomes))


#: The statistical checks' one evaluation run.
STATISTICAL_RUN = Product("statistical_run", run_model)


async def statistical_run(subject: Subject) -> list[EpisodeRecord]:
    """The scored records of the statistical run (run once)."""
    return (await subject.get(STATISTICAL_RUN)).records


def per_task(records: list[EpisodeRecord]) -> dict[str, list[EpisodeRecord]]:
    """Records grouped by task id."""
    groups: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        groups.setdefault(record.task_id, []).append(record)
    return groups


def pass_rates(records: list[EpisodeRecord]) -> dict[str, float]:
    """Success rate of each task over its samples."""
    return {
        task: sum(bool(r.success) for r in group) / len(group)
        for task, group in per_task(records).items()
    }


def group_signal(p: float, group: int) -> float:
    """Probability that a GRPO group of ``group`` samples is not all-equal: 1 - p^G - (1-p)^G."""
    return 1.0 - p**group - (1.0 - p) ** group


def _base(subject: Subject, records: list[EpisodeRecord]) -> JsonObject:
    run = subject.peek(STATISTICAL_RUN)
    rates = pass_rates(records)
    overall = sum(bool(r.success) for r in records) / len(records) if records else 0.0
    return {
        "model": subject.config.model,
        "episodes": len(records),
        "tasks": len(rates),
        "samples": subject.config.samples,
        "pass_rate": round(overall, 4),
        "outcomes": run.outcomes if run else None,
        "run_dir": run.run_dir if run else None,
    }


def _no_records(subject: Subject) -> Finding:
    run = subject.peek(STATISTICAL_RUN)
    return failed(
        "no episode of the model's run was scored (every one was an infra error)",
        "Make the env serve the runner's episodes (see the run directory's records).",
        measured={"run_dir": run.run_dir if run else None},
    )


@check("statistical.reward_reachability", level="statistical", needs=STAT_NEEDS)
async def check_reward_reachability(subject: Subject) -> Finding:
    """The model reaches the success reward on some task (pass rate > 0)."""
    records = await statistical_run(subject)
    if not records:
        return _no_records(subject)
    measured = _base(subject, records)
    if measured["pass_rate"] == 0:
        return failed(
            f"{subject.config.model} never succeeded in {len(records)} episodes",
            "Check that success is reachable: the tasks may be too hard for the reference "
            "model, or the verifier may reject correct answers in the model's format.",
            measured=measured,
        )
    return passed(
        f"pass rate {measured['pass_rate']:.2f} over {len(records)} episodes", measured=measured
    )


@check("statistical.headroom", level="statistical", needs=STAT_NEEDS)
async def check_headroom(subject: Subject) -> Finding:
    """The model does not solve everything (pass rate < 1): there is something to learn."""
    records = await statistical_run(subject)
    if not records:
        return _no_records(subject)
    measured = _base(subject, records)
    if measured["pass_rate"] >= 1.0:
        return failed(
            f"{subject.config.model} solved all {len(records)} episodes: no headroom",
            "Add harder tasks (higher difficulty levels) so stronger models can improve.",
            measured=measured,
        )
    return passed(f"pass rate {measured['pass_rate']:.2f} leaves headroom", measured=measured)


@check("statistical.variance_bound", level="statistical", needs=STAT_NEEDS)
async def check_variance_bound(subject: Subject) -> Finding:
    """The mean reward is precise: its 95% confidence half-width is within the tolerance."""
    records = await statistical_run(subject)
    rewarded = [r for r in records if r.reward is not None]
    if not rewarded:
        return _no_records(subject)
    # G samples of a task are not independent draws: the interval is clustered by task
    mean, _, low, high = mean_ci(
        [r.reward for r in rewarded if r.reward is not None], [r.task_id for r in rewarded]
    )
    half = (high - low) / 2 if low is not None and high is not None else None
    groups = [[r.reward or 0.0 for r in g] for g in per_task(records).values()]
    within = [statistics.pvariance(g) for g in groups if len(g) > 1]
    means = [sum(g) / len(g) for g in groups]
    tolerance = subject.variance_tolerance
    measured: JsonObject = {
        **_base(subject, records),
        "mean_reward": mean,
        "ci95_half_width": half,
        "tolerance": tolerance,
        "within_task_variance": statistics.fmean(within) if within else None,
        "between_task_variance": statistics.pvariance(means) if len(means) > 1 else None,
    }
    if half is None or half > tolerance:
        return failed(
            f"the mean reward's 95% half-width is {half} (tolerance {tolerance:g})",
            "Evaluate more tasks or samples, or reduce reward noise (deterministic verifier, "
            "less random task generation).",
            measured=measured,
        )
    return passed(
        f"mean reward {mean:.3f} +/- {half:.3f} (tolerance {tolerance:g})", measured=measured
    )


@check("statistical.training_signal", level="statistical", needs=STAT_NEEDS)
async def check_training_signal(subject: Subject) -> Finding:
    """GRPO groups of G samples disagree often enough to learn from (1 - p^G - (1-p)^G)."""
    records = await statistical_run(subject)
    if not records:
        return _no_records(subject)
    group = subject.config.samples
    signals = {task: group_signal(p, group) for task, p in pass_rates(records).items()}
    mean = sum(signals.values()) / len(signals)
    useful = sum(s > 0 for s in signals.values())
    bound = subject.policy.bounds.min_training_signal
    per_task_rows: list[Any] = [
        {"task_id": task, "p": round(p, 4), "signal": round(signals[task], 4)}
        for task, p in sorted(pass_rates(records).items())
    ]
    measured: JsonObject = {
        **_base(subject, records),
        "group_size": group,
        "mean_signal": round(mean, 4),
        "tasks_with_signal": useful,
        "per_task": per_task_rows[:50],
    }
    if mean < bound:
        return failed(
            f"mean GRPO group signal {mean:.3f} < {bound:g}: {useful} of {len(signals)} tasks "
            "give a learning signal",
            "Tune task difficulty so the reference model solves each task sometimes, not "
            "never or always.",
            measured=measured,
        )
    return passed(
        f"mean GRPO group signal {mean:.3f}; {useful} of {len(signals)} tasks give "
        "a learning signal",
        measured=measured,
    )
