"""The built-in tasksets: Hub layout, card, rows, oracles, and reproducibility of the data files."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2
import jinja2.sandbox
import pytest
import yaml
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.serialization import serialize_observation
from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser

from taskhub._envs.arith import ArithAction
from taskhub._envs.arith.server.arith_environment import ArithEnvironment
from taskhub._envs.gridworld import GridAction
from taskhub._envs.gridworld.server.gridworld_environment import GridworldEnvironment
from taskhub._envs.ledger.server.ledger_environment import LedgerEnvironment
from taskhub._schema import Task, TasksetCard
from tests.reference_envs.refenv_helpers import (
    ENV_NAMES,
    ENVS_DIR,
    ROOT,
    SPLITS,
    TASKSETS_DIR,
    read_rows,
)

EXPECTED_ROWS = {
    "arith": {"train": 300, "test": 200},
    "gridworld": {"train": 200, "test": 100},
    "ledger": {"train": 200, "test": 100},
}


def card_header(name: str) -> dict[str, Any]:
    text = (TASKSETS_DIR / name / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    header, body = text[4:].split("\n---\n", 1)
    assert body.strip(), "the card needs a Markdown body"
    loaded = yaml.safe_load(header)
    assert isinstance(loaded, dict)
    return loaded


def load_build_script() -> ModuleType:
    path = ROOT / "scripts" / "build_tasksets.py"
    spec = importlib.util.spec_from_file_location("build_tasksets", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tasks(name: str) -> dict[str, list[Task]]:
    return {split: [Task.model_validate(row) for row in read_rows(name, split)] for split in SPLITS}


@pytest.mark.parametrize("name", ENV_NAMES)
def test_folder_holds_data_only_in_hub_layout(name: str) -> None:
    files = sorted(
        p.relative_to(TASKSETS_DIR / name).as_posix()
        for p in (TASKSETS_DIR / name).rglob("*")
        if p.is_file()
    )
    assert files == ["README.md", "data/test.jsonl", "data/train.jsonl"]


@pytest.mark.parametrize("name", ENV_NAMES)
def test_card_header(name: str) -> None:
    header = card_header(name)
    assert header["pretty_name"] and header["license"] and header["task_categories"]
    assert header["configs"] == [
        {
            "config_name": "default",
            "data_files": [
                {"split": "train", "path": "data/train.jsonl"},
                {"split": "test", "path": "data/test.jsonl"},
            ],
        }
    ]
    card = TasksetCard.model_validate(header["taskhub"])
    assert (card.name, card.env, card.rewards) == (name, name, ["env"])
    assert (card.success_threshold, card.default_split) == (1.0, "test")
    assert card.description and card.prompt_template
    # the tool env keeps the default system prompt, which lists the env's tools
    assert (card.system_prompt is None) == (name == "ledger")
    assert (ENVS_DIR / name / "openenv.yaml").is_file()
    assert card.max_steps == {"arith": 1, "gridworld": 30, "ledger": 10}[name]


def test_gridworld_card_asks_for_a_json_move() -> None:
    card = TasksetCard.model_validate(card_header("gridworld")["taskhub"])
    assert card.system_prompt is not None and '{"move": "up"}' in card.system_prompt


@pytest.mark.parametrize("name", ENV_NAMES)
def test_card_templates_render_on_real_observations(name: str) -> None:
    card = TasksetCard.model_validate(card_header(name)["taskhub"])
    env: ArithEnvironment | GridworldEnvironment | LedgerEnvironment
    if name == "arith":
        env = ArithEnvironment()
        first = env.reset(family="linear", difficulty=2, seed=1)
        later = env.step(ArithAction(answer="3"))
    elif name == "ledger":
        env = LedgerEnvironment()
        first = env.reset(family="total", difficulty=2, seed=1)
        later = env.step(CallToolAction(tool_name="calculate", arguments={"expression": "1+1"}))
    else:
        env = GridworldEnvironment()
        first = env.reset(size=5, difficulty=2, seed=1)
        later = env.step(GridAction(move="up"))
    sandbox = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined)
    task = Task.model_validate(read_rows(name, "test")[0])
    observation = serialize_observation(first)["observation"]
    variables = {"task": task.model_dump(), "prompt": None, "action_schema": {}}
    assert card.prompt_template is not None
    if card.system_prompt is not None:
        sandbox.from_string(card.system_prompt).render(**variables)
    rendered = sandbox.from_string(card.prompt_template).render(
        observation=observation, **variables
    )
    key = "grid" if name == "gridworld" else "question"
    assert observation[key] in rendered
    if card.step_template is not None:
        step_observation = serialize_observation(later)["observation"]
        rendered = sandbox.from_string(card.step_template).render(
            observation=step_observation, reward=later.reward, step=1, **variables
        )
        assert step_observation["message"] in rendered


@pytest.mark.parametrize("name", ENV_NAMES)
def test_rows_validate_with_unique_ids_balanced_cells_and_disjoint_seeds(name: str) -> None:
    splits = tasks(name)
    assert {split: len(rows) for split, rows in splits.items()} == EXPECTED_ROWS[name]
    ids = [task.task_id for rows in splits.values() for task in rows]
    assert len(ids) == len(set(ids))
    keys = ("size", "difficulty") if name == "gridworld" else ("family", "difficulty")
    seeds = {}
    for split, rows in splits.items():
        for task in rows:
            assert set(task.reset) == {"seed", *keys}
            assert all(task.metadata[k] == task.reset[k] for k in keys)
            if name == "arith":
                assert isinstance(task.answer, str) and task.oracle_actions is None
            elif name == "ledger":
                assert isinstance(task.answer, str) and task.oracle_actions
                calls = [a["tool_name"] for a in task.oracle_actions]
                assert calls == ["lookup"] * len(task.metadata["items"]) + ["submit"]
            else:
                assert task.answer is None and task.oracle_actions
                assert task.metadata["shortest_path"] == len(task.oracle_actions)
        cells = Counter(tuple(task.reset[k] for k in keys) for task in rows)
        assert len(set(cells.values())) == 1, f"{split} is not balanced: {cells}"
        seeds[split] = {task.reset["seed"] for task in rows}
    assert not seeds["train"] & seeds["test"]


@pytest.mark.parametrize("name", ["arith", "ledger"])
def test_no_question_is_in_both_splits(name: str) -> None:
    splits = tasks(name)
    train = {t.metadata["question"] for t in splits["train"]}
    test = {t.metadata["question"] for t in splits["test"]}
    assert not train & test
    assert len(test) == len(splits["test"]) and len(train) == len(splits["train"])


@pytest.mark.parametrize("split", SPLITS)
def test_every_arith_answer_scores_one_through_the_env(split: str) -> None:
    env = ArithEnvironment()
    for task in tasks("arith")[split]:
        kwargs: dict[str, Any] = dict(task.reset)
        obs = env.reset(**kwargs)
        assert obs.question == task.metadata["question"]
        assert env.state.model_dump().keys().isdisjoint({"answer"})
        result = env.step(ArithAction(answer=str(task.answer)))
        assert (result.reward, result.done) == (1.0, True), task.task_id


@pytest.mark.parametrize("split", SPLITS)
def test_every_gridworld_oracle_reaches_the_goal_through_the_env(split: str) -> None:
    env = GridworldEnvironment()
    for task in tasks("gridworld")[split]:
        kwargs: dict[str, Any] = dict(task.reset)
        obs = env.reset(**kwargs)
        assert task.oracle_actions is not None
        assert len(task.oracle_actions) <= obs.max_steps
        for index, action in enumerate(task.oracle_actions):
            assert not obs.done, task.task_id
            obs = env.step(GridAction.model_validate(action))
            assert obs.reward == (1.0 if index == len(task.oracle_actions) - 1 else 0.0)
        assert obs.done and obs.position == obs.goal, task.task_id


@pytest.mark.parametrize("split", SPLITS)
def test_every_ledger_oracle_scores_one_through_the_env(split: str) -> None:
    env = LedgerEnvironment()
    for task in tasks("ledger")[split]:
        obs = env.reset(**dict(task.reset))
        assert obs.question == task.metadata["question"]
        assert task.oracle_actions is not None and len(task.oracle_actions) <= obs.max_calls
        for index, action in enumerate(task.oracle_actions):
            result = env.step(CallToolAction.model_validate(action))
            assert result.error is None, (task.task_id, result.error)
            last = index == len(task.oracle_actions) - 1
            assert (result.reward, result.done) == (float(last), last), task.task_id
        assert env.state.submitted


def test_shipped_data_files_are_what_the_build_script_writes() -> None:
    built = load_build_script().build()
    expected = {TASKSETS_DIR / n / "data" / f"{s}.jsonl" for n in ENV_NAMES for s in SPLITS}
    assert set(built) == expected
    for path, text in built.items():
        assert Path(path).read_bytes() == text.encode("utf-8"), f"{path} is stale: run the script"


@pytest.mark.parametrize("name", ENV_NAMES)
def test_datasets_loads_the_folder(name: str) -> None:
    import datasets

    loaded = datasets.load_dataset(str(TASKSETS_DIR / name))
    assert {split: loaded[split].num_rows for split in loaded} == EXPECTED_ROWS[name]
    assert loaded["test"][0]["task_id"] == read_rows(name, "test")[0]["task_id"]


@pytest.mark.parametrize("name", ENV_NAMES)
def test_openenv_manifest_is_valid(name: str) -> None:
    raw = yaml.safe_load((ENVS_DIR / name / "openenv.yaml").read_text(encoding="utf-8"))
    assert {k: raw[k] for k in ("spec_version", "name", "type", "runtime", "app", "port")} == {
        "spec_version": 1,
        "name": name,
        "type": "space",
        "runtime": "fastapi",
        "app": "server.app:app",
        "port": 8000,
    }
    manifest = OpenEnvYamlParser().parse(ENVS_DIR / name)
    assert manifest.reward.range == (0.0, 1.0)
    assert manifest.resources.episode_timeout_s > 0
    assert manifest.capabilities.verifier.kind == "reward_channel"
    assert manifest.types.tags
