"""Tool calling: the toolbox an env offers a model, and native tool calls over the OpenAI API."""

from __future__ import annotations

import json
import re

import pytest

from taskhub import AgentFormatError, ChatMessage, ModelError, SamplingParams, Task
from taskhub._agent import parse_action
from taskhub._schema import ToolCall, ToolSpec
from taskhub._tools import STEP_FUNCTION, Toolbox, function_name
from taskhub.env._tools import is_tool_env, parse_tools, tool_result
from taskhub.models import GenerateRequest, ModelOptions, TurnContext, load_model
from tests.servers import ModelScript, ModelServer, tool_message

pytestmark = pytest.mark.anyio

LOOKUP = ToolSpec(
    name="lookup",
    description="Look an item up.",
    input_schema={
        "type": "object",
        "properties": {"item": {"type": "string"}},
        "required": ["item"],
        "additionalProperties": False,
    },
)
SUBMIT = ToolSpec(
    name="submit",
    description="Submit the answer.",
    input_schema={
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    },
)
CALL_TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object"},
        "type": {"const": "call_tool", "default": "call_tool", "type": "string"},
        "tool_name": {"type": "string"},
        "arguments": {"type": "object"},
    },
    "required": ["tool_name"],
}
MOVE_SCHEMA = {
    "type": "object",
    "properties": {
        "move": {"type": "string", "enum": ["up", "down"]},
        "metadata": {"type": "object"},
    },
    "required": ["move"],
}


def tools_box() -> Toolbox:
    box = Toolbox.for_env([LOOKUP, SUBMIT], CALL_TOOL_SCHEMA)
    assert box is not None
    return box


def test_a_tool_env_offers_its_tools_and_calls_become_call_tool_actions() -> None:
    box = tools_box()
    assert box.mcp and [f.name for f in box.functions] == ["lookup", "submit"]
    action = box.action(ToolCall(name="lookup", arguments={"item": "rice"}, id="c1"))
    assert action == {"type": "call_tool", "tool_name": "lookup", "arguments": {"item": "rice"}}
    assert box.call(action, "c1") == ToolCall(name="lookup", arguments={"item": "rice"}, id="c1")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            ToolCall(name="lookp"),
            "there is no function 'lookp'; call one of lookup, submit. Did you mean 'lookup'?",
        ),
        (
            ToolCall(name="lookup", arguments={}),
            "the arguments of lookup do not match its schema: 'item' is a required property",
        ),
        (ToolCall(name="lookup", arguments={"item": 3}), "item: 3 is not of type 'string'"),
        (
            ToolCall(name="lookup", arguments_text="{item: rice"),
            "the arguments of lookup are not a JSON object: '{item: rice'",
        ),
    ],
)
def test_unusable_calls_are_format_errors_that_say_why(call: ToolCall, message: str) -> None:
    with pytest.raises(AgentFormatError, match=re.escape(message)):
        tools_box().action(call)


def test_a_single_action_env_offers_one_step_function() -> None:
    box = Toolbox.for_env(None, MOVE_SCHEMA)
    assert box is not None and not box.mcp
    (step,) = box.functions
    assert step.name == STEP_FUNCTION and "metadata" not in step.input_schema["properties"]
    assert box.action(ToolCall(name="step", arguments={"move": "up"})) == {"move": "up"}
    with pytest.raises(AgentFormatError, match="'left' is not one of"):
        box.action(ToolCall(name="step", arguments={"move": "left"}))
    assert Toolbox.for_env(None, None) is None
    assert Toolbox.for_env(None, {"type": "object", "properties": {"metadata": {}}}) is None


def test_text_replies_are_read_as_calls_in_many_shapes() -> None:
    box = tools_box()
    expected = {"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "4"}}
    for reply in [
        '{"tool_name": "submit", "arguments": {"answer": "4"}}',
        'I will submit.\n```json\n{"name": "submit", "args": {"answer": "4"}}\n```',
        '{"tool": "submit", "parameters": "{\\"answer\\": \\"4\\"}"}',
        '{"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "4"}}',
    ]:
        assert parse_action(reply, box.text_schema, normalize=box.normalize) == expected
    with pytest.raises(AgentFormatError, match="does not match the action schema"):
        parse_action('{"tool_name": "erase", "arguments": {}}', box.text_schema, box.normalize)
    step = Toolbox.for_env(None, MOVE_SCHEMA)
    assert step is not None
    wrapped = '{"tool_name": "step", "arguments": {"move": "down"}}'
    assert parse_action(wrapped, step.text_schema, normalize=step.normalize) == {"move": "down"}


def test_tool_names_become_safe_function_names_and_map_back() -> None:
    odd = ToolSpec(name="files.read/v2", input_schema={"type": "object", "properties": {}})
    clash = ToolSpec(name="files.read:v2", input_schema={"type": "object", "properties": {}})
    box = Toolbox.for_env([odd, clash], CALL_TOOL_SCHEMA)
    assert box is not None
    names = [f.name for f in box.functions]
    assert names[0] == function_name(odd.name) == "files_read_v2" and len(set(names)) == 2
    assert box.action(ToolCall(name=names[1]))["tool_name"] == "files.read:v2"
    assert box.call({"tool_name": "files.read:v2", "arguments": {}}).name == names[1]


def test_hostile_argument_schemas_do_not_stall_validation() -> None:
    evil = ToolSpec(
        name="grep",
        input_schema={
            "type": "object",
            "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}},
        },
    )
    box = Toolbox.for_env([evil, ToolSpec(name="bad", input_schema={"type": 5})], None)
    assert box is not None
    slow = "a" * 40 + "!"
    assert box.action(ToolCall(name="grep", arguments={"q": slow}))["arguments"] == {"q": slow}
    assert box.action(ToolCall(name="bad", arguments={"x": 1}))["tool_name"] == "bad"


def test_the_toolbox_describes_its_functions_for_text_mode() -> None:
    assert tools_box().describe() == (
        "- lookup(item: string): Look an item up.\n- submit(answer: string): Submit the answer."
    )


def test_tool_listings_and_results_are_read_from_both_spellings() -> None:
    assert is_tool_env(CALL_TOOL_SCHEMA) and not is_tool_env(MOVE_SCHEMA)
    tools = parse_tools(
        [
            {"name": "a", "description": "x", "input_schema": {"type": "object"}},
            {"name": "b", "inputSchema": {"type": "object", "properties": {}}},
        ],
        "here",
    )
    assert [(t.name, t.input_schema) for t in tools] == [
        ("a", {"type": "object"}),
        ("b", {"type": "object", "properties": {}}),
    ]
    for bad, message in [
        ({"tools": []}, "tools must be a list"),
        ([{"description": "no name"}], "tool 0 has no usable name"),
        ([{"name": "a"}, {"name": "a"}], "tool 'a' is listed twice"),
        ([{"name": "a", "input_schema": "x"}], "non-object schema"),
    ]:
        with pytest.raises(Exception, match=message):
            parse_tools(bad, "here")
    ok = {"tool_name": "a", "result": {"content": [{"type": "text", "text": "12"}]}, "error": None}
    assert tool_result(ok) == ("12", None)
    failed = {"tool_name": "a", "error": {"error_type": "invalid_args", "message": "no"}}
    assert tool_result(failed) == ("error (invalid_args): no", "invalid_args: no")
    assert tool_result({"result": {"data": {"x": 1}}}) == ('{"x": 1}', None)


# --- native tool calling over the OpenAI API -----------------------------------------------


def request(tools: tuple[ToolSpec, ...] | None = (LOOKUP, SUBMIT)) -> GenerateRequest:
    messages = [
        ChatMessage(role="system", content="Use the tools."),
        ChatMessage(role="user", content="What does rice cost?"),
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(name="lookup", arguments={"item": "rice"}, id="call_a")],
        ),
        ChatMessage(role="tool", content='{"price": "2.35"}', tool_call_id="call_a"),
    ]
    return GenerateRequest(
        messages=messages,
        params=SamplingParams(max_tokens=20),
        context=TurnContext(Task(task_id="t"), {}, CALL_TOOL_SCHEMA, 1, 0, (LOOKUP, SUBMIT)),
        tools=tools,
    )


def two_calls(body: dict) -> dict:
    return tool_message(("submit", {"answer": "2.35"}), ("lookup", "{not json"), content="ok")


async def test_functions_go_out_as_tools_and_tool_calls_come_back_in_order() -> None:
    with ModelServer({"m": ModelScript(reply=two_calls)}) as server:
        backend = load_model("openai/m", ModelOptions(base_url=server.base_url))
        generation = await backend.generate(request())
        await backend.aclose()
        body = server.requests[0]["body"]
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup", "submit"]
    assert body["tools"][0]["function"]["parameters"] == LOOKUP.input_schema
    assert body["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"item": "rice"}'},
            }
        ],
    }
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": '{"price": "2.35"}',
    }
    assert generation.text == "ok" and generation.finish_reason == "tool_calls"
    assert generation.tool_calls == [
        ToolCall(name="submit", arguments={"answer": "2.35"}, id="call_0"),
        ToolCall(name="lookup", arguments={}, id="call_1", arguments_text="{not json"),
    ]
    assert backend.tool_calling == "native"


async def test_a_server_that_refuses_tools_gets_text_from_then_on() -> None:
    refusal = (500, '{"error": {"message": "tools param requires --jinja flag"}}')
    script = ModelScript(reply='{"tool_name": "submit", "arguments": {"answer": "1"}}')
    script.refuse_tools = refusal
    with ModelServer({"m": script}) as server:
        backend = load_model("openai/m", ModelOptions(base_url=server.base_url, max_retries=0))
        first = await backend.generate(request())
        second = await backend.generate(request())
        await backend.aclose()
        bodies = [r["body"] for r in server.requests]
    assert ["tools" in b for b in bodies] == [True, False, False]
    assert first.text == second.text and first.tool_calls == []
    assert backend.tool_calling == "text"
    assert "tools param requires --jinja" in str(backend.details["tool_calling_fallback"])
    text_body = bodies[1]["messages"]
    assert text_body[0]["role"] == "system"
    assert '{"tool_name": NAME, "arguments": {...}}' in text_body[0]["content"]
    assert "- lookup(item: string)" in text_body[0]["content"]
    assert text_body[2] == {
        "role": "assistant",
        "content": '{"tool_name": "lookup", "arguments": {"item": "rice"}}',
    }
    assert text_body[3] == {"role": "user", "content": 'Result:\n{"price": "2.35"}'}


async def test_native_only_names_the_refusal_and_text_never_sends_tools() -> None:
    script = ModelScript(refuse_tools=(400, "this model does not support tools"))
    with ModelServer({"m": script}) as server:
        native = load_model(
            "openai/m", ModelOptions(base_url=server.base_url, tool_calling="native")
        )
        with pytest.raises(ModelError, match="refused the function tools .* --tool-calling text"):
            await native.generate(request())
        await native.aclose()
        text = load_model("openai/m", ModelOptions(base_url=server.base_url, tool_calling="text"))
        assert text.tool_calling == "text"  # type: ignore[attr-defined]
        assert (await text.generate(request())).text == "42"
        await text.aclose()
        assert ["tools" in r["body"] for r in server.requests] == [True, False]


async def test_a_request_without_tools_is_plain_chat() -> None:
    with ModelServer() as server:
        backend = load_model("openai/m", ModelOptions(base_url=server.base_url))
        await backend.generate(request(tools=None))
        await backend.aclose()
        body = server.requests[0]["body"]
    assert "tools" not in body
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert json.loads(body["messages"][2]["content"]) == {
        "tool_name": "lookup",
        "arguments": {"item": "rice"},
    }
