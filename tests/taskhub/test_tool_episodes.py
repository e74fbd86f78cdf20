"""Tool envs end to end: tools discovered, offered, called and recorded; honest outcomes.

The ledger reference env (MCP, ``openenv`` server library) runs once for the module; scriptable
envs stand for the cases it cannot show (null rewards, refused actions, the 0.3 dialect).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskhub import EvalConfig, evaluate, read_results
from tests.reference_envs.refenv_helpers import EnvServer, read_rows
from tests.servers import (
    FakeEnv,
    ModelScript,
    ModelServer,
    Session,
    error,
    observation,
    tool_message,
)

TOOL_ACTION = {
    "type": "object",
    "properties": {
        "type": {"const": "call_tool", "default": "call_tool", "type": "string"},
        "tool_name": {"type": "string"},
        "arguments": {"type": "object"},
        "metadata": {"type": "object"},
    },
    "required": ["tool_name"],
}
ECHO = {
    "name": "echo",
    "description": "Say something back.",
    "input_schema": {
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    },
}


def run(tmp_path: Path, **config: Any):
    result = evaluate(EvalConfig(**config), output_dir=tmp_path)
    return result, sorted(read_results(result.run_dir), key=lambda r: r.task_id)


@pytest.mark.parametrize("mode", ["auto", "text"])
def test_the_oracle_plays_the_ledger_through_its_tools(
    ledger_server: EnvServer, tmp_path: Path, mode: str
) -> None:
    result, records = run(
        tmp_path,
        model="scripted/oracle",
        taskset="ledger",
        env=ledger_server.url,
        limit=6,
        tool_calling=mode,
    )
    assert result.summary.mean_reward == 1.0 and len(records) == 6
    env, model = result.manifest.env, result.manifest.model
    assert env is not None and [t.name for t in env.tools or []] == [
        "lookup",
        "calculate",
        "submit",
    ]
    assert (env.tool_discovery, env.dialect) == ("list_tools", "openenv-0.4+")
    assert model.tool_calling == ("native" if mode == "auto" else "text")
    rows = {r["task_id"]: r for r in read_rows("ledger", "test")}
    for record in records:
        calls = rows[record.task_id]["oracle_actions"]
        assert [s.action for s in record.steps] == calls
        for step, call in zip(record.steps, calls, strict=True):
            assert step.tool_call is not None and step.tool_call.name == call["tool_name"]
            assert step.tool_call.arguments == call["arguments"] and step.tool_error is None
        assert record.steps[-1].tool_result == "correct"
        assert (
            json.loads(record.steps[0].tool_result or "")["item"] == calls[0]["arguments"]["item"]
        )
        roles = [m.role for m in record.messages]
        if mode == "auto":
            assert roles == ["system", "user"] + ["assistant", "tool"] * len(calls)
            assert record.messages[3].tool_call_id == record.messages[2].tool_calls[0].id
        else:
            assert "tool" not in roles
            assert '{"tool_name": NAME, "arguments": {...}}' in record.messages[0].content


@pytest.mark.parametrize("policy", ["noop", "random"])
def test_doing_nothing_or_anything_stays_below_the_oracle(
    ledger_server: EnvServer, tmp_path: Path, policy: str
) -> None:
    result, records = run(
        tmp_path, model=f"scripted/{policy}", taskset="ledger", env=ledger_server.url, limit=8
    )
    assert result.summary.mean_reward == 0.0
    assert all(r.outcome == "scored" for r in records)
    names = {s.tool_call.name for r in records for s in r.steps if s.tool_call}
    assert names <= {"lookup", "calculate", "submit"}


def ledger_model(body: dict) -> dict | str:
    """A tool-calling model that knows test row 0: one bad call, then both calls in one reply."""
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup", "calculate", "submit"]
    if body["messages"][-1]["role"] == "user":
        return tool_message(("lookup_item", {"item": "pasta"}))
    return tool_message(("lookup", {"item": "pasta"}), ("submit", {"answer": "$9.04"}))


def test_an_openai_model_calls_tools_several_per_reply(
    ledger_server: EnvServer, tmp_path: Path
) -> None:
    with ModelServer({"m": ModelScript(reply=ledger_model)}) as server:
        result, (record,) = run(
            tmp_path,
            model="openai/m",
            base_url=server.base_url,
            taskset="ledger",
            env=ledger_server.url,
            limit=1,
        )
        second = server.requests[1]["body"]["messages"]
    assert (
        record.reward == 1.0
        and record.num_steps == 2
        and result.manifest.model.tool_calling == "native"
    )
    assert (
        record.steps[0].format_errors
        and "there is no function 'lookup_item'" in (record.steps[0].format_errors[0])
    )
    assert second[-1]["role"] == "tool" and "Did you mean 'lookup'" in second[-1]["content"]
    assert [s.tool_call.name for s in record.steps if s.tool_call] == ["lookup", "submit"]
    assert [m.role for m in record.messages][-3:] == ["assistant", "tool", "tool"]


def test_a_server_without_tool_support_plays_in_text(
    ledger_server: EnvServer, tmp_path: Path
) -> None:
    replies = iter(
        [
            '{"name": "lookup", "arguments": {"item": "pasta"}}',
            '```json\n{"tool_name": "submit", "arguments": {"answer": "9.04"}}\n```',
        ]
    )
    script = ModelScript(
        reply=lambda body: next(replies), refuse_tools=(400, '"auto" tool choice requires flags')
    )
    with ModelServer({"m": script}) as server:
        result, (record,) = run(
            tmp_path,
            model="openai/m",
            base_url=server.base_url,
            taskset="ledger",
            env=ledger_server.url,
            limit=1,
        )
    assert record.reward == 1.0
    model = result.manifest.model
    assert model.tool_calling == "text" and "tool choice" in str(
        model.details["tool_calling_fallback"]
    )


def tool_env_step(session: Session, data: dict) -> Any:
    """An MCP-style env whose calls all return null rewards; three calls end the episode."""
    if data.get("type") == "list_tools":
        return observation({"tools": [ECHO]}, None, False)
    session.step_count += 1
    if data.get("tool_name") != "echo":
        result = {"tool_name": data.get("tool_name"), "result": None}
        result["error"] = {"error_type": "tool_not_found", "message": "no such tool"}
        return observation(result, None, session.step_count >= 3)
    text = str(data.get("arguments", {}).get("message"))
    content = {"content": [{"type": "text", "text": text}]}
    return observation(
        {"tool_name": "echo", "result": content, "error": None}, None, session.step_count >= 3
    )


@pytest.mark.parametrize("fresh", [False, True])
def test_a_tool_run_plays_on_the_session_its_probe_opened(tmp_path: Path, fresh: bool) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task_id": "a", "reset": {"seed": 1}}\n{"task_id": "b", "reset": {}}\n')
    with FakeEnv(on_step=tool_env_step, action_schema=TOOL_ACTION) as env:
        _, records = run(
            tmp_path,
            model="scripted/random",
            taskset=str(tasks),
            env=env.url,
            concurrency=1,
            fresh_session=fresh,
        )
        kinds = [f["type"] if f["type"] != "step" else f["data"].get("type") for f in env.frames]
    assert [r.outcome for r in records] == ["scored", "scored"]
    # the probe's reset, then the tools listed on the same session
    assert kinds[:2] == ["reset", "list_tools"]
    # one session for the probe, the listing and both episodes; with --fresh-session the probe's
    # is closed and each episode gets its own
    assert env.sessions_opened == (3 if fresh else 1)


def test_null_step_rewards_stay_null(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task_id": "a", "reset": {"seed": 1}}\n')
    with FakeEnv(on_step=tool_env_step, action_schema=TOOL_ACTION) as env:
        result, (record,) = run(tmp_path, model="scripted/random", taskset=str(tasks), env=env.url)
    assert record.outcome == "scored" and record.num_steps == 3
    assert [s.reward for s in record.steps] == [None, None, None]
    assert record.env_reward is None
    (component,) = record.reward_components
    assert component.value == 0.0 and component.details == {"null_rewards": 3, "steps": 3}
    assert all(s.tool_call and s.tool_call.name == "echo" for s in record.steps)
    assert result.manifest.env and result.manifest.env.tools
    assert result.manifest.env.tools[0].name == "echo"


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (error("EXECUTION_ERROR", "37 is not a valid Action"), "agent_error"),
        (error("EXECUTION_ERROR", "column 9 is out of range"), "agent_error"),
        (error("VALIDATION_ERROR", "Invalid message"), "agent_error"),
        (error("EXECUTION_ERROR", "database is locked"), "infra_error"),
    ],
)
def test_an_action_the_env_refuses_is_the_agent_s_error(
    tmp_path: Path, reply: dict, outcome: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task_id": "a", "reset": {"seed": 1}, "oracle_actions": [{"column": 9}]}\n')
    schema = {"type": "object", "properties": {"column": {"type": "integer"}}}
    with FakeEnv(on_step=lambda s, d: reply, action_schema=schema) as env:
        _, (record,) = run(
            tmp_path, model="scripted/oracle", taskset=str(tasks), env=env.url, max_retries=0
        )
    assert record.outcome == outcome and record.error is not None
    if outcome == "agent_error":
        assert record.error.type == "AgentFormatError" and record.reward == 0.0
        assert "the env rejected the action {'column': 9}" in record.error.message


def test_the_wire_dialect_and_openenv_version_are_recorded(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task_id": "a", "reset": {"seed": 1}, "answer": "1"}\n')
    with FakeEnv(dialect="0.3", metadata={"name": "old", "openenv_version": "0.2.1"}) as env:
        result, _ = run(tmp_path, model="scripted/oracle", taskset=str(tasks), env=env.url)
    info = result.manifest.env
    assert info is not None and (info.transport, info.dialect, info.server_openenv) == (
        "ws",
        "openenv-0.3",
        "0.2.1",
    )
    assert info.tools is None and result.manifest.model.tool_calling == "native"


def step_caller(body: dict) -> dict:
    """A tool-calling model for a single-action env: it calls ``step`` with a valid action."""
    (function,) = body["tools"]
    assert function["function"]["name"] == "step"
    properties = function["function"]["parameters"]["properties"]
    assert "metadata" not in properties
    if "move" in properties:
        return tool_message(("step", {"move": properties["move"]["enum"][0]}))
    return tool_message(("step", {"answer": "42"}))


@pytest.mark.parametrize("name", ["arith", "gridworld"])
def test_a_tool_calling_model_plays_every_reference_env(name: str, tmp_path: Path) -> None:
    with ModelServer({"m": ModelScript(reply=step_caller)}) as server:
        result, records = run(
            tmp_path, model="openai/m", base_url=server.base_url, taskset=name, limit=2, max_steps=3
        )
    assert result.manifest.model.tool_calling == "native"
    assert all(r.outcome == "scored" and r.steps for r in records)
    for record in records:
        assert all(s.tool_call is not None and s.tool_call.name == "step" for s in record.steps)
        assert [m.role for m in record.messages][:3] == ["system", "user", "assistant"]
