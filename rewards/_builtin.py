"""Every reward of this package, imported for its ``@reward`` registrations.

The ``taskhub.rewards`` entry point names this module: the registry imports it on its first
lookup of a reward the core lacks.
"""

from __future__ import annotations

from . import _adapters, _format, _judge, _math, _reasoning_gym, _text  # noqa: F401
