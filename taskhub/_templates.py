"""Prompt templates: a taskset card's jinja2 templates (or the defaults), sandboxed."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, meta
from jinja2.sandbox import SandboxedEnvironment

from taskhub._errors import ConfigError
from taskhub._schema import TasksetCard

DEFAULT_SYSTEM_PROMPT = """\
You are an agent acting in an environment, one action per reply.
{%- if text_field %}
Reply with your {{ text_field }} only.
{%- else %}
Reply with a single JSON object, the action, matching this JSON schema:
{{ action_schema_json }}
{%- endif %}"""

DEFAULT_PROMPT_TEMPLATE = """\
{%- if prompt %}{{ prompt }}

{% endif -%}
{{ observation_text }}"""

DEFAULT_STEP_TEMPLATE = """\
{%- if reward is not none %}Reward: {{ reward }}
{% endif -%}
{{ observation_text }}"""

#: The taskset card field behind each template, for error messages.
CARD_FIELDS = {"system": "system_prompt", "first": "prompt_template", "step": "step_template"}

# Observation fields that are protocol plumbing, not content for the model.
_HIDDEN_FIELDS = {"done", "reward", "metadata"}
_jinja = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=False)


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


@functools.lru_cache(maxsize=64)
def _compile(source: str) -> tuple[Template, frozenset[str]]:
    """Compile a template and find the variables it reads (once per text: compiling is slow)."""
    tree = _jinja.parse(source)
    return _jinja.from_string(tree), frozenset(meta.find_undeclared_variables(tree))


@dataclass
class Templates:
    """The prompt templates of a taskset, compiled once."""

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

    @classmethod
    def from_card(cls, card: TasksetCard) -> Templates:
        """Use the card's templates, the defaults where it sets none.

        Raises:
            ConfigError: A template does not compile.
        """
        templates = cls(
            card.system_prompt or DEFAULT_SYSTEM_PROMPT,
            card.prompt_template or DEFAULT_PROMPT_TEMPLATE,
            card.step_template or DEFAULT_STEP_TEMPLATE,
        )
        reads: set[str] = set()
        for name in ("system", "first", "step"):
            try:
                compiled, used = _compile(getattr(templates, name))
            except TemplateError as exc:
                raise ConfigError(
                    f"taskset card {CARD_FIELDS[name]} does not compile: {exc}"
                ) from None
            templates._compiled[name] = compiled
            if not used:  # the same text every time: rendered once
                templates._constant[name] = None
            templates.reads_in[name] = used
            reads |= used
        templates.reads = frozenset(reads)
        return templates

    def render(self, which: str, **variables: Any) -> str:
        """Render the ``system``, ``first`` or ``step`` template.

        Raises:
            ConfigError: The template fails (an undefined variable, a sandbox violation).
        """
        constant = self._constant.get(which)
        if constant is not None:
            return constant
        try:
            text = self._compiled[which].render(**variables).strip()
        except TemplateError as exc:
            raise ConfigError(
                f"taskset card {CARD_FIELDS[which]} failed to render: {exc}"
            ) from None
        if which in self._constant:
            self._constant[which] = text
        return text
