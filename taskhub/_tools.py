"""An env's actions offered to a model as functions, and the model's calls turned into actions.

A tool env (MCP) offers its own tools; any other env with an action schema offers one function,
``step``, whose parameters are the action. With native tool calling the functions go to the
model as OpenAI ``tools`` and come back as ``tool_calls``; in text mode the model writes a call
as JSON (``{"tool_name": ..., "arguments": {...}}`` for a tool env, the action itself otherwise),
read by the agent loop's action parser against ``Toolbox.text_schema``. Either way each call is
checked against its schema before it becomes an action, so an unknown tool or bad arguments are
the model's format error, shown back to it.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from taskhub._actions import Checker
from taskhub._errors import AgentFormatError
from taskhub._schema import ToolCall, ToolSpec

#: The function a single-action env is offered as.
STEP_FUNCTION = "step"
STEP_DESCRIPTION = "Take one action in the environment; the arguments are the action's fields."
#: The action type of an MCP tool call.
CALL_TOOL = "call_tool"
#: Keys a text-mode reply may use for the tool's name and its arguments (read as the canonical
#: ``tool_name`` and ``arguments``: small models write calls every which way).
_NAME_KEYS = ("tool_name", "name", "tool", "function")
_ARGUMENT_KEYS = ("arguments", "args", "parameters", "input")
# OpenAI function names: letters, digits, underscores and dashes, 64 at most.
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# Schema keywords dropped before client-side validation: a hostile regex must not stall the
# agent loop (the env validates its own arguments anyway).
_UNSAFE_KEYWORDS = frozenset({"pattern", "patternProperties", "format", "$schema"})
_MAX_SCHEMA_DEPTH = 32


def function_name(tool_name: str) -> str:
    """The OpenAI function name of a tool (unsafe characters become ``_``, 64 at most)."""
    return _UNSAFE.sub("_", tool_name)[:64] or "tool"


def public_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """An action schema without OpenEnv's inherited ``metadata`` field (noise for a model)."""
    if not schema:
        return {"type": "object", "properties": {}}
    public = dict(schema)
    properties = dict(public.get("properties") or {})
    properties.pop("metadata", None)
    public["properties"] = properties
    return public


def _safe(node: Any, depth: int = 0) -> Any:
    if depth > _MAX_SCHEMA_DEPTH:
        return {}
    if isinstance(node, dict):
        return {k: _safe(v, depth + 1) for k, v in node.items() if k not in _UNSAFE_KEYWORDS}
    if isinstance(node, list):
        return [_safe(v, depth + 1) for v in node]
    return node


def _compile(schema: dict[str, Any]) -> Checker | None:
    # Every run of an env compiles the same schemas: checking one costs milliseconds, more
    # than a short run's episodes, so the checked validators are kept by the schema's text.
    return _compile_text(json.dumps(_safe(schema), sort_keys=True))


@functools.lru_cache(maxsize=256)
def _compile_text(text: str) -> Checker | None:
    safe = json.loads(text)
    try:
        jsonschema.Draft202012Validator.check_schema(safe)
    except jsonschema.SchemaError:
        return None  # a schema the client cannot use: the env's own validation decides
    return Checker.of(safe)


def _clip(text: str, size: int = 200) -> str:
    return text if len(text) <= size else text[:size] + "..."


@dataclass
class Toolbox:
    """The functions a model is offered for an env, and how its calls become actions.

    Build it once per run with ``Toolbox.for_env`` (argument schemas compile once).

    Attributes:
        functions: What the model is offered (function names are OpenAI-safe).
        tools: The env's tools for a tool env, else None (a single-action env).
        action_schema: The env's action schema.
    """

    functions: tuple[ToolSpec, ...]
    tools: tuple[ToolSpec, ...] | None
    action_schema: dict[str, Any] | None
    _env_names: dict[str, str] = field(default_factory=dict, repr=False)
    _validators: dict[str, Checker | None] = field(default_factory=dict, repr=False)
    _text_schema: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def for_env(
        cls, tools: Sequence[ToolSpec] | None, action_schema: dict[str, Any] | None
    ) -> Toolbox | None:
        """The toolbox of an env: its tools, or one ``step`` function over its action schema.

        Returns:
            None when the env has neither tools nor an action schema with fields.
        """
        if tools:
            functions: list[ToolSpec] = []
            names: dict[str, str] = {}
            for tool in tools:
                name = function_name(tool.name)
                if name in names:  # two tool names that only differ in unsafe characters
                    name = f"{name[:60]}_{len(names)}"
                names[name] = tool.name
                schema = tool.input_schema or {"type": "object", "properties": {}}
                functions.append(
                    ToolSpec(name=name, description=tool.description, input_schema=schema)
                )
            box = cls(tuple(functions), tuple(tools), action_schema, names)
            box._text_schema = {"anyOf": [_call_schema(f, names[f.name]) for f in functions]}
        else:
            parameters = public_schema(action_schema)
            if not parameters.get("properties"):
                return None
            step = ToolSpec(
                name=STEP_FUNCTION, description=STEP_DESCRIPTION, input_schema=parameters
            )
            box = cls((step,), None, action_schema, {STEP_FUNCTION: STEP_FUNCTION})
            box._text_schema = action_schema
        box._validators = {f.name: _compile(f.input_schema) for f in box.functions}
        return box

    @functools.cached_property
    def call_instructions(self) -> str:
        """``text_call_instructions`` of the functions (every episode's prompt may show it)."""
        return text_call_instructions(self.functions)

    @property
    def mcp(self) -> bool:
        """Whether the env is a tool env (its actions are ``call_tool``)."""
        return self.tools is not None

    @property
    def text_schema(self) -> dict[str, Any] | None:
        """The schema a text-mode reply must match: one of the tool calls, or the action."""
        return self._text_schema

    def action(self, call: ToolCall) -> dict[str, Any]:
        """Turn a model's call into the env action it stands for.

        Raises:
            AgentFormatError: The function does not exist, or its arguments are not a JSON
                object matching its schema (the message says which, for the model to retry).
        """
        if call.name not in self._env_names:
            offered = [f.name for f in self.functions]
            close = difflib.get_close_matches(call.name, offered, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise AgentFormatError(
                f"there is no function {call.name!r}; call one of {', '.join(offered)}.{hint}",
                reply=call.model_dump_json(),
            )
        if call.arguments_text is not None:
            raise AgentFormatError(
                f"the arguments of {call.name} are not a JSON object: "
                f"{_clip(call.arguments_text)!r}",
                reply=call.arguments_text,
            )
        checker = self._validators.get(call.name)
        error = checker.error(call.arguments) if checker is not None else None
        if error is not None:
            raise AgentFormatError(
                f"the arguments of {call.name} do not match its schema: {error}",
                reply=call.model_dump_json(),
            )
        if not self.mcp:
            return dict(call.arguments)
        return {
            "type": CALL_TOOL,
            "tool_name": self._env_names[call.name],
            "arguments": dict(call.arguments),
        }

    def call(self, action: dict[str, Any], call_id: str | None = None) -> ToolCall:
        """The call that stands for ``action`` (the inverse of ``action``)."""
        if not self.mcp:
            return ToolCall(name=STEP_FUNCTION, arguments=dict(action), id=call_id)
        tool_name = str(action.get("tool_name", ""))
        name = next((f for f, t in self._env_names.items() if t == tool_name), tool_name)
        arguments = action.get("arguments")
        return ToolCall(
            name=name, arguments=dict(arguments) if isinstance(arguments, dict) else {}, id=call_id
        )

    def normalize(self, value: dict[str, Any]) -> dict[str, Any]:
        """A text-mode tool call in canonical form: ``tool_name``, ``arguments``, ``type``.

        ``{"name": ..., "args": ...}`` and the like become ``{"type": "call_tool",
        "tool_name": ..., "arguments": ...}``; for a single-action env, ``{"tool_name": "step",
        "arguments": A}`` becomes ``A``. Other values are returned as they are.
        """
        if not self.mcp:
            arguments = value.get("arguments")
            if value.get("tool_name") == STEP_FUNCTION and isinstance(arguments, dict):
                return arguments
            return value
        name_key = next((k for k in _NAME_KEYS if isinstance(value.get(k), str)), None)
        if name_key is None:
            return value
        arguments_key = next((k for k in _ARGUMENT_KEYS if k in value), None)
        extra = set(value) - {name_key, arguments_key, "type"}
        if extra or value.get("type", CALL_TOOL) != CALL_TOOL:
            return value
        arguments = value.get(arguments_key, {}) if arguments_key else {}
        if isinstance(arguments, str):  # arguments given as JSON text
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return value
        tool_name = value[name_key]
        return {
            "type": CALL_TOOL,
            "tool_name": self._env_names.get(tool_name, tool_name),
            "arguments": arguments,
        }

    def describe(self) -> str:
        """The functions as text, one line each: ``- name(arg: type, ...): description``."""
        return describe_functions(self.functions)


def describe_functions(functions: Sequence[ToolSpec]) -> str:
    """Functions as text, one line each: ``- name(arg: type, arg?: type): description``."""
    lines = []
    for function in functions:
        schema: dict[str, Any] = function.input_schema
        properties = schema.get("properties")
        listed = schema.get("required")
        required = {str(r) for r in listed} if isinstance(listed, list) else set()
        arguments = []
        if isinstance(properties, dict):
            for name, spec in properties.items():
                kind = spec.get("type", "any") if isinstance(spec, dict) else "any"
                options = spec.get("enum") if isinstance(spec, dict) else None
                if isinstance(options, list):
                    kind = " | ".join(json.dumps(o) for o in options)
                optional = "" if name in required else "?"
                arguments.append(f"{name}{optional}: {kind}")
        description = " ".join(function.description.split())
        lines.append(
            f"- {function.name}({', '.join(arguments)})"
            + (f": {_clip(description, 300)}" if description else "")
        )
    return "\n".join(lines)


def text_call_instructions(functions: Sequence[ToolSpec]) -> str:
    """How to call ``functions`` in text: one JSON object per reply, then the function list."""
    return (
        'Call a function by replying with one JSON object {"tool_name": NAME, "arguments": '
        "{...}} and nothing else. The functions:\n" + describe_functions(functions)
    )


def _call_schema(function: ToolSpec, tool_name: str) -> dict[str, Any]:
    arguments = _safe(function.input_schema) or {"type": "object"}
    return {
        "type": "object",
        "properties": {
            "type": {"const": CALL_TOOL},
            "tool_name": {"const": tool_name},
            "arguments": arguments,
        },
        "required": ["tool_name", "arguments"],
        "additionalProperties": False,
    }
