"""Known-answer cases for every built-in reward, through the real libraries."""

from __future__ import annotations

import json
import sys
import time

import pytest

from taskhub import ConfigError, MissingDependencyError, StepRecord, build_reward
from tests.rewards.episodes import episode, score, value

MATH = [
    # (answer, reference, expected)
    ("57", "57", 1.0),
    ("57.0", "57", 1.0),
    ("-4", "-4", 1.0),
    (r"So the total is \boxed{57}.", "57", 1.0),
    (r"The answer is $\boxed{\frac{2}{4}}$", "1/2", 1.0),
    ("2/4", r"\frac{1}{2}", 1.0),
    ("0.5", r"\frac{1}{2}", 1.0),
    (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2", 1.0),
    ("$x^2+1$", "1+x^2", 1.0),
    ("5", ["4", "5"], 1.0),
    (r"\boxed{4}, though 3 is tempting", "3", 0.0),
    ("1/3", "0.333", 0.0),
    ("58", "57", 0.0),
    ("I don't know", "1/2", 0.0),
    ("", "1/2", 0.0),
    ("   ", "1/2", 0.0),
]


@pytest.mark.parametrize(
    ("answer", "reference", "expected"), MATH, ids=[f"{a!r}~{r!r}" for a, r, _ in MATH]
)
def test_math_verify_known_answers(answer: str, reference: object, expected: float) -> None:
    assert value("math_verify", episode(answer, reference)) == expected


def test_math_verify_records_what_it_parsed_and_its_version() -> None:
    component = score("math_verify", episode(r"\boxed{\frac{6}{8}}", "3/4"))
    assert component.value == 1.0 and component.details == {"parsed_answer": "3/4"}
    assert build_reward("math_verify").plugin.version.startswith("math-verify ")


def test_math_verify_reference_that_is_not_math_is_a_reward_error() -> None:
    component = score("math_verify", episode("5", "the cat"))
    assert component.value is None
    assert "reward 'math_verify' failed on task 't0'" in component.error
    assert "the reference answer 'the cat' does not parse as math" in component.error


def test_a_missing_reference_is_a_reward_error_not_a_zero() -> None:
    for spec in ("math_verify", "exact", "contains", "fuzzy", "chrf", "bleu", "rougeL"):
        component = score(spec, episode("5", None))
        assert component.value is None, spec
        assert "task 't0' has no reference answer" in component.error, spec


TEXT = [
    ("exact", "57", "57", 1.0),
    ("exact", " 57 \n", "57", 1.0),
    ("exact", "57.0", "57", 0.0),
    ("exact", "Paris", "paris", 0.0),
    ("exact:ci", "  PARIS  france", "paris france", 1.0),
    ("exact", "", "57", 0.0),
    ("exact", "b", ["a", "b"], 1.0),
    ("exact", "5", 5, 1.0),
    ("contains", "The capital is Paris.", "Paris", 1.0),
    ("contains", "the capital is paris", "Paris", 0.0),
    ("contains:ci", "the capital is paris", "Paris", 1.0),
    ("contains", "", "Paris", 0.0),
    (r"regex:^\d+$", "57", None, 1.0),
    (r"regex:^\d+$", "57 apples", None, 0.0),
    (r"regex:\d*", "", None, 0.0),
    ("fuzzy", "kitten", "sitting", 0.6153846153846154),
    ("fuzzy", "", "abc", 0.0),
    ("fuzzy:token_sort_ratio", "b a", "a b", 1.0),
    ("chrf", "the cat sat on the mat", "the cat sat on the mat", 1.0),
    ("chrf", "", "the cat sat on the mat", 0.0),
    ("bleu", "the cat sat on the mat", "the cat sat on the mat", 1.0),
    ("bleu", "dogs bark loudly", "the cat sat on the mat", 0.0),
    ("bleu", "", "the cat", 0.0),
    ("rougeL", "the cats sat", "the cat sat", 1.0),
    ("rougeL", "a b c", "x y z", 0.0),
    ("rougeL", "", "the cat", 0.0),
]


@pytest.mark.parametrize(
    ("spec", "answer", "reference", "expected"),
    TEXT,
    ids=[f"{s}:{a!r}~{r!r}" for s, a, r, _ in TEXT],
)
def test_text_rewards_known_answers(
    spec: str, answer: str, reference: object, expected: float
) -> None:
    assert value(spec, episode(answer, reference)) == pytest.approx(expected, abs=1e-12)


def test_a_catastrophic_regex_is_a_reward_error_not_a_frozen_run() -> None:
    started = time.monotonic()
    component = score(r"regex:^(a|aa)+$", episode("a" * 40 + "!", "x"))
    assert time.monotonic() - started < 10  # an unbounded search would run for hours
    assert component.value is None
    assert "did not finish within 1s on a 41-character answer" in component.error
    assert value(r"regex:^(a|aa)+$", episode("aaaa", "x")) == 1.0


def test_partial_text_matches_are_strictly_between_0_and_1() -> None:
    record = episode("the cat sat on a mat", "the cat sat on the mat")
    for spec in ("chrf", "bleu", "rougeL", "fuzzy"):
        assert 0.0 < value(spec, record) < 1.0, spec


def test_library_versions_are_recorded() -> None:
    assert build_reward("chrf").plugin.version.startswith("sacrebleu ")
    assert build_reward("fuzzy").plugin.version.startswith("rapidfuzz ")
    assert build_reward("rougeL").plugin.version.startswith("rouge-score ")
    assert build_reward("reasoning_gym").plugin.version.startswith("reasoning-gym ")
    assert build_reward("exact").plugin.version is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("regex:(", "not a valid regular expression"),
        ("fuzzy:nope", "unknown scorer"),
        ("exact:loose", "unknown mode"),
        ("reasoning_gym:basic_arithmetc", "Did you mean 'basic_arithmetic'"),
        ("answer_present:x", "takes no argument"),
    ],
)
def test_bad_arguments_fail_when_the_reward_is_built(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_reward(spec)


@pytest.mark.parametrize(
    ("module", "spec", "hint"),
    [
        ("rapidfuzz.fuzz", "fuzzy", "pip install 'taskhub-openenv[text]'"),
        ("sacrebleu", "bleu", "pip install 'taskhub-openenv[text]'"),
        ("math_verify", "math_verify", "pip install 'taskhub-openenv[math]'"),
        ("reasoning_gym", "reasoning_gym", "pip install 'taskhub-openenv[reasoning]'"),
    ],
)
def test_a_missing_library_names_its_extra(
    module: str, spec: str, hint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what `import module` sees when absent
    with pytest.raises(MissingDependencyError) as info:
        build_reward(spec)
    assert f"reward {spec!r} needs" in str(info.value) and hint in str(info.value)


# --- reasoning-gym -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gym_entries() -> list[dict]:
    import reasoning_gym

    # as a taskset row keeps them: JSON (tuples become lists)
    dataset = reasoning_gym.create_dataset("basic_arithmetic", size=3, seed=7)
    return json.loads(json.dumps(list(dataset)))


def test_reasoning_gym_uses_the_family_score_answer(gym_entries: list[dict]) -> None:
    import reasoning_gym

    scorer = reasoning_gym.get_score_answer_fn("basic_arithmetic")
    entry = gym_entries[0]
    for answer in (entry["answer"], entry["answer"] + "1", "banana"):
        record = episode(answer, entry["answer"], metadata=entry["metadata"])
        assert value("reasoning_gym", record) == scorer(answer, entry), answer
    assert (
        value(
            "reasoning_gym", episode(entry["answer"], entry["answer"], metadata=entry["metadata"])
        )
        == 1.0
    )
    assert (
        value("reasoning_gym", episode("banana", entry["answer"], metadata=entry["metadata"]))
        == 0.0
    )
    assert value("reasoning_gym", episode("", entry["answer"], metadata=entry["metadata"])) == 0.0
    component = score("reasoning_gym", episode("1", entry["answer"], metadata=entry["metadata"]))
    assert component.details == {"family": "basic_arithmetic"}


def test_reasoning_gym_family_from_the_spec_or_an_error(gym_entries: list[dict]) -> None:
    entry = gym_entries[1]
    bare = episode(entry["answer"], entry["answer"], metadata={})
    assert value("reasoning_gym:basic_arithmetic", bare) == 1.0
    component = score("reasoning_gym", bare)
    assert component.value is None and "names no reasoning-gym family" in component.error


# --- format checks -------------------------------------------------------------------------------


def test_answer_present() -> None:
    assert value("answer_present", episode("x")) == 1.0
    assert value("answer_present", episode("  ")) == 0.0
    assert value("answer_present", episode(messages=[])) == 0.0


def test_json_action() -> None:
    assert value("json_action", episode("5", reply='{"answer": "5"}')) == 1.0
    assert value("json_action", episode("5", reply='```json\n{"answer": "5"}\n```')) == 1.0
    assert value("json_action", episode("five", reply="five")) == 0.0
    assert value("json_action", episode(None)) == 0.0
    assert value("json_action", episode("5", reply='{"answer": "5"}', outcome="agent_error")) == 0.0
    retried = StepRecord(
        index=0,
        action={"answer": "5"},
        observation={},
        reward=0.0,
        done=True,
        reply='{"answer": "5"}',
        format_errors=["reply is not a JSON object: 'five'"],
    )
    assert value("json_action", episode(steps=[retried])) == 0.0


def test_think_format_follows_trl_think_format_reward() -> None:
    # the cases of TRL's think_format_reward docstring, and two it rejects
    replies = {
        "<think>\nThis is my reasoning.\n</think>\nThis is my answer.": 1.0,
        "<think>\nThis is my reasoning.\nThis is my answer.": 0.0,
        "<think>a</think><think>b</think>5": 0.0,
        "I think <think>x</think> 5": 0.0,
    }
    for reply, expected in replies.items():
        assert value("think_format", episode("5", reply=reply)) == expected, reply


def test_reasoning_gym_family_from_the_reset_dataset_name(gym_entries: list[dict]) -> None:
    """OpenEnv's reasoning-gym env takes the family as reset(dataset_name=...)."""
    entry = gym_entries[2]
    record = episode(entry["answer"], entry["answer"], metadata={})
    task = record.task.model_copy(update={"reset": {"dataset_name": "basic_arithmetic"}})
    record = record.model_copy(update={"task": task})
    assert value("reasoning_gym", record) == 1.0
    assert score("reasoning_gym", record).details == {"family": "basic_arithmetic"}
