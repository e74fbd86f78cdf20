"""Training on a tool env: one typed method per remote tool, and TRL's dict of environments."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator

import pytest

from taskhub import load_taskset
from taskhub.training import (
    TasksetEnvironment,
    TrainingEnv,
    environment_factories,
    taskset_dataset,
)
from tests.reference_envs.refenv_helpers import EnvServer


@pytest.fixture(scope="module")
def ledger_env(ledger_server: EnvServer) -> Iterator[TrainingEnv]:
    with TrainingEnv(load_taskset("ledger"), env=ledger_server.url) as env:
        yield env


def tools_of(environment: object) -> set[str]:
    return {
        name
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if not name.startswith("_")
    }


def test_each_remote_tool_is_one_typed_method(ledger_env: TrainingEnv) -> None:
    from transformers.utils import get_json_schema

    environment = TasksetEnvironment(ledger_env)
    assert isinstance(environment, TasksetEnvironment)
    assert type(environment).__name__ == "LedgerTools"
    # TRL makes every public function of the class a tool (reset and get_reward aside)
    assert tools_of(environment) == {"lookup", "calculate", "submit", "reset", "get_reward"}
    assert not hasattr(environment, "step")
    schema = get_json_schema(environment.lookup)["function"]
    assert schema["name"] == "lookup" and schema["description"].startswith("Look an item")
    assert schema["parameters"]["properties"]["item"]["type"] == "string"
    assert schema["parameters"]["required"] == ["item"]
    assert type(TasksetEnvironment(ledger_env)) is type(environment)  # one class per env


def test_a_rollout_calls_the_tools_and_is_scored_as_evaluation(ledger_env: TrainingEnv) -> None:
    task = ledger_env.taskset.tasks("test")[0]
    row = taskset_dataset(ledger_env, tasks=[task])[0]
    system = row["prompt"][0]["content"]
    assert "through its tools" in system and "tool_name" not in system  # the trainer calls
    environment = TasksetEnvironment(ledger_env)
    assert environment.reset(**row) is None
    looked_up = environment.lookup(item="pasta")  # type: ignore[attr-defined]
    assert json.loads(looked_up.splitlines()[-1])["item"] == "pasta"
    refused = environment.lookup(item=3)  # type: ignore[attr-defined]
    assert refused.startswith("The call could not be used") and "not of type 'string'" in refused
    done = environment.submit(answer=str(task.answer))  # type: ignore[attr-defined]
    assert "correct" in done and done.endswith("The episode is over.")
    assert environment.get_reward() == 1.0
    record = environment.record
    assert record is not None and record.outcome == "scored"
    assert [s.tool_call.name for s in record.steps if s.tool_call] == ["lookup", "submit"]
    assert record.steps[-1].tool_result == "correct"


def test_several_envs_use_trl_s_dict_of_factories(ledger_env: TrainingEnv) -> None:
    with TrainingEnv(load_taskset("arith")) as arith_env:
        factories = environment_factories({"arith": arith_env, "ledger": ledger_env})
        assert set(factories) == {"arith", "ledger"}
        arith, ledger = factories["arith"](), factories["ledger"]()
        assert type(arith) is TasksetEnvironment and tools_of(arith) == {
            "step",
            "reset",
            "get_reward",
        }
        assert type(ledger).__name__ == "LedgerTools"
        rows = taskset_dataset(arith_env, "train", limit=1, environment="arith")
        assert rows[0]["environment"] == "arith"
        assert "environment" not in taskset_dataset(arith_env, "train", limit=1).column_names
