"""Gridworld environment server components."""

from __future__ import annotations

from .gridworld_environment import GridworldEnvironment

__all__ = ["GridworldEnvironment"]
