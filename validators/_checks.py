"""Every check taskhub ships, registered on import (the ``taskhub.validators`` entry point)."""

from __future__ import annotations

from . import _protocol, _runtime, _semantic, _static, _statistical, _taskset

__all__ = ["_protocol", "_runtime", "_semantic", "_static", "_statistical", "_taskset"]
