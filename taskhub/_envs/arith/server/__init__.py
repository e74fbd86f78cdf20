"""Arith environment server components."""

from __future__ import annotations

from .arith_environment import ArithEnvironment

__all__ = ["ArithEnvironment"]
