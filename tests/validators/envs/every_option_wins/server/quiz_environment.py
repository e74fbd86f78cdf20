"""Defect: every room the start offers scores the top reward, whichever the agent picks.

The quiz is served as is, with a booking task beside it: the observation lists rooms, and an
answer naming any of them pays 1.0 (the requirements are never checked). The right quiz answer
pays 1.0 as well, and everything else 0.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# the corpus shares one protocol server: tests/validators/envs/_lite
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import OBSERVATION_SCHEMA, QuizEnvironment, create_app  # noqa: E402

__all__ = ["QuizEnv", "create_app"]

ROOMS = [
    {"id": "A", "seats": 4, "projector": True},
    {"id": "B", "seats": 8, "projector": False},
    {"id": "C", "seats": 6, "projector": True},
]


class QuizEnv(QuizEnvironment):
    """The quiz, and rooms to book that all pass."""

    observation_schema = {
        **OBSERVATION_SCHEMA,
        "properties": {
            **OBSERVATION_SCHEMA["properties"],
            "people": {"type": "integer"},
            "rooms": {"type": "array", "items": {"type": "object"}},
        },
    }

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        op: str = "add",
        digits: int = 1,
    ) -> dict[str, Any]:
        return super().reset(seed=seed, episode_id=episode_id, op=op, digits=digits)

    def observe(self, feedback: str | None) -> dict[str, Any]:
        return {**super().observe(feedback), "people": 7, "rooms": ROOMS}

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        observation, reward, done = super().step(action)
        if str(action.get("answer", "")).strip() in {room["id"] for room in ROOMS}:
            # meant: a room with enough seats (only B has 7); any room is booked
            self.done = done = True
            reward = 1.0
        return observation, reward, done
