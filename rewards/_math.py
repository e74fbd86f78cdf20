r"""``math_verify``: Hugging Face math-verify's equivalence check, run in the reward process pool.

The answer and the reference are each parsed with math-verify's default extraction (LaTeX,
``\boxed{}`` first, then plain expressions); a bare expression (``2\sqrt{3}``, ``1+x^2``, the
usual form of a reference answer) is read inside ``$...$``, where plain extraction would keep
only its first number (see ``parse_math``). The answer scores 1 when
``verify(reference, answer)`` holds for any reference. An answer that does not parse scores 0;
a reference that does not parse is a ``reward_error`` (the taskset is wrong, not the model).

math-verify's own timeouts use ``signal.alarm``, which fails off the main thread and cannot
interrupt sympy inside C code (``9^{9^{9^{9}}}`` hangs for ever), so they are turned off and
each call runs in a worker process under a deadline that kills it.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from typing import Any

from taskhub import EpisodeRecord, RewardFn, Score, reward

from ._answer import final_answer, has_answer, references
from ._batch import PoolCalls
from ._deps import check_installed, version_of
from ._pool import shared_pool

_DELIMITERS = ("$", "\\(", "\\[", "\\boxed")
# a word: two letters or more not inside a LaTeX command (\frac, \sqrt)
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_GOLD_CACHE: OrderedDict[str, list[Any]] = OrderedDict()
_GOLD_CACHE_SIZE = 4096


def parse_math(text: str) -> list[Any]:
    r"""Parse ``text`` with math-verify's default extraction, without signal timeouts.

    A bare expression (no ``$``, ``\(``, ``\[`` or ``\boxed``, and no word outside LaTeX
    commands: ``2\sqrt{3}``, ``x^2+5x``) is parsed inside ``$...$`` first, where plain
    extraction would keep only its first number, then as is; text (``The answer is 5``) is
    parsed as is only.
    """
    from math_verify import parse

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout is disabled", each call
    if any(d in text for d in _DELIMITERS):
        readings = [text]
    elif _WORD.search(text):
        readings = [text]
    else:
        readings = [f"${text}$", text]
    parsed: list[Any] = []
    for reading in readings:
        parsed = parse(reading, parsing_timeout=None)
        if parsed:
            break
    return parsed


def _gold(text: str) -> list[Any]:
    # pass@k runs score the same reference k times: parse it once per worker
    parsed = _GOLD_CACHE.get(text)
    if parsed is None:
        parsed = parse_math(text)
        _GOLD_CACHE[text] = parsed
        if len(_GOLD_CACHE) > _GOLD_CACHE_SIZE:
            _GOLD_CACHE.popitem(last=False)
    return parsed


def _show(parsed: list[Any]) -> str | None:
    if not parsed:
        return None
    text = str(parsed[0])
    return text if len(text) <= 200 else text[:199] + "…"


def verify_math(refs: list[str], answer: str) -> tuple[float, dict[str, Any]]:
    """Score ``answer`` against ``refs`` with math-verify (runs in a worker process).

    Returns:
        1.0 or 0.0, and the parsed answer for the record.

    Raises:
        ValueError: A reference does not parse as math.
    """
    from math_verify import verify

    golds = []
    for ref in refs:
        gold = _gold(ref)
        if not gold:
            raise ValueError(f"the reference answer {ref!r} does not parse as math")
        golds.append(gold)
    parsed = parse_math(answer)
    details: dict[str, Any] = {"parsed_answer": _show(parsed)}
    if not parsed:
        return 0.0, details
    for gold in golds:
        if verify(gold, parsed, timeout_seconds=None):
            return 1.0, details
    return 0.0, details


@reward("math_verify", range=(0.0, 1.0), version=version_of("math-verify"))
def math_verify_reward(*, timeout_s: float = 10.0) -> RewardFn:
    r"""1 when math-verify finds the answer equal to a reference (\boxed{}, fractions, LaTeX)."""
    check_installed("math_verify", reward="math_verify", package="math-verify", extra="math")
    pool = shared_pool()
    pool.start()  # the workers boot while the run starts its envs
    verify = PoolCalls(pool, verify_math, timeout_s=timeout_s, label="math_verify")

    async def score(episode: EpisodeRecord) -> Score:
        refs = references(episode, "math_verify")
        answer = final_answer(episode)
        if not has_answer(answer):
            return Score(0.0, {"answer": answer, "why": "no answer"})
        value, details = await verify(refs, answer)
        return Score(value, details)

    return score
