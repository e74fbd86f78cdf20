"""User code through the adapters: python: per sample, trl: per batch, openenv: rubric replay."""

from __future__ import annotations

import pytest
from taskhub.rewards import PYTHON_ARGUMENTS, AttrDict, trl_sample

from taskhub import ConfigError, StepRecord, build_reward
from tests.rewards import user_rewards
from tests.rewards.episodes import episode, score, score_all, value

M = "tests.rewards.user_rewards"


# --- python: ------------------------------------------------------------------------------------


def test_python_fills_arguments_by_name() -> None:
    assert value(f"python:{M}:length_penalty", episode("57", "57")) == 1.0
    assert value(f"python:{M}:length_penalty", episode("0057", "57")) == 0.5
    assert value(f"python:{M}:async_exact", episode("57", "57")) == 1.0
    assert value(f"python:{M}:async_exact", episode("56", "57")) == 0.0


def test_user_code_outside_an_installed_package_has_no_version() -> None:
    assert build_reward(f"python:{M}:length_penalty").plugin.version is None
    assert build_reward(f"python:{M}:length_penalty").plugin.args == {
        "target": f"{M}:length_penalty"
    }


def test_python_with_kwargs_gets_every_argument() -> None:
    user_rewards._EXPECTED_NAMES[:] = list(PYTHON_ARGUMENTS)
    assert value(f"python:{M}:with_kwargs", episode("57", "57")) == 1.0


def test_python_none_means_not_applicable() -> None:
    results = score_all(
        [f"python:{M}:returns_none_for_odd", "exact"],
        [episode("57", "57", task_id="t1"), episode("57", "57", task_id="t2")],
    )
    (odd, odd_total, _), (even, even_total, _) = results
    assert odd[0].value is None and odd_total == 1.0  # only exact counted
    assert even[0].value == 1.0 and even_total == 2.0


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", "expected python:MODULE:NAME"),
        ("tests.rewards.nowhere:fn", "cannot import module 'tests.rewards.nowhere'"),
        (f"{M}:missing", f"module '{M}' has no 'missing'"),
        (f"{M}:NOT_A_FUNCTION", "42 is not a function"),
        (f"{M}:needs_unknown", "taskhub cannot fill parameter 'temperature'"),
        (f"{M}:FeedbackRubric", "is not a function"),
    ],
)
def test_python_targets_that_cannot_work_fail_when_built(target: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_reward(f"python:{target}")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("returns_nan", "returned nan for task 't0': not a finite number"),
        ("returns_text", "returned 'high' for task 't0': not a finite number"),
        ("raises", "failed on task 't0': ValueError: the scorer broke"),
    ],
)
def test_python_bad_values_are_reward_errors(name: str, message: str) -> None:
    component = score(f"python:{M}:{name}", episode("57", "57"))
    assert component.value is None and message in component.error
    assert f"reward 'python:{M}:{name}'" in component.error


# --- trl: ---------------------------------------------------------------------------------------


def test_trl_function_is_called_per_batch_with_columns_and_none_skips() -> None:
    user_rewards.CALLS.clear()
    records = [
        episode("the answer is 57", "57", task_id="a", metadata={"family": "add"}),
        episode("I think 12", "57", task_id="b", metadata={"family": "add"}),
        episode("57", "57", task_id="c", metadata={"family": "skip"}),
    ]
    results = score_all([f"trl:{M}:trl_match"], records)
    assert [c[0].value for c, _, _ in results] == [1.0, 0.0, None]
    assert user_rewards.CALLS == [3]  # one call for the three episodes


def test_trl_sample_is_conversational() -> None:
    record = episode("57", "57", reply='{"answer": "57"}', prompt="What is 50 + 7?")
    prompt, completion = trl_sample(record)
    assert prompt == [{"role": "user", "content": "What is 50 + 7?"}]
    assert completion == [{"role": "assistant", "content": '{"answer": "57"}'}]


def test_trl_async_function() -> None:
    results = score_all([f"trl:{M}:trl_async"], [episode("57", "57"), episode("", "57")])
    assert [c[0].value for c, _, _ in results] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("trl_wrong_length", "returned 1 values for 2 completions"),
        ("trl_not_a_list", "returned float, expected a list of float | None"),
        ("trl_needs_column", "needs the column 'difficulty', which the task rows do not have"),
    ],
)
def test_trl_bad_returns_are_reward_errors_for_the_whole_batch(name: str, message: str) -> None:
    results = score_all(
        [f"trl:{M}:{name}"], [episode("57", "57", task_id="x"), episode("5", "5", task_id="y")]
    )
    for (_, total, error), task in zip(results, ("x", "y"), strict=True):
        assert total is None and message in error
        assert f"reward 'trl:{M}:{name}' failed on task '{task}'" in error


def test_trl_targets_that_cannot_work_fail_when_built() -> None:
    with pytest.raises(ConfigError, match="a TRL reward function takes completions="):
        build_reward(f"trl:{M}:trl_no_completions")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_pkg.rewards'"):
        build_reward("trl:no_such_pkg.rewards:accuracy")
    with pytest.raises(ConfigError, match="is not a function"):
        build_reward(f"trl:{M}:NOT_A_FUNCTION")


# --- openenv: ------------------------------------------------------------------------------------


def steps(*feedback: str) -> list[StepRecord]:
    return [
        StepRecord(
            index=i,
            action={"answer": str(i)},
            observation={"feedback": f, "metadata": {}},
            reward=0.0,
            done=i == len(feedback) - 1,
        )
        for i, f in enumerate(feedback)
    ]


def test_openenv_rubric_is_replayed_over_the_steps() -> None:
    component = score(f"openenv:{M}:FeedbackRubric", episode(steps=steps("ok", "no", "ok")))
    assert component.value == 2.0 and component.details == {"step_rewards": [1.0, 0.0, 1.0]}


def test_openenv_trajectory_rubric_scores_at_done() -> None:
    component = score(f"openenv:{M}:FinalAnswerRubric", episode(steps=steps("a", "b")))
    assert component.details == {"step_rewards": [0.0, 1.0]} and component.value == 1.0
    # a fresh rubric per episode: state does not leak between concurrent episodes
    results = score_all(
        [f"openenv:{M}:FinalAnswerRubric"], [episode(steps=steps("a", "b")) for _ in range(3)]
    )
    assert [total for _, total, _ in results] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("NeedsArguments", "cannot build the rubric with no arguments"),
        ("NotARubric", "is not an OpenEnv Rubric subclass"),
        ("NOT_A_FUNCTION", "expected a Rubric class"),
    ],
)
def test_openenv_targets_that_cannot_work_fail_when_built(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_reward(f"openenv:{M}:{name}")


def test_attr_dict_reads_keys_as_attributes() -> None:
    obs = AttrDict({"done": True, "metadata": {"won": 1}})
    assert obs.done is True and obs.metadata.won == 1 and obs.metadata.get("won") == 1
    assert getattr(obs, "missing", "default") == "default"


def test_trl_own_reward_functions_through_the_adapter() -> None:
    # TRL's shipped rewards (trl is in the test extra for taskhub.training)
    records = [
        episode("1/2", "$\\frac{1}{2}$", reply="<think>halve</think> \\boxed{\\frac{2}{4}}"),
        episode("3", "$\\frac{1}{2}$", reply="\\boxed{3}"),
        episode("3", "the cat", reply="<think>?</think>\\boxed{3}"),
    ]
    results = score_all(
        ["trl:trl.rewards:accuracy_reward", "trl:trl.rewards:think_format_reward"], records
    )
    accuracy = [components[0].value for components, _, _ in results]
    think = [components[1].value for components, _, _ in results]
    assert accuracy == [1.0, 0.0, None]  # None: TRL skips a solution it cannot parse
    assert think == [1.0, 0.0, 1.0]
    assert think == [value("think_format", r) for r in records]
    assert build_reward("trl:trl.rewards:accuracy_reward").plugin.version.startswith("trl ")
