"""Action, observation and state of the quiz env: JSON schemas shared by the corpus."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_lite"))

from openenv_lite import ACTION_SCHEMA, OBSERVATION_SCHEMA, STATE_SCHEMA  # noqa: E402

__all__ = ["ACTION_SCHEMA", "OBSERVATION_SCHEMA", "STATE_SCHEMA"]
