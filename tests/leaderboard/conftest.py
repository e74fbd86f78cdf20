from __future__ import annotations

from pathlib import Path

import pytest

from taskhub import EvalConfig, evaluate

from .corpus import build_corpus


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: scripted/random on the built-in gridworld env, 3 tasks x 3 samples."""
    out = tmp_path_factory.mktemp("real-runs")
    config = EvalConfig(model="scripted/random", taskset="gridworld", limit=3, samples=3, seed=1)
    return evaluate(config, run_dir=out / "gridworld-random").run_dir


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixed corpus of tests/leaderboard/corpus.py (do not modify it in a test)."""
    return build_corpus(tmp_path_factory.mktemp("corpus"))
