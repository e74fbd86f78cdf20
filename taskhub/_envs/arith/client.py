"""Client of the arith environment: a typed OpenEnv ``EnvClient`` over WebSocket."""

from __future__ import annotations

from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

try:
    from .models import ArithAction, ArithObservation, ArithState
except ImportError:  # imported from the env folder
    from models import ArithAction, ArithObservation, ArithState  # type: ignore[import-not-found,no-redef]


class ArithEnv(EnvClient[ArithAction, ArithObservation, ArithState]):
    r"""Client of an arith server.

    Example:
        >>> async with ArithEnv(base_url="http://127.0.0.1:8000") as env:
        ...     result = await env.reset(family="add", difficulty=2, seed=7)
        ...     result = await env.step(ArithAction(answer=r"\boxed{123}"))
        ...     result.reward
    """

    def _step_payload(self, action: ArithAction) -> dict[str, Any]:
        """Return the ``data`` of a step frame."""
        return {"answer": action.answer}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ArithObservation]:
        """Build a ``StepResult`` from the ``data`` of an observation frame."""
        observation = ArithObservation(
            **payload.get("observation", {}),
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=payload.get("done", False),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: dict[str, Any]) -> ArithState:
        """Build the state from the ``data`` of a state frame."""
        return ArithState(**payload)
