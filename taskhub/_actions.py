"""JSON schemas of actions and tool arguments, compiled once, with a fast path for the usual one.

Every action a run sends, and every tool call's arguments, is checked against the same few
schemas. ``validate_action`` checks the common schema (an object of typed scalar fields) in
plain Python and remembers the discrete actions already found valid; anything else goes to
jsonschema, whose messages it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema


def validate_action(action: dict[str, Any], schema: dict[str, Any] | None) -> str | None:
    """Return why ``action`` does not satisfy ``schema``, or None when it does."""
    if not schema:
        return None
    return _checker(schema).error(action)


@dataclass(frozen=True)
class Checker:
    """A schema compiled once: the full validator, and a fast path when it is simple."""

    schema: dict[str, Any]
    validator: jsonschema.Draft202012Validator
    accepts: Callable[[dict[str, Any]], bool] | None
    """True only for values the schema accepts (False means: ask the full validator)."""

    @classmethod
    def of(cls, schema: dict[str, Any]) -> Checker:
        """Compile ``schema`` (a valid JSON schema of an object)."""
        return cls(schema, jsonschema.Draft202012Validator(schema), _fast_accepts(schema))

    def error(self, value: dict[str, Any]) -> str | None:
        """Why ``value`` does not satisfy the schema (jsonschema's best match), or None."""
        if self.accepts is not None and self.accepts(value):
            return None
        # Discrete action spaces repeat the same few actions: remember which ones were valid.
        frozen = _freeze(value)
        key = (id(self), frozen) if frozen is not None else None
        if key is not None and key in _VALID_ACTIONS:
            return None
        validator = self.validator
        if validator.is_valid(value):
            if key is not None:
                if len(_VALID_ACTIONS) > 4096:
                    _VALID_ACTIONS.clear()
                _VALID_ACTIONS.add(key)
            return None
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return f"{where + ': ' if where else ''}{error.message}"


_CHECKERS: dict[int, Checker] = {}
_Frozen = tuple[tuple[str, type, Any], ...]
_VALID_ACTIONS: set[tuple[int, _Frozen]] = set()
# Schema keywords that do not constrain a value.
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly"}
)
_SCALARS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str,
    "boolean": lambda v: type(v) is bool,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "null": lambda v: v is None,
    "array": lambda v: type(v) is list,
}


def _freeze(action: dict[str, Any]) -> _Frozen | None:
    """A hashable key of a flat action of scalars (the common case), else None."""
    items = []
    for key, value in action.items():
        # bool is kept apart from int: True and 1 are equal keys but not the same action
        if value is None or type(value) in (str, int, float, bool):
            items.append((key, type(value), value))
        else:
            return None
    return tuple(sorted(items))


def _checker(schema: dict[str, Any]) -> Checker:
    # Built once per schema object: a run validates every action against the same schema.
    cached = _CHECKERS.get(id(schema))
    if cached is None or cached.schema is not schema:
        if len(_CHECKERS) > 64:
            _CHECKERS.clear()
        # a new checker may reuse a dropped one's id: forget what that one accepted
        _VALID_ACTIONS.clear()
        cached = Checker.of(schema)
        _CHECKERS[id(schema)] = cached
    return cached


def _fast_accepts(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """A plain-Python test for the common action schema (an object of typed scalar fields).

    Only keywords it fully understands are allowed (``type``, ``properties``, ``required``,
    ``additionalProperties``, ``enum`` of strings, annotations); any other schema gets None and
    is left to jsonschema. It may refuse what jsonschema would accept (``1.0`` as an integer),
    never the reverse: a refusal only sends the action to the full validator.
    """
    if set(schema) - _ANNOTATIONS - {"type", "properties", "required", "additionalProperties"}:
        return None
    extra = schema.get("additionalProperties", True)
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if schema.get("type") != "object" or not isinstance(extra, bool):
        return None
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, sub in properties.items():
        check = _fast_value(sub)
        if check is None:
            return None
        checks[name] = check
    names = tuple(required)

    def accepts(action: dict[str, Any]) -> bool:
        for name in names:
            if name not in action:
                return False
        for key, value in action.items():
            check = checks.get(key)
            if check is None:
                if not extra:
                    return False
            elif not check(value):
                return False
        return True

    return accepts


def _fast_value(schema: Any) -> Callable[[Any], bool] | None:
    if not isinstance(schema, dict):
        return None
    keys = set(schema) - _ANNOTATIONS
    kind = schema.get("type")
    if "enum" in keys and keys <= {"enum", "type"} and kind in (None, "string"):
        options = schema["enum"]
        if not isinstance(options, list) or not all(type(o) is str for o in options):
            return None
        allowed = frozenset(options)
        return lambda v: type(v) is str and v in allowed
    if kind == "object" and keys <= {"type", "additionalProperties"}:
        if schema.get("additionalProperties", True) is not True:
            return None
        return lambda v: type(v) is dict
    if isinstance(kind, str) and kind in _SCALARS and keys == {"type"}:
        return _SCALARS[kind]
    return None
