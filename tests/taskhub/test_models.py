"""Model backends: the OpenAI-compatible client against a loopback server, scripted policies."""

from __future__ import annotations

import json
import re
import time

import jsonschema
import pytest

from taskhub import (
    ChatMessage,
    ModelAuthError,
    ModelError,
    SamplingParams,
    Task,
    UnknownPluginError,
)
from taskhub._schema import ToolCall, ToolSpec
from taskhub.models import GenerateRequest, ModelOptions, TurnContext, load_model
from tests.servers import ModelScript, ModelServer

pytestmark = pytest.mark.anyio

MOVE = {
    "type": "object",
    "properties": {
        "move": {"type": "string", "enum": ["up", "down"]},
        "speed": {"type": "integer", "minimum": 1, "maximum": 3},
        "metadata": {"type": "object"},
    },
    "required": ["move"],
}


def request(
    task: Task | None = None, schema: dict | None = None, step: int = 0, seed: int = 1
) -> GenerateRequest:
    task = task or Task(task_id="t")
    return GenerateRequest(
        messages=[ChatMessage(role="user", content="hi")],
        params=SamplingParams(max_tokens=5, seed=3),
        context=TurnContext(task, {}, schema, step, seed),
    )


async def generate(server: ModelServer, model: str, **options) -> str:
    backend = load_model(f"openai/{model}", ModelOptions(base_url=server.base_url, **options))
    try:
        return (await backend.generate(request())).text
    finally:
        await backend.aclose()


async def test_success_sends_sampling_params_and_records_usage() -> None:
    with ModelServer({"m": ModelScript(reply="hello")}, api_key="k") as server:
        backend = load_model("openai/m", ModelOptions(base_url=server.base_url, api_key="k"))
        generation = await backend.generate(request())
        await backend.aclose()
        body = server.requests[0]["body"]
    assert generation.text == "hello" and generation.finish_reason == "stop"
    assert generation.usage.prompt_tokens == 11 and generation.usage.completion_tokens == 3
    assert body["max_tokens"] == 5 and body["seed"] == 3 and body["temperature"] == 0.0
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_401_is_an_auth_error_not_retried() -> None:
    with ModelServer(api_key="right") as server:
        with pytest.raises(ModelAuthError, match="HTTP 401: the API key is missing or wrong"):
            await generate(server, "m", api_key="wrong")
        assert len(server.requests) == 1


async def test_429_honours_retry_after_then_succeeds() -> None:
    script = ModelScript(reply="ok", failures=[(429, "slow down", {"Retry-After": "0.4"})])
    with ModelServer({"m": script}) as server:
        started = time.monotonic()
        assert await generate(server, "m") == "ok"
        assert time.monotonic() - started >= 0.4
        assert len(server.requests) == 2


async def test_500s_are_retried_with_backoff() -> None:
    script = ModelScript(reply="ok", failures=[(500, "oops", {}), (503, "busy", {})])
    with ModelServer({"m": script}) as server:
        assert await generate(server, "m") == "ok"
        assert len(server.requests) == 3


async def test_persistent_500_gives_up_with_the_status() -> None:
    script = ModelScript(failures=[(500, "broken", {})] * 10)
    with ModelServer({"m": script}) as server:
        with pytest.raises(ModelError, match="answered HTTP 500: broken"):
            await generate(server, "m", max_retries=2)
        assert len(server.requests) == 3


async def test_400_is_not_retried() -> None:
    script = ModelScript(failures=[(400, "context too long", {})])
    with ModelServer({"m": script}) as server:
        with pytest.raises(ModelError, match="HTTP 400: context too long"):
            await generate(server, "m")
        assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "invalid JSON"),
        ('{"choices": []}', "no choices"),
        ('{"choices": [{"message": {"content": [1]}}]}', "not text"),
    ],
    ids=["invalid-json", "empty-choices", "content-not-text"],
)
async def test_malformed_answers(raw: str, message: str) -> None:
    with ModelServer({"m": ModelScript(raw=raw)}) as server:
        with pytest.raises(ModelError, match=re.escape(message)):
            await generate(server, "m", max_retries=1)


async def test_deadline_bounds_the_call_including_retries() -> None:
    with ModelServer({"m": ModelScript(delay_s=1.5)}) as server:
        started = time.monotonic()
        with pytest.raises(ModelError, match="deadline"):
            await generate(server, "m", timeout_s=0.5)
        assert time.monotonic() - started < 3


def test_unknown_provider_has_a_did_you_mean() -> None:
    with pytest.raises(
        UnknownPluginError, match=re.escape("unknown model 'opena'. Did you mean 'openai'?")
    ):
        load_model("opena/x")


async def test_oracle_plays_actions_then_answers() -> None:
    oracle = load_model("scripted/oracle")
    task = Task(task_id="t", oracle_actions=[{"move": "up"}, {"move": "down"}])
    assert (await oracle.generate(request(task, MOVE, step=1))).text == '{"move": "down"}'
    answer_task = Task(task_id="t", answer="42")
    schema = {"properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    assert (await oracle.generate(request(answer_task, schema))).text == '{"answer": "42"}'
    with pytest.raises(ModelError, match="neither oracle_actions nor an answer"):
        await oracle.generate(request(Task(task_id="t"), schema))


async def test_random_policy_is_valid_and_seeded() -> None:
    policy = load_model("scripted/random")
    texts = [(await policy.generate(request(schema=MOVE, step=s, seed=9))).text for s in range(20)]
    again = [(await policy.generate(request(schema=MOVE, step=s, seed=9))).text for s in range(20)]
    assert texts == again
    assert {'"move": "up"' in t or '"move": "down"' in t for t in texts} == {True}
    assert len(set(texts)) > 1


async def test_noop_sends_the_emptiest_action() -> None:
    noop = load_model("scripted/noop")
    assert (await noop.generate(request(schema=MOVE))).text == '{"move": "up"}'
    schema = {"properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    assert (await noop.generate(request(schema=schema))).text == '{"answer": ""}'


COLUMN = {"type": "object", "properties": {"column": {"type": "integer"}}, "required": ["column"]}
TOOLS = (
    ToolSpec(
        name="lookup",
        input_schema={
            "type": "object",
            "properties": {
                "item": {"type": "string", "minLength": 2, "maxLength": 4},
                "limit": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 4},
            },
            "required": ["item", "limit"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name="submit",
        input_schema={
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    ),
)


def tool_request(
    task: Task, step: int = 0, seed: int = 1, functions: tuple[ToolSpec, ...] | None = None
) -> GenerateRequest:
    return GenerateRequest(
        messages=[ChatMessage(role="user", content="hi")],
        params=SamplingParams(max_tokens=5),
        context=TurnContext(task, {}, None, step, seed, TOOLS),
        tools=functions,
    )


async def test_random_draws_only_the_legal_actions_the_observation_lists() -> None:
    policy = load_model("scripted/random")
    for observation, legal in [
        ({"legal_actions": [4, 6]}, [{"column": 4}, {"column": 6}]),
        ({"valid_actions": [{"column": 1}]}, [{"column": 1}]),
    ]:
        for step in range(12):
            context = TurnContext(Task(task_id="t"), observation, COLUMN, step, 5)
            reply = await policy.generate(
                GenerateRequest([ChatMessage(role="user", content="hi")], SamplingParams(), context)
            )
            assert json.loads(reply.text) in legal
    # without a list, an unbounded integer stays small rather than anywhere in 0..100
    unbounded = [
        json.loads((await policy.generate(request(schema=COLUMN, step=s))).text)["column"]
        for s in range(30)
    ]
    assert set(unbounded) <= set(range(0, 11)) and len(set(unbounded)) > 3


async def test_random_calls_listed_tools_with_valid_arguments() -> None:
    policy = load_model("scripted/random")
    validators = {t.name: jsonschema.Draft202012Validator(t.input_schema) for t in TOOLS}
    replies = [await policy.generate(tool_request(Task(task_id="t"), step=s)) for s in range(40)]
    names = set()
    for reply in replies:
        action = json.loads(reply.text)
        names.add(action["tool_name"])
        assert set(action) == {"tool_name", "arguments"}
        validators[action["tool_name"]].validate(action["arguments"])
    assert names == {"lookup", "submit"}
    again = [await policy.generate(tool_request(Task(task_id="t"), step=s)) for s in range(40)]
    assert [r.text for r in replies] == [r.text for r in again]


async def test_scripted_policies_answer_with_tool_calls_when_functions_are_offered() -> None:
    calls = [
        {"type": "call_tool", "tool_name": "lookup", "arguments": {"item": "rice", "limit": 1}},
        {"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "2.35"}},
    ]
    task = Task(task_id="t", oracle_actions=calls)
    oracle = load_model("scripted/oracle")
    reply = await oracle.generate(tool_request(task, step=1, functions=TOOLS))
    assert reply.text == "" and reply.tool_calls == [
        ToolCall(name="submit", arguments={"answer": "2.35"}, id="call_1")
    ]
    text = load_model("scripted/oracle", ModelOptions(tool_calling="text"))
    reply = await text.generate(tool_request(task, step=0, functions=TOOLS))
    assert json.loads(reply.text) == {"tool_name": "lookup", "arguments": calls[0]["arguments"]}
    # a tool env row with only an answer: the oracle submits it through the answer tool
    answer = await oracle.generate(tool_request(Task(task_id="a", answer="7")))
    assert json.loads(answer.text) == {"tool_name": "submit", "arguments": {"answer": "7"}}
    noop = await load_model("scripted/noop").generate(tool_request(Task(task_id="t")))
    assert json.loads(noop.text) == {"tool_name": "lookup", "arguments": {"item": "aa", "limit": 1}}
    # a single-action env offered as one function: the policies keep answering in JSON text
    step = ToolSpec(name="step", input_schema=MOVE)
    context = TurnContext(Task(task_id="t", oracle_actions=[{"move": "up"}]), {}, MOVE, 0, 1)
    reply = await oracle.generate(
        GenerateRequest(
            [ChatMessage(role="user", content="hi")], SamplingParams(), context, (step,)
        )
    )
    assert (reply.text, reply.tool_calls) == ('{"move": "up"}', [])


class _Proxy:
    """A loopback HTTP proxy that answers every request itself with one chat completion."""

    def __init__(self) -> None:
        import socketserver
        import threading

        lines: list[str] = []
        self.lines = lines

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                lines.append(self.rfile.readline().decode().strip())
                length = 0
                while (header := self.rfile.readline().strip()) != b"":
                    name, _, value = header.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                self.rfile.read(length)
                body = json.dumps(
                    {"choices": [{"message": {"content": "via proxy"}, "finish_reason": "stop"}]}
                ).encode()
                self.wfile.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_the_environments_proxy_carries_calls_unless_no_proxy_names_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on: only the proxy can answer
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    proxy = _Proxy()
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        options = {"base_url": f"http://127.0.0.1:{closed}/v1", "timeout_s": 10, "max_retries": 0}
        backend = load_model("openai/m", ModelOptions(**options))
        try:
            for _ in range(2):  # read once, used for every call
                assert (await backend.generate(request())).text == "via proxy"
        finally:
            await backend.aclose()
        line = f"POST http://127.0.0.1:{closed}/v1/chat/completions HTTP/1.1"
        assert proxy.lines == [line, line]
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        backend = load_model("openai/m", ModelOptions(**options))
        try:
            with pytest.raises(ModelError, match="Connect"):
                await backend.generate(request())
        finally:
            await backend.aclose()
        assert len(proxy.lines) == 2
    finally:
        proxy.close()
