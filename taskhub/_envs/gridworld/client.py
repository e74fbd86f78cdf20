"""Client of the gridworld environment: a typed OpenEnv ``EnvClient`` over WebSocket."""

from __future__ import annotations

from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

try:
    from .models import GridAction, GridObservation, GridState
except ImportError:  # imported from the env folder
    from models import GridAction, GridObservation, GridState  # type: ignore[import-not-found,no-redef]


class GridworldEnv(EnvClient[GridAction, GridObservation, GridState]):
    """Client of a gridworld server.

    Example:
        >>> async with GridworldEnv(base_url="http://127.0.0.1:8000") as env:
        ...     result = await env.reset(size=5, difficulty=2, seed=7)
        ...     while not result.done:
        ...         result = await env.step(GridAction(move=result.observation.legal_moves[0]))
    """

    def _step_payload(self, action: GridAction) -> dict[str, Any]:
        """Return the ``data`` of a step frame."""
        return {"move": action.move}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[GridObservation]:
        """Build a ``StepResult`` from the ``data`` of an observation frame."""
        observation = GridObservation(
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

    def _parse_state(self, payload: dict[str, Any]) -> GridState:
        """Build the state from the ``data`` of a state frame."""
        return GridState(**payload)
