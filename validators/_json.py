"""JSON values as the validators pass them around: measured values, frames, evidence."""

from __future__ import annotations

from typing import Any

#: A JSON object (measured values, frames, evidence).
JsonObject = dict[str, Any]

__all__ = ["JsonObject"]
