"""Format checks: ``answer_present``, ``json_action``, ``think_format``. Each is 0 or 1.

They need no reference answer, which makes them good gates: ``--reward answer_present=gate``
zeroes the total of an episode that never answered.
"""

from __future__ import annotations

import json
import re

from taskhub import EpisodeRecord, RewardFn, Score, reward

from ._answer import final_answer, final_reply, has_answer

UNIT = (0.0, 1.0)
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)
# TRL's think_format_reward pattern: one <think>...</think> block opening the reply.
_THINK = re.compile(r"^<think>(?!.*<think>)(.*?)</think>.*$", re.DOTALL | re.MULTILINE)


@reward("answer_present", range=UNIT)
def answer_present() -> RewardFn:
    """1 when the episode has a non-blank answer (its last action's text, or last reply)."""

    async def score(episode: EpisodeRecord) -> float:
        return float(has_answer(final_answer(episode)))

    return score


def _is_json_object(reply: str) -> bool:
    text = reply.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@reward("json_action", range=UNIT)
def json_action() -> RewardFn:
    """1 when every reply was a JSON object action (alone or in one ```json fence), first try."""

    async def score(episode: EpisodeRecord) -> Score:
        if episode.outcome == "agent_error":
            return Score(0.0, {"why": "a reply could not be used as an action"})
        if not episode.steps:
            return Score(0.0, {"why": "no action was taken"})
        for step in episode.steps:
            if step.format_errors:
                return Score(0.0, {"step": step.index, "why": "a reply was rejected first"})
            if step.reply is not None and not _is_json_object(step.reply):
                return Score(0.0, {"step": step.index, "why": "the reply is not a JSON object"})
        return Score(1.0)

    return score


@reward("think_format", range=UNIT)
def think_format() -> RewardFn:
    """1 when the last reply opens with one <think>...</think> block (TRL's think_format_reward)."""

    async def score(episode: EpisodeRecord) -> float:
        reply = final_reply(episode)
        return float(reply is not None and _THINK.match(reply) is not None)

    return score
