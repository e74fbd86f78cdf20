"""The quiz env naming its own episodes and paying only at the end: every check passes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# the corpus shares one protocol server: tests/validators/envs/_lite
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import QuizEnvironment, create_app  # noqa: E402

__all__ = ["QuizEnv", "create_app"]


class QuizEnv(QuizEnvironment):
    """The quiz; reset() takes no episode id, and a wrong answer with attempts left pays null."""

    def reset(self, seed: int | None = None, op: str = "add", digits: int = 1) -> dict[str, Any]:
        return super().reset(seed=seed, op=op, digits=digits)

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        observation, reward, done = super().step(action)
        return observation, reward if done else None, done
