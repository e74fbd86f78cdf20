"""Gridworld: a multi-step OpenEnv environment of maze navigation on a square grid."""

from __future__ import annotations

from .client import GridworldEnv
from .models import GridAction, GridObservation, GridState

__all__ = ["GridAction", "GridObservation", "GridState", "GridworldEnv"]
