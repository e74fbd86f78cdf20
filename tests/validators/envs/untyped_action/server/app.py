"""Defect: the step body's action is typed ``Any``, so anything is played as the default dose.

``{"action": "not-an-object"}``, ``{"action": null}`` or ``{"action": {"bogus": 1}}`` are
accepted with 200 and dose nothing. Bodies are OpenEnv's wrapped ones and observations are
nested, but one module-level env serves every client; there is no ``/schema``, ``/metadata``
or ``/ws``.
"""

from __future__ import annotations

import random
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

app = FastAPI(title="untyped_action")


class StepRequest(BaseModel):
    """The step body: the action is typed Any (the defect)."""

    action: Any


class ResetRequest(BaseModel):
    """The reset body."""

    seed: int | None = None


class Tank:
    """Reach the target level within eight doses."""

    def __init__(self) -> None:
        self.reset(ResetRequest(seed=0))

    def reply(self, reward: float | None) -> dict[str, Any]:
        observation = {"level": self.level, "target": self.target, "doses_left": self.left}
        return {"observation": observation, "reward": reward, "done": self.done}

    def reset(self, request: ResetRequest) -> dict[str, Any]:
        rng = random.Random(request.seed)
        self.level, self.target = 0, rng.randrange(3, 9)
        self.left, self.done = 8, False
        return self.reply(None)

    def step(self, action: Any) -> dict[str, Any]:
        if self.done:
            raise HTTPException(status_code=400, detail="the episode is over: reset first")
        amount = action.get("amount", 0) if isinstance(action, dict) else 0  # anything goes
        self.level += int(amount) if isinstance(amount, int) else 0
        self.left -= 1
        self.done = self.level >= self.target or self.left == 0
        return self.reply(1.0 if self.level == self.target else 0.0)


ENV = Tank()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/reset")
def reset(request: ResetRequest) -> dict[str, Any]:
    return ENV.reset(request)


@app.post("/step")
def step(request: StepRequest) -> dict[str, Any]:
    return ENV.step(request.action)


@app.get("/state")
def state() -> dict[str, Any]:
    return {"level": ENV.level, "target": ENV.target, "step_count": 8 - ENV.left}
