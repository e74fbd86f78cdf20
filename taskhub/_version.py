"""The installed taskhub version."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("taskhub-openenv")
except PackageNotFoundError:  # a source checkout that is not installed
    __version__ = "0.0.0+source"
