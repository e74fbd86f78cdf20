"""Defects: a hand-rolled FastAPI quiz as hackathon submissions write them, several at once.

One module-level env serves every client; the step body is the bare action; replies put the
observation at the top level; health lives at ``/``; there is no ``/schema``, ``/metadata`` or
``/ws``; a step after the episode ended is accepted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import make_question  # noqa: E402

app = FastAPI(title="handrolled_global")


class ResetRequest(BaseModel):
    """What /reset takes."""

    model_config = ConfigDict(extra="forbid")

    seed: int | None = None
    episode_id: str | None = None
    op: str = "add"
    digits: int = 1


class Answer(BaseModel):
    """The bare action body."""

    model_config = ConfigDict(extra="forbid")

    answer: str


class Quiz:
    """Three attempts at one question; every step is scored, even after the end."""

    def __init__(self) -> None:
        self.episode_id: str | None = None
        self.step_count = 0
        self.question, self.answer = make_question(0, "add", 1)
        self.attempts_left = 3
        self.done = False

    def reset(self, request: ResetRequest) -> dict[str, Any]:
        seed = request.seed if request.seed is not None else 0
        self.question, self.answer = make_question(seed, request.op, request.digits)
        self.episode_id = request.episode_id
        self.step_count = 0
        self.attempts_left = 3
        self.done = False
        return {"question": self.question, "attempts_left": 3, "reward": None, "done": False}

    def step(self, answer: str) -> dict[str, Any]:
        self.step_count += 1
        self.attempts_left = max(self.attempts_left - 1, 0)
        reward = 1.0 if answer.strip() == self.answer else 0.0
        self.done = reward >= 1.0 or self.attempts_left == 0
        return {
            "question": self.question,
            "attempts_left": self.attempts_left,
            "feedback": "correct" if reward else "incorrect",
            "reward": reward,
            "done": self.done,
        }


ENV = Quiz()


@app.get("/")
def root() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/reset")
def reset(request: ResetRequest) -> dict[str, Any]:
    return ENV.reset(request)


@app.post("/step")
def step(action: Answer) -> dict[str, Any]:
    return ENV.step(action.answer)


@app.get("/state")
def state() -> dict[str, Any]:
    return {"episode_id": ENV.episode_id, "step_count": ENV.step_count}
