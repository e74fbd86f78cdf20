"""Re-scoring: new reward components over a stored run's trajectories, no episode re-run.

``rescore_async(source, rewards)`` reads a run directory, scores every stored episode with the
given reward specs exactly as the runner scores a finished episode, and writes a new run
directory whose ``run.json`` names the source in ``parent_run``. Each record keeps its
trajectory and gets new ``reward_components``, ``reward``, ``success`` and ``outcome``.

- Rewards that need the live env (``env``, anything registered ``stateful=True``) are refused
  before anything is read: the env is gone.
- ``infra_error`` episodes have no trajectory to score and are copied as they are.
- An episode stored as ``agent_error`` stays one (with its new reward); a stored
  ``reward_error`` is scored afresh as a ``scored`` episode.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import platform
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

from taskhub._comparability import build_comparability, reward_infos
from taskhub._errors import ConfigError, ResultsError
from taskhub._lock import RunLock
from taskhub._results import (
    EPISODES,
    SUMMARY_COLUMNS,
    ResultsWriter,
    iter_results,
    read_manifest,
    summarize,
    write_manifest,
)
from taskhub._results_table import read_results_table
from taskhub._rewards import BoundReward, RewardSet, score_episode
from taskhub._runner import Progress, RunResult, _now, new_run_id
from taskhub._schema import (
    EpisodeRecord,
    ErrorInfo,
    RunManifest,
    RunStatus,
    TasksetCard,
    TasksetRef,
)
from taskhub._taskset import read_card
from taskhub._version import __version__

logger = logging.getLogger(__name__)

#: Episodes scored at once by default (rewards that batch or use the process pool need several).
DEFAULT_CONCURRENCY = 32


def refuse_stateful(rewards: Sequence[BoundReward]) -> None:
    """Refuse rewards that need the live env: a stored run cannot give them what they read.

    Raises:
        ConfigError: One of ``rewards`` is stateful (``env`` is).
    """
    for bound in rewards:
        if bound.stateful:
            raise ConfigError(
                f"reward {bound.spec.text!r} needs the live environment, and re-scoring only "
                "reads stored trajectories: run the episodes again with `taskhub eval`, or "
                "re-score with rewards that read the trajectory (exact, math_verify, "
                "judge:MODEL, python:MODULE:FN...)"
            )


async def rescore_record(
    record: EpisodeRecord,
    rewards: Sequence[BoundReward],
    *,
    success_threshold: float,
    run_id: str | None = None,
) -> EpisodeRecord:
    """Score one stored episode with ``rewards``, as the runner scores a finished episode.

    Args:
        record: The stored episode.
        rewards: The built rewards (``RewardSet.resolve``).
        success_threshold: Total reward at which the episode succeeds.
        run_id: Run id to give the new record (default: keep the stored one).

    Returns:
        A new record: same trajectory, new components, total, success and outcome.
    """
    update: dict[str, Any] = {} if run_id is None else {"run_id": run_id}
    if record.outcome == "infra_error":
        return record.model_copy(update=update)
    # What the runner had in hand before scoring: an agent error keeps its error, the rest
    # starts clean (a stored reward_error lost the agent error it may have had, if any).
    agent_error = record.outcome == "agent_error"
    base = record.model_copy(
        update={
            **update,
            "outcome": "agent_error" if agent_error else "scored",
            "error": record.error if agent_error else None,
            "reward": None,
            "success": None,
            "reward_components": [],
        }
    )
    components, total, reward_error = await score_episode(base, rewards)
    result: dict[str, Any] = {"reward_components": components, "reward": total}
    if reward_error is not None:
        result["outcome"] = "reward_error"
        result["error"] = ErrorInfo(type="RewardError", message=reward_error, boundary="reward")
    elif total is not None:
        result["success"] = total >= success_threshold
    return base.model_copy(update=result)


def _report(
    queue: asyncio.Queue[tuple[int, asyncio.Task[EpisodeRecord]]],
    index: int,
    task: asyncio.Task[EpisodeRecord],
) -> None:
    queue.put_nowait((index, task))


async def rescore_records(
    records: Iterable[EpisodeRecord],
    rewards: Sequence[BoundReward],
    *,
    success_threshold: float,
    run_id: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> AsyncIterator[EpisodeRecord]:
    """Re-score ``records``, ``concurrency`` at a time, yielding the new records in input order.

    Raises:
        ConfigError: A reward is stateful (see ``refuse_stateful``).
    """
    refuse_stateful(rewards)
    limit = max(1, concurrency)
    pending = iter(enumerate(records))
    finished: asyncio.Queue[tuple[int, asyncio.Task[EpisodeRecord]]] = asyncio.Queue()
    running: set[asyncio.Task[EpisodeRecord]] = set()
    # Episodes finish out of order; they wait here for the ones before them (bounded, so that
    # one slow episode does not hold everything scored after it in memory).
    ready: dict[int, EpisodeRecord] = {}
    next_out = 0
    try:
        while True:
            while len(running) < limit and len(ready) < limit * 16:
                item = next(pending, None)
                if item is None:
                    break
                index, record = item
                task = asyncio.ensure_future(
                    rescore_record(
                        record, rewards, success_threshold=success_threshold, run_id=run_id
                    )
                )
                task.add_done_callback(functools.partial(_report, finished, index))
                running.add(task)
            if not running:
                break
            index, task = await finished.get()
            running.discard(task)
            ready[index] = task.result()
            while next_out in ready:
                yield ready.pop(next_out)
                next_out += 1
    finally:
        for task in running:
            task.cancel()


def _card_threshold(ref: TasksetRef) -> float:
    """The success threshold of the taskset's card, read from where the run loaded it."""
    if ref.path and Path(ref.path).is_dir():
        return read_card(Path(ref.path))[1].success_threshold
    default = TasksetCard().success_threshold
    if ref.kind != "file":  # a single data file has no card: the default is right
        logger.warning(
            "the card of taskset %r is not at %s any more: success threshold %g (the default)",
            ref.source,
            ref.path,
            default,
        )
    return default


async def rescore_async(
    source: Path | str,
    rewards: Sequence[str],
    *,
    output_dir: Path | str | None = None,
    run_dir: Path | str | None = None,
    success_threshold: float | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Progress | None = None,
    argv: list[str] | None = None,
) -> RunResult:
    """Re-score a stored run with new rewards; write the result as a new run directory.

    Args:
        source: The run directory to re-score (it is only read).
        rewards: Reward specs, as for ``taskhub eval --reward``.
        output_dir: Parent of the new run directory (default: the source's parent).
        run_dir: Exact new run directory instead (must not hold a run yet).
        success_threshold: Success threshold (default: the source run's, else its card's).
        concurrency: Episodes scored at once.
        progress: Receives progress updates.
        argv: The command line, recorded in ``run.json``.

    Returns:
        The new run directory, its manifest (``parent_run`` = the source's run id) and summary.

    Raises:
        ResultsError: ``source`` is not a run directory, or the target already holds a run.
        ConfigError: A spec does not parse, names no reward, or names a stateful reward.
    """
    source = Path(source)
    parent = read_manifest(source)
    if not rewards:
        raise ConfigError("re-scoring needs at least one reward spec (--reward SPEC)")
    reward_set = RewardSet()
    bound = reward_set.resolve(list(rewards))
    refuse_stateful(bound)
    if success_threshold is None:
        success_threshold = parent.success_threshold
    if success_threshold is None:
        success_threshold = parent.config.success_threshold
    if success_threshold is None:
        success_threshold = _card_threshold(parent.taskset)
    # Records are read one at a time as they are scored: a run of any size fits in memory.
    total = read_results_table(source, columns=["sample"]).num_rows
    if parent.status != "completed":
        logger.warning(
            "%s is %s: re-scoring the %d episodes it holds", source, parent.status, total
        )
    run_id = new_run_id(parent.config, parent.taskset.name)
    target = Path(run_dir) if run_dir is not None else Path(output_dir or source.parent) / run_id
    if (target / "run.json").exists():
        raise ResultsError(f"{target} already holds a run; choose another --run-dir")
    started = _now()

    def manifest(status: RunStatus) -> RunManifest:
        now = _now()
        config = parent.config.model_copy(
            update={"rewards": [s.strip() for s in rewards], "success_threshold": success_threshold}
        )
        derived = parent.model_copy(
            update={
                "run_id": run_id,
                "taskhub_version": __version__,
                "status": status,
                "created_at": started,
                "updated_at": now,
                "finished_at": now if status == "completed" else None,
                "config": config,
                "rewards": reward_set.plugins(),
                "n_planned": total,
                "host": {
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "machine": platform.machine(),
                },
                "argv": argv,
                "sessions": [started],
                "parent_run": parent.run_id,
                "success_threshold": success_threshold,
            }
        )
        infos, reward_range = reward_infos([bound])
        derived.comparability = build_comparability(derived, infos, reward_range)
        return derived

    lock = RunLock(target).acquire()  # one writer per run directory
    if (target / "run.json").exists():
        lock.release()
        raise ResultsError(f"{target} already holds a run; choose another --run-dir")
    write_manifest(target, manifest("running"))
    if progress:
        progress.start(total, 0)
    status: RunStatus = "failed"
    try:
        with ResultsWriter(target / EPISODES) as writer:
            async for record in rescore_records(
                iter_results(source),
                bound,
                success_threshold=success_threshold,
                run_id=run_id,
                concurrency=concurrency,
            ):
                writer.write(record)
                if progress:
                    progress.update(record)
        status = "completed"
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "interrupted"
        raise
    finally:
        try:
            if progress:
                progress.complete()
            write_manifest(target, manifest(status))
        finally:
            lock.release()
    final = read_manifest(target)
    table = read_results_table(target, columns=SUMMARY_COLUMNS)
    summary = summarize(table, n_planned=total, comparability=final.comparability)
    return RunResult(target, final, summary)


def rescore(source: Path | str, rewards: Sequence[str], **kwargs: Any) -> RunResult:
    """Run ``rescore_async`` to completion."""
    return asyncio.run(rescore_async(source, rewards, **kwargs))
