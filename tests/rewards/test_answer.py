"""What an episode answered, read the same way by every reward."""

from __future__ import annotations

import pytest
from taskhub.rewards import action_text, final_answer, final_reply, references, task_prompt

from taskhub import ChatMessage, RewardError
from tests.rewards.episodes import episode


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ({"answer": "57"}, "57"),
        ({"answer": 57}, "57"),
        ({"answer": "57", "metadata": {}}, "57"),
        ({"move": "up"}, "up"),
        ({"answer": "5", "confidence": 0.9}, "5"),
        ({"x": 1, "y": 2}, None),
        ({"answer": None}, None),
        ({"flag": True}, None),
        ({}, None),
    ],
)
def test_action_text(action: dict, expected: str | None) -> None:
    assert action_text(action) == expected


def test_final_answer_prefers_the_last_action_then_the_last_reply() -> None:
    assert final_answer(episode("57", "57", reply="I say 57")) == "57"
    no_text = episode(action={"x": 1, "y": 2}, reply='{"x": 1, "y": 2}')
    assert final_answer(no_text) == '{"x": 1, "y": 2}'
    chat_only = episode(messages=[ChatMessage(role="assistant", content="maybe 4")])
    assert final_answer(chat_only) == "maybe 4"
    assert final_answer(episode(messages=[ChatMessage(role="user", content="hi")])) is None


def test_final_reply_is_the_raw_text() -> None:
    assert final_reply(episode("57", reply="<think>x</think>57")) == "<think>x</think>57"
    assert final_reply(episode(messages=[])) is None


def test_references() -> None:
    assert references(episode("1", "57"), "exact") == ["57"]
    assert references(episode("1", ["57", "fifty-seven", ""]), "exact") == ["57", "fifty-seven"]
    assert references(episode("1", 0.5), "exact") == ["0.5"]
    assert references(episode("1", {"b": 1, "a": 2}), "exact") == ['{"a":2,"b":1}']
    for missing in (None, "", "  ", []):
        with pytest.raises(RewardError, match="task 't0' has no reference answer"):
            references(episode("1", missing), "exact")


def test_task_prompt() -> None:
    assert task_prompt(episode("1", prompt="Add them.")) == "Add them."
    assert task_prompt(episode("1", prompt=None)) == "go"
