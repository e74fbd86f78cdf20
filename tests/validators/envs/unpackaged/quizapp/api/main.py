"""Defects: an env not packaged for OpenEnv, served the way hand-rolled submissions serve it.

No openenv.yaml: the Dockerfile runs this module, which starts uvicorn on its own app. HTTP
only, one module-level env for every client, and no ``/schema``, ``/metadata``, ``/state``
or ``/ws``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "_lite"))

from openenv_lite import QuizEnvironment  # noqa: E402

app = FastAPI(title="quiz game")


class ResetRequest(BaseModel):
    """What /reset takes."""

    model_config = ConfigDict(extra="forbid")

    seed: int | None = None
    episode_id: str | None = None
    op: str = "add"
    digits: int = 1


class Answer(BaseModel):
    """The action."""

    model_config = ConfigDict(extra="forbid")

    answer: str


class StepRequest(BaseModel):
    """What /step takes: the action, wrapped."""

    action: Answer


GAME = QuizEnvironment()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/reset")
def reset(request: ResetRequest) -> dict[str, Any]:
    try:
        observation = GAME.reset(**request.model_dump())
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return {"observation": observation, "reward": None, "done": False}


@app.post("/step")
def step(request: StepRequest) -> dict[str, Any]:
    try:
        observation, reward, done = GAME.step(request.action.model_dump())
    except RuntimeError as exc:
        raise HTTPException(409, str(exc)) from None
    return {"observation": observation, "reward": reward, "done": done}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run("quizapp.api.main:app", host="0.0.0.0", port=int(os.environ.get("PORT", "8000")))
