r"""What the ``math_verify`` reward runs in its worker processes: math-verify's parse and verify.

This module imports nothing of taskhub (and math-verify only when called): the pool's workers
import it as they start, and a worker's start is what a cold run waits for.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from typing import Any

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
