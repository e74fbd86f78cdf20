"""User reward code, as a training project would have it, for the python:/trl:/openenv: adapters."""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

from openenv.core.rubrics import Rubric, TrajectoryRubric

# --- python: per sample -----------------------------------------------------------------------


def length_penalty(completion: str | None, answer: Any) -> float:
    """1 for an answer as short as the reference, less for longer ones."""
    if not completion:
        return 0.0
    return min(1.0, len(str(answer)) / len(completion))


async def async_exact(completion: str | None, task: Any, episode: Any) -> bool:
    await asyncio.sleep(0)
    return (
        completion is not None and completion.strip() == str(task.answer) and episode.num_steps > 0
    )


def with_kwargs(**kwargs: Any) -> float:
    return float(sorted(kwargs) == sorted(_EXPECTED_NAMES))


_EXPECTED_NAMES: list[str] = []


def needs_unknown(completion: str, temperature: float) -> float:
    return 0.0


def returns_nan(completion: str | None) -> float:
    return math.nan


def returns_text(completion: str | None) -> str:
    return "high"


def returns_none_for_odd(task_id: str) -> float | None:
    return None if int(task_id[1:]) % 2 else 1.0


def raises(completion: str | None) -> float:
    raise ValueError("the scorer broke")


NOT_A_FUNCTION = 42

# --- trl: per batch ------------------------------------------------------------------------------

CALLS: list[int] = []


def trl_match(
    prompts: list[Any], completions: list[Any], answer: list[Any], **kwargs: Any
) -> list[float | None]:
    """TRL convention: conversational completions, dataset columns as lists."""
    CALLS.append(len(completions))
    out: list[float | None] = []
    for completion, ref, family in zip(
        completions, answer, kwargs.get("family", [None] * len(answer)), strict=True
    ):
        if family == "skip":
            out.append(None)
            continue
        text = completion[0]["content"]
        out.append(1.0 if re.search(rf"\b{re.escape(str(ref))}\b", text) else 0.0)
    return out


async def trl_async(completions: list[Any], **kwargs: Any) -> list[float]:
    await asyncio.sleep(0)
    return [float(len(c[0]["content"]) > 0) for c in completions]


def trl_wrong_length(completions: list[Any], **kwargs: Any) -> list[float]:
    return [1.0]


def trl_not_a_list(completions: list[Any], **kwargs: Any) -> float:
    return 1.0


def trl_needs_column(completions: list[Any], difficulty: list[Any]) -> list[float]:
    return [1.0 for _ in completions]


def trl_no_completions(prompts: list[Any]) -> list[float]:
    return [1.0 for _ in prompts]


# --- openenv: rubrics -----------------------------------------------------------------


class FeedbackRubric(Rubric):
    """Rewards each step whose observation says 'ok'."""

    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if observation.feedback == "ok" else 0.0


class FinalAnswerRubric(TrajectoryRubric):
    """0 until done, then 1 when the last action's answer has the expected length."""

    def score_trajectory(self, trajectory: list[tuple[Any, Any]]) -> float:
        action, observation = trajectory[-1]
        return 1.0 if observation.done and len(action.answer) <= 3 else 0.0

    def compute_step_rewards(self) -> list[float]:
        score = self.score_trajectory(self._trajectory)
        return [score] * len(self._trajectory)


class NeedsArguments(Rubric):
    def __init__(self, threshold: float) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, action: Any, observation: Any) -> float:
        return 1.0


class NotARubric:
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0
