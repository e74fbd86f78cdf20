"""A scripted policy's transcript: rendered while the env works, the same as a reading model's.

Scripted policies act on the observation and never read the chat messages, so the agent loop
renders their prompts after sending each action, while the env works on it. These tests hold
that to the transcript a model that reads every message gets (the ``reading`` backend below:
the same oracle, reading), on the reference envs and when a template fails mid-episode.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import yaml

from taskhub import (
    ConfigError,
    EnvClosedError,
    EvalConfig,
    evaluate,
    model_backend,
    read_results,
)
from taskhub._taskset import builtin_tasksets
from taskhub.env import EnvClient
from taskhub.models import GenerateRequest, Generation, ModelOptions
from taskhub.models._base import load_model
from tests.reference_envs.refenv_helpers import EnvServer
from tests.servers import FakeEnv, Session, counting_step

VOLATILE = {"run_id", "started_at", "duration_s", "env_time_s", "model_time_s"}


class _Reading:
    """``scripted/NAME``, reading the conversation as a language model does."""

    reads_messages = True

    def __init__(self, name: str, options: ModelOptions) -> None:
        self.policy = load_model(f"scripted/{name}", options)
        self.details = self.policy.details
        self.tool_calling = getattr(self.policy, "tool_calling", "text")
        self.seen: list[int] = []

    async def generate(self, request: GenerateRequest) -> Generation:
        self.seen.append(len(request.messages))
        return await self.policy.generate(request)

    async def aclose(self) -> None:
        await self.policy.aclose()


@model_backend("reading", override=True)
def reading(name: str, options: ModelOptions) -> _Reading:
    """The scripted policy ``name``, given every message before each call."""
    return _Reading(name, options)


def transcripts(run_dir: Path) -> list[dict]:
    records = sorted(read_results(run_dir), key=lambda r: (r.task_id, r.sample))
    out = []
    for record in records:
        data = record.model_dump(mode="json", exclude=VOLATILE)
        for step in data["steps"]:
            step.pop("latency_s")
            step.pop("model_latency_s")
        data.pop("episode_id")
        out.append(data)
    return out


def run(tmp_path: Path, model: str, **config: object) -> list[dict]:
    result = evaluate(EvalConfig(model=model, **config), output_dir=tmp_path / model)
    return transcripts(result.run_dir)


@pytest.mark.parametrize("name", ["arith", "gridworld"])
def test_a_scripted_policys_transcript_is_the_one_a_reading_model_gets(
    name: str, tmp_path: Path
) -> None:
    config = {"taskset": name, "limit": 8, "concurrency": 2, "seed": 5}
    blind = run(tmp_path, "scripted/oracle", **config)
    reading_ = run(tmp_path, "reading/oracle", **config)
    assert blind == reading_
    assert all(r["messages"] and r["outcome"] == "scored" for r in blind)
    # user prompts, assistant replies: every turn has both, in order
    roles = [m["role"] for m in blind[0]["messages"]]
    assert roles[0] == "system" and roles[1:] == ["user", "assistant"] * (len(roles) // 2)


@pytest.mark.parametrize("policy", ["oracle", "random"])
def test_a_tool_envs_transcript_with_native_calls_is_the_one_a_reading_model_gets(
    ledger_server: EnvServer, tmp_path: Path, policy: str
) -> None:
    config = {"taskset": "ledger", "env": ledger_server.url, "limit": 6, "seed": 3}
    blind = run(tmp_path, f"scripted/{policy}", **config)
    reading_ = run(tmp_path, f"reading/{policy}", **config)
    assert blind == reading_
    assert any(m["role"] == "tool" for r in blind for m in r["messages"])


def failing_taskset(folder: Path) -> Path:
    """gridworld's rows under a card whose step template fails from the third turn on."""
    shutil.copytree(builtin_tasksets()["gridworld"], folder)
    _, header, body = (folder / "README.md").read_text().split("---\n", 2)
    card = yaml.safe_load(header)
    card["taskhub"]["step_template"] = (
        "{% if step >= 2 %}{{ no_such_variable }}{% endif %}{{ observation_text }}"
    )
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n{body}")
    return folder


def test_a_template_that_fails_mid_episode_fails_it_at_the_same_turn_either_way(
    tmp_path: Path,
) -> None:
    folder = failing_taskset(tmp_path / "taskset")
    config = {"taskset": str(folder), "env": "gridworld", "limit": 4, "split": "test"}
    blind = run(tmp_path, "scripted/oracle", **config)
    reading_ = run(tmp_path, "reading/oracle", **config)
    assert blind == reading_
    long = [r for r in blind if r["outcome"] == "infra_error"]
    assert long, "no episode reached its third turn"
    for record in long:
        assert record["error"]["type"] == "ConfigError"
        assert "no_such_variable" in record["error"]["message"]
        assert record["num_steps"] == 2  # the action after the failed prompt was never recorded
        assert record["messages"][-1]["role"] == "assistant"


def test_prompts_are_rendered_after_the_action_is_sent() -> None:
    stepped = asyncio.Event()
    loop_of_test: list[asyncio.AbstractEventLoop] = []

    def on_step(session: Session, data: dict) -> object:
        loop_of_test[0].call_soon_threadsafe(stepped.set)
        return counting_step(session, data)

    async def go(url: str) -> None:
        loop_of_test.append(asyncio.get_running_loop())
        async with EnvClient(url) as env:
            await env.reset(seed=4)

            async def work() -> None:
                # the server has the action before the work ends: it was sent first
                await asyncio.wait_for(stepped.wait(), 10)

            result = await env.step_while({"answer": "4"}, work)
            assert result.reward == 1.0 and result.done

            await env.reset(seed=2)

            async def broken() -> None:
                raise ConfigError("a template failed")

            with pytest.raises(ConfigError, match="a template failed"):
                await env.step_while({"answer": "2"}, broken)
            # the reply was never read: the session was dropped rather than left out of step
            assert not env.is_open
            with pytest.raises(EnvClosedError):
                await env.reset(seed=1)

    with FakeEnv(on_step=on_step) as fake:
        asyncio.run(go(fake.url))
