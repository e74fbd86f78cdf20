"""Prompt templates: a taskset card's jinja2 templates (or the defaults), sandboxed.

Templates see ``task``, ``prompt``, ``action_schema`` (``action_schema_json``), ``text_field``,
and on a tool env ``tools`` (the functions: name, description, input_schema), ``tool_calling``
(``native`` or ``text``) and ``tool_instructions`` (how to write a call in text); turn templates
also see ``observation``, ``observation_text`` (a tool call's result text on a tool env),
``reward`` and ``step``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError
from jinja2.sandbox import SandboxedEnvironment

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


@dataclass
class Templates:
    """The prompt templates of a taskset, compiled once."""

    system: str
    first: str
    step: str
    _compiled: dict[str, Template] = field(default_factory=dict, repr=False, compare=False)

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
        for name in ("system", "first", "step"):
            try:
                templates._compiled[name] = _jinja.from_string(getattr(templates, name))
            except TemplateError as exc:
                raise ConfigError(
                    f"taskset card {CARD_FIELDS[name]} does not compile: {exc}"
                ) from None
        return templates

    def render(self, which: str, **variables: Any) -> str:
        """Render the ``system``, ``first`` or ``step`` template.

        Raises:
            ConfigError: The template fails (an undefined variable, a sandbox violation).
        """
        try:
            return self._compiled[which].render(**variables).strip()
        except TemplateError as exc:
            raise ConfigError(
                f"taskset card {CARD_FIELDS[which]} failed to render: {exc}"
            ) from None
