"""``reasoning_gym``: reasoning-gym's own ``score_answer`` for its task families.

A reasoning-gym entry is ``{"question", "answer", "metadata"}`` with the family in
``metadata["source_dataset"]``; a taskset row made from one keeps ``answer`` and ``metadata``, so
the entry is rebuilt from the row. A row for OpenEnv's reasoning-gym env names the family in its
reset kwargs instead (``reset.dataset_name``), where that env reads it. ``reasoning_gym:FAMILY``
names the family for rows that carry neither. Some families' scorers use sympy, so calls run in
the reward process pool.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from taskhub import ConfigError, EpisodeRecord, RewardError, RewardFn, Score, reward

from ._answer import final_answer, has_answer, task_prompt
from ._batch import PoolCalls
from ._deps import check_installed, require, version_of
from ._pool import shared_pool

_SCORERS: dict[str, Callable[[str | None, dict[str, Any]], float]] = {}


def score_reasoning_gym(family: str, answer: str, entry: dict[str, Any]) -> float:
    """Score ``answer`` with the family's ``score_answer`` (runs in a worker process)."""
    scorer = _SCORERS.get(family)
    if scorer is None:
        import reasoning_gym

        scorer = _SCORERS[family] = reasoning_gym.get_score_answer_fn(family)
    return float(scorer(answer, entry))


def _families() -> list[str]:
    factory = require(
        "reasoning_gym.factory", reward="reasoning_gym", package="reasoning-gym", extra="reasoning"
    )
    return sorted(factory.DATASETS)


@reward("reasoning_gym", spec_arg="family", range=(0.0, 1.0), version=version_of("reasoning-gym"))
def reasoning_gym_reward(*, family: str | None = None, timeout_s: float = 10.0) -> RewardFn:
    """reasoning-gym's score_answer for the row's family (source_dataset, dataset_name or ARG)."""
    check_installed(
        "reasoning_gym", reward="reasoning_gym", package="reasoning-gym", extra="reasoning"
    )
    if family is not None:
        known = _families()
        if family not in known:
            close = difflib.get_close_matches(family, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"reasoning_gym:{family}: reasoning-gym has no such family.{hint}")
    pool = shared_pool()
    pool.start()
    scorer = PoolCalls(pool, score_reasoning_gym, timeout_s=timeout_s, label="reasoning_gym")

    async def score(episode: EpisodeRecord) -> Score:
        task = episode.task
        name = family or task.metadata.get("source_dataset")
        if not isinstance(name, str):
            name = episode.reset_payload.get("dataset_name") or task.reset.get("dataset_name")
        if not isinstance(name, str):
            raise RewardError(
                f"task {task.task_id!r} names no reasoning-gym family: add "
                "metadata.source_dataset (or reset.dataset_name) to the row, or use "
                "reasoning_gym:FAMILY"
            )
        if task.answer is None:
            raise RewardError(f"task {task.task_id!r} has no reference answer for reasoning_gym")
        answer = final_answer(episode)
        if not has_answer(answer):
            return Score(0.0, {"answer": answer, "why": "no answer"})
        entry = {"question": task_prompt(episode), "answer": task.answer, "metadata": task.metadata}
        value = await scorer(name, answer, entry)
        return Score(value, {"family": name})

    return score
