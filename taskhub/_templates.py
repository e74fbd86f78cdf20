"""Prompt templates: a taskset card's jinja2 templates (or the defaults), sandboxed.

Templates see ``task``, ``prompt``, ``action_schema`` (``action_schema_json``), ``text_field``,
and on a tool env ``tools`` (the functions: name, description, input_schema), ``tool_calling``
(``native`` or ``text``) and ``tool_instructions`` (how to write a call in text); turn templates
also see ``observation``, ``observation_text`` (a tool call's result text on a tool env),
``reward`` and ``step``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, StrictUndefined, Template, TemplateError, meta, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment, safe_range
from jinja2.utils import Namespace

from taskhub._errors import ConfigError
from taskhub._schema import TasksetCard

DEFAULT_SYSTEM_PROMPT = """\
{%- if tools is defined and tools %}
You are an agent acting in an environment through its tools; each tool call is one step.
{%- if tool_calling != "native" %}
{{ tool_instructions }}
{%- endif %}
{%- else %}
You are an agent acting in an environment, one action per reply.
{%- if text_field %}
Reply with your {{ text_field }} only.
{%- else %}
Reply with a single JSON object, the action, matching this JSON schema:
{{ action_schema_json }}
{%- endif %}
{%- endif %}"""

DEFAULT_PROMPT_TEMPLATE = """\
{%- if prompt %}{{ prompt }}

{% endif -%}
{{ observation_text }}"""

DEFAULT_STEP_TEMPLATE = """\
{%- if reward is not none %}Reward: {{ reward }}
{% endif -%}
{{ observation_text }}"""


def _default_system(v: Mapping[str, Any]) -> str:
    if v.get("tools"):
        text = (
            "You are an agent acting in an environment through its tools; "
            "each tool call is one step."
        )
        if v["tool_calling"] != "native":
            text += "\n" + str(v["tool_instructions"])
        return text
    text = "You are an agent acting in an environment, one action per reply."
    if v["text_field"]:
        return text + "\nReply with your " + str(v["text_field"]) + " only."
    return (
        text
        + "\nReply with a single JSON object, the action, matching this JSON schema:\n"
        + str(v["action_schema_json"])
    )


def _default_first(v: Mapping[str, Any]) -> str:
    text = str(v["observation_text"])
    return str(v["prompt"]) + "\n\n" + text if v["prompt"] else text


def _default_step(v: Mapping[str, Any]) -> str:
    text = str(v["observation_text"])
    return text if v["reward"] is None else "Reward: " + str(v["reward"]) + "\n" + text


#: The default templates written in Python (what jinja renders them to, before ``strip``),
#: with the variables each reads: they render in every turn of most runs.
_DEFAULT_RENDERERS: dict[str, tuple[Callable[[Mapping[str, Any]], str], frozenset[str]]] = {
    DEFAULT_SYSTEM_PROMPT: (
        _default_system,
        frozenset({"tool_calling", "tool_instructions", "text_field", "action_schema_json"}),
    ),
    DEFAULT_PROMPT_TEMPLATE: (_default_first, frozenset({"prompt", "observation_text"})),
    DEFAULT_STEP_TEMPLATE: (_default_step, frozenset({"reward", "observation_text"})),
}

#: The taskset card field behind each template, for error messages.
CARD_FIELDS = {"system": "system_prompt", "first": "prompt_template", "step": "step_template"}

# Observation fields that are protocol plumbing, not content for the model.
_HIDDEN_FIELDS = {"done", "reward", "metadata"}
#: Longest text a template may produce, and longest value it may build on the way (characters).
MAX_RENDER_CHARS = 1 << 20
#: Longest template source a card may hold (characters).
MAX_TEMPLATE_CHARS = 64 * 1024
#: Deadline of one render, seconds (generous: a card's template renders in milliseconds).
RENDER_TIMEOUT_S = 10.0
#: Largest exponent of ``**`` in a template.
_MAX_EXPONENT = 256
_WIDTH = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?|\{[^{}]*:[^{}]*?(\d+)[^{}]*\}")
_render_state = threading.local()
_OVER_THE_LIMIT = f"the output is over the {MAX_RENDER_CHARS}-character limit"


class TemplateLimitError(SecurityError):
    """Raised inside a render that breaks a bound (size, deadline)."""


def _check_deadline() -> None:
    deadline = getattr(_render_state, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise TemplateLimitError(f"rendering took longer than its {RENDER_TIMEOUT_S:g}s deadline")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple) else 0


def _check_value(value: Any) -> Any:
    if _size(value) > MAX_RENDER_CHARS:
        raise TemplateLimitError(f"a value of {_size(value)} items is over the limit")
    return value


def _check_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse an argument that asks for more output than a render may produce."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_RENDER_CHARS:
            raise TemplateLimitError(f"the argument {value} asks for more than the output limit")
        if isinstance(value, str):
            _check_format(value)


def _check_format(text: str) -> None:
    """Refuse a %- or {}-format whose width or precision passes the output limit."""
    if "%" not in text and "{" not in text:
        return
    for match in _WIDTH.finditer(text):
        for group in match.groups():
            if group == "*" or (group and int(group) > MAX_RENDER_CHARS):
                raise TemplateLimitError(f"the format {match.group(0)!r} is over the output limit")


def _bounded_filter(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _check_deadline()
        _check_args(args[1:], kwargs)
        return _check_value(fn(*args, **kwargs))

    return bounded


def _bounded_range(*args: int) -> Iterator[int]:
    for index, value in enumerate(safe_range(*args)):
        if not index & 1023:
            _check_deadline()
        yield value


class _Namespace(Namespace):
    def __setitem__(self, name: str, value: Any) -> None:
        _check_deadline()
        super().__setitem__(name, _check_value(value))


class _CodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` to a join that checks its size (the sandbox cannot intercept ``~``)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(SandboxedEnvironment):
    """jinja2's sandbox, bounded in time and size, compiled without constant folding.

    Constant folding would evaluate ``{{ '%2000000000s' % 'x' }}`` while compiling, outside any
    check. Every operator that can build a large value (``*``, ``%``, ``**``, ``+``, ``~``),
    every filter and call, ``range`` and ``namespace`` assignment are checked against
    ``MAX_RENDER_CHARS`` and the render's deadline; the output is cut off at the limit.
    """

    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset({"*", "%", "**", "+"})

    def __init__(self) -> None:
        """Create the environment."""
        super().__init__(undefined=StrictUndefined, keep_trailing_newline=False, optimized=False)
        self.filters = {name: _bounded_filter(name, fn) for name, fn in self.filters.items()}
        self.globals["range"] = _bounded_range
        self.globals["namespace"] = _Namespace

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """Apply an operator, refusing results over the limits."""
        _check_deadline()
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if _size(seq) and isinstance(count, int) and _size(seq) * count > MAX_RENDER_CHARS:
                    raise TemplateLimitError(f"'*' would build {_size(seq) * count} items")
        elif operator == "%" and isinstance(left, str):
            _check_format(left)
        elif operator == "**" and isinstance(right, int | float) and abs(right) > _MAX_EXPONENT:
            raise TemplateLimitError(f"the exponent {right} is over {_MAX_EXPONENT}")
        return _check_value(super().call_binop(context, operator, left, right))

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """Call from sandboxed code, refusing size arguments over the limit."""
        _check_deadline()
        _check_args(args, kwargs)
        return _check_value(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Read an attribute; a str's ``format`` is checked here (the sandbox wraps it)."""
        if isinstance(obj, str) and attribute in ("format", "format_map"):
            _check_format(obj)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """Subscript; ``'...'['format']`` is checked as ``getattr`` checks it."""
        if isinstance(obj, str) and argument in ("format", "format_map"):
            _check_format(obj)
        return super().getitem(obj, argument)

    def bounded_concat(self, parts: tuple[Any, ...]) -> str:
        """``a ~ b ~ ...``, refusing a result over the limit."""
        _check_deadline()
        texts = [str(part) for part in parts]
        if sum(map(len, texts)) > MAX_RENDER_CHARS:
            raise TemplateLimitError("'~' would build a text over the output limit")
        return "".join(texts)


_jinja = BoundedSandbox()
_executor = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="taskhub-template")


def observation_text(observation: dict[str, Any]) -> str:
    """Render an observation for a model: one ``key: value`` line per content field."""
    lines = []
    for key, value in observation.items():
        if key in _HIDDEN_FIELDS or value is None:
            continue
        if isinstance(value, str):
            lines.append(f"{key}:\n{value}" if "\n" in value else f"{key}: {value}")
        elif isinstance(value, bool):
            lines.append(f"{key}: {'true' if value else 'false'}")
        elif isinstance(value, int):
            lines.append(f"{key}: {value}")
        else:
            lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines)


class _TrustedEnvironment(Environment):
    """jinja's environment, reading a dict's field (``observation.grid``) without an exception.

    jinja tries the attribute first, then the item: for a name that is not an attribute of
    every dict, the item is what it finds.
    """

    def getattr(self, obj: Any, attribute: str) -> Any:
        """``obj.attribute`` in a template."""
        if type(obj) is dict and attribute in obj and not hasattr(dict, attribute):
            return obj[attribute]
        return super().getattr(obj, attribute)


#: Renders taskhub's own templates (the defaults, the cards of built-in tasksets): they are as
#: trusted as its code, so they render without the sandbox's checks (gridworld's step prompt in
#: less than half the time). What they show still comes from the env: the output limit holds.
_trusted_jinja = _TrustedEnvironment(undefined=StrictUndefined, keep_trailing_newline=False)


@functools.lru_cache(maxsize=64)
def _compile(source: str, trusted: bool = False) -> tuple[Template, frozenset[str]]:
    """Compile a template and find the variables it reads (once per text: compiling is slow).

    ``trusted``: one of taskhub's own, compiled outside the sandbox (``_trusted_jinja``).
    """
    environment = _trusted_jinja if trusted else _jinja
    tree = environment.parse(source)
    template = environment.from_string(tree)
    # jinja keeps a template's globals as a ChainMap over the environment's, copied key by key
    # into every render's context: as a dict (the environment's never change), a short prompt
    # renders in less than half the time
    template.globals = dict(template.globals)
    return template, frozenset(meta.find_undeclared_variables(tree))


@dataclass
class Templates:
    """The prompt templates of a taskset, compiled once.

    A card's templates are rendered off the event loop, under a deadline and an output limit
    that a template cannot escape (see ``BoundedSandbox``); taskhub's own (the defaults, and
    the cards of built-in tasksets), in the loop and outside the sandbox, under the output
    limit (the defaults in Python).
    """

    system: str
    first: str
    step: str
    _compiled: dict[str, Template] = field(default_factory=dict, repr=False, compare=False)
    reads: frozenset[str] = frozenset()
    """The variables any of the templates reads: the agent loop computes only those."""
    reads_in: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)
    """The variables each template (``system``, ``first``, ``step``) reads."""
    _constant: dict[str, str | None] = field(default_factory=dict, repr=False, compare=False)
    """Templates that read no variable, and their text once rendered (None until then)."""
    _own: set[str] = field(default_factory=set, repr=False, compare=False)
    _fast: dict[str, tuple[Callable[[Mapping[str, Any]], str], frozenset[str]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    """The templates that are defaults, rendered by their Python version."""

    @classmethod
    def from_card(cls, card: TasksetCard, *, own: bool = False) -> Templates:
        """Use the card's templates, the defaults where it sets none.

        Args:
            card: The taskset card.
            own: The card is one of taskhub's own (a built-in taskset, as trusted as taskhub's
                code): its templates render in the loop, as the defaults do.

        Raises:
            ConfigError: A template is too long or does not compile.
        """
        templates = cls(
            card.system_prompt or DEFAULT_SYSTEM_PROMPT,
            card.prompt_template or DEFAULT_PROMPT_TEMPLATE,
            card.step_template or DEFAULT_STEP_TEMPLATE,
        )
        reads: set[str] = set()
        for name in ("system", "first", "step"):
            source = getattr(templates, name)
            if own or source in (
                DEFAULT_SYSTEM_PROMPT,
                DEFAULT_PROMPT_TEMPLATE,
                DEFAULT_STEP_TEMPLATE,
            ):
                templates._own.add(name)
            if len(source) > MAX_TEMPLATE_CHARS:
                raise ConfigError(
                    f"taskset card {CARD_FIELDS[name]} is {len(source)} characters long: over "
                    f"the {MAX_TEMPLATE_CHARS}-character limit of a template"
                )
            try:
                compiled, used = _compile(source, trusted=name in templates._own)
            except (TemplateError, RecursionError) as exc:
                raise ConfigError(
                    f"taskset card {CARD_FIELDS[name]} does not compile: {exc}"
                ) from None
            templates._compiled[name] = compiled
            if source in _DEFAULT_RENDERERS:
                templates._fast[name] = _DEFAULT_RENDERERS[source]
            if not used:  # the same text every time: rendered once
                templates._constant[name] = None
            templates.reads_in[name] = used
            reads |= used
        templates.reads = frozenset(reads)
        return templates

    def render(self, which: str, **variables: Any) -> str:
        """Render the ``system``, ``first`` or ``step`` template, here, under its bounds.

        A template that reads no variable renders the same text every time: once, under the
        same bounds, and that text is kept.

        Raises:
            ConfigError: The template fails (an undefined variable, a sandbox violation, the
                output limit, the deadline).
        """
        constant = self._constant.get(which)
        if constant is not None:
            return constant
        if which in self._own:
            return self._render_own(which, variables)
        _render_state.deadline = time.monotonic() + RENDER_TIMEOUT_S
        try:
            chunks, size = [], 0
            for chunk in self._compiled[which].generate(**variables):
                size += len(chunk)
                if size > MAX_RENDER_CHARS:
                    raise TemplateLimitError(_OVER_THE_LIMIT)
                chunks.append(chunk)
                _check_deadline()
            text = "".join(chunks).strip()
        except (TemplateError, RecursionError, MemoryError, _Interrupted) as exc:
            if isinstance(exc, _Interrupted):
                exc = TemplateLimitError(
                    f"rendering took longer than its {RENDER_TIMEOUT_S:g}s deadline"
                )
            raise ConfigError(
                f"taskset card {CARD_FIELDS[which]} failed to render: {exc}"
            ) from None
        finally:
            _render_state.deadline = None
        if which in self._constant:
            self._constant[which] = text
        return text

    def _render_own(self, which: str, variables: dict[str, Any]) -> str:
        """``render`` of one of taskhub's own templates, outside the sandbox.

        A default template renders in Python (what jinja makes of it, before ``strip``).
        """
        fast = self._fast.get(which)
        try:
            if fast is not None and fast[1] <= variables.keys():  # else jinja names the missing
                text = fast[0](variables)
            else:
                text = self._compiled[which].render(**variables)
        except (TemplateError, RecursionError) as exc:
            raise ConfigError(
                f"taskset card {CARD_FIELDS[which]} failed to render: {exc}"
            ) from None
        if len(text) > MAX_RENDER_CHARS:
            raise ConfigError(
                f"taskset card {CARD_FIELDS[which]} failed to render: {_OVER_THE_LIMIT}"
            )
        text = text.strip()
        if which in self._constant:
            self._constant[which] = text
        return text

    async def render_async(self, which: str, **variables: Any) -> str:
        """``render`` off the event loop (for a card's template), so a slow one blocks nothing.

        A render still running at its deadline is interrupted in its thread. Taskhub's own
        templates, and a template whose text is already kept, are not sent to a thread.

        Raises:
            ConfigError: As ``render``.
        """
        if which in self._own or self._constant.get(which) is not None:
            return self.render(which, **variables)
        loop = asyncio.get_running_loop()
        started = threading.Event()
        running = asyncio.Event()
        thread_id: list[int] = []

        def run() -> str:
            thread_id.append(threading.get_ident())
            started.set()
            loop.call_soon_threadsafe(running.set)
            return self.render(which, **variables)

        def interrupt() -> None:
            # a loop with no call in it never reaches a deadline check: stop it from outside
            if started.is_set() and not future.done():
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(thread_id[0]), ctypes.py_object(_Interrupted)
                )

        future = loop.run_in_executor(_executor, run)
        try:
            # the deadline counts from the start of the render, not from its wait for a thread
            waiter = asyncio.ensure_future(running.wait())
            try:
                either: set[asyncio.Future[Any]] = {future, waiter}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            async with asyncio.timeout(RENDER_TIMEOUT_S + 1.0):
                return await asyncio.shield(future)
        except TimeoutError:
            interrupt()
            raise ConfigError(
                f"taskset card {CARD_FIELDS[which]} failed to render: it took longer than its "
                f"{RENDER_TIMEOUT_S:g}s deadline"
            ) from None
        except asyncio.CancelledError:  # the episode's own deadline
            interrupt()
            raise


class _Interrupted(Exception):
    """Raised in a render thread that passed its deadline."""
