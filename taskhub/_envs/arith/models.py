"""Data models of the arith environment: the answer, the question, the episode state."""

from __future__ import annotations

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class ArithAction(Action):
    r"""The agent's reply to the question.

    Free text is accepted: the verifier reads ``\boxed{X}`` when present, else the last number.
    """

    answer: str = Field(..., description="The reply; its \\boxed{} value or last number is scored")


class ArithObservation(Observation):
    """A question, and after the step, whether the answer was right."""

    question: str = Field(default="", description="The question to answer")
    family: str = Field(default="", description="Question family (add, linear, modular...)")
    difficulty: int = Field(default=1, ge=1, le=5, description="Difficulty level, 1 to 5")
    feedback: str | None = Field(
        default=None, description="After the step: correct, incorrect, or why nothing was read"
    )
    parsed_answer: str | None = Field(
        default=None, description="After the step: the number read from the reply, normalized"
    )


class ArithState(State):
    """Episode bookkeeping. Never holds the expected answer."""

    family: str | None = Field(default=None, description="Question family of the episode")
    difficulty: int | None = Field(default=None, description="Difficulty of the episode")
    seed: int | None = Field(
        default=None, description="Seed the question was generated from (drawn when none given)"
    )
