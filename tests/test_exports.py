"""The public API: every ``__all__`` is sorted, complete and importable."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PUBLIC = ["taskhub", "taskhub.env", "taskhub.models"]
# packages whose names are imported on first use: a table of each name's module, and the same
# imports under TYPE_CHECKING for type checkers
LAZY = ["taskhub", "taskhub.rewards"]


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


def _type_checking_imports(path: Path, package: str) -> dict[str, str]:
    """Each name imported under ``if TYPE_CHECKING:`` in ``path``, and its module."""
    names: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom) and item.module
                module = ("." * item.level + item.module).removeprefix(package + ".")
                names |= {alias.name: module.lstrip(".") for alias in item.names}
    return names


@pytest.mark.parametrize("name", LAZY)
def test_a_lazy_package_names_every_export_once_in_its_table_and_for_type_checkers(
    name: str,
) -> None:
    module = importlib.import_module(name)
    table = module._MODULE_OF  # each name's module, in the package
    assert sum(len(names) for names in module._SOURCES.values()) == len(table)  # no name twice
    assert sorted(table) == module.__all__
    assert _type_checking_imports(Path(module.__file__), name) == table
    for attr, source in table.items():  # each from the module the table names
        assert getattr(module, attr) is getattr(importlib.import_module(f"{name}.{source}"), attr)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018


def test_a_reward_worker_imports_none_of_taskhub_but_its_own_modules() -> None:
    # what a worker of the reward pool imports before its first math-verify job
    code = (
        "import sys, taskhub.rewards._worker, taskhub.rewards._math_work\n"
        "print(sorted(m for m in sys.modules if m.startswith('taskhub')))"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "['taskhub',",
        "'taskhub.rewards',",
        "'taskhub.rewards._math_work',",
        "'taskhub.rewards._worker']",
    ]
