"""What an episode answered, and what it should have answered, read the same way by every reward.

- ``final_answer``: the text of the last action (its ``answer`` field, else its only text field),
  else the last assistant message. For a single-step env like ``arith`` it is ``{"answer": ...}``.
- ``final_reply``: the model's raw last reply (what format checks such as think tags look at).
- ``references``: the row's reference answer(s), ``episode.task.answer``, as text.
"""

from __future__ import annotations

import json
from typing import Any

from taskhub import EpisodeRecord, RewardError, canonical_json


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def action_text(action: dict[str, Any]) -> str | None:
    """Return an action's answer text: its ``answer`` field, else its only scalar field.

    OpenEnv's inherited ``metadata`` field is left out. None when the action has no such field
    (several fields, or none that is text or a number).
    """
    if "answer" in action:
        text = _scalar_text(action["answer"])
        if text is not None:
            return text
    fields = [_scalar_text(v) for k, v in action.items() if k != "metadata"]
    texts = [t for t in fields if t is not None]
    return texts[0] if len(fields) == 1 and len(texts) == 1 else None


def final_answer(episode: EpisodeRecord) -> str | None:
    """Return the episode's answer: the last action's text, else the last assistant message.

    Returns:
        The text, or None when the episode has neither (no step and no reply).
    """
    if episode.steps:
        text = action_text(episode.steps[-1].action)
        if text is not None:
            return text
    for message in reversed(episode.messages):
        if message.role == "assistant":
            return message.content
    return None


def final_reply(episode: EpisodeRecord) -> str | None:
    """Return the model's raw last reply: the last step's reply, else the last assistant message."""
    if episode.steps and episode.steps[-1].reply is not None:
        return episode.steps[-1].reply
    for message in reversed(episode.messages):
        if message.role == "assistant":
            return message.content
    return None


def has_answer(text: str | None) -> bool:
    """Whether ``text`` is an answer at all (an empty or blank answer never scores)."""
    return text is not None and bool(text.strip())


def references(episode: EpisodeRecord, reward: str) -> list[str]:
    """Return the task's reference answer(s) as text: a list answer gives several references.

    Raises:
        RewardError: The row has no reference answer (or only empty ones), which ``reward`` needs.
    """
    answer = episode.task.answer
    items = answer if isinstance(answer, list) else [answer]
    texts = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, bool):
            texts.append(json.dumps(item))
        elif isinstance(item, dict | list):
            texts.append(canonical_json(item))
        else:
            texts.append(str(item))
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise RewardError(
            f"task {episode.task_id!r} has no reference answer (the row's 'answer' field), "
            f"which reward {reward!r} compares against"
        )
    return texts


def task_prompt(episode: EpisodeRecord) -> str:
    """Return what the task asked: the row's prompt, else the first user message or observation."""
    if episode.task.prompt:
        return episode.task.prompt
    for message in episode.messages:
        if message.role == "user":
            return message.content
    return canonical_json(episode.initial_observation or {})
