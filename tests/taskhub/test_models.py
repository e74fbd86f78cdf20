"""Model backends: the OpenAI-compatible client against a loopback server, scripted policies."""

from __future__ import annotations

import re
import time

import pytest

from taskhub import (
    ChatMessage,
    ModelAuthError,
    ModelError,
    SamplingParams,
    Task,
    UnknownPluginError,
)
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
