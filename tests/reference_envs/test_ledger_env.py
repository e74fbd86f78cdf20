"""The ledger reference env in-process: generation, tools, verifier, call budget, Task API."""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction
from typing import Any

import pytest
from fastmcp.exceptions import ToolError
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

from taskhub._envs.ledger import TOOL_NAMES
from taskhub._envs.ledger.server.ledger_environment import (
    FAMILIES,
    LedgerEnvironment,
    calculate,
    format_amount,
    generate_problem,
    parse_answer,
    score_answer,
    tasks_of_split,
)
from tests.reference_envs.refenv_helpers import read_rows


def call(env: LedgerEnvironment, tool: str, **arguments: Any) -> Any:
    return env.step(CallToolAction(tool_name=tool, arguments=arguments))


def text(observation: Any) -> str:
    return "".join(part.text for part in observation.result.content)


def test_same_arguments_same_problem_and_every_cell_generates() -> None:
    for family in FAMILIES:
        for difficulty in range(1, 6):
            for seed in range(6):
                a = generate_problem(family, difficulty, seed)
                assert a == generate_problem(family, difficulty, seed)
                assert a.needed and set(a.needed) <= set(a.items)
                assert all(name in a.question for name in a.needed)
                assert Fraction(a.answer) >= 0
    questions = {generate_problem("total", 3, seed).question for seed in range(30)}
    assert len(questions) == 30


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (Fraction(12), "12"),
        (Fraction(61, 4), "15.25"),
        (Fraction(3, 2), "1.50"),
        (Fraction(132252, 1000), "132.252"),
        (Fraction(-7, 20), "-0.35"),
        (Fraction(1, 3), "1/3"),
    ],
)
def test_amounts_are_written_exactly(value: Fraction, written: str) -> None:
    assert format_amount(value) == written
    # answers are whole cents times counts and percentages: always a finite decimal
    assert parse_answer(written) == (value if "/" not in written else None)


def test_calculate_is_exact_and_refuses_anything_but_arithmetic() -> None:
    assert calculate("3 * 2.35 + 2 * (4.10 - 0.5)") == "14.25"
    assert calculate("0.1 + 0.2") == "0.30"
    assert calculate("$1,204 / 4") == "301"
    assert calculate("-(2 - 5) * 3") == "9"
    for bad, message in [
        ("__import__('os').system('true')", "only numbers"),
        ("2 ** 10", "only numbers"),
        ("x + 1", "only numbers"),
        ("1 / (2 - 2)", "division by zero"),
        ("1 +", "cannot read"),
        ("1" + "+1" * 200, "longer than 300"),
        ("", "give an arithmetic expression"),
    ]:
        with pytest.raises(ToolError, match=message):
            calculate(bad)


def test_answers_must_hold_exactly_one_number() -> None:
    assert score_answer("$15.25", "15.25").reward == 1.0
    assert score_answer("15.250 dollars", "15.25").reward == 1.0
    assert score_answer("1,204 units", "1204").reward == 1.0
    assert score_answer("15.24", "15.25") == score_answer("15.24", "15.25")
    assert score_answer("15.24", "15.25").feedback == "incorrect: read 15.24"
    assert score_answer("15.25 or 16", "15.25").reward == 0.0
    assert score_answer("no idea", "15.25").reward == 0.0
    assert score_answer("1" * 101, "1").reward == 0.0


def test_an_episode_looks_up_then_submits() -> None:
    env = LedgerEnvironment()
    problem = generate_problem("total", 3, 11)
    obs = env.reset(family="total", difficulty=3, seed=11, episode_id="e1")
    assert (obs.question, obs.max_calls, obs.reward, obs.done) == (
        problem.question,
        10,
        None,
        False,
    )
    listed = env.step(ListToolsAction())
    assert [tool.name for tool in listed.tools] == list(TOOL_NAMES)
    assert env.state.step_count == 0, "listing the tools uses no call"
    for name in problem.needed:
        result = call(env, "lookup", item=name.upper())
        record = json.loads(text(result))
        assert record == problem.items[name].record()
        assert (result.reward, result.done, result.metadata["calls_left"]) == (
            0.0,
            False,
            10 - env.state.step_count,
        )
    result = call(env, "submit", answer=problem.answer)
    assert (text(result), result.reward, result.done) == ("correct", 1.0, True)
    state = env.state
    assert (state.episode_id, state.step_count, state.submitted) == (
        "e1",
        len(problem.needed) + 1,
        True,
    )
    with pytest.raises(RuntimeError, match="episode is over; call reset"):
        call(env, "lookup", item="rice")


def test_failed_calls_count_and_the_budget_ends_the_episode() -> None:
    env = LedgerEnvironment()
    env.reset(family="value", difficulty=1, seed=2, max_calls=3)
    missing = call(env, "lookup", item="kiwi")
    assert missing.error is not None and missing.error.error_type.value == "execution_error"
    assert "no item called 'kiwi'; its items are" in missing.error.message
    unknown = call(env, "teleport")
    assert unknown.error is not None and unknown.error.error_type.value == "tool_not_found"
    last = call(env, "calculate", expression="1 / 0")
    assert last.error is not None and "division by zero" in last.error.message
    assert (last.reward, last.done, env.state.submitted) == (0.0, True, False)


def test_a_wrong_submission_ends_the_episode_with_zero() -> None:
    env = LedgerEnvironment()
    problem = generate_problem("budget", 4, 5)
    env.reset(family="budget", difficulty=4, seed=5)
    result = call(env, "submit", answer=str(Fraction(problem.answer) + 1))
    assert (result.reward, result.done) == (0.0, True)
    assert text(result).startswith("incorrect: read ")


def test_submit_outside_a_step_is_refused() -> None:
    env = LedgerEnvironment()
    problem = generate_problem("total", 1, 4)
    env.reset(family="total", difficulty=1, seed=4)

    async def direct() -> str:
        async with env.mcp_session() as client:
            try:
                await client.call_tool("submit", {"answer": problem.answer})
            except Exception as exc:
                return str(exc)
        return "accepted"

    assert "send it as a call_tool step" in asyncio.run(direct())
    assert not env.state.submitted and env.state.step_count == 0
    result = call(env, "submit", answer=problem.answer)
    assert (result.reward, result.done) == (1.0, True)


def test_bad_resets_are_refused() -> None:
    env = LedgerEnvironment()
    for kwargs, message in [
        ({"family": "totl"}, "unknown family 'totl'; .* Did you mean 'total'"),
        ({"difficulty": 6}, "difficulty must be an integer from 1 to 5, got 6"),
        ({"max_calls": 0}, "max_calls must be an integer from 1 to 100"),
        ({"task_spec": {"colour": "red"}}, r"task_spec has unknown keys \['colour'\]"),
        ({"split": "test"}, "split and index go together"),
        ({"split": "dev", "index": 0}, "unknown split 'dev'"),
        ({"split": "test", "index": 100}, "index 100 is out of range: split 'test' has 100"),
    ]:
        with pytest.raises(ValueError, match=message):
            env.reset(**kwargs)
    with pytest.raises(RuntimeError, match="no episode is running"):
        LedgerEnvironment().step(CallToolAction(tool_name="lookup", arguments={"item": "x"}))


def test_the_task_api_serves_the_built_in_taskset() -> None:
    env = LedgerEnvironment()
    assert [s["name"] for s in env.list_splits()] == ["train", "test"]
    rows = read_rows("ledger", "test")
    assert env.num_tasks("test") == len(rows) == len(tasks_of_split("test"))
    specs = env.get_task_range("test", 2, 5)
    assert [spec["task_id"] for spec in specs] == [row["task_id"] for row in rows[2:5]]
    assert env.get_task("test", 7) == env.list_tasks("test")[7]
    for spec, row in zip(env.list_tasks("test"), rows, strict=True):
        assert "answer" not in spec and spec["question"] == row["metadata"]["question"]
    by_index = env.reset(split="test", index=7)
    by_kwargs = LedgerEnvironment().reset(**rows[7]["reset"])
    assert by_index == by_kwargs
    with pytest.raises(IndexError):
        env.get_task("test", 100)
