"""Defects: an empty step body is played as an action, and a step after done is answered.

The request model makes every field optional, so ``POST /step {}`` is graded as an empty reply
(0.0, outside the declared ``reward_range``); a real reply is graded inside it. A step after
the one-step episode ends repeats the final observation. Replies put the observation at the top
level; one module-level env serves every client; there is no ``/schema``, ``/metadata`` or
``/ws``.
"""

from __future__ import annotations

import random
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI(title="lenient_text")

TICKETS = [
    ("My invoice was charged twice this month.", "billing"),
    ("The app crashes when I open settings.", "technical"),
    ("Someone logged into my account from abroad.", "security"),
    ("How do I change my display name?", "general"),
]


class StepRequest(BaseModel):
    """The bare step body: every field optional (the defect)."""

    message: str = ""
    agent_id: str | None = None


class ResetRequest(BaseModel):
    """The reset body."""

    seed: int | None = None


def grade(message: str, category: str) -> float:
    """0.99 for the right category, 0.01 for a wrong one; an empty reply falls through to 0."""
    if not message.strip():
        return 0.0
    return 0.99 if category in message.lower() else 0.01


class Triage:
    """One ticket, one reply."""

    def __init__(self) -> None:
        self.reset(ResetRequest(seed=0))

    def observation(self, **extra: Any) -> dict[str, Any]:
        return {"ticket": self.ticket, "step": self.step_count, "done": self.done, **extra}

    def reset(self, request: ResetRequest) -> dict[str, Any]:
        rng = random.Random(request.seed)
        self.ticket, self.category = TICKETS[rng.randrange(len(TICKETS))]
        self.step_count = 0
        self.done = False
        self.last: dict[str, Any] = self.observation(reward=None)
        return self.last

    def step(self, request: StepRequest) -> dict[str, Any]:
        if self.done:
            return {**self.last, "reward": None}  # the defect: answered, not refused
        self.step_count += 1
        self.done = True
        self.last = self.observation(reward=grade(request.message, self.category))
        return self.last


ENV = Triage()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/reset")
def reset(request: ResetRequest) -> dict[str, Any]:
    return ENV.reset(request)


@app.post("/step")
def step(request: StepRequest) -> dict[str, Any]:
    return ENV.step(request)


@app.get("/state")
def state() -> dict[str, Any]:
    return {"ticket": ENV.ticket, "step_count": ENV.step_count, "done": ENV.done}
