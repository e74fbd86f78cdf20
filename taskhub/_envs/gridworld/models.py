"""Data models of the gridworld environment: a move, the maze as seen, the episode state.

Cells are ``(row, col)``, row 0 at the top: ``up`` decreases the row, ``left`` the column.
"""

from __future__ import annotations

from typing import Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

#: The four moves, in the order the environment lists them.
Move = Literal["up", "down", "left", "right"]


class GridAction(Action):
    """One move of the agent."""

    move: Move = Field(..., description="Direction to move: up, down, left or right")


class GridObservation(Observation):
    """The maze as text, where the agent is, and what it can do."""

    grid: str = Field(
        default="",
        description="One line per row: '#' wall, '.' free, 'A' the agent, 'G' the goal",
    )
    size: int = Field(default=0, ge=0, description="Side of the square grid")
    position: tuple[int, int] = Field(default=(0, 0), description="Agent cell (row, col)")
    goal: tuple[int, int] = Field(default=(0, 0), description="Goal cell (row, col)")
    legal_moves: list[Move] = Field(
        default_factory=list,
        description="Moves that do not run into a wall or the edge (none once the episode is over)",
    )
    steps_taken: int = Field(default=0, ge=0, description="Moves made so far")
    max_steps: int = Field(default=0, ge=0, description="Moves allowed in the episode")
    message: str = Field(default="", description="What happened on the last move")


class GridState(State):
    """Episode bookkeeping. Holds no solution."""

    position: tuple[int, int] | None = Field(default=None, description="Agent cell (row, col)")
    size: int | None = Field(default=None, description="Side of the grid")
    difficulty: int | None = Field(default=None, description="Wall density level, 1 to 5")
    seed: int | None = Field(
        default=None, description="Seed the maze was generated from (drawn when none given)"
    )
    max_steps: int | None = Field(default=None, description="Moves allowed in the episode")
