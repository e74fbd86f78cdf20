"""Reference OpenEnv environments shipped with taskhub, one OpenEnv project folder each."""

from __future__ import annotations

import os
import sys

# Imported as taskhub._envs.NAME, an env loads openenv before its server/__init__.py can keep
# openenv's unused Gradio web UI out of the import (see there): the same, for this entry point.
if (
    "openenv.core.env_server" not in sys.modules
    and "gradio" not in sys.modules
    and os.environ.get("ENABLE_WEB_INTERFACE", "false").lower() not in ("true", "1", "yes")
):
    sys.modules["gradio"] = None  # type: ignore[assignment]
    try:
        import openenv.core.env_server  # noqa: F401
    except ImportError:  # openenv is the `envs` extra: the folders are still found without it
        pass
    finally:
        del sys.modules["gradio"]
