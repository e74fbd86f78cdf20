"""First actions to try on an env, read from its action schema: enums, required fields, examples.

An env refuses actions that do not fit it, and a hand-rolled one often refuses the emptiest
one (an ``action_type`` that must be one of a few verbs, a field that must not be empty). The
candidates are tried in order until one is accepted: the emptiest valid action first (a short
text where every field is optional: an empty body is no action), then one per enum option or
union variant, then the schema's own examples.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
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


#: The text put in an action's free text field when no field is required (``message``).
PLACEHOLDER_TEXT = "noop"


def _free_text(variant: dict[str, Any]) -> str | None:
    """The first free-text (string, not enum) property of an action schema, if any."""
    for name, raw in (variant.get("properties") or {}).items():
        spec = _typed(raw) if isinstance(raw, dict) else {}
        if name != "metadata" and spec.get("type") == "string" and "enum" not in spec:
            return str(name)
    return None


def candidate_actions(schema: dict[str, Any] | None) -> list[JsonObject]:
    """Actions to try, most plausible first (at most ``MAX_CANDIDATES``, no duplicates)."""
    if not schema:
        return [{}]
    candidates: list[JsonObject] = []
    for variant in _variants(schema):
        emptiest = _fill(variant)
        text = _free_text(variant) if not emptiest else None
        if text is not None:  # every field optional: an empty action is no action at all
            candidates.append({text: PLACEHOLDER_TEXT})
        candidates.append(emptiest)
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


#: Observation keys that list the moves the env accepts now (``legal_moves``, ``actions``...).
_CHOICE_KEY = re.compile(
    r"^(?:(?:legal|valid|available|allowed|possible)_?)?(moves|actions|commands|choices|options)$",
    re.IGNORECASE,
)
#: Choices that read as doing nothing, preferred for the do-nothing action.
_IDLE = re.compile(r"no.?op|nothing|wait|stay|pass|skip|idle|hold", re.IGNORECASE)


@dataclass(frozen=True)
class ChoiceHint:
    """An action field whose value the observation lists the choices of (``legal_moves``)."""

    field: str
    """The action field that takes one of the listed values."""
    key: str
    """The observation key that lists them."""

    def pick(self, observation: dict[str, Any]) -> str | None:
        """The listed choice to play now (one that reads as idle first), if any is listed."""
        return pick_choice(observation.get(self.key))


def pick_choice(values: Any) -> str | None:
    """The choice of a listed set to play: one that reads as idle, else the first plain one."""
    if not isinstance(values, list):
        return None
    plain = [v for v in values if isinstance(v, str) and v and "<" not in v]
    idle = [v for v in plain if _IDLE.search(v)]
    chosen = idle or plain
    return chosen[0] if chosen else None


def choice_lists(observation: dict[str, Any]) -> list[tuple[str, str]]:
    """``(observation key, singular noun)`` of each list of choices the observation holds."""
    found = []
    for key, value in observation.items():
        match = _CHOICE_KEY.match(str(key))
        if match and pick_choice(value) is not None:
            found.append((str(key), match.group(1).lower().removesuffix("s")))
    return found


def _choice_fields(schema: dict[str, Any] | None, noun: str) -> tuple[JsonObject, list[str]]:
    """The action a choice goes into: the rest of the action, and the fields it may fill.

    With a schema, its free string field (the one named like the choice's noun, else the only
    required one); without one, a field named after the noun (``available_commands`` ->
    ``command``) and ``action``.
    """
    if not (schema and schema.get("properties")):
        return {}, list(dict.fromkeys([noun, "action"]))
    strings = [
        name
        for name, spec in (schema.get("properties") or {}).items()
        if isinstance(spec, dict)
        and _typed(spec).get("type") == "string"
        and "enum" not in _typed(spec)
    ]
    required = [n for n in strings if n in (schema.get("required") or [])]
    named = [n for n in strings if n in (noun, "action", "move", "command")]
    return _fill(schema), named[:1] or (required if len(required) == 1 else [])


def hinted_actions(
    schema: dict[str, Any] | None, observation: dict[str, Any]
) -> list[tuple[JsonObject, ChoiceHint]]:
    """Actions that play a choice the observation lists, each with the hint it follows."""
    out: list[tuple[JsonObject, ChoiceHint]] = []
    for key, noun in choice_lists(observation):
        value = pick_choice(observation[key])
        if value is None:
            continue
        base, fields = _choice_fields(schema, noun)
        for name in fields:
            out.append(({**base, name: value}, ChoiceHint(name, key)))
    return out


#: Most options of one offered set played by ``offered_actions``.
MAX_OFFERED = 6
#: Keys that name one option of a listed set (``rooms: [{"id": "A", ...}, ...]``).
_OPTION_ID = re.compile(r"^(?:id|name|code|key|\w+_id)$")


def _option_ids(options: list[Any]) -> list[str] | None:
    """The ids of a list of option objects that share an id key, if it is one."""
    if not (2 <= len(options) <= 50) or not all(isinstance(o, dict) for o in options):
        return None
    shared = set(options[0]).intersection(*options[1:])
    for key in sorted(k for k in shared if _OPTION_ID.match(str(k))):
        ids = [o[key] for o in options]
        if all(isinstance(v, str | int) and not isinstance(v, bool) for v in ids):
            texts = [str(v) for v in ids]
            if len(set(texts)) == len(texts) and all(0 < len(t) <= 100 for t in texts):
                return texts
    return None


def offered_sets(observation: dict[str, Any], depth: int = 0) -> list[tuple[str, list[str]]]:
    """``(key, values)`` of each set of options the observation offers to choose from.

    A list of moves under a choice key (``legal_moves: ["e2e4", ...]``), or the ids of a list
    of option objects (``rooms: [{"id": "A", ...}, {"id": "B", ...}]``); searched one level
    down too (an observation nested under ``state``).
    """
    found: list[tuple[str, list[str]]] = []
    for key, value in observation.items():
        if isinstance(value, dict) and depth == 0:
            found.extend(offered_sets(value, depth + 1))
        elif isinstance(value, list):
            if _CHOICE_KEY.match(str(key)):
                plain = [v for v in value if isinstance(v, str) and v and "<" not in v]
                if len(plain) >= 2:
                    found.append((str(key), list(dict.fromkeys(plain))))
                    continue
            ids = _option_ids(value)
            if ids is not None:
                found.append((str(key), ids))
    return found


def offered_actions(
    schema: dict[str, Any] | None, observation: dict[str, Any]
) -> list[tuple[str, list[JsonObject]]]:
    """For each set of options the observation offers, one action per option (``MAX_OFFERED``).

    The option goes where ``hinted_actions`` puts a listed choice; a set whose option has no
    field to go into is left out.
    """
    out = []
    for key, values in offered_sets(observation):
        match = _CHOICE_KEY.match(key)
        noun = match.group(1).lower().removesuffix("s") if match else key.removesuffix("s")
        base, fields = _choice_fields(schema, noun)
        if fields:
            out.append((key, [{**base, fields[0]: v} for v in values[:MAX_OFFERED]]))
    return out


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
