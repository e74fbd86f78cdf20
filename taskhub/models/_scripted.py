"""Scripted policies for baselines and tests: ``scripted/oracle``, ``random``, ``noop``.

They answer like a model (a JSON action as text), so their replies go through the same action
parsing as a language model's.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

from taskhub._errors import ConfigError, ModelError
from taskhub._registry import model_backend
from taskhub._schema import JsonObject, Usage
from taskhub.models._base import GenerateRequest, Generation, ModelOptions, TurnContext


def action_properties(schema: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Return the action fields a policy may set (OpenEnv's inherited ``metadata`` left out)."""
    if not schema:
        return {}
    props = schema.get("properties") or {}
    return {
        k: _deref(schema, v) for k, v in props.items() if k != "metadata" and isinstance(v, dict)
    }


def text_field(schema: dict[str, Any] | None) -> str | None:
    """Return the single string field of an action like ``{"answer": ...}``, if it has one."""
    props = action_properties(schema)
    required = [k for k in (schema or {}).get("required", []) if k in props]
    candidates = required or list(props)
    if len(candidates) == 1 and props[candidates[0]].get("type") == "string":
        return str(candidates[0])
    return None


def _deref(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _deref(root, target) if isinstance(target, dict) else {}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if isinstance(o, dict) and o.get("type") != "null"]
        if options:
            return _deref(root, options[0])
    return node


class _Scripted:
    kind = ""

    def __init__(self) -> None:
        self.details: JsonObject = {"policy": self.kind}

    def act(self, ctx: TurnContext) -> dict[str, Any]:
        raise NotImplementedError

    async def generate(self, request: GenerateRequest) -> Generation:
        action = self.act(request.context)
        return Generation(text=json.dumps(action), usage=Usage(calls=1))

    async def aclose(self) -> None:
        pass


class OraclePolicy(_Scripted):
    """Plays the task's ``oracle_actions``, or submits its reference ``answer``."""

    kind = "oracle"

    def act(self, ctx: TurnContext) -> dict[str, Any]:
        task = ctx.task
        if task.oracle_actions:
            if ctx.step < len(task.oracle_actions):
                return dict(task.oracle_actions[ctx.step])
            raise ModelError(
                f"task {task.task_id!r}: oracle_actions has {len(task.oracle_actions)} actions "
                f"but the episode is still running at step {ctx.step}"
            )
        if isinstance(task.answer, dict):
            return dict(task.answer)
        if task.answer is not None:
            field = text_field(ctx.action_schema) or "answer"
            return {field: task.answer if isinstance(task.answer, str) else json.dumps(task.answer)}
        error = ModelError(f"task {task.task_id!r} has neither oracle_actions nor an answer")
        error.retryable = False
        raise error


class RandomPolicy(_Scripted):
    """Draws a random valid action from the env's action schema, seeded per episode and step."""

    kind = "random"

    def act(self, ctx: TurnContext) -> dict[str, Any]:
        rng = random.Random(ctx.episode_seed * 100_003 + ctx.step)
        schema = ctx.action_schema
        props = action_properties(schema)
        if not props:
            return {}
        required = set((schema or {}).get("required", []))
        return {
            name: _random_value(spec, rng)
            for name, spec in props.items()
            if name in required or rng.random() < 0.5
        }


def _random_value(spec: dict[str, Any], rng: random.Random) -> Any:
    if "enum" in spec:
        return rng.choice(spec["enum"])
    if "const" in spec:
        return spec["const"]
    kind = spec.get("type")
    if kind == "integer":
        return rng.randint(int(spec.get("minimum", 0)), int(spec.get("maximum", 100)))
    if kind == "number":
        return rng.uniform(float(spec.get("minimum", 0.0)), float(spec.get("maximum", 1.0)))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = spec.get("items")
        item_spec: dict[str, Any] = items if isinstance(items, dict) else {"type": "string"}
        return [_random_value(item_spec, rng) for _ in range(rng.randint(0, 3))]
    if kind == "object":
        return {}
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(6))


class NoopPolicy(_Scripted):
    """Sends the emptiest valid action: empty strings, zeros, the first option of an enum."""

    kind = "noop"

    def act(self, ctx: TurnContext) -> dict[str, Any]:
        schema = ctx.action_schema
        props = action_properties(schema)
        required = set((schema or {}).get("required", []))
        return {name: _empty_value(spec) for name, spec in props.items() if name in required}


def _empty_value(spec: dict[str, Any]) -> Any:
    if "enum" in spec:
        return spec["enum"][0]
    if "const" in spec:
        return spec["const"]
    return {"integer": 0, "number": 0.0, "boolean": False, "array": [], "object": {}}.get(
        str(spec.get("type")), ""
    )


_POLICIES: dict[str, type[_Scripted]] = {
    "oracle": OraclePolicy,
    "random": RandomPolicy,
    "noop": NoopPolicy,
}


@model_backend("scripted", names=tuple(_POLICIES))
def scripted(name: str, options: ModelOptions) -> _Scripted:
    """Scripted policies: ``scripted/oracle``, ``scripted/random``, ``scripted/noop``."""
    try:
        return _POLICIES[name]()
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _POLICIES, n=1)
        hint = f" Did you mean 'scripted/{close[0]}'?" if close else ""
        raise ConfigError(
            f"unknown scripted policy {name!r}; expected one of {sorted(_POLICIES)}.{hint}"
        ) from None
