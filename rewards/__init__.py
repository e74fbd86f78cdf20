r"""taskhub's external rewards: real reward libraries, LLM judges and adapters for user code.

The rewards below register on the registry's first lookup: the ``taskhub.rewards`` entry point
names ``taskhub.rewards._builtin``, which imports them, so ``--reward math_verify`` works without
importing anything. Importing this package imports none of its modules (each name below is
imported when first used): a reward worker process, which imports the pool's worker module and
its reward's library, starts in the time the library takes. The libraries themselves are
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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; _SOURCES names the same (tests/test_exports.py)
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
    from ._math_work import parse_math, verify_math
    from ._pool import RewardPool, shared_pool

#: The module of each public name, imported when the name is first used.
_SOURCES: dict[str, tuple[str, ...]] = {
    "_adapters": ("PYTHON_ARGUMENTS", "AttrDict", "TrlBatch", "trl_columns", "trl_sample"),
    "_answer": (
        "action_text",
        "final_answer",
        "final_reply",
        "has_answer",
        "references",
        "task_prompt",
    ),
    "_judge": ("DEFAULT_TEMPLATE", "Judge", "parse_judge_score"),
    "_math_work": ("parse_math", "verify_math"),
    "_pool": ("RewardPool", "shared_pool"),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("." + module, __name__), name)
    globals()[name] = value  # found here from now on, without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


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
