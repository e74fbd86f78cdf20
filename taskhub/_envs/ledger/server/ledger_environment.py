"""The ledger environment: answer a question about a shop's ledger with tool calls.

``reset(family=, difficulty=, seed=)`` generates a ledger (items with a unit price and a stock
count) and a question about it, deterministically from its arguments: the same triple always
gives the same ledger and question, on any machine. The ledger is never shown: the agent must
``lookup`` the items the question names, may ``calculate`` exactly, and ends the episode with
``submit``, which pays 1.0 for the exact answer and 0.0 otherwise. Every other tool call pays
0.0; running out of calls ends the episode with 0.0. Listing the tools is free (no call used).

The environment also serves OpenEnv's Task API (``list_splits``, ``num_tasks``, ``get_task``,
``get_task_range``, ``list_tasks``): the built-in taskset's train and test tasks, each
selectable with ``reset(split=, index=)``. The module holds the generator (``generate_problem``,
``tasks_of_split``), the oracle (``Problem.oracle_calls``) and the verifier (``score_answer``),
which ``scripts/build_tasksets.py`` uses to write the built-in taskset.
"""

from __future__ import annotations

import ast
import difflib
import functools
import math
import random
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any
from uuid import uuid4

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation

try:
    from ..models import LedgerObservation, LedgerState  # noqa: TID252
except ImportError:  # run from the env folder: `uvicorn server.app:app`
    from models import LedgerObservation, LedgerState  # type: ignore[import-not-found,no-redef]

#: Question families, in the order the built-in taskset lists them.
FAMILIES: tuple[str, ...] = ("total", "difference", "restock", "budget", "value")
MIN_DIFFICULTY = 1
MAX_DIFFICULTY = 5
DEFAULT_DIFFICULTY = 1
#: Tool calls allowed in an episode unless ``max_calls`` is given.
DEFAULT_MAX_CALLS = 10
MAX_MAX_CALLS = 100
#: Keys a ``task_spec`` dict may carry.
TASK_SPEC_KEYS = frozenset({"family", "difficulty", "seed", "max_calls"})
#: Longest expression ``calculate`` reads, and longest answer ``submit`` reads, in characters.
MAX_EXPRESSION_CHARS = 300
MAX_ANSWER_CHARS = 100
#: Items a ledger may hold (single words, so that a tool argument is one token).
ITEMS: tuple[str, ...] = (
    "almonds",
    "apples",
    "bananas",
    "beans",
    "bread",
    "butter",
    "carrots",
    "cheese",
    "coffee",
    "eggs",
    "flour",
    "garlic",
    "grapes",
    "honey",
    "lemons",
    "lentils",
    "milk",
    "oats",
    "oil",
    "onions",
    "oranges",
    "pasta",
    "pears",
    "pepper",
    "potatoes",
    "rice",
    "salt",
    "sugar",
    "tea",
    "tomatoes",
    "vinegar",
    "walnuts",
)
#: Split -> (tasks per family and difficulty, seeds it draws from). The seed ranges are disjoint.
SPLITS: dict[str, tuple[int, range]] = {
    "train": (8, range(0, 5000)),
    "test": (4, range(5000, 10000)),
}

_README = Path(__file__).resolve().parent.parent / "README.md"


# --- the ledger and its questions ---------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One line of the ledger."""

    name: str
    price: Fraction
    """Unit price in dollars (whole cents)."""
    stock: int
    """Units in stock."""

    def record(self) -> dict[str, Any]:
        """What ``lookup`` returns for this item."""
        return {"item": self.name, "unit_price": format_amount(self.price), "in_stock": self.stock}


@dataclass(frozen=True)
class Problem:
    """A generated ledger, a question about it, and the exact answer."""

    family: str
    difficulty: int
    seed: int
    items: Mapping[str, Item]
    question: str
    answer: str
    """The exact answer: a count (``"12"``) or an amount in dollars (``"15.25"``)."""
    needed: tuple[str, ...]
    """The items the question names, in the order it names them."""

    def oracle_calls(self) -> list[dict[str, Any]]:
        """A shortest solving sequence: look up every named item, then submit the answer."""
        calls = [_call("lookup", item=name) for name in self.needed]
        return [*calls, _call("submit", answer=self.answer)]


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}


def format_amount(value: Fraction) -> str:
    """Write an exact number: ``"12"`` for an integer, else a decimal with at least two places.

    A value with no finite decimal expansion is written ``p/q``.

    Args:
        value: The number.

    Returns:
        Its text.
    """
    if value.denominator == 1:
        return str(value.numerator)
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(2, twos, fives)
    scaled = value * 10**places
    sign = "-" if scaled < 0 else ""
    digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def _money(value: Fraction) -> str:
    return f"${format_amount(value)}" if value.denominator != 1 else f"${value.numerator}.00"


def _units(count: int, name: str) -> str:
    return f"{count} unit{'s' if count != 1 else ''} of {name}"


def _listing(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _verb(quantities: list[int]) -> str:
    return "does" if quantities == [1] else "do"


def _ledger(rng: random.Random, difficulty: int) -> dict[str, Item]:
    names = sorted(rng.sample(ITEMS, 6 + difficulty))
    return {
        name: Item(name, Fraction(rng.randint(50, 1500), 100), rng.randint(0, 80)) for name in names
    }


Question = tuple[str, Fraction, tuple[str, ...]]


def _total(rng: random.Random, d: int, items: dict[str, Item]) -> Question:
    count = {1: 1, 2: 2, 3: 3, 4: 3, 5: 4}[d]
    names = tuple(rng.sample(sorted(items), count))
    # a single item comes at least twice: the answer is never a price the lookup shows
    quantities = [rng.randint(2 if count == 1 else 1, 2 + 2 * d) for _ in names]
    total = sum((q * items[n].price for q, n in zip(quantities, names, strict=True)), Fraction(0))
    bought = _listing([_units(q, n) for q, n in zip(quantities, names, strict=True)])
    in_total = " in total" if count > 1 else ""
    if d < 4:
        return f"What {_verb(quantities)} {bought} cost{in_total}, in dollars?", total, names
    discount = rng.choice((10, 15, 20, 25, 40))
    question = (
        f"What do {bought} cost in total, in dollars, with a {discount}% discount on the "
        "whole order?"
    )
    return question, total * (100 - discount) / 100, names


def _difference(rng: random.Random, d: int, items: dict[str, Item]) -> Question:
    left_count, right_count = {1: (1, 1), 2: (1, 1), 3: (2, 1), 4: (2, 2), 5: (3, 2)}[d]
    while True:
        names = rng.sample(sorted(items), left_count + right_count)
        quantities = [1 if d == 1 else rng.randint(1, 3 + d) for _ in names]
        sides = [
            list(zip(quantities[:left_count], names[:left_count], strict=True)),
            list(zip(quantities[left_count:], names[left_count:], strict=True)),
        ]
        costs = [sum((q * items[n].price for q, n in side), Fraction(0)) for side in sides]
        if costs[0] == costs[1]:
            continue
        if costs[0] < costs[1]:
            if left_count != right_count:
                continue
            sides.reverse()
            costs.reverse()
        break
    left = _listing([_units(q, n) for q, n in sides[0]])
    right = _listing([_units(q, n) for q, n in sides[1]])
    together = " together" if len(sides[1]) > 1 else ""
    verb = _verb([q for q, _ in sides[0]])
    question = f"How many dollars more {verb} {left} cost than {right}{together}?"
    return question, costs[0] - costs[1], tuple(n for side in sides for _, n in side)


def _restock(rng: random.Random, d: int, items: dict[str, Item]) -> Question:
    count = {1: 1, 2: 2, 3: 3, 4: 1, 5: 2}[d]
    names = tuple(rng.sample(sorted(items), count))
    target = max(items[n].stock for n in names) + rng.randint(1, 40)
    short = [target - items[n].stock for n in names]
    which = _listing(list(names))
    each = " each" if count > 1 else ""
    if d < 4:
        question = (
            f"The shop wants at least {target} units of {which}{each} in stock. How many units "
            f"must it order{' in total' if count > 1 else ''}?"
        )
        return question, Fraction(sum(short)), names
    box = rng.choice((4, 6, 10, 12))
    boxes = sum(math.ceil(s / box) for s in short)
    question = (
        f"The shop wants at least {target} units of {which}{each} in stock, and orders in "
        f"whole boxes of {box} units (one item per box). How many boxes must it order?"
    )
    return question, Fraction(boxes), names


def _budget(rng: random.Random, d: int, items: dict[str, Item]) -> Question:
    extra_count = {1: 0, 2: 1, 3: 0, 4: 2, 5: 1}[d]
    capped = d in (3, 5)
    while True:
        names = rng.sample(sorted(items), 1 + extra_count)
        target, extras = names[0], names[1:]
        quantities = [rng.randint(1, 4) for _ in extras]
        spent = sum(
            (q * items[n].price for q, n in zip(quantities, extras, strict=True)), Fraction(0)
        )
        budget = Fraction(rng.randint(5, 40 * d) * 5)
        left = budget - spent
        if left < items[target].price:
            continue
        can_buy = math.floor(left / items[target].price)
        answer = min(can_buy, items[target].stock) if capped else can_buy
        if capped and items[target].stock == 0:
            continue
        break
    question = f"You have {_money(budget)}."
    if extras:
        bought = _listing([_units(q, n) for q, n in zip(quantities, extras, strict=True)])
        question += f" You first buy {bought}."
    question += f" How many whole units of {target} can you buy with "
    question += "the money left" if extras else "it"
    question += ", given the shop's current stock?" if capped else "?"
    return question, Fraction(answer), (*extras, target)


def _value(rng: random.Random, d: int, items: dict[str, Item]) -> Question:
    count = min(d, 4) if d < 5 else 2
    names = tuple(rng.sample(sorted(items), count))
    worth = [items[n].stock * items[n].price for n in names]
    if d < 5:
        which = _listing(list(names))
        question = (
            f"What is the whole stock of {which} worth at the unit prices, in dollars?"
            if count > 1
            else f"What is the whole stock of {which} worth at its unit price, in dollars?"
        )
        return question, sum(worth, Fraction(0)), names
    if worth[0] == worth[1]:
        return _value(rng, 4, items)
    high, low = (0, 1) if worth[0] > worth[1] else (1, 0)
    question = (
        f"How many dollars more is the whole stock of {names[high]} worth than the whole stock "
        f"of {names[low]}, at the unit prices?"
    )
    return question, worth[high] - worth[low], (names[high], names[low])


_GENERATORS: dict[str, Callable[[random.Random, int, dict[str, Item]], Question]] = {
    "total": _total,
    "difference": _difference,
    "restock": _restock,
    "budget": _budget,
    "value": _value,
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


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")
    return value


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
    """Generate the ledger and question of ``(family, difficulty, seed)``.

    Args:
        family: Question family (one of ``FAMILIES``); None picks one from the seed.
        difficulty: 1 (one item, small numbers) to 5 (several items, discounts, boxes).
        seed: Any integer. Equal arguments give equal problems.

    Returns:
        The problem, with its exact answer.

    Raises:
        ValueError: An argument is out of range.
    """
    seed = check_seed(seed)
    difficulty = _check_int("difficulty", difficulty, MIN_DIFFICULTY, MAX_DIFFICULTY)
    if family is None:
        family = random.Random(f"ledger:family:{seed}").choice(FAMILIES)
    family = check_family(family)
    rng = random.Random(f"ledger:{family}:{difficulty}:{seed}")
    items = _ledger(rng, difficulty)
    question, answer, needed = _GENERATORS[family](rng, difficulty, items)
    question += " Look the items up with the tools, then submit the answer."
    return Problem(family, difficulty, seed, items, question, format_amount(answer), needed)


@dataclass(frozen=True)
class TaskEntry:
    """One task of a split, as the Task API and the built-in taskset list it."""

    task_id: str
    problem: Problem

    def spec(self) -> dict[str, Any]:
        """The task spec the Task API serves (never the answer)."""
        p = self.problem
        return {
            "task_id": self.task_id,
            "family": p.family,
            "difficulty": p.difficulty,
            "seed": p.seed,
            "question": p.question,
        }


@functools.cache
def _all_splits() -> dict[str, tuple[TaskEntry, ...]]:
    # Every (family, difficulty) cell once, then again...; a question already used in either
    # split is skipped, so no test task is a copy of a train task.
    seen: set[str] = set()

    def cell(family: str, difficulty: int, seeds: range) -> Iterator[TaskEntry]:
        for seed in seeds:
            problem = generate_problem(family, difficulty, seed)
            if problem.question in seen:
                continue
            seen.add(problem.question)
            yield TaskEntry(f"ledger-{family}-d{difficulty}-s{seed:04d}", problem)
        raise RuntimeError(f"ledger {family} d{difficulty}: {seeds} has too few new questions")

    splits = {}
    for split, (per_cell, seeds) in SPLITS.items():
        cells = [
            cell(f, d, seeds) for f in FAMILIES for d in range(MIN_DIFFICULTY, MAX_DIFFICULTY + 1)
        ]
        splits[split] = tuple(next(c) for _ in range(per_cell) for c in cells)
    return splits


def tasks_of_split(split: str) -> tuple[TaskEntry, ...]:
    """Return the tasks of ``split`` (``train`` or ``test``), in order.

    Raises:
        ValueError: ``split`` is not a split.
    """
    splits = _all_splits()
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(splits)}")
    return splits[split]


# --- the tools ----------------------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?\$?\s*(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\$?\s*\.\d+")
_ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant)
_OPERATORS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def calculate(expression: str) -> str:
    """Evaluate ``+ - * /`` and parentheses over decimal numbers, exactly.

    Args:
        expression: Such as ``3 * 2.35 + 2 * (4.10 - 0.5)``.

    Returns:
        The exact result (a decimal, or ``p/q`` when it has no finite decimal form).

    Raises:
        ToolError: The expression is too long, not arithmetic, or divides by zero.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("give an arithmetic expression such as 3 * 2.35 + 4.10")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    cleaned = expression.replace("$", "").replace(",", "").replace("\u00d7", "*")
    try:
        tree = ast.parse(cleaned.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot read {expression!r} as arithmetic") from None

    def value(node: ast.AST, depth: int) -> Fraction:
        if depth > 50 or not isinstance(node, _ALLOWED_NODES):
            raise ToolError("only numbers, + - * / and parentheses are allowed")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ToolError("only numbers, + - * / and parentheses are allowed")
            return Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.UAdd | ast.USub):
                raise ToolError("only numbers, + - * / and parentheses are allowed")
            inner = value(node.operand, depth + 1)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp):
            operator = _OPERATORS.get(type(node.op))
            if operator is None:
                raise ToolError("only numbers, + - * / and parentheses are allowed")
            left, right = value(node.left, depth + 1), value(node.right, depth + 1)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ToolError("division by zero")
            return operator(left, right)
        assert isinstance(node, ast.Expression)
        return value(node.body, depth + 1)

    return format_amount(value(tree, 0))


def parse_answer(text: str) -> Fraction | None:
    """Read the one number of an answer: ``"15.25"``, ``"$15.25"``, ``"1,204 units"``.

    Args:
        text: The submitted answer.

    Returns:
        Its exact value, or None when the text holds no number or more than one.
    """
    found = _NUMBER.findall(text)
    if len(found) != 1:
        return None
    number = re.sub(r"[\s$,]", "", found[0])
    try:
        return Fraction(number)
    except (ValueError, ZeroDivisionError):
        return None


@dataclass(frozen=True)
class Verdict:
    """The outcome of one submitted answer."""

    reward: float
    feedback: str


def score_answer(answer: str, expected: str) -> Verdict:
    """Score a submitted answer against the exact one.

    Args:
        answer: The submitted text.
        expected: The exact answer (``"15.25"``, ``"12"``).

    Returns:
        Reward 1.0 when the answer's one number equals ``expected`` exactly, else 0.0.
    """
    if len(answer) > MAX_ANSWER_CHARS:
        return Verdict(0.0, f"incorrect: the answer is longer than {MAX_ANSWER_CHARS} characters")
    value = parse_answer(answer)
    if value is None:
        return Verdict(0.0, "incorrect: the answer must hold exactly one number")
    if value == Fraction(expected):
        return Verdict(1.0, "correct")
    return Verdict(0.0, f"incorrect: read {format_amount(value)}")


# --- the environment ----------------------------------------------------------------------------


def resolve_task(
    *,
    seed: int | None = None,
    family: str | None = None,
    difficulty: int | None = None,
    max_calls: int | None = None,
    task_spec: Mapping[str, Any] | None = None,
    split: str | None = None,
    index: int | None = None,
) -> tuple[str | None, int, int | None, int]:
    """Merge explicit reset arguments, a Task API task and a ``task_spec`` (explicit ones win).

    Args:
        seed: Explicit seed, or None.
        family: Explicit family, or None.
        difficulty: Explicit difficulty, or None.
        max_calls: Explicit call budget, or None.
        task_spec: A dict that may carry ``family``, ``difficulty``, ``seed``, ``max_calls``.
        split: Task API split (with ``index``).
        index: Task API index within ``split``.

    Returns:
        ``(family or None, difficulty, seed or None, max_calls)``, validated.

    Raises:
        ValueError: An argument is invalid, or ``split``/``index`` name no task.
    """
    spec: dict[str, Any] = {}
    if (split is None) != (index is None):
        raise ValueError("split and index go together: pass both or neither")
    if split is not None and index is not None:
        entries = tasks_of_split(split)
        index = _check_int("index", index, 0)
        if index >= len(entries):
            raise ValueError(f"index {index} is out of range: split {split!r} has {len(entries)}")
        problem = entries[index].problem
        spec = {"family": problem.family, "difficulty": problem.difficulty, "seed": problem.seed}
    if task_spec is not None:
        if not isinstance(task_spec, Mapping):
            raise ValueError(f"task_spec must be an object, got {task_spec!r}")
        unknown = sorted(set(task_spec) - TASK_SPEC_KEYS)
        if unknown:
            raise ValueError(
                f"task_spec has unknown keys {unknown}; allowed: {sorted(TASK_SPEC_KEYS)}"
            )
        spec = {**spec, **task_spec}
    family = family if family is not None else spec.get("family")
    difficulty = difficulty if difficulty is not None else spec.get("difficulty")
    seed = seed if seed is not None else spec.get("seed")
    max_calls = max_calls if max_calls is not None else spec.get("max_calls")
    return (
        None if family is None else check_family(family),
        DEFAULT_DIFFICULTY
        if difficulty is None
        else _check_int("difficulty", difficulty, MIN_DIFFICULTY, MAX_DIFFICULTY),
        None if seed is None else check_seed(seed),
        DEFAULT_MAX_CALLS
        if max_calls is None
        else _check_int("max_calls", max_calls, 1, MAX_MAX_CALLS),
    )


class LedgerEnvironment(MCPEnvironment):
    """A question about a hidden ledger, answered with the lookup, calculate and submit tools.

    Example:
        >>> env = LedgerEnvironment()
        >>> obs = env.reset(family="total", difficulty=1, seed=3)
        >>> obs = env.step(CallToolAction(tool_name="lookup", arguments={"item": "rice"}))
    """

    # Each session gets its own instance (and its own MCP server); nothing is shared.
    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self) -> None:
        """Create an environment with no episode yet (call ``reset()``)."""
        server = FastMCP("ledger")

        @server.tool
        def lookup(item: str) -> dict[str, Any]:
            """Look an item of the ledger up: its unit price in dollars and its stock in units.

            Args:
                item: The item's name as the question writes it (e.g. "rice").
            """
            return self._lookup(item)

        @server.tool(name="calculate")
        def calculate_tool(expression: str) -> str:
            """Evaluate + - * / and parentheses over decimal numbers exactly.

            Args:
                expression: Such as "3 * 2.35 + 2 * 4.10".
            """
            return calculate(expression)

        @server.tool
        def submit(answer: str) -> str:
            """Submit the final answer (one number) and end the episode.

            Args:
                answer: The answer, such as "15.25" or "12".
            """
            return self._submit(answer)

        super().__init__(server)
        self._state = LedgerState()
        self._problem: Problem | None = None
        self._max_calls = DEFAULT_MAX_CALLS
        self._done = False
        self._verdict: Verdict | None = None
        self._in_step = False

    # --- tools ----------------------------------------------------------------------------

    def _lookup(self, item: str) -> dict[str, Any]:
        problem = self._running()
        key = item.strip().lower() if isinstance(item, str) else ""
        if key in problem.items:
            return problem.items[key].record()
        listed = ", ".join(sorted(problem.items))
        raise ToolError(f"the ledger has no item called {item!r:.60}; its items are {listed}")

    def _submit(self, answer: str) -> str:
        problem = self._running()
        if not self._in_step:
            # over a direct MCP request (no step) a submission could neither end the episode
            # nor be paid: refusing it keeps the verdict from being probed for free
            raise ToolError("submit ends the episode: send it as a call_tool step")
        verdict = score_answer(answer if isinstance(answer, str) else str(answer), problem.answer)
        self._verdict = verdict
        return verdict.feedback

    def _running(self) -> Problem:
        if self._problem is None:
            raise ToolError("no episode is running; call reset() first")
        return self._problem

    # --- the OpenEnv verbs ----------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        family: str | None = None,
        difficulty: int | None = None,
        max_calls: int | None = None,
        task_spec: dict[str, Any] | None = None,
        split: str | None = None,
        index: int | None = None,
    ) -> LedgerObservation:
        """Start an episode: generate the ledger and question of ``(family, difficulty, seed)``.

        Args:
            seed: Seed of the ledger; None draws one (reported in the state).
            episode_id: Id of the episode; a fresh uuid when None.
            family: Question family (``total``, ``difference``, ``restock``, ``budget``,
                ``value``); None picks one from the seed.
            difficulty: 1 to 5 (default 1): how many items, discounts, boxes, stock limits.
            max_calls: Tool calls allowed (default 10, at most 100).
            task_spec: OpenEnv Task API dict with any of ``family``, ``difficulty``, ``seed``,
                ``max_calls``; explicit arguments win over it.
            split: A Task API split (``train``, ``test``), with ``index``.
            index: The task's index within ``split``.

        Returns:
            The question, with ``reward`` None and ``done`` False.

        Raises:
            ValueError: An argument is invalid.
        """
        family, difficulty, seed, max_calls = resolve_task(
            seed=seed,
            family=family,
            difficulty=difficulty,
            max_calls=max_calls,
            task_spec=task_spec,
            split=split,
            index=index,
        )
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        if episode_id is not None and not isinstance(episode_id, str):
            raise ValueError(f"episode_id must be a string, got {episode_id!r}")
        problem = generate_problem(family, difficulty, seed)
        self._problem = problem
        self._max_calls = max_calls
        self._done = False
        self._verdict = None
        self._state = LedgerState(
            episode_id=episode_id if episode_id is not None else str(uuid4()),
            step_count=0,
            family=problem.family,
            difficulty=problem.difficulty,
            seed=problem.seed,
            max_calls=max_calls,
        )
        return LedgerObservation(
            question=problem.question,
            family=problem.family,
            difficulty=problem.difficulty,
            max_calls=max_calls,
            done=False,
            reward=None,
        )

    def _before(self, action: Action) -> None:
        self._verdict = None
        if isinstance(action, ListToolsAction):
            return
        if self._problem is None:
            raise RuntimeError("no episode is running; call reset() first")
        if self._done:
            raise RuntimeError("episode is over; call reset() to start a new one")
        if not isinstance(action, CallToolAction):
            raise TypeError(
                f"expected a call_tool or list_tools action, got {type(action).__name__}"
            )
        self._in_step = True

    def _after(self, action: Action, observation: Observation) -> Observation:
        if isinstance(observation, ListToolsObservation):
            # discovery is free: no call used, a neutral reward
            return ListToolsObservation(tools=observation.tools, done=self._done, reward=0.0)
        assert isinstance(observation, CallToolObservation)
        self._state.step_count += 1
        verdict, self._verdict = self._verdict, None
        reward = 0.0
        if verdict is not None:
            self._done = True
            self._state.submitted = True
            reward = verdict.reward
        elif self._state.step_count >= self._max_calls:
            self._done = True
        return CallToolObservation(
            tool_name=observation.tool_name,
            result=observation.result,
            error=observation.error,
            done=self._done,
            reward=reward,
            metadata={"calls_left": self._max_calls - self._state.step_count},
        )

    def step(
        self,
        action: Action,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> Observation:
        """Call a tool (or list them).

        Args:
            action: ``ListToolsAction`` or ``CallToolAction``.
            timeout_s: Deadline of the tool call (OpenEnv's default when None).
            **kwargs: Unused.

        Returns:
            ``CallToolObservation`` with the tool's result or error; ``reward`` 1.0 for a
            correct ``submit``, else 0.0; ``done`` after ``submit`` or the last allowed call.

        Raises:
            RuntimeError: No episode was started, or it is over.
            TypeError: ``action`` is not an MCP action.
        """
        self._before(action)
        try:
            observation = super().step(action, timeout_s=timeout_s, **kwargs)
        finally:
            self._in_step = False
        return self._after(action, observation)

    async def step_async(
        self,
        action: Action,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> Observation:
        """The WebSocket path of ``step`` (the MCP session is already open)."""
        self._before(action)
        try:
            observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        finally:
            self._in_step = False
        return self._after(action, observation)

    def _step_impl(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        raise TypeError(f"expected a call_tool or list_tools action, got {type(action).__name__}")

    @property
    def state(self) -> LedgerState:
        """The episode's id, call count, family, difficulty, seed and budget (never the answer)."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Describe the environment for ``GET /metadata``."""
        return EnvironmentMetadata(
            name="ledger",
            description=(
                "Multi-step tool use: answer a question about a hidden shop ledger by looking "
                "items up, calculating and submitting, generated deterministically from "
                "(family, difficulty, seed)."
            ),
            readme_content=_README.read_text(encoding="utf-8") if _README.is_file() else None,
            version="0.1.0",
            author="taskhub",
        )

    # --- OpenEnv's Task API -----------------------------------------------------------------

    def list_splits(self) -> list[dict[str, str]]:
        """The splits of the built-in tasks."""
        return [{"name": name, "type": name} for name in SPLITS]

    def num_tasks(self, split: str) -> int:
        """How many tasks ``split`` has."""
        return len(self._split(split))

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """Every task spec of ``split``."""
        return [entry.spec() for entry in self._split(split)]

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """The task spec at ``index`` of ``split`` (reset with ``split=`` and ``index=``).

        Raises:
            IndexError: ``index`` is out of range.
        """
        entries = self._split(split)
        if not 0 <= index < len(entries):
            raise IndexError(f"index {index} is out of range: split {split!r} has {len(entries)}")
        return entries[index].spec()

    def get_task_range(
        self, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        """The task specs of ``split`` in ``[start, stop)``."""
        return [entry.spec() for entry in self._split(split)[start:stop]]

    @staticmethod
    def _split(split: str) -> tuple[TaskEntry, ...]:
        try:
            return tasks_of_split(split)
        except ValueError as exc:
            raise IndexError(str(exc)) from None
