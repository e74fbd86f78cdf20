"""The agent loop: observation -> chat messages -> model -> action -> ``step()``, until done.

Messages are rendered with the taskset card's jinja2 templates (``taskhub._templates``). The
action is parsed from the reply against the env's action JSON schema: a JSON
object, a fenced JSON block, or plain text for an action with a single string field such as
``{"answer": ...}`` (and a reply naming exactly one option of a single enum field).
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from taskhub._actions import validate_action
from taskhub._errors import (
    AgentFormatError,
    ConfigError,
    EnvError,
    EnvExecutionError,
    EnvProtocolError,
)
from taskhub._limits import loads_bounded
from taskhub._schema import (
    ChatMessage,
    SamplingParams,
    StepRecord,
    Task,
    ToolCall,
    ToolSpec,
    Usage,
    trusted,
)
from taskhub._templates import Templates, observation_text
from taskhub._tools import Toolbox
from taskhub.env._client import EnvSession, StepResult
from taskhub.env._tools import tool_result
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


@dataclass(frozen=True)
class _SchemaFacts:
    """What the loop derives from an action schema, computed once per schema object."""

    schema: dict[str, Any] | None
    public: dict[str, Any] | None
    public_json: str
    text_field: str | None
    properties: dict[str, dict[str, Any]]


_SCHEMA_FACTS: dict[int, _SchemaFacts] = {}


def _facts(schema: dict[str, Any] | None) -> _SchemaFacts:
    # A run parses every reply against the same schema object: derive its facts once.
    facts = _SCHEMA_FACTS.get(id(schema))
    if facts is None or facts.schema is not schema:
        if len(_SCHEMA_FACTS) > 64:
            _SCHEMA_FACTS.clear()
        public = public_action_schema(schema)
        facts = _SchemaFacts(
            schema,
            public,
            json.dumps(public, indent=2) if public else "{}",
            text_field(schema),
            action_properties(schema),
        )
        _SCHEMA_FACTS[id(schema)] = facts
    return facts


def parse_action(
    reply: str,
    schema: dict[str, Any] | None,
    normalize: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Turn a model reply into an action that satisfies ``schema``.

    Tries, in order, and returns the first reading that satisfies the schema: the whole reply as
    a JSON object; a fenced JSON block; a JSON object inside the text; for a single-string-field
    action, the plain text; for a single enum field, the one option the reply names.
    ``normalize`` rewrites each JSON object read before it is checked (a tool call written
    ``{"name": ..., "args": ...}`` read as ``{"tool_name": ..., "arguments": ...}``).

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
        if normalize is not None:
            candidate = normalize(candidate)
        error = validate_action(candidate, schema)
        if error is None:
            return candidate
        first_error = first_error or error
    if not found_object:
        raise AgentFormatError(f"reply is not a JSON object: {_clip(text)!r}", reply=reply)
    raise AgentFormatError(f"action does not match the action schema: {first_error}", reply=reply)


def _readings(text: str, schema: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Yield the possible actions a reply can be read as, most literal first (lazily)."""
    facts = _facts(schema)
    field = facts.text_field
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
    if field is not None and not had_field and "enum" not in facts.properties[field]:
        yield {field: _unfence(text)}
    enum_action = _enum_action(text, schema, facts.properties)
    if enum_action is not None:
        yield enum_action


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


def _enum_action(
    text: str, schema: dict[str, Any] | None, props: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
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
    queue_time_s: float = 0.0
    terminated: bool = False
    truncated: bool = False


class _Prompts:
    """An episode's prompts, rendered when the loop asks or, for a model that reads none, later.

    A model that reads messages (a language model) gets each prompt rendered before it is
    called. A model that reads none (``reads_messages = False``: the scripted policies) does
    not need them to act, so each prompt's slot in the transcript is kept and the prompt is
    rendered in the next window the loop gives (``flush``): after the next action is sent, while
    the env works on it. The transcript is the same either way; a prompt that fails to render
    fails the episode at the same point, before the action that followed it is recorded.
    """

    def __init__(
        self,
        trace: EpisodeTrace,
        templates: Templates,
        variables: Callable[[], dict[str, Any]],
        *,
        defer: bool,
    ) -> None:
        self.trace = trace
        self.templates = templates
        self.variables = variables
        self.defer = defer
        self._pending: list[tuple[int, str, str, Callable[[], dict[str, Any]], str | None]] = []
        self._spent: tuple[tuple[int, int, int, int, int], float, float] | None = None

    @property
    def pending(self) -> bool:
        """Whether some prompt waits for a window to be rendered in."""
        return bool(self._pending)

    async def say(
        self,
        role: Literal["system", "user", "tool"],
        which: str,
        shown: Callable[[], dict[str, Any]],
        tool_call_id: str | None = None,
    ) -> None:
        """Add the prompt ``which``, rendered with the turn's variables (``shown()`` builds them).

        The episode's own variables (``template_variables``) come on top; an empty system
        prompt adds nothing.
        """
        if not self.defer:
            self._add(role, await self._render(which, shown), tool_call_id)
            return
        if not self._pending:
            # what the model has cost so far: a prompt that fails to render ends the episode
            # before the calls that followed it, as it would have for a model that reads it
            trace = self.trace
            self._spent = (trace.usage.counts(), trace.model_time_s, trace.queue_time_s)
        self._pending.append((len(self.trace.messages), role, which, shown, tool_call_id))
        self.trace.messages.append(_PENDING)

    async def flush(self) -> None:
        """Render every pending prompt into its slot.

        Raises:
            ConfigError: A template failed; the transcript keeps the prompts before it.
        """
        pending, self._pending = self._pending, []
        messages = self.trace.messages
        rendered = 0
        empty: list[int] = []  # an empty system prompt's slot: it adds nothing
        try:
            for slot, role, which, shown, call_id in pending:
                content = await self._render(which, shown)
                if role == "system" and not content:
                    empty.append(slot)
                messages[slot] = _message(role, content, call_id)
                rendered += 1
        finally:
            if rendered < len(pending):
                # a failed (or cancelled) render: what came after it in the episode never was
                del messages[pending[rendered][0] :]
                if self._spent is not None:
                    trace = self.trace
                    counts, trace.model_time_s, trace.queue_time_s = self._spent
                    trace.usage.restore(counts)
            self._spent = None
            for index in reversed(empty):  # once every slot is filled: no slot left to move
                del messages[index]

    async def _render(self, which: str, shown: Callable[[], dict[str, Any]]) -> str:
        return await self.templates.render_async(which, **self.variables(), **shown())

    def _add(self, role: str, content: str, tool_call_id: str | None) -> None:
        if role == "system" and not content:
            return
        self.trace.messages.append(_message(role, content, tool_call_id))


#: A transcript slot whose prompt is rendered later (``_Prompts.flush``).
_PENDING = ChatMessage.model_construct(role="system", content="")


def _message(role: str, content: Any, tool_call_id: str | None = None) -> ChatMessage:
    """A chat message; text the loop made (or a backend gave as ``str``) is not checked again."""
    if type(content) is str and role in _ROLES:
        return trusted(
            ChatMessage, role=role, content=content, tool_calls=None, tool_call_id=tool_call_id
        )
    return ChatMessage(role=role, content=content, tool_call_id=tool_call_id)  # type: ignore[arg-type]


_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _calling(content: Any, calls: list[ToolCall]) -> ChatMessage:
    """The assistant message that makes ``calls`` (built as ``_message`` builds one)."""
    if type(content) is str and all(type(call) is ToolCall for call in calls):
        return trusted(
            ChatMessage, role="assistant", content=content, tool_calls=calls, tool_call_id=None
        )
    return ChatMessage(role="assistant", content=content, tool_calls=calls)


async def _step(
    session: EnvSession,
    action: dict[str, Any],
    prompts: _Prompts,
    then_reset: dict[str, Any] | None = None,
) -> StepResult:
    """Send ``action``; pending prompts are rendered while the env works on it.

    ``then_reset`` (the next episode's reset, behind an episode's last step) goes along when
    the session can send it ahead (``resets_ahead``), and is left out otherwise.
    """
    sends_it = then_reset is not None and getattr(session, "resets_ahead", False)
    ahead = {"then_reset": then_reset} if sends_it else {}
    if not prompts.pending:
        return await session.step(action, **ahead)
    step_while = getattr(session, "step_while", None)
    if step_while is None:  # a session that cannot overlap: render first, as the loop would
        await prompts.flush()
        return await session.step(action, **ahead)
    result: StepResult = await step_while(action, prompts.flush, **ahead)
    return result


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
    toolbox: Toolbox | None = None,
    next_reset: Callable[[], dict[str, Any] | None] | None = None,
) -> None:
    """Play one episode into ``trace``.

    With a ``toolbox``, a model whose backend calls functions natively (``tool_calling =
    "native"``) is offered the env's actions as functions; each call it makes is one step, and
    the observation goes back to it as the call's ``tool`` message. Replies in text are read
    against ``toolbox.text_schema`` (a tool env's calls written as JSON).

    A model that reads no messages (``reads_messages = False``) is called with none; its
    transcript is still rendered, each prompt while the env works on the action that follows
    it (``_Prompts``).

    ``next_reset`` gives the reset payload of the episode to play next on this session (None
    when there is none): a step known to be the last (the ``max_steps``-th) carries that reset
    behind it, so the next episode finds its first observation sent already.

    Raises:
        EnvError: The env failed (the trace keeps what happened before).
        ModelError: The model failed after its own retries.
        AgentFormatError: Replies stayed unusable after ``format_retries`` corrections, or the
            env rejected an action as invalid.
        ConfigError: A prompt template failed to render.
    """
    started = time.perf_counter()
    result = await session.reset(**reset_payload)
    trace.env_time_s += time.perf_counter() - started
    trace.initial = result
    mcp = toolbox is not None and toolbox.mcp
    native = toolbox is not None and getattr(model, "tool_calling", "text") == "native"
    blind = not getattr(model, "reads_messages", True)
    variables: dict[str, Any] = {}

    def episode_variables() -> dict[str, Any]:
        if not variables:
            variables.update(
                template_variables(
                    task, action_schema, toolbox, native=native, reads=templates.reads
                )
            )
        return variables

    prompts = _Prompts(trace, templates, episode_variables, defer=blind)
    try:
        await prompts.say("system", "system", dict)
        await _play_turns(
            session,
            model,
            trace,
            prompts,
            result,
            task,
            action_schema,
            toolbox,
            native,
            mcp,
            sampling,
            max_steps,
            format_retries,
            episode_seed,
            blind,
            next_reset,
        )
    except BaseException as exc:
        if prompts.pending:
            # Prompts still waiting were due before what failed: a template that fails to
            # render is the episode's first failure (a cancellation stays one).
            try:
                await prompts.flush()
            except ConfigError as render_error:
                if isinstance(exc, Exception):
                    raise render_error from None
        raise
    if prompts.pending:  # the episode ended before another window
        await prompts.flush()


async def _play_turns(
    session: EnvSession,
    model: ModelBackend,
    trace: EpisodeTrace,
    prompts: _Prompts,
    result: StepResult,
    task: Task,
    action_schema: dict[str, Any] | None,
    toolbox: Toolbox | None,
    native: bool,
    mcp: bool,
    sampling: SamplingParams,
    max_steps: int,
    format_retries: int,
    episode_seed: int,
    blind: bool,
    next_reset: Callable[[], dict[str, Any] | None] | None,
) -> None:
    """The turns of ``run_episode``, from the first observation to the end."""
    templates = prompts.templates
    reader = _Reader(toolbox, action_schema, format_retries)
    env_tools = toolbox.tools if toolbox is not None and toolbox.tools else ()
    offered = toolbox.functions if native and toolbox is not None else None
    # an observation's text is built only for a template that shows it
    text_in_first = "observation_text" in templates.reads_in["first"]
    text_in_step = "observation_text" in templates.reads_in["step"]
    observation, reward = result.observation, None
    index = 0
    answered = False  # whether the last observation went back to the model as tool messages
    while index < max_steps and not result.done:
        if not answered:
            await prompts.say(
                "user",
                "first" if index == 0 else "step",
                functools.partial(
                    _turn_variables,
                    observation,
                    reward,
                    index,
                    mcp,
                    text_in_step if index else text_in_first,
                ),
            )
        context = TurnContext(task, observation, action_schema, index, episode_seed, env_tools)
        turn = await reader.read(model, trace, sampling, context, offered, blind)
        reply, format_errors, model_s, queue_s = (
            turn.reply,
            turn.format_errors,
            turn.model_s,
            turn.queue_s,
        )
        answered = False
        for action, call in turn.moves:
            if index >= max_steps or result.done:
                break  # the reply's later calls are not run: the episode is over
            # the max_steps-th step is the last, whatever it returns
            then_reset = next_reset() if next_reset and index + 1 == max_steps else None
            started = time.perf_counter()
            try:
                result = await _step(session, action, prompts, then_reset)
            except (EnvProtocolError, EnvExecutionError) as exc:
                if not rejects_action(exc, action):
                    raise
                # the env refused the action itself: the agent's fault, not the env's
                raise AgentFormatError(
                    f"the env rejected the action {action!r}: {exc}", reply=reply
                ) from None
            latency = time.perf_counter() - started
            trace.env_time_s += latency
            tool_text = tool_error = None
            if mcp and "tool_name" in result.observation:
                tool_text, tool_error = tool_result(result.observation)
            if toolbox is not None and call is None and mcp:
                call = toolbox.call(action)
            # Everything here is already typed (the observation came out of loads_bounded, the
            # rest from this loop), so the record is built without re-validating it: this loop
            # is the runner's hot path.
            trace.steps.append(
                trusted(
                    StepRecord,
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
                    queue_time_s=queue_s,
                    tool_call=call,
                    tool_result=tool_text,
                    tool_error=tool_error,
                )
            )
            format_errors, model_s, queue_s = [], 0.0, 0.0
            index += 1
            observation, reward = result.observation, result.reward
            if call is not None and call.id is not None and reader.called:
                shown = functools.partial(
                    _tool_turn_variables, observation, tool_text, reward, index, text_in_step
                )
                await prompts.say("tool", "step", shown, call.id)
                answered = True
    trace.terminated = result.done
    trace.truncated = not result.done


def template_variables(
    task: Task,
    action_schema: dict[str, Any] | None,
    toolbox: Toolbox | None = None,
    *,
    native: bool = False,
    reads: frozenset[str] | None = None,
) -> dict[str, Any]:
    """The variables every prompt template of ``task`` sees (training renders with them too).

    Args:
        task: The task (its answer and oracle actions are left out).
        action_schema: The env's action schema.
        toolbox: The env's toolbox; a tool env's functions are given as ``tools``.
        native: Whether the model is offered the functions natively.
        reads: The variable names the templates read (``Templates.reads``): the costly ones
            (``task``, ``tools``, ``tool_instructions``) are computed only when read. None
            computes them all.
    """
    facts = _facts(action_schema)
    mcp = toolbox is not None and toolbox.mcp
    variables: dict[str, Any] = {
        "prompt": task.prompt,
        "action_schema": facts.public,
        "action_schema_json": facts.public_json,
        "text_field": facts.text_field,
        "tool_calling": "native" if native else "text",
    }
    if reads is None or "task" in reads:
        variables["task"] = task.model_dump(exclude={"answer", "oracle_actions"})
    if reads is None or "tools" in reads:
        variables["tools"] = (
            [f.model_dump() for f in toolbox.functions] if toolbox and mcp else None
        )
    if reads is None or "tool_instructions" in reads:
        variables["tool_instructions"] = toolbox.call_instructions if toolbox and mcp else ""
    return variables


def _turn_variables(
    observation: dict[str, Any], reward: float | None, step: int, mcp: bool, text: bool
) -> dict[str, Any]:
    """What a turn's prompt shows (its observation's text only for a template that reads it)."""
    return {
        "observation": observation,
        "observation_text": _observation_text(observation, mcp) if text else "",
        "reward": reward,
        "step": step,
    }


def _tool_turn_variables(
    observation: dict[str, Any], tool_text: str | None, reward: float | None, step: int, text: bool
) -> dict[str, Any]:
    """What the prompt answering a tool call shows: the tool's result, else the observation."""
    if tool_text is None:
        tool_text = observation_text(observation) if text else ""
    return {
        "observation": observation,
        "observation_text": tool_text,
        "reward": reward,
        "step": step,
    }


def _observation_text(observation: dict[str, Any], mcp: bool) -> str:
    """A tool call's observation as its result text; any other as ``key: value`` lines."""
    if mcp and "tool_name" in observation:
        return tool_result(observation)[0]
    return observation_text(observation)


#: Messages that say why an env refused an action (``37 is not a valid Action``).
_REFUSAL = re.compile(
    r"\b(invalid|illegal|not (?:a |an )?(?:valid|legal|allowed|permitted)|unknown|unsupported"
    r"|out of (?:range|bounds))\b",
    re.IGNORECASE,
)
_ACTION_WORDS = re.compile(r"\b(action|move)s?\b", re.IGNORECASE)


def rejects_action(error: EnvError, action: dict[str, Any]) -> bool:
    """Whether an env's error on ``step`` refuses the action itself (the agent's error).

    A ``VALIDATION_ERROR`` frame, or an HTTP 4xx, always does. An ``EXECUTION_ERROR`` (or an
    HTTP 500) does when its message says the action is invalid: it names the action (``not a
    valid Action``) or one of its values (``column 9 is out of range``).
    """
    code = error.code or ""
    if code == "VALIDATION_ERROR" or (code.isdigit() and 400 <= int(code) < 500):
        return True
    if not isinstance(error, EnvExecutionError | EnvProtocolError) or code == "FRAME_TOO_LARGE":
        return False
    message = str(error)
    if not _REFUSAL.search(message):
        return False
    if _ACTION_WORDS.search(message):
        return True
    values = [str(v) for v in _leaves(action) if str(v)]
    return any(re.search(rf"(?<![\w.]){re.escape(v)}(?![\w.])", message) for v in values)


def _leaves(value: Any, depth: int = 0) -> Iterator[Any]:
    if depth > 4:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in ("metadata", "type"):
                yield from _leaves(item, depth + 1)
    elif isinstance(value, list):
        for item in value[:16]:
            yield from _leaves(item, depth + 1)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        if not isinstance(value, str) or len(value) <= 100:
            yield value


@dataclass(frozen=True)
class _Turn:
    """The model's part of a turn: the actions its reply asks for, and what getting them took."""

    moves: list[tuple[dict[str, Any], ToolCall | None]]
    """Each action, with the tool call it came from (None for a reply in text)."""
    reply: str
    format_errors: list[str]
    model_s: float
    """Seconds the model worked on the turn's calls."""
    queue_s: float
    """Seconds those calls waited for the model before it worked on them."""


@dataclass
class _Reader:
    """Turns a model's replies into actions: tool calls, or text read against a schema."""

    toolbox: Toolbox | None
    action_schema: dict[str, Any] | None
    format_retries: int
    called: bool = False
    """Whether the last reply was read from tool calls (their results go in tool messages)."""

    async def read(
        self,
        model: ModelBackend,
        trace: EpisodeTrace,
        sampling: SamplingParams,
        context: TurnContext,
        offered: tuple[ToolSpec, ...] | None,
        blind: bool = False,
    ) -> _Turn:
        errors: list[str] = []
        model_s = queue_s = 0.0
        box = self.toolbox
        schema = box.text_schema if box is not None else self.action_schema
        normalize = box.normalize if box is not None else None
        while True:
            started = time.perf_counter()
            generation = await model.generate(
                GenerateRequest([] if blind else list(trace.messages), sampling, context, offered)
            )
            elapsed = time.perf_counter() - started
            # a call queued behind others (a local model serves one at a time) is not model time
            queued = min(max(generation.queue_s, 0.0), elapsed)
            model_s += elapsed - queued
            queue_s += queued
            trace.model_time_s += elapsed - queued
            trace.queue_time_s += queued
            trace.usage.add(generation.usage)
            if generation.finish_reason == "cut":  # stored cut and marked, never sent to the env
                trace.messages.append(_message("assistant", generation.text))
                raise AgentFormatError(
                    "the reply was over the model's reply size limit: it was cut and not used",
                    reply=generation.text[-200:],
                )
            if generation.tool_calls and box is not None:
                calls = [
                    c if c.id else c.model_copy(update={"id": f"call_{context.step}_{n}"})
                    for n, c in enumerate(generation.tool_calls)
                ]
                trace.messages.append(_calling(generation.text, calls))
                reply = generation.text or json.dumps(
                    [{"tool_name": c.name, "arguments": c.arguments} for c in calls]
                )
                moves: list[tuple[dict[str, Any], ToolCall | None]] = []
                problem: AgentFormatError | None = None
                for call in calls:
                    try:
                        moves.append((box.action(call), call))
                    except AgentFormatError as exc:
                        problem = problem or exc
                if problem is None:
                    self.called = True
                    return _Turn(moves, reply, errors, model_s, queue_s)
                errors.append(str(problem))
                # every call of the reply is answered: none of them was run
                for call in calls:
                    try:
                        box.action(call)
                        text = "Not run: another call of this reply could not be used."
                    except AgentFormatError as exc:
                        text = FORMAT_RETRY_MESSAGE.format(error=exc)
                    trace.messages.append(
                        ChatMessage(role="tool", content=text, tool_call_id=call.id)
                    )
                if len(errors) > self.format_retries:
                    raise problem
                continue
            trace.messages.append(_message("assistant", generation.text))
            try:
                action = parse_action(generation.text, schema, normalize)
            except AgentFormatError as exc:
                errors.append(str(exc))
                if len(errors) > self.format_retries:
                    raise
                trace.messages.append(
                    ChatMessage(role="user", content=FORMAT_RETRY_MESSAGE.format(error=exc))
                )
                continue
            self.called = False
            return _Turn([(action, None)], generation.text, errors, model_s, queue_s)
