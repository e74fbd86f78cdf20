"""Defect: extra questions load from a Hub dataset with no revision, so the task distribution
can change under the same version of the env."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# the corpus shares one protocol server: tests/validators/envs/_lite
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import QuizEnvironment, create_app  # noqa: E402

__all__ = ["QuizEnv", "create_app"]

HUB_QUESTIONS = "quiz-org/arith-questions"


def hub_questions(split: str = "train") -> list[dict[str, Any]]:
    """Extra questions from the Hub (rows with ``question`` and ``answer``)."""
    from datasets import load_dataset

    return list(load_dataset(HUB_QUESTIONS, split=split))


class QuizEnv(QuizEnvironment):
    """The quiz, with extra Hub questions when ``QUIZ_HUB_QUESTIONS`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.extra = hub_questions() if os.environ.get("QUIZ_HUB_QUESTIONS") else []

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        op: str = "add",
        digits: int = 1,
    ) -> dict[str, Any]:
        observation = super().reset(seed=seed, episode_id=episode_id, op=op, digits=digits)
        if self.extra and seed is not None:
            row = self.extra[seed % len(self.extra)]
            self.question, self.answer = row["question"], str(row["answer"])
            observation = self.observe(None)
        return observation

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        return super().step(action)
