"""The arith environment: one question with a checkable answer per episode.

``reset(family=, difficulty=, seed=)`` generates a question deterministically: the same triple
always gives the same question, on any machine (the generator seeds ``random.Random`` with a
string, which CPython hashes with SHA-512). ``step(ArithAction(answer=...))`` scores the reply
1.0 or 0.0 and ends the episode. The expected answer never leaves the server: it is neither in
the observation nor in the state.

The module also holds the generator (``generate_problem``) and the verifier
(``extract_answer``, ``parse_number``, ``score_answer``), which ``scripts/build_tasksets.py``
uses to write the built-in taskset.
"""

from __future__ import annotations

import difflib
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

try:
    from ..models import ArithAction, ArithObservation, ArithState  # noqa: TID252
except ImportError:  # run from the env folder: `uvicorn server.app:app`
    from models import ArithAction, ArithObservation, ArithState  # type: ignore[import-not-found,no-redef]

#: Question families, in the order the built-in taskset lists them.
FAMILIES: tuple[str, ...] = (
    "add",
    "sub",
    "mul",
    "div",
    "linear",
    "sequence",
    "modular",
    "compare",
    "gcd",
    "power",
)
MIN_DIFFICULTY = 1
MAX_DIFFICULTY = 5
DEFAULT_DIFFICULTY = 1
#: Replies longer than this score 0 without being read.
MAX_ANSWER_CHARS = 1000
#: Keys a ``task_spec`` dict may carry.
TASK_SPEC_KEYS = frozenset({"family", "difficulty", "seed"})

_README = Path(__file__).resolve().parent.parent / "README.md"


@dataclass(frozen=True)
class Problem:
    """A generated question and its exact answer."""

    family: str
    difficulty: int
    seed: int
    question: str
    answer: str
    """The exact answer: an integer (``"-42"``) or a fraction (``"4/9"``)."""


# --- the generator ------------------------------------------------------------------------------

Generator = Callable[[random.Random, int], tuple[str, int | str]]


def _num(rng: random.Random, digits: int) -> int:
    """A random integer with exactly ``digits`` digits, at least 2."""
    return rng.randint(max(2, 10 ** (digits - 1)), 10**digits - 1)


def _signed(rng: random.Random, low: int, high: int) -> int:
    """A random integer in ``[low, high]`` with a random sign."""
    value = rng.randint(low, high)
    return -value if rng.random() < 0.5 else value


def _add(rng: random.Random, d: int) -> tuple[str, int | str]:
    terms = [_num(rng, d + 1), _num(rng, rng.randint(1, d + 1))]
    if d >= 4:
        terms.append(_num(rng, rng.randint(2, d + 1)))
    return f"What is {' + '.join(map(str, terms))}?", sum(terms)


def _sub(rng: random.Random, d: int) -> tuple[str, int | str]:
    a, b = _num(rng, d + 1), _num(rng, rng.randint(1, d + 1))
    if d <= 2 or rng.random() < 0.5:
        a, b = max(a, b), min(a, b)
    else:
        a, b = min(a, b), max(a, b)
    terms = [a, b]
    if d == 5:
        terms.append(_num(rng, rng.randint(2, 5)))
    return f"What is {' - '.join(map(str, terms))}?", terms[0] - sum(terms[1:])


def _mul(rng: random.Random, d: int) -> tuple[str, int | str]:
    da, db = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2), 5: (3, 3)}[d]
    a, b = _num(rng, da), _num(rng, db)
    return f"What is {a} * {b}?", a * b


def _div(rng: random.Random, d: int) -> tuple[str, int | str]:
    dd, dq = {1: (1, 1), 2: (1, 2), 3: (2, 2), 4: (2, 3), 5: (3, 3)}[d]
    divisor, quotient = _num(rng, dd), _num(rng, dq)
    return f"What is {divisor * quotient} divided by {divisor}?", quotient


def _linear_expr(a: int, b: int) -> str:
    """Render ``a*x + b`` the way people write it: ``3x - 7``, ``-x``, ``12``."""
    if a == 0:
        return str(b)
    head = "x" if a == 1 else "-x" if a == -1 else f"{a}x"
    if b == 0:
        return head
    return f"{head} {'+' if b > 0 else '-'} {abs(b)}"


def _linear(rng: random.Random, d: int) -> tuple[str, int | str]:
    x_range = {1: 10, 2: 20, 3: 50, 4: 100, 5: 100}[d]
    a_max = {1: 5, 2: 9, 3: 12, 4: 20, 5: 20}[d]
    x = rng.randint(0 if d == 1 else -x_range, x_range)
    a = _signed(rng, 2, a_max) if d >= 3 else rng.randint(2, a_max)
    b = _signed(rng, 1, 10 * d) if d >= 2 else rng.randint(1, 10)
    if d < 5:
        return f"Solve for x: {_linear_expr(a, b)} = {a * x + b}.", x
    e = rng.choice([k for k in range(-a_max, a_max + 1) if k not in (0, a)])
    f = (a - e) * x + b
    return f"Solve for x: {_linear_expr(a, b)} = {_linear_expr(e, f)}.", x


def _sequence(rng: random.Random, d: int) -> tuple[str, int | str]:
    kinds = {
        1: ("arithmetic",),
        2: ("arithmetic",),
        3: ("arithmetic", "geometric"),
        4: ("geometric", "quadratic"),
        5: ("quadratic", "fibonacci"),
    }[d]
    kind = rng.choice(kinds)
    count = 5
    if kind == "arithmetic":
        start = rng.randint(1, 20) if d == 1 else rng.randint(-25 * d, 25 * d)
        step = rng.randint(1, 9) if d == 1 else _signed(rng, 2, 10 * d)
        terms = [start + step * i for i in range(count + 1)]
    elif kind == "geometric":
        start = rng.randint(1, 3 * d)
        ratio = rng.randint(2, 3) if d == 3 else _signed(rng, 2, 4)
        terms = [start * ratio**i for i in range(count + 1)]
    elif kind == "quadratic":
        a = rng.randint(1, 3) if d == 4 else _signed(rng, 1, 4)
        b, c = rng.randint(-5 * d, 5 * d), rng.randint(-10 * d, 10 * d)
        terms = [a * n * n + b * n + c for n in range(1, count + 2)]
    else:
        terms = [rng.randint(1, 20), rng.randint(1, 20)]
        while len(terms) < count + 1:
            terms.append(terms[-1] + terms[-2])
    shown = ", ".join(map(str, terms[:count]))
    return f"What is the next term of the sequence {shown}, ...?", terms[count]


def _modular(rng: random.Random, d: int) -> tuple[str, int | str]:
    if d <= 3:
        a = _num(rng, {1: 2, 2: 3, 3: 5}[d])
        m = rng.randint(*{1: (2, 9), 2: (3, 19), 3: (11, 99)}[d])
        return f"What is the remainder when {a} is divided by {m}?", a % m
    if d == 4:
        a, b, m = _num(rng, 3), _num(rng, 2), rng.randint(7, 50)
        return f"What is the remainder when {a} * {b} is divided by {m}?", (a * b) % m
    base, exp, m = rng.randint(2, 30), rng.randint(5, 20), rng.randint(7, 97)
    question = f"What is {base}^{exp} mod {m} (a number from 0 to {m - 1})?"
    return question, pow(base, exp, m)


def _compare(rng: random.Random, d: int) -> tuple[str, int | str]:
    count = {1: 2, 2: 3, 3: 3, 4: 4, 5: 5}[d]
    den_max = {1: 9, 2: 12, 3: 20, 4: 30, 5: 50}[d]
    while True:
        shown: list[tuple[int, int]] = []
        for _ in range(count):
            den = rng.randint(2, den_max)
            shown.append((rng.randint(1, 2 * den if d == 5 else den - 1), den))
        values = [Fraction(p, q) for p, q in shown]
        if len(set(values)) == count:
            break
    best = max(range(count), key=lambda i: values[i])
    listed = ", ".join(f"{p}/{q}" for p, q in shown)
    p, q = shown[best]
    return f"Which is the largest of these fractions: {listed}?", f"{p}/{q}"


def _gcd(rng: random.Random, d: int) -> tuple[str, int | str]:
    g_range, k_range = {
        1: ((2, 9), (2, 9)),
        2: ((2, 20), (2, 20)),
        3: ((10, 99), (2, 30)),
        4: ((10, 200), (10, 99)),
        5: ((100, 999), (10, 999)),
    }[d]
    g = rng.randint(*g_range)
    p = rng.randint(*k_range)
    q = rng.choice([k for k in range(k_range[0], k_range[1] + 1) if k != p])
    a, b = g * p, g * q
    return f"What is the greatest common divisor of {a} and {b}?", math.gcd(a, b)


def _power(rng: random.Random, d: int) -> tuple[str, int | str]:
    base_range, exp_range = {
        1: ((2, 20), (2, 2)),
        2: ((2, 20), (3, 3)),
        3: ((2, 9), (4, 6)),
        4: ((11, 30), (3, 4)),
        5: ((2, 9), (10, 15)),
    }[d]
    base, exp = rng.randint(*base_range), rng.randint(*exp_range)
    if d == 5 and rng.random() < 0.5:
        base = -base
    shown = f"({base})" if base < 0 else str(base)
    return f"What is {shown}^{exp}?", base**exp


_GENERATORS: dict[str, Generator] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "div": _div,
    "linear": _linear,
    "sequence": _sequence,
    "modular": _modular,
    "compare": _compare,
    "gcd": _gcd,
    "power": _power,
}


def check_family(family: Any) -> str:
    """Return ``family`` if it names a question family.

    Args:
        family: The value to check.

    Returns:
        The family name.

    Raises:
        ValueError: ``family`` is not one of ``FAMILIES``.
    """
    if isinstance(family, str) and family in _GENERATORS:
        return family
    close = difflib.get_close_matches(str(family), FAMILIES, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}.{hint}")


def check_difficulty(difficulty: Any) -> int:
    """Return ``difficulty`` if it is an integer from 1 to 5.

    Args:
        difficulty: The value to check.

    Returns:
        The difficulty.

    Raises:
        ValueError: ``difficulty`` is not an integer in range.
    """
    if (
        isinstance(difficulty, bool)
        or not isinstance(difficulty, int)
        or not MIN_DIFFICULTY <= difficulty <= MAX_DIFFICULTY
    ):
        raise ValueError(
            f"difficulty must be an integer from {MIN_DIFFICULTY} to {MAX_DIFFICULTY}, "
            f"got {difficulty!r}"
        )
    return difficulty


def check_seed(seed: Any) -> int:
    """Return ``seed`` if it is an integer.

    Args:
        seed: The value to check.

    Returns:
        The seed.

    Raises:
        ValueError: ``seed`` is not an integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return seed


def generate_problem(family: str | None, difficulty: int, seed: int) -> Problem:
    """Generate the question of ``(family, difficulty, seed)``.

    Args:
        family: Question family (one of ``FAMILIES``); None picks one from the seed.
        difficulty: 1 (small numbers) to 5 (large numbers, harder forms).
        seed: Any integer. Equal arguments give equal problems.

    Returns:
        The problem, with its exact answer.

    Raises:
        ValueError: An argument is out of range.
    """
    seed = check_seed(seed)
    difficulty = check_difficulty(difficulty)
    if family is None:
        family = random.Random(f"arith:family:{seed}").choice(FAMILIES)
    family = check_family(family)
    rng = random.Random(f"arith:{family}:{difficulty}:{seed}")
    question, answer = _GENERATORS[family](rng, difficulty)
    return Problem(family, difficulty, seed, question, str(answer))


# --- the verifier -------------------------------------------------------------------------------

_BOXED = re.compile(r"\\boxed\s*\{")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
# A number, not glued to a word or a decimal point: 42, -7, 1,234, 3.5, 7/2, 7 / 2.
_NUMBER = re.compile(
    r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*[-+]?\d+(?:\.\d+)?)?"
)
_EXACT = re.compile(r"([-+]?\d+(?:\.\d+)?)(?:/([-+]?\d+(?:\.\d+)?))?")
_NOISE = re.compile(r"\\[,;:! ]|\{,\}|\$|\s|,")


def _boxed_content(text: str) -> str | None:
    r"""Return the content of the last ``\boxed{...}``, braces balanced, or None."""
    starts = list(_BOXED.finditer(text))
    if not starts:
        return None
    begin = starts[-1].end()
    depth = 1
    for index in range(begin, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:index]
    return text[begin:]


def parse_number(text: str) -> Fraction | None:
    r"""Read an exact number: an integer, a decimal or a fraction ``p/q``.

    Commas, spaces, ``$`` and LaTeX spacing are ignored; ``\frac{p}{q}`` is read as ``p/q``.

    Args:
        text: The number as written.

    Returns:
        Its exact value, or None when ``text`` is not a number.
    """
    cleaned = _FRAC.sub(r"\1/\2", text.replace("\u2212", "-"))
    cleaned = _NOISE.sub("", cleaned).rstrip(".")
    match = _EXACT.fullmatch(cleaned)
    if match is None:
        return None
    value = Fraction(match[1])
    if match[2] is not None:
        denominator = Fraction(match[2])
        if denominator == 0:
            return None
        value /= denominator
    return value


def extract_answer(reply: str) -> str | None:
    r"""Find the answer in a reply: the last ``\boxed{X}`` if any, else the last number.

    Args:
        reply: The agent's text.

    Returns:
        The text of the answer (not yet normalized), or None when there is none.
    """
    reply = reply.replace("\u2212", "-")
    boxed = _boxed_content(reply)
    if boxed is not None:
        boxed = _FRAC.sub(r"\1/\2", boxed)
        # "x = 5" inside the box: the value is what follows the last "=".
        boxed = boxed.rsplit("=", 1)[-1]
        if parse_number(boxed) is not None:
            return boxed.strip()
        numbers = _NUMBER.findall(boxed)
        return numbers[-1] if numbers else None
    numbers = _NUMBER.findall(reply)
    return numbers[-1] if numbers else None


def format_number(value: Fraction) -> str:
    """Write an exact number as ``"42"`` or ``"7/2"``.

    Args:
        value: The number.

    Returns:
        Its canonical text.
    """
    return str(value.numerator) if value.denominator == 1 else f"{value}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of scoring one reply."""

    reward: float
    feedback: str
    parsed: str | None = None
    """The number read from the reply, canonical (``"42"``, ``"7/2"``), if any."""


def score_answer(reply: str, expected: str) -> Verdict:
    """Score a reply against the exact answer.

    Args:
        reply: The agent's text.
        expected: The exact answer (``"42"``, ``"4/9"``).

    Returns:
        Reward 1.0 when the reply's answer equals ``expected`` as a rational number, else 0.0.
    """
    target = parse_number(expected)
    if target is None:
        raise ValueError(f"expected answer {expected!r} is not a number")
    if len(reply) > MAX_ANSWER_CHARS:
        return Verdict(0.0, f"incorrect: the answer is longer than {MAX_ANSWER_CHARS} characters")
    if not reply.strip():
        return Verdict(0.0, "incorrect: the answer is empty")
    found = extract_answer(reply)
    value = None if found is None else parse_number(found)
    if value is None:
        return Verdict(0.0, "incorrect: no number found in the answer")
    parsed = format_number(value)
    if value == target:
        return Verdict(1.0, "correct", parsed)
    return Verdict(0.0, f"incorrect: read {parsed}", parsed)


# --- the environment ----------------------------------------------------------------------------


def resolve_task(
    *,
    seed: int | None = None,
    family: str | None = None,
    difficulty: int | None = None,
    task_spec: Mapping[str, Any] | None = None,
) -> tuple[str | None, int, int | None]:
    """Merge explicit reset arguments with a ``task_spec`` dict (explicit ones win).

    Args:
        seed: Explicit seed, or None.
        family: Explicit family, or None.
        difficulty: Explicit difficulty, or None.
        task_spec: A dict that may carry ``family``, ``difficulty`` and ``seed``.

    Returns:
        ``(family or None, difficulty, seed or None)``, validated.

    Raises:
        ValueError: ``task_spec`` is not a dict, has unknown keys, or a value is out of range.
    """
    spec: Mapping[str, Any] = {}
    if task_spec is not None:
        if not isinstance(task_spec, Mapping):
            raise ValueError(f"task_spec must be an object, got {task_spec!r}")
        unknown = sorted(set(task_spec) - TASK_SPEC_KEYS)
        if unknown:
            raise ValueError(
                f"task_spec has unknown keys {unknown}; allowed: {sorted(TASK_SPEC_KEYS)}"
            )
        spec = task_spec
    family = family if family is not None else spec.get("family")
    difficulty = difficulty if difficulty is not None else spec.get("difficulty")
    seed = seed if seed is not None else spec.get("seed")
    return (
        None if family is None else check_family(family),
        DEFAULT_DIFFICULTY if difficulty is None else check_difficulty(difficulty),
        None if seed is None else check_seed(seed),
    )


class ArithEnvironment(Environment[ArithAction, ArithObservation, ArithState]):
    r"""One arithmetic question per episode, scored exactly.

    Example:
        >>> env = ArithEnvironment()
        >>> obs = env.reset(family="add", difficulty=1, seed=3)
        >>> obs = env.step(ArithAction(answer=r"\boxed{42}"))
        >>> obs.done
        True
    """

    # Each session gets its own instance and no state is shared between instances.
    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self) -> None:
        """Create an environment with no episode yet (call ``reset()``)."""
        super().__init__()
        self._state = ArithState()
        self._problem: Problem | None = None
        self._done = False

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        family: str | None = None,
        difficulty: int | None = None,
        task_spec: dict[str, Any] | None = None,
    ) -> ArithObservation:
        """Start an episode: generate the question of ``(family, difficulty, seed)``.

        Args:
            seed: Seed of the question; None draws one (reported in the state).
            episode_id: Id of the episode; a fresh uuid when None.
            family: Question family (``add``, ``sub``, ``mul``, ``div``, ``linear``,
                ``sequence``, ``modular``, ``compare``, ``gcd``, ``power``); None picks one
                from the seed.
            difficulty: 1 to 5 (default 1): the size of the numbers and the form of the question.
            task_spec: OpenEnv Task API dict with any of ``family``, ``difficulty``, ``seed``;
                explicit arguments win over it.

        Returns:
            The question, with ``reward`` None and ``done`` False.

        Raises:
            ValueError: An argument is invalid.
        """
        family, difficulty, seed = resolve_task(
            seed=seed, family=family, difficulty=difficulty, task_spec=task_spec
        )
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        if episode_id is not None and not isinstance(episode_id, str):
            raise ValueError(f"episode_id must be a string, got {episode_id!r}")
        problem = generate_problem(family, difficulty, seed)
        self._problem = problem
        self._done = False
        self._state = ArithState(
            episode_id=episode_id if episode_id is not None else str(uuid4()),
            step_count=0,
            family=problem.family,
            difficulty=problem.difficulty,
            seed=problem.seed,
        )
        return ArithObservation(
            question=problem.question,
            family=problem.family,
            difficulty=problem.difficulty,
            done=False,
            reward=None,
        )

    def step(
        self,
        action: ArithAction,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> ArithObservation:
        """Score the answer and end the episode.

        Args:
            action: The reply.
            timeout_s: Unused (scoring is instantaneous).
            **kwargs: Unused.

        Returns:
            The question again with ``feedback``; ``reward`` 1.0 or 0.0; ``done`` True.

        Raises:
            RuntimeError: No episode was started, or it is over.
            TypeError: ``action`` is not an ``ArithAction``.
        """
        if self._problem is None:
            raise RuntimeError("no episode is running; call reset() first")
        if self._done:
            raise RuntimeError("episode is over; call reset() to start a new one")
        if not isinstance(action, ArithAction):
            raise TypeError(f"expected an ArithAction, got {type(action).__name__}")
        verdict = score_answer(action.answer, self._problem.answer)
        self._done = True
        self._state.step_count += 1
        return ArithObservation(
            question=self._problem.question,
            family=self._problem.family,
            difficulty=self._problem.difficulty,
            feedback=verdict.feedback,
            parsed_answer=verdict.parsed,
            done=True,
            reward=verdict.reward,
        )

    @property
    def state(self) -> ArithState:
        """The episode's id, step count, family, difficulty and seed (never the answer)."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Describe the environment for ``GET /metadata``."""
        return EnvironmentMetadata(
            name="arith",
            description=(
                "Single-step arithmetic questions with exact answers, generated "
                "deterministically from (family, difficulty, seed)."
            ),
            readme_content=_README.read_text(encoding="utf-8") if _README.is_file() else None,
            version="0.1.0",
            author="taskhub",
        )
