"""First actions to try on an env, read from its action schema: enums, required fields, examples.

An env refuses actions that do not fit it, and a hand-rolled one often refuses the emptiest
one (an ``action_type`` that must be one of a few verbs, a field that must not be empty). The
candidates are tried in order until one is accepted: the emptiest valid action first, then one
per enum option or union variant, then the schema's own examples.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._json import JsonObject

#: Most candidate actions tried before an env is said to refuse every action.
MAX_CANDIDATES = 6
_EMPTY: dict[str, Any] = {
    "string": "",
    "integer": 0,
    "number": 0.0,
    "boolean": False,
    "array": [],
    "object": {},
}


def inline(root: Any, node: Any, depth: int = 0) -> Any:
    """``node`` with every ``$ref`` into ``root`` replaced by its target (bounded depth)."""
    if depth > 8:
        return {}
    if isinstance(node, list):
        return [inline(root, item, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        merged = {**(target if isinstance(target, dict) else {}), **node}
        merged.pop("$ref", None)
        return inline(root, merged, depth + 1)
    return {k: inline(root, v, depth + 1) for k, v in node.items() if k not in ("$defs",)}


def _typed(spec: dict[str, Any]) -> dict[str, Any]:
    """The non-null option of an ``Optional`` field."""
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list):
            typed = [o for o in options if isinstance(o, dict) and o.get("type") != "null"]
            if len(typed) == 1:
                return {**spec, **typed[0]}
    return spec


def sample_value(spec: dict[str, Any], *, option: int = 0) -> Any:
    """A plain value for a schema property: its example, default, an enum option, an empty."""
    spec = _typed(spec)
    for key in ("const",):
        if key in spec:
            return spec[key]
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        return enum[min(option, len(enum) - 1)]
    examples = spec.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    if "example" in spec:
        return spec["example"]
    if "default" in spec and spec["default"] is not None:
        return spec["default"]
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "integer" and isinstance(spec.get("minimum"), int):
        return spec["minimum"]
    if kind == "number" and isinstance(spec.get("minimum"), int | float):
        return spec["minimum"]
    return _EMPTY.get(kind, "") if isinstance(kind, str) else ""


def _variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The object variants of a union action schema (or the schema itself)."""
    for key in ("oneOf", "anyOf"):
        options = schema.get(key)
        if isinstance(options, list):
            found = [o for o in options if isinstance(o, dict) and o.get("properties")]
            if found:
                return found
    return [schema]


def _fill(variant: dict[str, Any], *, option: int = 0, enum_field: str | None = None) -> JsonObject:
    properties = variant.get("properties") or {}
    required = set(variant.get("required") or [])
    action: JsonObject = {}
    for name, spec in properties.items():
        if name == "metadata" or not isinstance(spec, dict):
            continue
        tag = "const" in spec or (isinstance(spec.get("enum"), list) and len(spec["enum"]) == 1)
        if name in required or name == enum_field or tag:  # a union's tag, required or not
            action[name] = sample_value(spec, option=option if name == enum_field else 0)
    return action


def candidate_actions(schema: dict[str, Any] | None) -> list[JsonObject]:
    """Actions to try, most plausible first (at most ``MAX_CANDIDATES``, no duplicates)."""
    if not schema:
        return [{}]
    candidates: list[JsonObject] = []
    for variant in _variants(schema):
        candidates.append(_fill(variant))
        properties = variant.get("properties") or {}
        for name, raw in properties.items():
            spec = _typed(raw) if isinstance(raw, dict) else {}
            enum = spec.get("enum")
            if isinstance(enum, list) and len(enum) > 1:
                for option in range(1, min(len(enum), MAX_CANDIDATES)):
                    candidates.append(_fill(variant, option=option, enum_field=name))
        for example in schema.get("examples") or []:
            if isinstance(example, dict):
                candidates.append(example)
    candidates.append({})
    unique: list[JsonObject] = []
    for action in candidates:
        if action not in unique:
            unique.append(action)
    return unique[:MAX_CANDIDATES]


_ENUM_TEXT = re.compile(r"(\w+)[ \t]*\n\s+Input should be ((?:'[^']*'(?:, | or )?)+)")
_QUOTED = re.compile(r"'([^']*)'")


def repaired(action: JsonObject, error: str) -> JsonObject | None:
    """``action`` with the value a validation error asks for, when the error names one.

    Pydantic-based servers answer a bad enum with ``field ... Input should be 'a', 'b' or
    'c'`` (in plain text or in FastAPI's JSON ``detail``): the first allowed value is taken.
    """
    fixed = dict(action)
    try:
        start = error.index("{")
        detail = json.loads(error[start:]).get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list):
        for item in detail:
            if not isinstance(item, dict):
                continue
            loc, msg = item.get("loc") or [], str(item.get("msg", ""))
            values = _QUOTED.findall(msg.partition("Input should be")[2])
            if values and loc and isinstance(loc[-1], str) and loc[-1] != "action":
                fixed[loc[-1]] = values[0]
    for name, allowed in _ENUM_TEXT.findall(error.replace("\\n", "\n")):
        values = _QUOTED.findall(allowed)
        if values:
            fixed[name] = values[0]
    return fixed if fixed != action else None
