"""The arith reference env in-process: generation, verification, episode lifecycle, state."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from taskhub._envs.arith import ArithAction, ArithObservation, ArithState
from taskhub._envs.arith.server.arith_environment import (
    FAMILIES,
    MAX_ANSWER_CHARS,
    ArithEnvironment,
    generate_problem,
    parse_number,
    score_answer,
)

DIFFICULTIES = (1, 2, 3, 4, 5)
CELLS = [(f, d) for f in FAMILIES for d in DIFFICULTIES]


def play(env: ArithEnvironment, answer: str) -> ArithObservation:
    return env.step(ArithAction(answer=answer))


@pytest.mark.parametrize(("family", "difficulty"), CELLS, ids=[f"{f}-d{d}" for f, d in CELLS])
def test_every_family_and_difficulty_has_exact_answers_the_env_accepts(
    family: str, difficulty: int
) -> None:
    env = ArithEnvironment()
    for seed in range(10):
        problem = generate_problem(family, difficulty, seed)
        assert parse_number(problem.answer) is not None
        obs = env.reset(family=family, difficulty=difficulty, seed=seed)
        assert obs.question == problem.question
        assert (obs.family, obs.difficulty, obs.reward, obs.done) == (
            family,
            difficulty,
            None,
            False,
        )
        done = play(env, rf"The answer is \boxed{{{problem.answer}}}.")
        assert (done.reward, done.done, done.feedback) == (1.0, True, "correct")


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_question_and_different_seeds_differ(family: str) -> None:
    first, second = ArithEnvironment(), ArithEnvironment()
    a = first.reset(family=family, difficulty=3, seed=17)
    b = second.reset(family=family, difficulty=3, seed=17, episode_id="other")
    assert a == b
    questions = {first.reset(family=family, difficulty=3, seed=s).question for s in range(20)}
    assert len(questions) >= 10


def test_seed_none_draws_a_seed_and_reports_it() -> None:
    env = ArithEnvironment()
    seeds = set()
    for _ in range(5):
        obs = env.reset(family="mul", difficulty=5)
        seed = env.state.seed
        assert isinstance(seed, int)
        seeds.add(seed)
        assert generate_problem("mul", 5, seed).question == obs.question
    assert len(seeds) > 1


def test_family_none_is_picked_from_the_seed() -> None:
    env = ArithEnvironment()
    picked = {env.reset(seed=s).family for s in range(40)}
    assert picked <= set(FAMILIES) and len(picked) > 3
    assert env.reset(seed=5).question == env.reset(seed=5).question


def test_task_spec_is_read_and_explicit_arguments_win() -> None:
    env = ArithEnvironment()
    spec = {"family": "gcd", "difficulty": 4, "seed": 9}
    from_spec = env.reset(task_spec=spec)
    assert from_spec.question == generate_problem("gcd", 4, 9).question
    mixed = env.reset(task_spec=spec, family="power", seed=2)
    assert mixed.question == generate_problem("power", 4, 2).question
    assert (env.state.family, env.state.difficulty, env.state.seed) == ("power", 4, 2)


def test_episode_id_is_kept_else_a_fresh_one() -> None:
    env = ArithEnvironment()
    env.reset(seed=1, episode_id="ep-42")
    assert env.state.episode_id == "ep-42"
    env.reset(seed=1)
    first = env.state.episode_id
    env.reset(seed=1)
    assert first and env.state.episode_id and first != env.state.episode_id


def test_step_after_done_raises_and_reset_starts_again() -> None:
    env = ArithEnvironment()
    env.reset(family="add", difficulty=1, seed=0)
    play(env, "0")
    with pytest.raises(RuntimeError, match=re.escape("episode is over; call reset()")):
        play(env, generate_problem("add", 1, 0).answer)
    env.reset(family="add", difficulty=1, seed=0)
    assert play(env, generate_problem("add", 1, 0).answer).reward == 1.0


def test_step_before_reset_raises() -> None:
    with pytest.raises(RuntimeError, match=re.escape("call reset() first")):
        play(ArithEnvironment(), "1")


def test_state_never_holds_the_answer() -> None:
    env = ArithEnvironment()
    assert set(env.state.model_dump()) == {
        "episode_id",
        "step_count",
        "family",
        "difficulty",
        "seed",
    }
    env.reset(family="compare", difficulty=5, seed=3, episode_id="e")
    answer = generate_problem("compare", 5, 3).answer
    for snapshot in (env.state, (play(env, "1/2"), env.state)[1]):
        dumped = snapshot.model_dump()
        assert isinstance(snapshot, ArithState)
        assert set(dumped) == {"episode_id", "step_count", "family", "difficulty", "seed"}
        assert answer not in map(str, dumped.values())
    assert env.state.step_count == 1


def test_reset_observation_does_not_hold_the_answer() -> None:
    env = ArithEnvironment()
    obs = env.reset(family="linear", difficulty=2, seed=11)
    assert obs.feedback is None and obs.parsed_answer is None and obs.metadata == {}


@pytest.mark.parametrize(
    ("reply", "expected", "reward"),
    [
        ("42", "42", 1.0),
        ("12 + 30 = 42", "42", 1.0),
        (r"so \boxed{42}", "42", 1.0),
        (r"\boxed{x = 42}", "42", 1.0),
        (r"\boxed{41} but maybe \boxed{42}", "42", 1.0),
        (r"\boxed{41}, the correct total is 42", "42", 0.0),
        ("1,234,567", "1234567", 1.0),
        (r"\boxed{1\,234}", "1234", 1.0),
        ("x = -17", "-17", 1.0),
        ("x = \u221217", "-17", 1.0),
        ("12 - 5 = 7", "7", 1.0),
        ("3.5", "7/2", 1.0),
        (r"\boxed{\frac{7}{2}}", "7/2", 1.0),
        (r"\boxed{-\dfrac{14}{4}}", "-7/2", 1.0),
        ("the largest is 8/18", "4/9", 1.0),
        ("42.0", "42", 1.0),
        ("42.", "42", 1.0),
        ("$42$", "42", 1.0),
        ("43", "42", 0.0),
        ("", "42", 0.0),
        ("   \n", "42", 0.0),
        ("banana", "42", 0.0),
        (r"\boxed{}", "42", 0.0),
        (r"\boxed{banana} 42", "42", 0.0),
        ("1/0", "42", 0.0),
        ("x" * (MAX_ANSWER_CHARS - 3) + " 42", "42", 1.0),
        ("x" * MAX_ANSWER_CHARS + r"\boxed{42}", "42", 0.0),
    ],
)
def test_verifier(reply: str, expected: str, reward: float) -> None:
    assert score_answer(reply, expected).reward == reward


def test_garbage_and_empty_answers_score_zero_through_the_env() -> None:
    env = ArithEnvironment()
    for reply in ("", " ", "no idea", "{}", "\x00\x01", "9" * (MAX_ANSWER_CHARS + 1)):
        env.reset(family="div", difficulty=2, seed=4)
        obs = play(env, reply)
        assert (obs.reward, obs.done) == (0.0, True)
        assert obs.feedback and obs.feedback.startswith("incorrect")


def test_feedback_tells_what_was_read_without_the_answer() -> None:
    env = ArithEnvironment()
    env.reset(family="sub", difficulty=4, seed=8)
    answer = generate_problem("sub", 4, 8).answer
    obs = play(env, "I think it is 12345678")
    assert obs.parsed_answer == "12345678"
    assert obs.feedback == "incorrect: read 12345678"
    assert answer not in obs.feedback


def test_compare_accepts_any_equal_fraction() -> None:
    problem = generate_problem("compare", 3, 21)
    value = Fraction(problem.answer)
    for form in (f"{value.numerator}/{value.denominator}", problem.answer):
        assert score_answer(rf"\boxed{{{form}}}", problem.answer).reward == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"family": "addition"}, "unknown family 'addition'"),
        ({"family": "ad"}, "Did you mean 'add'?"),
        ({"difficulty": 0}, "difficulty must be an integer from 1 to 5, got 0"),
        ({"difficulty": 6}, "got 6"),
        ({"difficulty": "3"}, "got '3'"),
        ({"difficulty": True}, "got True"),
        ({"seed": "7"}, "seed must be an integer, got '7'"),
        ({"task_spec": {"famly": "add"}}, "task_spec has unknown keys ['famly']"),
        ({"task_spec": ["add"]}, "task_spec must be an object"),
    ],
)
def test_invalid_reset_arguments_are_explained(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ArithEnvironment().reset(**kwargs)  # type: ignore[arg-type]


def test_metadata_names_the_env() -> None:
    metadata = ArithEnvironment().get_metadata()
    assert metadata.name == "arith"
    assert metadata.readme_content and "# Arith environment" in metadata.readme_content
