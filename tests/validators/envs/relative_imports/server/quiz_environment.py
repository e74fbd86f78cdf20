"""The quiz env, importing its schemas from the package above: every check passes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# the corpus shares one protocol server: tests/validators/envs/_lite
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import QuizEnvironment, create_app  # noqa: E402

from ..models import ACTION_SCHEMA  # noqa: E402, TID252 (the layout under test)

__all__ = ["QuizEnv", "create_app"]


class QuizEnv(QuizEnvironment):
    """The quiz, with the action schema of the package's models."""

    action_schema = ACTION_SCHEMA

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
