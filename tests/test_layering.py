"""The core stays light and never imports its sibling packages at import time."""

from __future__ import annotations

import subprocess
import sys

HEAVY = [
    "taskhub.validators",
    "taskhub.rewards",
    "taskhub.leaderboard",
    "datasets",
    "pandas",
    "huggingface_hub",
    "openenv",
    "llama_cpp",
    "ray",
]


def test_import_taskhub_loads_no_sibling_and_no_heavy_library() -> None:
    code = (
        "import sys, taskhub, taskhub.env, taskhub.models, taskhub._cli\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_siblings_import_only_the_public_core() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    offenders = []
    for folder in ("rewards", "validators", "leaderboard"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                offenders += [
                    f"{path.relative_to(root)}: {n}" for n in names if n.startswith("taskhub._")
                ]
    assert offenders == []
