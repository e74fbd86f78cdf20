"""The public API: every ``__all__`` is sorted, complete and importable."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = ["taskhub", "taskhub.env", "taskhub.models"]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__)
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.{attr}"


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_complete(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, type(importlib))
        and getattr(value, "__module__", "").startswith("taskhub")
    }
    assert public <= set(module.__all__)
