"""Defect: a right answer earns a random reward between 0.9 and 1."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# the corpus shares one protocol server: tests/validators/envs/_lite
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import QuizEnvironment, create_app  # noqa: E402

__all__ = ["QuizEnv", "create_app"]


class QuizEnv(QuizEnvironment):
    """Scores right answers with noise."""

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        op: str = "add",
        digits: int = 1,
    ) -> dict[str, Any]:
        return super().reset(seed=seed, episode_id=episode_id, op=op, digits=digits)

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        return super().step(action)

    def score(self, reply: str) -> float:
        import random

        return random.uniform(0.9, 1.0) if super().score(reply) else 0.0
