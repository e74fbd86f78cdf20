"""Ledger: a multi-step MCP tool environment: look items up, compute, submit the answer."""

from __future__ import annotations

from .client import LedgerEnv
from .models import TOOL_NAMES, LedgerObservation, LedgerState

__all__ = ["LedgerEnv", "LedgerObservation", "LedgerState", "TOOL_NAMES"]
