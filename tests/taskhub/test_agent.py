"""Turning model replies into actions, and rendering prompts."""

from __future__ import annotations

import re

import pytest

from taskhub import AgentFormatError, ConfigError, TasksetCard, parse_action
from taskhub._templates import Templates, observation_text

ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "metadata": {"type": "object"}},
    "required": ["answer"],
    "additionalProperties": False,
}
MOVE = {
    "type": "object",
    "properties": {
        "move": {"type": "string", "enum": ["up", "down", "left", "right"]},
        "metadata": {"type": "object"},
    },
    "required": ["move"],
    "additionalProperties": False,
}
TWO_FIELDS = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
}

CASES = [
    ("answer-plain", ANSWER, "42", {"answer": "42"}),
    ("answer-sentence", ANSWER, "12 + 30 = 42", {"answer": "12 + 30 = 42"}),
    ("answer-json", ANSWER, '{"answer": "7"}', {"answer": "7"}),
    ("answer-fenced", ANSWER, 'Sure:\n```json\n{"answer": "7"}\n```', {"answer": "7"}),
    ("answer-fenced-text", ANSWER, "```\n7\n```", {"answer": "7"}),
    ("move-json", MOVE, '{"move": "up"}', {"move": "up"}),
    ("move-embedded", MOVE, 'I think {"move": "left"} is best', {"move": "left"}),
    ("move-word", MOVE, "I will go down.", {"move": "down"}),
    ("two-json", TWO_FIELDS, 'x and y: {"x": 1, "y": 2}', {"x": 1, "y": 2}),
    (
        "nested-braces",
        TWO_FIELDS,
        'noise {"x": 1, "y": 2, "z": {"w": "}"}}',
        {"x": 1, "y": 2, "z": {"w": "}"}},
    ),
    ("no-schema", None, '{"anything": [1]}', {"anything": [1]}),
]


@pytest.mark.parametrize(
    ("schema", "reply", "action"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_replies_become_valid_actions(schema: dict | None, reply: str, action: dict) -> None:
    assert parse_action(reply, schema) == action


BAD = [
    ("empty", ANSWER, "   ", "reply is empty"),
    ("move-two-words", MOVE, "up or down?", "reply is not a JSON object"),
    ("move-invalid", MOVE, '{"move": "north"}', "'north' is not one of"),
    ("missing-field", TWO_FIELDS, '{"x": 1}', "'y' is a required property"),
    ("wrong-type", TWO_FIELDS, '{"x": "1", "y": 2}', "x: '1' is not of type 'integer'"),
    ("prose", TWO_FIELDS, "I would pick one and two", "reply is not a JSON object"),
]


@pytest.mark.parametrize(
    ("schema", "reply", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_unusable_replies_say_why(schema: dict, reply: str, message: str) -> None:
    with pytest.raises(AgentFormatError, match=re.escape(message)) as info:
        parse_action(reply, schema)
    assert info.value.reply == reply


def test_observation_text_hides_protocol_fields() -> None:
    text = observation_text(
        {
            "question": "What is 2+2?",
            "done": False,
            "reward": None,
            "metadata": {},
            "grid": "#.\n.A",
            "legal": ["up"],
        }
    )
    assert text == 'question: What is 2+2?\ngrid:\n#.\n.A\nlegal: ["up"]'


def test_card_templates_render_in_a_sandbox() -> None:
    card = TasksetCard(prompt_template="Q: {{ observation.question }} ({{ task.task_id }})")
    templates = Templates.from_card(card)
    assert (
        templates.render("first", observation={"question": "2+2?"}, task={"task_id": "t1"})
        == "Q: 2+2? (t1)"
    )
    sneaky = Templates.from_card(TasksetCard(prompt_template="{{ ''.__class__.__mro__ }}"))
    with pytest.raises(ConfigError, match="taskset card prompt_template failed to render"):
        sneaky.render("first")


def test_broken_template_fails_at_load() -> None:
    with pytest.raises(ConfigError, match="taskset card step_template does not compile"):
        Templates.from_card(TasksetCard(step_template="{% if %}"))


def test_default_system_prompt_shows_the_schema_without_metadata() -> None:
    templates = Templates.from_card(TasksetCard())
    text = templates.render("system", text_field=None, action_schema_json='{"move": "..."}')
    assert "JSON object" in text and '{"move": "..."}' in text
    assert templates.render("system", text_field="answer", action_schema_json="{}").endswith(
        "Reply with your answer only."
    )


# --- the hot path's shortcuts agree with the full machinery ------------------------------------

SCHEMAS = {
    "answer": ANSWER,
    "move": MOVE,
    "two-fields": TWO_FIELDS,
    "typed": {
        "type": "object",
        "properties": {
            "n": {"type": "number", "title": "N"},
            "flag": {"type": "boolean"},
            "note": {"type": "null"},
            "items": {"type": "array"},
            "kind": {"enum": ["a", "b"]},
        },
        "required": ["n"],
        "description": "annotations do not constrain",
    },
    # keywords the fast path does not read: it must stand aside
    "bounded": {"type": "object", "properties": {"s": {"type": "string", "maxLength": 2}}},
    "nested": {
        "type": "object",
        "properties": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    },
    "defs": {
        "type": "object",
        "properties": {"m": {"$ref": "#/$defs/M"}},
        "$defs": {"M": {"type": "string", "enum": ["x"]}},
        "additionalProperties": False,
    },
}
ACTIONS = [
    {},
    {"answer": "7"},
    {"answer": 7},
    {"answer": "7", "metadata": {}},
    {"answer": "7", "metadata": []},
    {"answer": "7", "other": 1},
    {"move": "up"},
    {"move": "north"},
    {"move": True},
    {"x": 1, "y": 2},
    {"x": 1.0, "y": 2},
    {"x": True, "y": 2},
    {"x": "1", "y": 2},
    {"n": 1},
    {"n": 1.5, "flag": False, "note": None, "items": [1], "kind": "a"},
    {"n": True},
    {"n": 1, "flag": 0},
    {"n": 1, "note": 0},
    {"n": 1, "kind": "c"},
    {"n": 1, "items": {}},
    {"s": "ab"},
    {"s": "abc"},
    {"p": {"x": 1}},
    {"p": {"x": "1"}},
    {"m": "x"},
    {"m": "y"},
]


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_action_checks_agree_with_jsonschema(name: str) -> None:
    import jsonschema

    from taskhub._agent import validate_action

    schema = SCHEMAS[name]
    full = jsonschema.Draft202012Validator(schema)
    for action in ACTIONS:
        for _ in range(2):  # the second time through the cache of valid actions
            assert (validate_action(action, schema) is None) == full.is_valid(action), action


def test_the_default_templates_render_as_jinja_renders_them() -> None:
    # the defaults render in Python (every turn of most runs); a card that sets the same text
    # as its own template renders it with jinja: both must agree on every value they can see
    from itertools import product

    from taskhub._templates import (
        DEFAULT_PROMPT_TEMPLATE,
        DEFAULT_STEP_TEMPLATE,
        DEFAULT_SYSTEM_PROMPT,
    )

    fast = Templates.from_card(TasksetCard())
    card = TasksetCard(
        system_prompt=DEFAULT_SYSTEM_PROMPT + " ",
        prompt_template=DEFAULT_PROMPT_TEMPLATE + " ",
        step_template=DEFAULT_STEP_TEMPLATE + " ",
    )
    slow = Templates.from_card(card)
    assert fast._fast and not slow._fast
    texts = ["", " ", "x", "  two\nlines  ", "{{ not jinja }}", "\n"]
    values = [None, 0, 1.0, -0.5, True, 3]
    rendered = 0
    for tools, calling, instructions, field, schema in product(
        [None, [], [{"name": "f"}]], ["native", "text"], texts[:3], [None, "", "answer"], texts[:4]
    ):
        variables = {
            "tools": tools,
            "tool_calling": calling,
            "tool_instructions": instructions,
            "text_field": field,
            "action_schema_json": schema,
        }
        assert fast.render("system", **variables) == slow.render("system", **variables)
        rendered += 1
    for prompt, text, reward in product([None, *texts], texts, values):
        first = {"prompt": prompt, "observation_text": text}
        assert fast.render("first", **first) == slow.render("first", **first)
        step = {"reward": reward, "observation_text": text}
        assert fast.render("step", **step) == slow.render("step", **step)
        rendered += 2
    assert rendered > 400
    # a variable missing: jinja's own error, as before
    with pytest.raises(ConfigError, match="undefined"):
        fast.render("step", observation_text="x")


@pytest.mark.parametrize("name", ["arith", "gridworld", "ledger"])
def test_a_built_in_cards_templates_render_outside_the_sandbox_as_inside(name: str) -> None:
    from taskhub import load_taskset

    card = load_taskset(name).card
    own, sandboxed = Templates.from_card(card, own=True), Templates.from_card(card)
    task = {"task_id": "t-1", "prompt": None, "metadata": {"family": "add"}}
    observations = [
        {
            "size": 5,
            "grid": "#....\n.A..G\n.....",
            "position": [1, 1],
            "goal": [1, 4],
            "legal_moves": ["up", "down", "right"],
            "steps_taken": 3,
            "max_steps": 30,
            "message": "You moved right.",
            "question": "What is 17 + 25? {{ 1 + 1 }}",
            "max_calls": 6,
        },
        {
            "size": None,
            "grid": "",
            "position": None,
            "goal": {"row": 0},
            "legal_moves": [],
            "steps_taken": 0,
            "max_steps": 1.5,
            "message": None,
            "question": "",
            "max_calls": 0,
        },
    ]
    for observation in observations:
        variables = {
            "prompt": None,
            "task": task,
            "observation": observation,
            "observation_text": observation_text(observation),
            "reward": 0.5,
            "step": 1,
            "action_schema": {},
            "action_schema_json": "{}",
            "text_field": None,
            "tool_calling": "text",
            "tools": None,
            "tool_instructions": "",
        }
        for which in ("system", "first", "step"):
            assert own.render(which, **variables) == sandboxed.render(which, **variables)
    # a field read as jinja reads it: the attribute first (a dict's own methods), then the item
    from taskhub._templates import _trusted_jinja

    fields = {"items": 1, "grid": "g"}
    assert _trusted_jinja.getattr(fields, "grid") == "g"
    assert _trusted_jinja.getattr(fields, "items") == fields.items
    if "observation" in own.reads:  # a field missing: the same error on both sides
        for templates in (own, sandboxed):
            with pytest.raises(ConfigError, match="failed to render"):
                templates.render("first", **{**variables, "observation": {}})


def test_templates_know_what_they_read() -> None:
    card = TasksetCard(
        system_prompt="Plain rules.",
        prompt_template="{{ observation.question }} ({{ task.metadata.family }})",
        step_template="{{ observation_text }}",
    )
    templates = Templates.from_card(card)
    assert templates.reads == {"observation", "task", "observation_text"}
    assert templates.render("system") == "Plain rules." == templates.render("system")
    default = Templates.from_card(TasksetCard())
    assert {"text_field", "action_schema_json", "observation_text"} <= default.reads


def test_a_cards_templates_render_off_the_loop_and_a_built_in_cards_in_it() -> None:
    import asyncio
    import threading

    in_loop: list[bool] = []

    class Probe:
        def __str__(self) -> str:
            in_loop.append(threading.current_thread() is threading.main_thread())
            return "probe"

    card = TasksetCard(system_prompt="Plain rules.", prompt_template="{{ probe }}")

    async def render(templates: Templates) -> list[str]:
        return [
            await templates.render_async("first", probe=Probe()),
            await templates.render_async("system"),  # reads nothing: rendered once, then kept
            await templates.render_async("system"),
        ]

    assert asyncio.run(render(Templates.from_card(card))) == ["probe", *["Plain rules."] * 2]
    assert asyncio.run(render(Templates.from_card(card, own=True)))[0] == "probe"
    assert in_loop == [False, True]  # a card's template in a thread; taskhub's own in the loop


def test_variables_are_computed_only_when_a_template_reads_them() -> None:
    from taskhub import Task
    from taskhub._agent import template_variables

    task = Task(task_id="t", prompt="p", answer="secret", metadata={"family": "add"})
    everything = template_variables(task, ANSWER)
    assert everything["task"]["metadata"] == {"family": "add"}
    assert "answer" not in everything["task"]
    assert everything["text_field"] == "answer" and everything["prompt"] == "p"
    assert "task" not in template_variables(task, ANSWER, reads=frozenset({"observation"}))
