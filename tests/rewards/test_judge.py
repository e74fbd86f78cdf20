"""``judge:MODEL`` against an OpenAI-compatible server on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from taskhub.rewards import DEFAULT_TEMPLATE, parse_judge_score

from taskhub import (
    BoundReward,
    ConfigError,
    RewardSpec,
    UnknownPluginError,
    build_reward,
    create,
    registry,
    score_episode,
)
from tests.rewards.episodes import episode, score
from tests.servers import ModelScript, ModelServer


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    with ModelServer(api_key="judge-key") as server:
        monkeypatch.setenv("TASKHUB_JUDGE_BASE_URL", server.base_url)
        monkeypatch.setenv("TASKHUB_JUDGE_API_KEY", "judge-key")
        yield server


def judge(server: ModelServer, reply: str, name: str = "grader", **script: object) -> str:
    server.scripts[name] = ModelScript(reply=reply, **script)  # type: ignore[arg-type]
    return f"judge:openai/{name}"


def test_the_judge_grades_with_the_reference_and_records_what_pins_it(server: ModelServer) -> None:
    spec = judge(server, "The answer agrees with the reference.\nSCORE: 8")
    record = episode("57", "57", prompt="What is 50 + 7?", metadata={"rubric": "exact numbers"})
    component = score(spec, record)
    assert component.value == 0.8 and component.error is None
    details = component.details
    assert details["model"] == "openai/grader" and details["score"] == 8 and details["out_of"] == 10
    assert details["params"] == {"temperature": 0.0, "max_tokens": 512, "seed": 0}
    assert details["model_details"] == {"endpoint": server.base_url}
    assert len(details["template_sha256"]) == 64
    assert details["reply"].endswith("SCORE: 8")
    body = server.requests[-1]["body"]
    assert body["model"] == "grader" and body["temperature"] == 0.0 and body["seed"] == 0
    prompt = body["messages"][-1]["content"]
    assert "What is 50 + 7?" in prompt and "Reference answer:\n57" in prompt
    assert "Rubric: exact numbers" in prompt and "Answer to grade:\n57" in prompt
    assert server.requests[-1]["headers"]["authorization"] == "Bearer judge-key"
    pinned = build_reward(spec).plugin
    assert pinned.args == {"model": "openai/grader"}
    assert pinned.version == (
        f"openai/grader (endpoint={server.base_url}); temperature 0, seed 0, max_tokens 512, "
        f"scale 10; template sha256:{details['template_sha256'][:16]}"
    )


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("SCORE: 10", 1.0),
        ("**Score:** 7", 0.7),
        ("Rating: 3/5", 0.6),
        ("score: 2 ... on reflection SCORE: 9", 0.9),
        ("SCORE: 4.5 out of 9", 0.5),
    ],
)
def test_score_formats(reply: str, expected: float) -> None:
    raw, out_of = parse_judge_score(reply, 10)
    assert raw / out_of == pytest.approx(expected)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("Looks right to me!", "the judge's reply has no parsable score"),
        ("SCORE: 12", "the judge's score 'SCORE: 12' is outside 0..10"),
        ("SCORE: -1", "outside 0..10"),
    ],
)
def test_a_reply_without_a_usable_score_is_a_reward_error(
    server: ModelServer, reply: str, message: str
) -> None:
    component = score(judge(server, reply), episode("57", "57", task_id="q1"))
    assert component.value is None
    assert "reward 'judge:openai/grader' failed on task 'q1'" in component.error
    assert message in component.error


def test_an_empty_answer_scores_0_without_asking(server: ModelServer) -> None:
    spec = judge(server, "SCORE: 10")
    before = len(server.requests)
    component = score(spec, episode("  ", "57"))
    assert component.value == 0.0 and len(server.requests) == before


def test_a_failing_judge_endpoint_is_a_reward_error(server: ModelServer) -> None:
    spec = judge(server, "SCORE: 10", failures=[(401, "invalid key", {})])
    component = score(spec, episode("57", "57"))
    assert component.value is None and "HTTP 401" in component.error


def test_judge_calls_respect_their_concurrency_limit(server: ModelServer) -> None:
    judge(server, "SCORE: 5", name="slow", delay_s=0.3)
    fn, plugin = create("reward", "judge", model="openai/slow", concurrency=2)
    bound = BoundReward(
        RewardSpec.parse("judge:openai/slow"), fn, plugin, registry.lookup("reward", "judge")
    )

    async def main() -> list[float | None]:
        records = [episode("57", "57", task_id=f"t{i}") for i in range(6)]
        results = await asyncio.gather(*(score_episode(r, [bound]) for r in records))
        return [total for _, total, _ in results]

    started = time.monotonic()
    totals = asyncio.run(main())
    elapsed = time.monotonic() - started
    assert totals == [0.5] * 6
    assert elapsed >= 0.85  # three rounds of two 0.3 s calls; unbounded would take 0.3 s


def test_a_custom_template_sees_the_row_and_a_broken_one_fails_early(server: ModelServer) -> None:
    judge(server, "SCORE: 6", name="custom")
    template = "Rubric: {{ rubric }}\nQ: {{ question }}\nA: {{ answer }}\nReply 'SCORE: N'."
    fn, plugin = create("reward", "judge", model="openai/custom", template=template)
    bound = BoundReward(
        RewardSpec.parse("judge:openai/custom"), fn, plugin, registry.lookup("reward", "judge")
    )
    record = episode("blue", "blue", prompt="Sky colour?", metadata={"rubric": "one word"})
    components, total, _ = asyncio.run(score_episode(record, [bound]))
    assert total == 0.6
    assert server.requests[-1]["body"]["messages"][-1]["content"] == (
        "Rubric: one word\nQ: Sky colour?\nA: blue\nReply 'SCORE: N'."
    )
    assert (
        components[0].details["template_sha256"]
        != build_reward("judge:openai/custom").fn.template_sha256
    )  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="the prompt template does not parse"):
        create("reward", "judge", model="openai/custom", template="{% if %}")
    assert "SCORE: N" in DEFAULT_TEMPLATE


def test_bad_judge_models_fail_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnknownPluginError, match="unknown model 'opnai'. Did you mean 'openai'"):
        build_reward("judge:opnai/gpt-4o-mini")
    monkeypatch.delenv("TASKHUB_JUDGE_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="needs a base URL"):
        build_reward("judge:openai/gpt-4o-mini")
    with pytest.raises(ConfigError, match="not 'provider/model'"):
        build_reward("judge:gpt-4o-mini")
