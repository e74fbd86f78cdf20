"""The gridworld environment: walk a maze to its goal, one move per step.

``reset(size=, difficulty=, seed=)`` generates a ``size x size`` grid with walls, a start and a
goal, deterministically from its arguments. Difficulty raises the wall density and the detour the
shortest path must make around walls. A maze is always solvable: the generator draws again from
the same seeded stream until a breadth-first search finds a path no longer than ``4 * size``.
Reaching the goal pays 1.0 and ends the episode; running out of moves ends it with 0.0. The state
never holds the solution.

The module also holds the generator (``generate_maze``) and the solver (``shortest_path``),
which ``scripts/build_tasksets.py`` uses to write the built-in taskset and its oracle paths.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

try:
    from ..models import GridAction, GridObservation, GridState, Move  # noqa: TID252
except ImportError:  # run from the env folder: `uvicorn server.app:app`
    from models import GridAction, GridObservation, GridState, Move  # type: ignore[import-not-found,no-redef]

Cell = tuple[int, int]

#: Moves and their (row, col) offsets, in the order BFS tries them.
MOVES: dict[Move, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
MIN_SIZE = 3
MAX_SIZE = 16
DEFAULT_SIZE = 5
MIN_DIFFICULTY = 1
MAX_DIFFICULTY = 5
DEFAULT_DIFFICULTY = 1
#: Probability that a cell is a wall, by difficulty.
WALL_DENSITY: dict[int, float] = {1: 0.10, 2: 0.18, 3: 0.26, 4: 0.34, 5: 0.42}
#: Extra moves, beyond the Manhattan distance, that the shortest path needs, by difficulty
#: (capped at ``2 * (size - 3)`` so that small grids stay generable).
MIN_DETOUR: dict[int, int] = {1: 0, 2: 0, 3: 2, 4: 2, 5: 4}
#: Keys a ``task_spec`` dict may carry.
TASK_SPEC_KEYS = frozenset({"size", "difficulty", "seed", "max_steps"})
#: Draws before the generator gives up (never reached in practice: see the tests).
_MAX_ATTEMPTS = 100_000

_README = Path(__file__).resolve().parent.parent / "README.md"


def default_max_steps(size: int) -> int:
    """Moves allowed in an episode on a ``size x size`` grid unless ``max_steps`` is given."""
    return 4 * size


@dataclass(frozen=True)
class Maze:
    """A generated maze. ``solution`` is for oracles and tasksets, never sent to agents."""

    size: int
    difficulty: int
    seed: int
    walls: frozenset[Cell]
    start: Cell
    goal: Cell
    solution: tuple[Move, ...]
    """A shortest path from start to goal (BFS, moves tried up, down, left, right)."""

    def is_free(self, cell: Cell) -> bool:
        """Whether ``cell`` is inside the grid and not a wall."""
        row, col = cell
        return 0 <= row < self.size and 0 <= col < self.size and cell not in self.walls

    def legal_moves(self, cell: Cell) -> list[Move]:
        """The moves from ``cell`` that land on a free cell."""
        return [m for m, (dr, dc) in MOVES.items() if self.is_free((cell[0] + dr, cell[1] + dc))]

    def render(self, agent: Cell) -> str:
        """Draw the grid: ``#`` wall, ``.`` free, ``A`` agent, ``G`` goal, one line per row."""
        rows = []
        for row in range(self.size):
            chars = []
            for col in range(self.size):
                cell = (row, col)
                if cell == agent:
                    chars.append("A")
                elif cell == self.goal:
                    chars.append("G")
                elif cell in self.walls:
                    chars.append("#")
                else:
                    chars.append(".")
            rows.append("".join(chars))
        return "\n".join(rows)


def shortest_path(size: int, walls: frozenset[Cell], start: Cell, goal: Cell) -> list[Move] | None:
    """Find a shortest path by breadth-first search.

    Args:
        size: Side of the grid.
        walls: Wall cells.
        start: Start cell.
        goal: Goal cell.

    Returns:
        The moves from ``start`` to ``goal``, or None when the goal cannot be reached.
    """
    previous: dict[Cell, tuple[Cell, Move] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path: list[Move] = []
            step = previous[cell]
            while step is not None:
                cell, move = step
                path.append(move)
                step = previous[cell]
            return path[::-1]
        for move, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if (
                0 <= nxt[0] < size
                and 0 <= nxt[1] < size
                and nxt not in walls
                and nxt not in previous
            ):
                previous[nxt] = (cell, move)
                queue.append(nxt)
    return None


def _distance(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")
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


def generate_maze(size: int, difficulty: int, seed: int) -> Maze:
    """Generate the maze of ``(size, difficulty, seed)``; equal arguments give equal mazes.

    Args:
        size: Side of the grid, 3 to 16.
        difficulty: 1 to 5: wall density from 10% to 42%, and a longer detour.
        seed: Any integer.

    Returns:
        A maze whose goal is at least ``size - 1`` cells (Manhattan) from the start, reachable
        in at most ``4 * size`` moves, by a shortest path that detours around walls by at least
        ``MIN_DETOUR[difficulty]`` moves (capped for small grids).

    Raises:
        ValueError: An argument is out of range.
    """
    size = _check_int("size", size, MIN_SIZE, MAX_SIZE)
    difficulty = _check_int("difficulty", difficulty, MIN_DIFFICULTY, MAX_DIFFICULTY)
    seed = check_seed(seed)
    rng = random.Random(f"gridworld:{size}:{difficulty}:{seed}")
    density = WALL_DENSITY[difficulty]
    detour = min(MIN_DETOUR[difficulty], 2 * (size - 3))
    cells = [(row, col) for row in range(size) for col in range(size)]
    for _ in range(_MAX_ATTEMPTS):
        walls = frozenset(cell for cell in cells if rng.random() < density)
        free = [cell for cell in cells if cell not in walls]
        if len(free) < 2:
            continue
        start = rng.choice(free)
        far = [c for c in free if _distance(c, start) >= size - 1]
        if not far:
            continue
        goal = rng.choice(far)
        path = shortest_path(size, walls, start, goal)
        if (
            path is not None
            and len(path) <= default_max_steps(size)
            and len(path) - _distance(start, goal) >= detour
        ):
            return Maze(size, difficulty, seed, walls, start, goal, tuple(path))
    raise RuntimeError(  # pragma: no cover - the densities above make this unreachable
        f"no solvable maze for size={size} difficulty={difficulty} seed={seed} "
        f"after {_MAX_ATTEMPTS} draws"
    )


def resolve_task(
    *,
    seed: int | None = None,
    size: int | None = None,
    difficulty: int | None = None,
    max_steps: int | None = None,
    task_spec: Mapping[str, Any] | None = None,
) -> tuple[int, int, int | None, int]:
    """Merge explicit reset arguments with a ``task_spec`` dict (explicit ones win).

    Args:
        seed: Explicit seed, or None.
        size: Explicit grid side, or None (5).
        difficulty: Explicit difficulty, or None (1).
        max_steps: Explicit move budget, or None (``4 * size``).
        task_spec: A dict that may carry ``size``, ``difficulty``, ``seed`` and ``max_steps``.

    Returns:
        ``(size, difficulty, seed or None, max_steps)``, validated.

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
    size = size if size is not None else spec.get("size", DEFAULT_SIZE)
    difficulty = difficulty if difficulty is not None else spec.get("difficulty")
    seed = seed if seed is not None else spec.get("seed")
    max_steps = max_steps if max_steps is not None else spec.get("max_steps")
    size = _check_int("size", size, MIN_SIZE, MAX_SIZE)
    return (
        size,
        _check_int(
            "difficulty",
            DEFAULT_DIFFICULTY if difficulty is None else difficulty,
            MIN_DIFFICULTY,
            MAX_DIFFICULTY,
        ),
        None if seed is None else check_seed(seed),
        default_max_steps(size) if max_steps is None else _check_int("max_steps", max_steps, 1),
    )


class GridworldEnvironment(Environment[GridAction, GridObservation, GridState]):
    """Maze navigation: reach ``G`` within ``max_steps`` moves.

    Example:
        >>> env = GridworldEnvironment()
        >>> obs = env.reset(size=5, difficulty=2, seed=7)
        >>> print(obs.grid)  # doctest: +SKIP
        >>> obs = env.step(GridAction(move=obs.legal_moves[0]))
    """

    # Each session gets its own instance and no state is shared between instances.
    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self) -> None:
        """Create an environment with no episode yet (call ``reset()``)."""
        super().__init__()
        self._state = GridState()
        self._maze: Maze | None = None
        self._position: Cell = (0, 0)
        self._max_steps = 0
        self._done = False

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        size: int | None = None,
        difficulty: int | None = None,
        max_steps: int | None = None,
        task_spec: dict[str, Any] | None = None,
    ) -> GridObservation:
        """Start an episode in the maze of ``(size, difficulty, seed)``.

        Args:
            seed: Seed of the maze; None draws one (reported in the state).
            episode_id: Id of the episode; a fresh uuid when None.
            size: Side of the grid, 3 to 16 (default 5).
            difficulty: 1 to 5 (default 1): wall density from 10% to 42%, and a longer detour.
            max_steps: Moves allowed (default ``4 * size``).
            task_spec: OpenEnv Task API dict with any of ``size``, ``difficulty``, ``seed``,
                ``max_steps``; explicit arguments win over it.

        Returns:
            The initial observation, with ``reward`` None and ``done`` False.

        Raises:
            ValueError: An argument is invalid.
        """
        size, difficulty, seed, max_steps = resolve_task(
            seed=seed, size=size, difficulty=difficulty, max_steps=max_steps, task_spec=task_spec
        )
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        if episode_id is not None and not isinstance(episode_id, str):
            raise ValueError(f"episode_id must be a string, got {episode_id!r}")
        maze = generate_maze(size, difficulty, seed)
        self._maze = maze
        self._position = maze.start
        self._max_steps = max_steps
        self._done = False
        self._state = GridState(
            episode_id=episode_id if episode_id is not None else str(uuid4()),
            step_count=0,
            position=maze.start,
            size=size,
            difficulty=difficulty,
            seed=seed,
            max_steps=max_steps,
        )
        message = (
            f"Move the agent A to the goal G in at most {max_steps} moves. "
            "Walls (#) and the edge block moves."
        )
        return self._observe(maze, message, reward=None)

    def _observe(self, maze: Maze, message: str, reward: float | None) -> GridObservation:
        return GridObservation(
            grid=maze.render(self._position),
            size=maze.size,
            position=self._position,
            goal=maze.goal,
            legal_moves=[] if self._done else maze.legal_moves(self._position),
            steps_taken=self._state.step_count,
            max_steps=self._max_steps,
            message=message,
            done=self._done,
            reward=reward,
        )

    def step(
        self,
        action: GridAction,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> GridObservation:
        """Make one move.

        Args:
            action: The move. A move into a wall or the edge keeps the position (and counts).
            timeout_s: Unused (moves are instantaneous).
            **kwargs: Unused.

        Returns:
            The new observation; ``reward`` 1.0 on reaching the goal, else 0.0; ``done`` when
            the goal is reached or the moves run out.

        Raises:
            RuntimeError: No episode was started, or it is over.
            TypeError: ``action`` is not a ``GridAction``.
        """
        maze = self._maze
        if maze is None:
            raise RuntimeError("no episode is running; call reset() first")
        if self._done:
            raise RuntimeError("episode is over; call reset() to start a new one")
        if not isinstance(action, GridAction):
            raise TypeError(f"expected a GridAction, got {type(action).__name__}")
        dr, dc = MOVES[action.move]
        target = (self._position[0] + dr, self._position[1] + dc)
        if maze.is_free(target):
            self._position = target
            message = f"Moved {action.move}."
        else:
            inside = 0 <= target[0] < maze.size and 0 <= target[1] < maze.size
            obstacle = "a wall" if inside else "the edge"
            message = f"Blocked: {action.move} runs into {obstacle}; position unchanged."
        self._state.step_count += 1
        self._state.position = self._position
        reward = 0.0
        if self._position == maze.goal:
            self._done = True
            reward = 1.0
            message += " Reached the goal!"
        elif self._state.step_count >= self._max_steps:
            self._done = True
            message += f" Out of moves ({self._max_steps})."
        return self._observe(maze, message, reward=reward)

    @property
    def state(self) -> GridState:
        """The episode's id, step count, position, size, difficulty, seed and move budget."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Describe the environment for ``GET /metadata``."""
        return EnvironmentMetadata(
            name="gridworld",
            description=(
                "Multi-step maze navigation on a square grid with walls; always solvable, "
                "generated deterministically from (size, difficulty, seed)."
            ),
            readme_content=_README.read_text(encoding="utf-8") if _README.is_file() else None,
            version="0.1.0",
            author="taskhub",
        )
