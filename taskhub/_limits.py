"""Bounds on untrusted JSON: frames, replies and rows nested too deep are refused, not crashes.

Python's ``json`` raises ``RecursionError`` past about a thousand levels, and pydantic refuses to
validate or serialize past about 250: a frame nested 300 deep (600 bytes) would otherwise pass
the parser and break the record that stores it. Every JSON text from outside is parsed with
``loads_bounded``, which refuses more than ``MAX_JSON_DEPTH`` levels with a ``ValueError``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

#: Deepest nesting of objects and arrays accepted from an env, a model endpoint or a data file.
MAX_JSON_DEPTH = 100


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


# One strict decoder for every text: json.loads with a hook builds a new decoder per call.
_STRICT = json.JSONDecoder(parse_constant=_reject_constant)
# msgspec reads strict JSON (no NaN or Infinity) in a third of the time; what it refuses
# (a lone surrogate, a number out of float range, UTF-16 bytes, malformed text) is read again
# by ``json``, whose answer (its value or its error) is the one given.
_FAST = msgspec.json.Decoder()


def _loads_strict(text: str | bytes) -> Any:
    try:
        return _FAST.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError):
        pass
    if isinstance(text, bytes | bytearray):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    return _STRICT.decode(text)


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Return the nesting depth of ``value`` (a scalar is 0), counting up to ``limit + 1``.

    Iterative, so a deep value cannot exhaust the stack.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children if isinstance(child, dict | list | tuple))
    return deepest


def check_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ``ValueError`` when ``value`` nests deeper than ``limit``."""
    if json_depth(value, limit) > limit:
        raise ValueError(f"nested deeper than {limit} levels")


def loads_bounded(
    text: str | bytes, *, limit: int = MAX_JSON_DEPTH, constants: bool = False
) -> Any:
    """Parse JSON strictly (no NaN or Infinity) and refuse nesting deeper than ``limit``.

    ``constants=True`` lets NaN and Infinity through, for a reader whose schema names the field
    that holds one.

    Raises:
        ValueError: The text is not JSON (``json.JSONDecodeError``), holds NaN or Infinity, or
            nests deeper than ``limit``.
    """
    try:
        value = json.loads(text) if constants else _loads_strict(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {limit} levels") from None
    # Counting brackets runs at C speed: only a text with more of them than the limit can be
    # too deep, and only that one is walked.
    opens = (
        text.count(b"{") + text.count(b"[")
        if isinstance(text, bytes)
        else text.count("{") + text.count("[")
    )
    if opens > limit:
        check_depth(value, limit)
    return value
