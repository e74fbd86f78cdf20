"""A small OpenEnv-protocol server (FastAPI) and the quiz environment the corpus is built on.

Every env of the validator corpus (tests/validators/envs/<defect>/) serves a quiz env through
``create_app``: the same frames, error codes and session rules as OpenEnv 0.10's server
(``/ws`` sessions, ``reset``/``step``/``state``/``close`` frames, INVALID_JSON, UNKNOWN_TYPE,
VALIDATION_ERROR, EXECUTION_ERROR, SESSION_ERROR, CAPACITY_REACHED; reset kwargs filtered
against ``reset()``'s signature), but starting in a fraction of a second. Each corpus env
changes one thing in ``QuizEnvironment`` or in how it is served: its one defect.
"""

from __future__ import annotations

import inspect
import json
import os
import random
from typing import Any
from uuid import uuid4

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from jsonschema import Draft202012Validator

ACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "QuizAction",
    "properties": {"answer": {"type": "string"}, "metadata": {"type": "object"}},
    "required": ["answer"],
    "additionalProperties": False,
}
OBSERVATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "QuizObservation",
    "properties": {
        "question": {"type": "string"},
        "attempts_left": {"type": "integer", "minimum": 0},
        "feedback": {"type": ["string", "null"]},
        "metadata": {"type": "object"},
    },
    "required": ["question", "attempts_left"],
    "additionalProperties": False,
}
STATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "QuizState",
    "properties": {"episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"}},
}
OPS = {"add": "+", "sub": "-", "mul": "*"}


def make_question(seed: int, op: str, digits: int) -> tuple[str, str]:
    """The question and its answer for ``(seed, op, digits)`` (the taskset's generator)."""
    rng = random.Random(f"quiz:{seed}:{op}:{digits}")
    low, high = 10 ** (digits - 1), 10**digits - 1
    a, b = rng.randint(max(low, 2), high), rng.randint(max(low, 2), high)
    value = {"add": a + b, "sub": a - b, "mul": a * b}[op]
    return f"What is {a} {OPS[op]} {b}?", str(value)


class QuizEnvironment:
    """Answer one arithmetic question; three attempts; reward 1.0 for the right answer."""

    observation_schema = OBSERVATION_SCHEMA
    action_schema = ACTION_SCHEMA
    attempts = 3

    def __init__(self) -> None:
        self.episode_id: str | None = None
        self.step_count = 0
        self.question = ""
        self.answer = ""
        self.attempts_left = 0
        self.done = False
        self.params: dict[str, Any] = {}

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        op: str = "add",
        digits: int = 1,
    ) -> dict[str, Any]:
        if op not in OPS or not 1 <= int(digits) <= 4:
            raise ValueError(f"unknown task op={op!r} digits={digits!r}")
        seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.question, self.answer = make_question(int(seed), op, int(digits))
        self.episode_id = episode_id or str(uuid4())
        self.step_count = 0
        self.attempts_left = self.attempts
        self.done = False
        self.params = {"seed": seed, "op": op, "digits": int(digits)}
        return self.observe(None)

    def observe(self, feedback: str | None) -> dict[str, Any]:
        return {
            "question": self.question,
            "attempts_left": self.attempts_left,
            "feedback": feedback,
            "metadata": {},
        }

    def score(self, reply: str) -> float:
        return 1.0 if reply.strip() == self.answer else 0.0

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        if self.done:
            raise RuntimeError("episode is over; call reset() to start a new one")
        if self.episode_id is None:
            raise RuntimeError("step() before reset(): no episode")
        self.step_count += 1
        self.attempts_left -= 1
        reward = self.score(str(action.get("answer", "")))
        self.done = reward >= 1.0 or self.attempts_left == 0
        feedback = "correct" if reward >= 1.0 else "incorrect"
        return self.observe(feedback), reward, self.done

    def state(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "step_count": self.step_count, **self.params}


def _error(code: str, message: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


def _observation(observation: dict[str, Any], reward: Any, done: bool) -> dict[str, Any]:
    return {"observation": observation, "reward": reward, "done": done}


def _filter_kwargs(env: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Drop the keys ``reset()`` does not take, silently, as OpenEnv's server does."""
    parameters = inspect.signature(env.reset).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(data)
    return {k: v for k, v in data.items() if k in parameters}


def create_app(
    env_cls: type[QuizEnvironment],
    *,
    name: str,
    description: str = "A quiz environment of the validator corpus.",
    shared: bool = False,
    validate_actions: bool = True,
    default_sessions: int = 8,
    max_sessions: int | None = None,
    http_fresh: bool = False,
) -> FastAPI:
    """Serve ``env_cls`` over OpenEnv's HTTP routes and WebSocket ``/ws``.

    Args:
        env_cls: The environment class; one instance per WebSocket session.
        name: Name in ``/metadata``.
        description: Description in ``/metadata``.
        shared: Serve one instance to every session (the shared-state defect).
        validate_actions: Check step actions against the action schema first.
        default_sessions: Sessions served at once when ``MAX_CONCURRENT_ENVS`` is not set.
        max_sessions: A fixed capacity that ignores ``MAX_CONCURRENT_ENVS``.
        http_fresh: Serve every HTTP request a fresh env (OpenEnv's stateless HTTP routes):
            an HTTP episode never advances.
    """
    app = FastAPI(title=name)
    capacity = max_sessions or int(os.environ.get("MAX_CONCURRENT_ENVS", default_sessions))
    active = [0]
    http_env = env_cls()
    action_validator = Draft202012Validator(env_cls.action_schema)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/metadata")
    def metadata() -> dict[str, str]:
        return {"name": name, "description": description, "version": "0.1.0"}

    @app.get("/schema")
    def schema() -> dict[str, Any]:
        return {
            "action": env_cls.action_schema,
            "observation": env_cls.observation_schema,
            "state": STATE_SCHEMA,
            "reset_observation": env_cls.observation_schema,
        }

    def env_of_request() -> QuizEnvironment:
        return env_cls() if http_fresh else http_env

    @app.post("/reset")
    async def http_reset(request: Request) -> JSONResponse:
        body = await request.json()
        env = env_of_request()
        observation = env.reset(**_filter_kwargs(env, body))
        return JSONResponse(_observation(observation, None, False))

    @app.post("/step")
    async def http_step(request: Request) -> JSONResponse:
        body = await request.json()
        observation, reward, done = env_of_request().step(body.get("action", {}))
        return JSONResponse(_observation(observation, reward, done))

    @app.get("/state")
    def http_state() -> dict[str, Any]:
        return env_of_request().state()

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        if active[0] >= capacity:
            await websocket.send_text(_error("CAPACITY_REACHED", "server at capacity"))
            await websocket.close()
            return
        active[0] += 1
        env = http_env if shared else env_cls()
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None:
                    await websocket.send_text(_error("SESSION_ERROR", "binary frame"))
                    await websocket.close()
                    return
                try:
                    frame = json.loads(text)
                except ValueError as exc:
                    await websocket.send_text(_error("INVALID_JSON", f"Invalid JSON: {exc}"))
                    continue
                if not isinstance(frame, dict):
                    await websocket.send_text(_error("SESSION_ERROR", "frame is not an object"))
                    await websocket.close()
                    return
                kind = frame.get("type")
                if kind == "close":
                    await websocket.close()
                    return
                reply = await _handle(env, kind, frame, action_validator, validate_actions)
                await websocket.send_text(reply)
        except WebSocketDisconnect:
            return
        finally:
            active[0] -= 1

    return app


async def _handle(
    env: QuizEnvironment,
    kind: Any,
    frame: dict[str, Any],
    validator: Draft202012Validator,
    validate_actions: bool,
) -> str:
    if kind == "state":
        return json.dumps({"type": "state", "data": env.state()})
    if kind not in ("reset", "step"):
        return _error("UNKNOWN_TYPE", f"Unknown message type: {kind}")
    if "data" not in frame and kind == "step":
        return _error("VALIDATION_ERROR", "step needs data")
    data = frame.get("data") or {}
    if not isinstance(data, dict):
        return _error("VALIDATION_ERROR", "data must be an object")
    try:
        if kind == "reset":
            observation = env.reset(**_filter_kwargs(env, data))
            data = _observation(observation, None, False)
            return json.dumps({"type": "observation", "data": data})
        if validate_actions:
            errors = [e.message for e in validator.iter_errors(data)]
            if errors:
                return _error("VALIDATION_ERROR", "; ".join(errors)[:500])
        observation, reward, done = env.step(data)
    except Exception as exc:  # noqa: BLE001 - an env error is an error frame, as in OpenEnv
        return _error("EXECUTION_ERROR", f"{type(exc).__name__}: {exc}")
    return json.dumps({"type": "observation", "data": _observation(observation, reward, done)})
