"""taskhub.training without a model: prompts, rewards, environments and ART groups equal eval's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskhub import (
    ConfigError,
    EpisodeRecord,
    EvalConfig,
    Task,
    evaluate,
    load_taskset,
    read_results,
)
from taskhub.training import (
    EnvRollout,
    TasksetEnvironment,
    TasksetReward,
    TrainingEnv,
    art_trajectory_dicts,
    art_trajectory_groups,
    completion_text,
    taskset_dataset,
)
from tests.training.conftest import evaluate_completions, taskset_folder


@pytest.fixture(scope="module")
def arith_env() -> Iterator[TrainingEnv]:
    with TrainingEnv(load_taskset("arith")) as env:
        yield env


@pytest.fixture(scope="module")
def gridworld_env() -> Iterator[TrainingEnv]:
    with TrainingEnv(load_taskset("gridworld")) as env:
        yield env


@pytest.mark.parametrize("name", ["arith", "gridworld"])
def test_prompts_are_the_messages_evaluation_sends_first(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env: TrainingEnv = request.getfixturevalue(f"{name}_env")
    dataset = taskset_dataset(env, "test", limit=4)
    run = evaluate(
        EvalConfig(model="scripted/oracle", taskset=name, split="test", limit=4, max_steps=2),
        output_dir=tmp_path,
    )
    records = {r.task_id: r for r in read_results(run.run_dir)}
    assert sorted(records) == sorted(dataset["task_id"])
    for row in dataset:
        first_turn = [m.model_dump() for m in records[row["task_id"]].messages[:2]]
        assert [m["role"] for m in first_turn] == ["system", "user"]
        assert row["prompt"] == first_turn


def test_dataset_columns_carry_the_task_and_its_profile(arith_env: TrainingEnv) -> None:
    dataset = taskset_dataset(arith_env, "train", limit=2)
    assert dataset.column_names == [
        "prompt",
        "task_id",
        "split",
        "reset",
        "answer",
        "metadata",
        "max_steps",
        "difficulty",
        "pass_rate",
    ]
    task = arith_env.taskset.tasks("train")[0]
    row = dataset[0]
    assert (row["task_id"], row["split"]) == (task.task_id, "train")
    assert (
        Task.model_validate(
            {
                "task_id": row["task_id"],
                "reset": row["reset"],
                "metadata": row["metadata"],
                "answer": json.loads(row["answer"]),
            }
        )
        == task
    )
    assert row["difficulty"] is None and row["pass_rate"] is None

    profile = {"pass_rate": {"a": 1.0, "b": 0.5}}
    profiled = task.model_copy(update={"pass_rate": 0.75, "difficulty": 0.25, "profile": profile})
    row = taskset_dataset(arith_env, tasks=[profiled])[0]
    assert (row["difficulty"], row["pass_rate"]) == (0.25, 0.75)


def test_reward_function_gives_what_evaluation_gives(
    arith_env: TrainingEnv, tmp_path: Path
) -> None:
    tasks = list(arith_env.taskset.tasks("train")[:3])
    answers = [str(t.answer) for t in tasks]
    completions = [
        [f"The sum is \\boxed{{{answers[0]}}}.", "I think it is 0", "", "\\boxed{1/0}"],
        [f"\\boxed{{{answers[1]}}}", f"{answers[1]}", "no idea", "\\boxed{3}"],
        ["\\boxed{-1}", f"answer: {answers[2]}", "   ", f"\\boxed{{{answers[2]}}}"],
    ]
    reward = TasksetReward(arith_env)
    flat_tasks = [t for t, texts in zip(tasks, completions, strict=True) for _ in texts]
    flat = [[{"role": "assistant", "content": c}] for texts in completions for c in texts]
    given = reward(
        prompts=[[]] * len(flat), completions=flat, task_id=[t.task_id for t in flat_tasks]
    )
    assert reward.__name__ == "taskhub"
    evaluated = evaluate_completions("arith", list(zip(tasks, completions, strict=True)), tmp_path)
    expected = [
        evaluated[(t.task_id, sample)].reward
        for t, texts in zip(tasks, completions, strict=True)
        for sample in range(len(texts))
    ]
    assert given == expected
    assert given[0] == 1.0 and given[2] == 0.0 and 1.0 in given[4:8]
    assert [h.outcome for h in reward.history][2] == "agent_error"  # empty reply: no action
    assert reward.records[0].steps[0].action == {"answer": f"The sum is \\boxed{{{answers[0]}}}."}


def test_completion_text_accepts_trl_completion_shapes() -> None:
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "a"}]) == "a"
    assert (
        completion_text(
            [
                {"role": "assistant", "content": "a"},
                {"role": "tool", "content": "x"},
                {"role": "assistant", "content": "b"},
            ]
        )
        == "a\nb"
    )
    with pytest.raises(TypeError):
        completion_text(3)


def test_unknown_task_ids_are_named(arith_env: TrainingEnv) -> None:
    with pytest.raises(ConfigError, match="task 'nope' is not in taskset 'arith'"):
        TasksetReward(arith_env)(prompts=[[]], completions=["1"], task_id=["nope"])


def test_rollout_refuses_prompts_it_cannot_tell_apart(arith_env: TrainingEnv) -> None:
    import datasets

    tasks = arith_env.taskset.tasks("train")[:2]
    same = [{"role": "user", "content": "same"}]
    dataset = datasets.Dataset.from_list([{"prompt": same, "task_id": t.task_id} for t in tasks])
    with pytest.raises(ConfigError, match="render the same prompt but reset the env differently"):
        EnvRollout(arith_env, dataset)
    rollout = EnvRollout(arith_env, taskset_dataset(arith_env, "train", limit=2))
    with pytest.raises(ConfigError, match="matches no row"):
        rollout.task_for(same)


def test_environment_plays_an_episode_as_evaluation_does(
    gridworld_env: TrainingEnv, tmp_path: Path
) -> None:
    from transformers.utils import get_json_schema

    task = gridworld_env.taskset.tasks("test")[2]
    assert task.oracle_actions
    row = taskset_dataset(gridworld_env, tasks=[task])[0]
    environment = TasksetEnvironment(gridworld_env)
    assert environment.reset(**row) is None  # the prompt already holds the first observation
    replies = [json.dumps(a) for a in task.oracle_actions]
    texts = [environment.step(reply) for reply in replies]
    assert "The episode is over." in texts[-1]
    assert environment.step(replies[0]) == "The episode is over."
    assert environment.get_reward() == 1.0
    assert environment.record is not None and environment.record.outcome == "scored"
    assert [s.action for s in environment.record.steps] == task.oracle_actions

    evaluated = evaluate_completions("gridworld", [(task, [replies])], tmp_path)
    # the same moves in an evaluation: same observations, same reward
    assert evaluated[(task.task_id, 0)].reward == 1.0
    run_steps = evaluated[(task.task_id, 0)].steps
    assert [s.observation for s in run_steps] == [s.observation for s in environment.record.steps]

    environment.reset(**row)  # the instance is reused for the next rollout
    assert environment.step("fly away").startswith("The action could not be used")
    assert environment.get_reward() == 0.0  # an unusable action: no step, the reward earned
    schema = get_json_schema(environment.step)["function"]
    assert schema["name"] == "step"
    assert schema["parameters"]["required"] == ["action"]


def test_records_become_art_trajectory_groups(tmp_path: Path) -> None:
    records: list[EpisodeRecord] = []
    for model in ("scripted/oracle", "scripted/noop"):
        run = evaluate(
            EvalConfig(model=model, taskset="arith", limit=3, samples=2), output_dir=tmp_path
        )
        records += read_results(run.run_dir)
    broken = records[0].model_copy(update={"reward": None, "outcome": "infra_error"})
    groups = art_trajectory_groups([*records, broken])

    import art

    assert sorted(g.metadata["task_id"] for g in groups) == sorted(
        t.task_id for t in load_taskset("arith").tasks("test")[:3]
    )
    for group in groups:
        assert isinstance(group, art.TrajectoryGroup)
        assert sorted(t.reward for t in group.trajectories) == [0.0, 0.0, 1.0, 1.0]
        trajectory = group.trajectories[0]
        assert trajectory.messages()[0]["role"] == "system"
        assert trajectory.messages()[-1]["role"] == "assistant"
        assert trajectory.metadata["task_id"] == group.metadata["task_id"]
    assert [g.metadata["skipped"] for g in groups] == [1, 0, 0]
    assert art_trajectory_dicts(records)[0]["trajectories"][0]["metrics"]["reward/env"] in (
        0.0,
        1.0,
    )
    # the JSON form (for files) validates as ART's own models, field for field
    for group in art_trajectory_dicts(records):
        for data in group["trajectories"]:
            trajectory = art.Trajectory.model_validate(data)
            assert trajectory.model_dump(include=set(data)) == data


def test_taskset_folder_helper_keeps_the_card(tmp_path: Path) -> None:
    tasks = load_taskset("arith").tasks("train")[:2]
    folder = taskset_folder("arith", tasks, tmp_path / "ts")
    loaded = load_taskset(str(folder))
    assert loaded.card == load_taskset("arith").card
    assert list(loaded.tasks("train")) == list(tasks)


def test_env_failures_are_results_without_a_reward() -> None:
    taskset = load_taskset("arith")
    task = taskset.tasks("train")[0]
    with TrainingEnv(taskset, step_timeout_s=5) as env:
        row = taskset_dataset(env, tasks=[task])[0]
        assert env._handle is not None
        env._handle.stop()  # the env server dies mid-training
        reward = TasksetReward(env)
        assert reward(
            prompts=[row["prompt"]], completions=["\\boxed{37}"], task_id=[task.task_id]
        ) == [None]
        assert reward.history[0].outcome == "infra_error"
        environment = TasksetEnvironment(env)
        assert environment.reset(**row) is None
        assert environment.step('{"answer": "37"}').startswith("The environment failed")
        assert environment.get_reward() is None
        assert environment.record is not None and environment.record.outcome == "infra_error"
