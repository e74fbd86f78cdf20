"""Ledger environment server components."""

from __future__ import annotations

from .ledger_environment import LedgerEnvironment

__all__ = ["LedgerEnvironment"]
