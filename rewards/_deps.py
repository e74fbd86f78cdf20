"""Optional libraries: import them when a reward is built, with an install hint when missing."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from types import ModuleType

from taskhub import MissingDependencyError

#: The distribution to name in install hints.
DISTRIBUTION = "taskhub-openenv"


def require(module: str, *, reward: str, package: str, extra: str) -> ModuleType:
    """Import ``module`` for ``reward``, or explain how to install it.

    Raises:
        MissingDependencyError: ``module`` is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise _missing(reward, package, extra) from None


def check_installed(module: str, *, reward: str, package: str, extra: str) -> None:
    """Like ``require`` without importing (for libraries that run in worker processes only).

    Raises:
        MissingDependencyError: ``module`` is not installed.
    """
    if importlib.util.find_spec(module) is None:
        raise _missing(reward, package, extra)


def _missing(reward: str, package: str, extra: str) -> MissingDependencyError:
    return MissingDependencyError(
        f"reward {reward!r} needs {package}: pip install '{DISTRIBUTION}[{extra}]'"
    )


def version_of(distribution: str) -> Callable[[], str | None]:
    """Return a callable giving ``"<distribution> <version>"`` (for ``@reward(version=...)``)."""

    def version() -> str | None:
        try:
            return f"{distribution} {importlib.metadata.version(distribution)}"
        except importlib.metadata.PackageNotFoundError:
            return None

    return version
