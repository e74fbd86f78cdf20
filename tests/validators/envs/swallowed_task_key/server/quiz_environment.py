"""Defect: reset takes the task id the manifest's tasks are selected by, and drops it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# the corpus shares one protocol server: tests/validators/envs/_lite
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import QuizEnvironment, create_app  # noqa: E402

__all__ = ["QuizEnv", "create_app"]

#: The tasks openenv.yaml lists, as they were meant to be served.
TASKS = {"add-small": ("add", 1), "mul-small": ("mul", 1), "add-large": ("add", 3)}


class QuizEnv(QuizEnvironment):
    """The quiz; ``task_id`` is accepted and never read."""

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        op: str = "add",
        digits: int = 1,
        task_id: str | None = None,
    ) -> dict[str, Any]:
        # meant: op, digits = TASKS[task_id]; the id is dropped, the row's op and digits rule
        return super().reset(seed=seed, episode_id=episode_id, op=op, digits=digits)

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        return super().step(action)
