"""Scripted policies for baselines and tests: ``scripted/oracle``, ``random``, ``noop``.

They answer like a model: a JSON action as text, or, on a tool env whose tools the agent offers
as functions (native tool calling), a tool call, so their replies go through the same parsing as
a language model's.
They respect what the env says is legal: the listed tools and their argument schemas for a tool
env, ``legal_actions`` (and the like) in the observation, enums and numeric bounds in the
schema.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Sequence
from typing import Any

from taskhub._errors import ConfigError, ModelError
from taskhub._registry import model_backend
from taskhub._schema import JsonObject, ToolCall, ToolSpec, Usage, trusted
from taskhub._tools import CALL_TOOL, STEP_FUNCTION, function_name
from taskhub.models._base import GenerateRequest, Generation, ModelOptions, TurnContext

#: Observation fields that list the actions legal right now (whole actions, or the values of
#: the action's one field).
LEGAL_ACTION_FIELDS = ("legal_actions", "valid_actions", "legal_moves", "available_actions")
#: Range drawn from for an integer field the schema gives no bounds.
UNBOUNDED_INT = (0, 10)
_MAX_DEPTH = 8


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


def _deref(root: dict[str, Any], node: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _deref(root, target, depth + 1) if isinstance(target, dict) else {}
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = [o for o in node[key] if isinstance(o, dict) and o.get("type") != "null"]
            if options:
                return _deref(root, options[0], depth + 1)
    return node


def legal_actions(
    observation: dict[str, Any], schema: dict[str, Any] | None
) -> list[dict[str, Any]] | None:
    """The actions the observation says are legal now, as whole actions; None when it lists none.

    A list of objects is taken as whole actions; a list of values as the values of the
    action's one required field (or its only field).
    """
    for key in LEGAL_ACTION_FIELDS:
        listed = observation.get(key)
        if not isinstance(listed, list) or not listed:
            continue
        if all(isinstance(item, dict) for item in listed):
            return [dict(item) for item in listed]
        props = action_properties(schema)
        required = [k for k in (schema or {}).get("required", []) if k in props]
        names = required or list(props)
        if len(names) == 1:
            return [{names[0]: item} for item in listed]
    return None


class _Scripted:
    kind = ""
    #: A policy acts on the observation, never on the chat messages: the agent loop renders
    #: them while the env works instead of before each call.
    reads_messages = False

    def __init__(self, options: ModelOptions | None = None) -> None:
        self.details: JsonObject = {"policy": self.kind}
        # scripted replies are exact: calls when functions are offered, unless told text
        self.tool_calling = "text" if options and options.tool_calling == "text" else "native"

    def act(self, ctx: TurnContext) -> dict[str, Any]:
        raise NotImplementedError

    async def generate(self, request: GenerateRequest) -> Generation:
        action = self.act(request.context)
        if request.tools and request.context.tools and self.tool_calling == "native":
            # a tool env's actions are calls; any other env's stay JSON text, as they always were
            call = _as_call(action, request.tools, request.context)
            return Generation(text="", usage=Usage.one_call(), tool_calls=[call])
        if request.context.tools and action.get("type") == CALL_TOOL:
            # text mode on a tool env: write the call the way the prompt asks for it
            action = {"tool_name": action.get("tool_name"), "arguments": action.get("arguments")}
        return Generation(text=json.dumps(action), usage=Usage.one_call())

    async def aclose(self) -> None:
        pass


def _as_call(action: dict[str, Any], functions: Sequence[ToolSpec], ctx: TurnContext) -> ToolCall:
    call_id = f"call_{ctx.step}"
    if action.get("type", CALL_TOOL) == CALL_TOOL and "tool_name" in action:
        name = function_name(str(action["tool_name"]))
        arguments = action.get("arguments")
        return _call(name, dict(arguments) if isinstance(arguments, dict) else {}, call_id)
    name = functions[0].name if len(functions) == 1 else STEP_FUNCTION
    return _call(name, dict(action), call_id)


def _call(name: str, arguments: dict[str, Any], call_id: str) -> ToolCall:
    # the arguments are a task row's action or the policy's own draw: JSON already
    return trusted(ToolCall, name=name, arguments=arguments, id=call_id, arguments_text=None)


class OraclePolicy(_Scripted):
    """Plays the task's ``oracle_actions`` (tool calls on a tool env), or submits its ``answer``."""

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
        if task.answer is not None and ctx.tools:
            submit = _answer_tool(ctx.tools)
            if submit is not None:
                tool, field = submit
                return {"type": CALL_TOOL, "tool_name": tool, "arguments": {field: _text(task)}}
        if isinstance(task.answer, dict):
            return dict(task.answer)
        if task.answer is not None:
            field = text_field(ctx.action_schema) or "answer"
            return {field: _text(task)}
        error = ModelError(f"task {task.task_id!r} has neither oracle_actions nor an answer")
        error.retryable = False
        raise error


def _text(task: Any) -> str:
    return task.answer if isinstance(task.answer, str) else json.dumps(task.answer)


def _answer_tool(tools: Sequence[ToolSpec]) -> tuple[str, str] | None:
    """A tool that takes the answer: named like submit/answer, with one string argument."""
    for tool in tools:
        if not any(word in tool.name.lower() for word in ("submit", "answer")):
            continue
        field = text_field(tool.input_schema)
        if field is not None:
            return tool.name, field
    return None


class RandomPolicy(_Scripted):
    """Draws a random legal action, seeded per episode and step.

    On a tool env: a listed tool, with arguments drawn from its schema. Elsewhere: one of the
    observation's ``legal_actions`` when it lists them, else an action drawn from the schema
    (enum options, numeric bounds, lengths, nested objects).
    """

    kind = "random"

    def act(self, ctx: TurnContext) -> dict[str, Any]:
        rng = random.Random(ctx.episode_seed * 100_003 + ctx.step)
        if ctx.tools:
            tool = rng.choice(ctx.tools)
            return {
                "type": CALL_TOOL,
                "tool_name": tool.name,
                "arguments": _random_object(tool.input_schema, tool.input_schema, rng, 0),
            }
        legal = legal_actions(ctx.observation, ctx.action_schema)
        if legal:
            return rng.choice(legal)
        schema = ctx.action_schema
        if not action_properties(schema):
            return {}
        assert schema is not None
        public = {**schema, "properties": action_properties(schema)}
        action: dict[str, Any] = _random_object(public, schema, rng, 0)
        return action


def _random_object(
    spec: dict[str, Any], root: dict[str, Any], rng: random.Random, depth: int
) -> Any:
    properties = spec.get("properties")
    if not isinstance(properties, dict):
        return {}
    required = set(spec.get("required") or [])
    out: dict[str, Any] = {}
    for name, sub in properties.items():
        if not isinstance(sub, dict) or name == "metadata":
            continue
        if name in required or rng.random() < 0.5:
            out[name] = _random_value(_deref(root, sub), root, rng, depth + 1)
    return out


def _random_value(
    spec: dict[str, Any], root: dict[str, Any], rng: random.Random, depth: int
) -> Any:
    if "enum" in spec and spec["enum"]:
        return rng.choice(spec["enum"])
    if "const" in spec:
        return spec["const"]
    kind = spec.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"] or ["null"]
        kind = rng.choice(kinds)
    if kind == "integer":
        low, high = _int_bounds(spec)
        return rng.randint(low, high)
    if kind == "number":
        low_f = float(spec.get("minimum", spec.get("exclusiveMinimum", 0.0)))
        high_f = float(spec.get("maximum", spec.get("exclusiveMaximum", max(1.0, low_f + 1.0))))
        return rng.uniform(low_f, high_f)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        items = spec.get("items")
        item_spec = _deref(root, items) if isinstance(items, dict) else {"type": "string"}
        low = int(spec.get("minItems", 0))
        high = int(spec.get("maxItems", max(low, 3)))
        if depth > _MAX_DEPTH:
            return []
        return [
            _random_value(item_spec, root, rng, depth + 1) for _ in range(rng.randint(low, high))
        ]
    if kind == "object":
        return _random_object(spec, root, rng, depth) if depth <= _MAX_DEPTH else {}
    alphabet = string.ascii_lowercase + string.digits
    size = 6
    if "minLength" in spec or "maxLength" in spec:
        low = int(spec.get("minLength", 0))
        size = rng.randint(low, max(low, min(int(spec.get("maxLength", low + 8)), 64)))
    return "".join(rng.choice(alphabet) for _ in range(size))


def _int_bounds(spec: dict[str, Any]) -> tuple[int, int]:
    low = spec.get("minimum")
    if low is None and "exclusiveMinimum" in spec:
        low = int(spec["exclusiveMinimum"]) + 1
    high = spec.get("maximum")
    if high is None and "exclusiveMaximum" in spec:
        high = int(spec["exclusiveMaximum"]) - 1
    if low is not None and high is not None:
        return int(low), max(int(low), int(high))
    if low is not None:
        return int(low), int(low) + UNBOUNDED_INT[1]
    if high is not None:
        return int(high) - UNBOUNDED_INT[1], int(high)
    return UNBOUNDED_INT


class NoopPolicy(_Scripted):
    """Sends the emptiest valid action (on a tool env, the first tool with such arguments).

    Empty strings, zeros (or the minimum), the first option of an enum. It does not follow
    ``legal_actions``: a move into a wall is the closest to doing nothing.
    """

    kind = "noop"

    def act(self, ctx: TurnContext) -> dict[str, Any]:
        if ctx.tools:
            tool = ctx.tools[0]
            return {
                "type": CALL_TOOL,
                "tool_name": tool.name,
                "arguments": _empty_object(tool.input_schema, tool.input_schema),
            }
        schema = ctx.action_schema
        public = {**(schema or {}), "properties": action_properties(schema)}
        return _empty_object(public, schema or {})


def _empty_object(spec: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    properties = spec.get("properties")
    if not isinstance(properties, dict):
        return {}
    required = set(spec.get("required") or [])
    return {
        name: _empty_value(_deref(root, sub), root)
        for name, sub in properties.items()
        if name in required and isinstance(sub, dict) and name != "metadata"
    }


def _empty_value(spec: dict[str, Any], root: dict[str, Any]) -> Any:
    if "enum" in spec and spec["enum"]:
        return spec["enum"][0]
    if "const" in spec:
        return spec["const"]
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "integer":
        low, high = _int_bounds(spec)
        return 0 if low <= 0 <= high else low
    if kind == "number":
        low_f = spec.get("minimum", spec.get("exclusiveMinimum"))
        return 0.0 if low_f is None or low_f < 0 else float(low_f)
    if kind == "array":
        return [] if not spec.get("minItems") else [None] * int(spec["minItems"])
    if kind == "object":
        return _empty_object(spec, root)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "a" * int(spec.get("minLength", 0))


_POLICIES: dict[str, type[_Scripted]] = {
    "oracle": OraclePolicy,
    "random": RandomPolicy,
    "noop": NoopPolicy,
}


@model_backend("scripted", names=tuple(_POLICIES))
def scripted(name: str, options: ModelOptions) -> _Scripted:
    """Scripted policies: ``scripted/oracle``, ``scripted/random``, ``scripted/noop``."""
    try:
        return _POLICIES[name](options)
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _POLICIES, n=1)
        hint = f" Did you mean 'scripted/{close[0]}'?" if close else ""
        raise ConfigError(
            f"unknown scripted policy {name!r}; expected one of {sorted(_POLICIES)}.{hint}"
        ) from None
