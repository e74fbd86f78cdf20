"""Data models of the ledger environment: the question, the episode state, the tool names.

Actions are OpenEnv's MCP actions (``openenv.core.env_server.mcp_types``): ``ListToolsAction``
lists the tools, ``CallToolAction`` calls one; tool calls return a ``CallToolObservation``.
"""

from __future__ import annotations

from openenv.core.env_server.types import Observation, State
from pydantic import Field

#: The tools the environment serves, in the order it lists them.
TOOL_NAMES: tuple[str, ...] = ("lookup", "calculate", "submit")


class LedgerObservation(Observation):
    """What ``reset()`` shows: the question and the call budget."""

    question: str = Field(default="", description="The question to answer with the tools")
    family: str = Field(default="", description="Question family (total, difference...)")
    difficulty: int = Field(default=1, ge=1, le=5, description="Difficulty level, 1 to 5")
    max_calls: int = Field(default=0, ge=0, description="Tool calls allowed in the episode")


class LedgerState(State):
    """Episode bookkeeping. Never holds the expected answer or the catalog."""

    family: str | None = Field(default=None, description="Question family of the episode")
    difficulty: int | None = Field(default=None, description="Difficulty of the episode")
    seed: int | None = Field(
        default=None, description="Seed the ledger was generated from (drawn when none given)"
    )
    max_calls: int | None = Field(default=None, description="Tool calls allowed")
    submitted: bool = Field(default=False, description="Whether an answer was submitted")
