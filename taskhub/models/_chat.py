"""The OpenAI chat format of messages, function tools and tool calls (remote and local models).

``openai_messages`` writes a conversation with tool calls and tool results as chat-completions
messages; ``text_messages`` writes it for a model that is not given the tools (a text-mode
fallback): calls become the JSON text a text-mode reply would hold, results become user
messages, and the system message learns how to call the functions in text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from taskhub._limits import loads_bounded
from taskhub._schema import ChatMessage, ToolCall, ToolSpec
from taskhub._tools import STEP_FUNCTION, text_call_instructions

logger = logging.getLogger(__name__)

#: Most tool calls read from one reply; the rest are dropped (and logged).
MAX_TOOL_CALLS = 32


def openai_tools(functions: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Functions as the ``tools`` of a chat-completions request."""
    return [
        {
            "type": "function",
            "function": {
                "name": f.name,
                "description": f.description,
                "parameters": f.input_schema or {"type": "object", "properties": {}},
            },
        }
        for f in functions
    ]


def _call_id(call: ToolCall, index: int) -> str:
    return call.id or f"call_{index}"


def openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """A conversation as chat-completions messages (tool calls and tool results included)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id or "call_0",
                    "content": message.content,
                }
            )
        elif message.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": _call_id(call, index),
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": call.arguments_text
                                if call.arguments_text is not None
                                else json.dumps(call.arguments, ensure_ascii=False),
                            },
                        }
                        for index, call in enumerate(message.tool_calls)
                    ],
                }
            )
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def text_messages(
    messages: Sequence[ChatMessage], functions: Sequence[ToolSpec] | None
) -> list[dict[str, Any]]:
    """A conversation for a model that is not given the tools: every message is plain text.

    An assistant's calls become JSON text (``{"tool_name": ..., "arguments": ...}``), tool
    results become user messages, and, for a tool env, the system message gets
    ``text_call_instructions`` (a single-action env's prompt already says how to act).
    """
    out: list[dict[str, Any]] = []
    instructions = None
    if functions and [f.name for f in functions] != [STEP_FUNCTION]:
        instructions = text_call_instructions(functions)
    for message in messages:
        if message.role == "tool":
            out.append({"role": "user", "content": f"Result:\n{message.content}"})
        elif message.tool_calls:
            calls = [
                json.dumps({"tool_name": c.name, "arguments": c.arguments}, ensure_ascii=False)
                for c in message.tool_calls
            ]
            text = "\n".join(filter(None, [message.content, *calls]))
            out.append({"role": "assistant", "content": text})
        else:
            out.append({"role": message.role, "content": message.content})
    if instructions is not None:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{instructions}"}
        else:
            out.insert(0, {"role": "system", "content": instructions})
    return out


def parse_tool_calls(raw: Any, where: str) -> list[ToolCall]:
    """Read a chat-completions ``message.tool_calls`` list into calls, in order.

    Arguments that are not a JSON object are kept as ``arguments_text`` (the agent shows the
    model why the call cannot be used); entries without a function name are skipped.
    """
    if not isinstance(raw, list):
        return []
    if len(raw) > MAX_TOOL_CALLS:
        logger.info(
            "%s: %d tool calls in one reply; reading the first %d", where, len(raw), MAX_TOOL_CALLS
        )
    calls: list[ToolCall] = []
    for entry in raw[:MAX_TOOL_CALLS]:
        if not isinstance(entry, dict):
            continue
        function = entry.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            continue
        arguments: Any = function.get("arguments") if isinstance(function, dict) else None
        call_id = entry.get("id") if isinstance(entry.get("id"), str) else None
        text: str | None = None
        if isinstance(arguments, str):
            try:
                decoded = loads_bounded(arguments) if arguments.strip() else {}
            except ValueError:  # not JSON, NaN, or nested too deep
                decoded = None
            if isinstance(decoded, dict):
                arguments = decoded
            else:
                text = arguments
        elif arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            text = text if text is not None else json.dumps(arguments)
        if text is not None:
            calls.append(ToolCall(name=name, arguments={}, id=call_id, arguments_text=text[:2000]))
        else:
            try:
                calls.append(ToolCall(name=name, arguments=arguments, id=call_id))
            except ValueError:  # not JSON-compatible values (NaN...)
                calls.append(
                    ToolCall(
                        name=name, arguments={}, id=call_id, arguments_text=str(arguments)[:2000]
                    )
                )
    return calls
