r"""taskhub's external rewards: real reward libraries, LLM judges and adapters for user code.

Importing this package registers every reward below (the ``taskhub.rewards`` entry point names
it, so ``--reward math_verify`` works without importing anything). The libraries themselves are
imported when a reward is built, never here.

| spec | what | runs |
|---|---|---|
| ``math_verify`` | HF math-verify equivalence (``\boxed{}``, fractions, LaTeX) | process pool |
| ``exact``, ``exact:ci``, ``contains``, ``regex:PATTERN`` | string checks | inline |
| ``fuzzy[:SCORER]`` | rapidfuzz similarity | inline |
| ``chrf``, ``bleu`` | sacrebleu sentence scores | inline |
| ``rougeL`` | rouge-score ROUGE-L F | inline |
| ``reasoning_gym[:FAMILY]`` | reasoning-gym's own ``score_answer`` | process pool |
| ``answer_present``, ``json_action``, ``think_format`` | format checks | inline |
| ``judge:MODEL`` | LLM judge with a rubric prompt | async, bounded |
| ``python:M:F``, ``trl:M:F``, ``openenv:M:RUBRIC`` | user code | thread / loop |

Every value is in [0, 1] except the adapters'; an empty answer never scores.
"""

from __future__ import annotations

from . import _adapters, _format, _judge, _math, _reasoning_gym, _text  # noqa: F401
from ._adapters import PYTHON_ARGUMENTS, AttrDict, TrlBatch, trl_columns, trl_sample
from ._answer import (
    action_text,
    final_answer,
    final_reply,
    has_answer,
    references,
    task_prompt,
)
from ._judge import DEFAULT_TEMPLATE, Judge, parse_judge_score
from ._math import parse_math, verify_math
from ._pool import RewardPool, shared_pool

__all__ = [
    "AttrDict",
    "DEFAULT_TEMPLATE",
    "Judge",
    "PYTHON_ARGUMENTS",
    "RewardPool",
    "TrlBatch",
    "action_text",
    "final_answer",
    "final_reply",
    "has_answer",
    "parse_judge_score",
    "parse_math",
    "references",
    "shared_pool",
    "task_prompt",
    "trl_columns",
    "trl_sample",
    "verify_math",
]
