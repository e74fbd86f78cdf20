"""The agent loop: observation -> chat messages -> model -> action -> ``step()``, until done.

Messages are rendered with the taskset card's jinja2 templates (``taskhub._templates``). The
action is parsed from the reply against the env's action JSON schema: a JSON
object, a fenced JSON block, or plain text for an action with a single string field such as
``{"answer": ...}`` (and a reply naming exactly one option of a single enum field).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from taskhub._errors import AgentFormatError, EnvProtocolError
from taskhub._limits import loads_bounded
from taskhub._schema import (
    ChatMessage,
    SamplingParams,
    StepRecord,
    Task,
    Usage,
)
from taskhub._templates import Templates, observation_text
from taskhub.env._client import EnvSession, StepResult
from taskhub.models._base import GenerateRequest, ModelBackend, TurnContext
from taskhub.models._scripted import action_properties, text_field

FORMAT_RETRY_MESSAGE = (
    "Your reply could not be used as an action: {error}\nReply again with only the action."
)

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def public_action_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The action schema without OpenEnv's inherited ``metadata`` field (noise for a model)."""
    if not schema:
        return None
    public = dict(schema)
    props = dict(public.get("properties") or {})
    props.pop("metadata", None)
    public["properties"] = props
    return public


def parse_action(reply: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    """Turn a model reply into an action that satisfies ``schema``.

    Tries, in order, and returns the first reading that satisfies the schema: the whole reply as
    a JSON object; a fenced JSON block; a JSON object inside the text; for a single-string-field
    action, the plain text; for a single enum field, the one option the reply names.

    Raises:
        AgentFormatError: No reading of the reply gives a valid action.
    """
    text = reply.strip()
    if not text:
        raise AgentFormatError("reply is empty", reply=reply)
    first_error = ""
    found_object = False
    for candidate in _readings(text, schema):
        found_object = True
        error = validate_action(candidate, schema)
        if error is None:
            return candidate
        first_error = first_error or error
    if not found_object:
        raise AgentFormatError(f"reply is not a JSON object: {_clip(text)!r}", reply=reply)
    raise AgentFormatError(f"action does not match the action schema: {first_error}", reply=reply)


def _readings(text: str, schema: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Yield the possible actions a reply can be read as, most literal first (lazily)."""
    field = text_field(schema)
    had_field = False

    def objects() -> Iterator[str]:
        yield text
        yield from _FENCE.findall(text)
        yield from _json_objects(text)

    for chunk in objects():
        try:
            value = loads_bounded(chunk)
        except ValueError:
            continue
        if isinstance(value, dict):
            had_field = had_field or (field is not None and field in value)
            yield value
    if field is not None and not had_field and "enum" not in action_properties(schema)[field]:
        yield {field: _unfence(text)}
    enum_action = _enum_action(text, schema)
    if enum_action is not None:
        yield enum_action


def validate_action(action: dict[str, Any], schema: dict[str, Any] | None) -> str | None:
    """Return why ``action`` does not satisfy ``schema``, or None when it does."""
    if not schema:
        return None
    validator = _validator(schema)
    # Discrete action spaces repeat the same few actions: remember which ones were valid.
    key = (id(validator), json.dumps(action, sort_keys=True, default=repr))
    if key in _VALID_ACTIONS:
        return None
    if validator.is_valid(action):
        if len(_VALID_ACTIONS) > 4096:
            _VALID_ACTIONS.clear()
        _VALID_ACTIONS.add(key)
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(action))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"


_VALIDATORS: dict[int, tuple[dict[str, Any], jsonschema.Draft202012Validator]] = {}
_VALID_ACTIONS: set[tuple[int, str]] = set()


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    # Built once per schema object: a run validates every action against the same schema.
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:
        if len(_VALIDATORS) > 64:
            _VALIDATORS.clear()
        # a new validator may reuse a dropped one's id: forget what that one accepted
        _VALID_ACTIONS.clear()
        cached = (schema, jsonschema.Draft202012Validator(schema))
        _VALIDATORS[id(schema)] = cached
    return cached[1]


def _unfence(text: str) -> str:
    fenced = _FENCE.findall(text)
    return fenced[0].strip() if len(fenced) == 1 else text


def _json_objects(text: str, limit: int = 8) -> list[str]:
    """Return up to ``limit`` balanced ``{...}`` substrings, outermost first."""
    found: list[str] = []
    depth, start, in_string, escaped = 0, -1, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"' and depth > 0:
            in_string = True
        elif char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                found.append(text[start : index + 1])
                if len(found) >= limit:
                    break
    return found


def _enum_action(text: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    props = action_properties(schema)
    required = [k for k in (schema or {}).get("required", []) if k in props]
    names = required or list(props)
    if len(names) != 1 or "enum" not in props[names[0]]:
        return None
    options = [o for o in props[names[0]]["enum"] if isinstance(o, str)]
    lowered = text.lower()
    named = {o for o in options if re.search(rf"\b{re.escape(o.lower())}\b", lowered)}
    return {names[0]: named.pop()} if len(named) == 1 else None


def _clip(text: str, size: int = 200) -> str:
    return text if len(text) <= size else text[:size] + "..."


@dataclass
class EpisodeTrace:
    """Everything an episode produced, filled in as it runs (kept even when it fails)."""

    reset_payload: dict[str, Any]
    initial: StepResult | None = None
    steps: list[StepRecord] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    env_time_s: float = 0.0
    model_time_s: float = 0.0
    terminated: bool = False
    truncated: bool = False


async def run_episode(
    *,
    task: Task,
    session: EnvSession,
    model: ModelBackend,
    templates: Templates,
    action_schema: dict[str, Any] | None,
    reset_payload: dict[str, Any],
    sampling: SamplingParams,
    max_steps: int,
    format_retries: int,
    episode_seed: int,
    trace: EpisodeTrace,
) -> None:
    """Play one episode into ``trace``.

    Raises:
        EnvError: The env failed (the trace keeps what happened before).
        ModelError: The model failed after its own retries.
        AgentFormatError: Replies stayed unusable after ``format_retries`` corrections.
    """
    started = time.perf_counter()
    result = await session.reset(**reset_payload)
    trace.env_time_s += time.perf_counter() - started
    trace.initial = result
    public_schema = public_action_schema(action_schema)
    variables: dict[str, Any] = {
        "task": task.model_dump(exclude={"answer", "oracle_actions"}),
        "prompt": task.prompt,
        "action_schema": public_schema,
        "action_schema_json": json.dumps(public_schema, indent=2) if public_schema else "{}",
        "text_field": text_field(action_schema),
    }
    system = await templates.render_async("system", **variables)
    if system:
        trace.messages.append(ChatMessage(role="system", content=system))
    observation, reward = result.observation, None
    for index in range(max_steps):
        if result.done:
            break
        turn = {
            **variables,
            "observation": observation,
            "observation_text": observation_text(observation),
            "reward": reward,
            "step": index,
        }
        content = await templates.render_async("first" if index == 0 else "step", **turn)
        trace.messages.append(ChatMessage.model_construct(role="user", content=content))
        context = TurnContext(task, observation, action_schema, index, episode_seed)
        action, reply, format_errors, model_s = await _next_action(
            model, trace, sampling, context, action_schema, format_retries
        )
        started = time.perf_counter()
        try:
            result = await session.step(action)
        except EnvProtocolError as exc:
            if exc.code != "VALIDATION_ERROR":
                raise
            # the env rejected an action our schema check let through: the agent's fault
            raise AgentFormatError(
                f"the env rejected the action {action!r}: {exc}", reply=reply
            ) from None
        latency = time.perf_counter() - started
        trace.env_time_s += latency
        # Everything here is already typed (the observation came out of json.loads), so the
        # record is built without re-validating it: this loop is the runner's hot path.
        trace.steps.append(
            StepRecord.model_construct(
                index=index,
                action=action,
                observation=result.observation,
                reward=result.reward,
                done=result.done,
                metadata=result.metadata,
                reply=reply,
                latency_s=latency,
                model_latency_s=model_s,
                format_errors=format_errors,
            )
        )
        observation, reward = result.observation, result.reward
    trace.terminated = result.done
    trace.truncated = not result.done


async def _next_action(
    model: ModelBackend,
    trace: EpisodeTrace,
    sampling: SamplingParams,
    context: TurnContext,
    action_schema: dict[str, Any] | None,
    format_retries: int,
) -> tuple[dict[str, Any], str, list[str], float]:
    errors: list[str] = []
    model_s = 0.0
    while True:
        started = time.perf_counter()
        generation = await model.generate(GenerateRequest(list(trace.messages), sampling, context))
        elapsed = time.perf_counter() - started
        model_s += elapsed
        trace.model_time_s += elapsed
        trace.usage.add(generation.usage)
        trace.messages.append(ChatMessage(role="assistant", content=generation.text))
        if generation.finish_reason == "cut":  # stored cut and marked, never sent to the env
            raise AgentFormatError(
                "the reply was over the model's reply size limit: it was cut and not used",
                reply=generation.text[-200:],
            )
        try:
            return parse_action(generation.text, action_schema), generation.text, errors, model_s
        except AgentFormatError as exc:
            errors.append(str(exc))
            if len(errors) > format_retries:
                raise
            trace.messages.append(
                ChatMessage(role="user", content=FORMAT_RETRY_MESSAGE.format(error=exc))
            )
