"""Arith: a single-step OpenEnv environment of arithmetic questions with exact answers."""

from __future__ import annotations

from .client import ArithEnv
from .models import ArithAction, ArithObservation, ArithState

__all__ = ["ArithAction", "ArithEnv", "ArithObservation", "ArithState"]
