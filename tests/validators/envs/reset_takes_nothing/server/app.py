"""Defects: declared tasks that reset cannot select, served by one module-level env.

``POST /reset`` takes no body: the three tasks openenv.yaml lists exist in the code, but only
the first is ever served (its observation names it, and its difficulty: easy). Replies put the
observation at the top level; there is no ``/schema``, ``/metadata`` or ``/ws``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import make_question  # noqa: E402

app = FastAPI(title="reset_takes_nothing")

#: The declared tasks: (op, digits). Only the first is reachable.
TASKS = {"task_easy": ("add", 1), "task_medium": ("add", 2), "task_hard": ("mul", 3)}


class Answer(BaseModel):
    """The bare action body."""

    model_config = ConfigDict(extra="forbid")

    answer: str


class Quiz:
    """Three attempts at one question of the current task."""

    def __init__(self) -> None:
        self.task_id = "task_easy"
        self.step_count = 0
        self.question, self.answer = make_question(0, *TASKS[self.task_id])
        self.attempts_left = 3
        self.done = False

    def observation(self, **extra: Any) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "difficulty": "easy",
            "question": self.question,
            "attempts_left": self.attempts_left,
            "done": self.done,
            **extra,
        }

    def reset(self) -> dict[str, Any]:
        self.task_id = "task_easy"  # meant to come from the request; nothing can choose it
        self.question, self.answer = make_question(7, *TASKS[self.task_id])
        self.step_count = 0
        self.attempts_left = 3
        self.done = False
        return self.observation(reward=None)

    def step(self, answer: str) -> dict[str, Any]:
        if self.done:
            raise ValueError("the episode is over: reset first")
        self.step_count += 1
        self.attempts_left = max(self.attempts_left - 1, 0)
        reward = 1.0 if answer.strip() == self.answer else 0.0
        self.done = reward >= 1.0 or self.attempts_left == 0
        return self.observation(reward=reward, feedback="correct" if reward else "incorrect")


ENV = Quiz()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/reset")
def reset() -> dict[str, Any]:
    return ENV.reset()


@app.post("/step")
def step(action: Answer) -> dict[str, Any]:
    try:
        return ENV.step(action.answer)
    except ValueError as exc:
        from fastapi import HTTPException

        raise HTTPException(status_code=400, detail=str(exc)) from None


@app.get("/state")
def state() -> dict[str, Any]:
    return {"task_id": ENV.task_id, "step_count": ENV.step_count}
