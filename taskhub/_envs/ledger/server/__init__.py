"""Ledger environment server components."""

from __future__ import annotations

import os
import sys

# openenv's env_server package imports its Gradio web UI as it loads, even when the UI is off:
# 6 s of this server's 8 s start. With the UI off (create_app then never touches it), that first
# import runs with gradio unimportable, which openenv falls back on; gradio stays importable after.
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

from .ledger_environment import LedgerEnvironment  # noqa: E402

__all__ = ["LedgerEnvironment"]
