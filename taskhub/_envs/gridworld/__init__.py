"""Gridworld: a multi-step OpenEnv environment of maze navigation on a square grid."""

from __future__ import annotations

import os
import sys

# taskhub launches this env as a package (`uvicorn NAME.server.app:app --app-dir ..`): this file
# loads openenv (through .client) before server/__init__.py can keep openenv's unused Gradio web
# UI out of the import (see there), so it does the same here first.
if (
    "openenv.core.env_server" not in sys.modules
    and "gradio" not in sys.modules
    and os.environ.get("ENABLE_WEB_INTERFACE", "false").lower() not in ("true", "1", "yes")
):
    sys.modules["gradio"] = None  # type: ignore[assignment]
    try:
        import openenv.core.env_server  # noqa: F401
    finally:
        del sys.modules["gradio"]

from .client import GridworldEnv  # noqa: E402
from .models import GridAction, GridObservation, GridState  # noqa: E402

__all__ = ["GridAction", "GridObservation", "GridState", "GridworldEnv"]
