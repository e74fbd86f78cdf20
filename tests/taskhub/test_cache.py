"""The model-call cache: keyed on the full request, never for unseeded sampling, no repeats."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from taskhub import (
    EvalConfig,
    ModelAuthError,
    Task,
    evaluate,
    read_manifest,
    read_results,
    resume,
)
from taskhub._schema import ChatMessage, SamplingParams
from taskhub.models import (
    CachedModel,
    GenerateRequest,
    Generation,
    TurnContext,
    cacheable,
    request_key,
)
from tests.servers import FakeEnv, ModelScript, ModelServer, Session, observation

pytestmark = pytest.mark.anyio


def _request(**params: Any) -> GenerateRequest:
    task = Task(task_id="t0", reset={"seed": 1})
    context = TurnContext(task, {"question": "say 1"}, None, 0, 7)
    return GenerateRequest(
        [ChatMessage(role="user", content="say 1")], SamplingParams(**params), context
    )


def test_the_key_covers_the_full_request() -> None:
    base = _request(seed=3)
    key = request_key(base, model="openai/m", endpoint="http://x/v1")
    assert key == request_key(_request(seed=3), model="openai/m", endpoint="http://x/v1")
    other_messages = dataclasses.replace(base, messages=[ChatMessage(role="user", content="say 2")])
    changed = [
        request_key(base, model="openai/other", endpoint="http://x/v1"),
        request_key(base, model="openai/m", endpoint="http://y/v1"),
        request_key(_request(seed=4), model="openai/m", endpoint="http://x/v1"),
        request_key(_request(seed=3, max_tokens=9), model="openai/m", endpoint="http://x/v1"),
        request_key(other_messages, model="openai/m", endpoint="http://x/v1"),
    ]
    assert key not in changed and len(set(changed)) == len(changed)


def test_tools_are_part_of_the_key_when_the_request_has_them() -> None:
    """A request type with a ``tools`` field (native tool calling) keys on it."""

    @dataclasses.dataclass(frozen=True)
    class ToolRequest(GenerateRequest):
        tools: list[dict[str, Any]] | None = None

    base = _request(seed=3)
    with_tools = ToolRequest(base.messages, base.params, base.context, tools=[{"name": "add"}])
    other_tools = ToolRequest(base.messages, base.params, base.context, tools=[{"name": "mul"}])
    keys = {request_key(r, model="m", endpoint=None) for r in (base, with_tools, other_tools)}
    assert len(keys) == 3


def test_sampling_without_a_seed_is_never_cached() -> None:
    assert cacheable(_request(temperature=0.0))
    assert cacheable(_request(temperature=0.7, seed=1))
    assert not cacheable(_request(temperature=0.7))


class Counting:
    """A backend that counts its calls."""

    details: dict[str, Any] = {}

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: GenerateRequest) -> Generation:
        self.calls += 1
        return Generation(text=f"reply {self.calls}")

    async def aclose(self) -> None:
        pass


async def test_hits_misses_and_skips(tmp_path: Path) -> None:
    inner = Counting()
    cached = CachedModel(inner, tmp_path / "cache", model="counting/x")
    first = await cached.generate(_request(seed=1))
    again = await cached.generate(_request(seed=1))
    assert (first.text, again.text, inner.calls) == ("reply 1", "reply 1", 1)
    assert (first.usage.cache_misses, again.usage.cache_hits) == (1, 1)
    hot = [await cached.generate(_request(temperature=0.9)) for _ in range(2)]
    assert [g.text for g in hot] == ["reply 2", "reply 3"]  # sampled, no seed: the model answers
    assert dataclasses.astuple(cached.stats) == (1, 1, 2)
    # another process sharing the folder reads the same entry
    other = CachedModel(Counting(), tmp_path / "cache", model="counting/x")
    assert (await other.generate(_request(seed=1))).text == "reply 1"


def _two_step_env() -> FakeEnv:
    def reset(session: Session, data: dict[str, Any]) -> Any:
        session.step_count = 0
        session.target = int(data.get("seed") or 0) % 100
        return observation({"question": f"say {session.target}"})

    def step(session: Session, data: dict[str, Any]) -> Any:
        session.step_count += 1
        done = session.step_count == 2
        return observation({"question": f"again {session.step_count}"}, 1.0 if done else 0.0, done)

    return FakeEnv(on_reset=reset, on_step=step)


def test_a_resumed_run_with_the_cache_repeats_no_call(tmp_path: Path) -> None:
    """The third episode is cut short after its first call; the resume asks again: a hit."""
    answered: list[str] = []
    server = ModelServer()

    def reply(body: dict[str, Any]) -> str:
        answered.append(json.dumps(body, sort_keys=True))
        if len(answered) == 5:  # the next call is refused: a fatal error stops the run
            server.api_key = "now-required"
        return '{"answer": "1"}'

    server.scripts["m"] = ModelScript(reply=reply)
    rows = tmp_path / "tasks.jsonl"
    rows.write_text("".join(json.dumps({"task_id": f"t{i}", "reset": {}}) + "\n" for i in range(4)))
    run_dir = tmp_path / "run"
    with server, _two_step_env() as env:
        config = EvalConfig(
            model="openai/m",
            base_url=server.base_url,
            env=env.url,
            taskset=str(rows),
            concurrency=1,
            cache=str(tmp_path / "cache"),
        )
        with pytest.raises(ModelAuthError):  # the refused call stops the run
            evaluate(config, run_dir=run_dir)
        assert read_manifest(run_dir).status == "failed"
        assert len(read_results(run_dir)) == 2
        server.api_key = None
        second = resume(run_dir)
    assert second.manifest.status == "completed"
    assert len(answered) == len(set(answered)) == 8  # 4 episodes x 2 calls, none twice
    assert second.summary.model_cache == {"hits": 1, "misses": 7}
    assert [r.usage.cache_hits for r in read_results(run_dir)] == [0, 0, 1, 0]
