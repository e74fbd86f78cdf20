"""taskhub.training: a curated public surface that imports no heavy library until used."""

from __future__ import annotations

import importlib
import subprocess
import sys


def test_all_is_sorted_complete_and_importable() -> None:
    module = importlib.import_module("taskhub.training")
    assert module.__all__ == sorted(module.__all__)
    for attr in module.__all__:
        assert hasattr(module, attr), attr
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, type(importlib))
        and getattr(value, "__module__", "").startswith("taskhub")
    }
    assert public <= set(module.__all__)


def test_importing_it_loads_no_trainer_library() -> None:
    heavy = ["datasets", "torch", "trl", "transformers", "art", "huggingface_hub", "pandas"]
    code = f"import sys, taskhub.training\nprint([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
