"""Defect: a hand-rolled HTTP-only server with one global env and no WebSocket ``/ws``.

Seen in practice: every client shares the module-level env, so concurrent episodes trample
each other; HTTP carries no session.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import ACTION_SCHEMA, OBSERVATION_SCHEMA, STATE_SCHEMA  # noqa: E402
from openenv_lite import QuizEnvironment as _Quiz  # noqa: E402

app = FastAPI(title="http_only")


class QuizEnv(_Quiz):
    """The quiz, one instance for the whole server."""

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


ENV = QuizEnv()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "healthy"}


@app.get("/metadata")
def metadata() -> dict[str, str]:
    return {"name": "http_only", "description": "quiz over plain HTTP", "version": "0.1.0"}


@app.get("/schema")
def schema() -> dict[str, Any]:
    return {"action": ACTION_SCHEMA, "observation": OBSERVATION_SCHEMA, "state": STATE_SCHEMA}


@app.post("/reset")
def reset(body: dict[str, Any]) -> dict[str, Any]:
    keys = {"seed", "episode_id", "op", "digits"}
    observation = ENV.reset(**{k: v for k, v in body.items() if k in keys})
    return {"observation": observation, "reward": None, "done": False}


@app.post("/step")
def step(body: dict[str, Any]) -> dict[str, Any]:
    action = body.get("action")
    if not isinstance(action, dict) or not isinstance(action.get("answer"), str):
        raise HTTPException(422, 'action must be {"answer": str}')
    try:
        observation, reward, done = ENV.step(action)
    except RuntimeError as exc:
        raise HTTPException(409, str(exc)) from None
    return {"observation": observation, "reward": reward, "done": done}


@app.get("/state")
def state() -> dict[str, Any]:
    return ENV.state()
