"""`taskhub results compare`: per-task changes and paired statistics, checked by hand and scipy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from typer.testing import CliRunner

from taskhub import ResultsError, read_run
from taskhub._cli import app
from taskhub._compare import compare_columns, compare_runs
from tests.leaderboard.corpus import episode, write_run

# Task -> rewards of its two samples, for A and B. t5 only in A, t6 only in B.
A = {"t0": [0, 0], "t1": [1, 0], "t2": [1, 1], "t3": [0, 0], "t4": [1, 0], "t5": [1, 1]}
B = {"t0": [1, 1], "t1": [1, 1], "t2": [1, 0], "t3": [0, 0], "t4": [1, 1], "t6": [0, 0]}


def columns(data: dict[str, list[int]]):  # type: ignore[no-untyped-def]
    tasks = [t for t, values in data.items() for _ in values]
    samples = [s for values in data.values() for s in range(len(values))]
    rewards = [float(v) for values in data.values() for v in values]
    return tasks, samples, rewards, [v >= 1 for v in rewards]


def test_changes_paired_difference_mcnemar_and_pass_at_k() -> None:
    numbers = compare_columns(columns(A), columns(B))
    assert numbers["shared_tasks"] == 5
    assert (numbers["only_a"], numbers["only_b"]) == (["t5"], ["t6"])
    assert numbers["counts"] == {"fixed": 3, "regressed": 1, "unchanged": 1}
    changes = {t.task_id: t.change for t in numbers["tasks"]}  # type: ignore[attr-defined]
    assert changes == {
        "t0": "fixed", "t1": "fixed", "t2": "regressed", "t3": "unchanged", "t4": "fixed"
    }  # fmt: skip
    assert [t.task_id for t in numbers["tasks"]][0] == "t2"  # type: ignore[attr-defined]

    # the paired t test over per-task means: scipy.stats.ttest_rel
    shared = ["t0", "t1", "t2", "t3", "t4"]
    mean_a = [sum(A[t]) / 2 for t in shared]
    mean_b = [sum(B[t]) / 2 for t in shared]
    reference = stats.ttest_rel(mean_b, mean_a)
    ci = reference.confidence_interval(0.95)
    reward = numbers["reward"]
    assert reward.difference == pytest.approx(0.3)  # type: ignore[attr-defined]
    assert reward.ci95 == pytest.approx((ci.low, ci.high), abs=5e-4)  # type: ignore[attr-defined]
    assert reward.tasks == 5  # type: ignore[attr-defined]

    # McNemar over (task, sample) pairs: A-only successes (t2#1), B-only (t0#0, t0#1, t1#1,
    # t4#1), checked against statsmodels
    test = numbers["mcnemar"]
    assert (test.pairs, test.only_a, test.only_b) == (10, 1, 4)  # type: ignore[attr-defined]
    expected = mcnemar([[3, 1], [4, 2]], exact=True).pvalue
    assert test.p_value == pytest.approx(expected)  # type: ignore[attr-defined]

    # unbiased pass@k over the shared tasks: A solves t1, t2, t4 at least once; B t0, t1, t2, t4
    passk = numbers["pass_at_k"]
    assert passk["pass@1"] == pytest.approx({"a": 0.4, "b": 0.7, "delta": 0.3})  # type: ignore[index]
    assert passk["pass@2"] == pytest.approx({"a": 0.6, "b": 0.8, "delta": 0.2})  # type: ignore[index]


def _run(root: Path, run_id: str, data: dict[str, list[int]], **kwargs: object) -> Path:
    records = [
        episode(run_id, task, sample=s, reward=float(v))
        for task, values in data.items()
        for s, v in enumerate(values)
    ]
    return write_run(root, run_id, records, samples=2, **kwargs)  # type: ignore[arg-type]


def test_compare_command_prints_and_gives_json(tmp_path: Path) -> None:
    a = _run(tmp_path, "base", A, model="scripted/base")
    b = _run(tmp_path, "tuned", B, model="scripted/tuned", temperature=0.7)
    cli = CliRunner()
    result = cli.invoke(app, ["results", "compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "5 shared: 3 fixed, 1 regressed, 1 unchanged" in result.output
    assert "1 only in A, 1 only in B" in result.output
    assert "sampling temperature: 0.0 vs 0.7" in result.output
    assert re.search(r"reward B - A\s+.\s+\+0\.300", result.output)
    data = json.loads(cli.invoke(app, ["results", "compare", str(a), str(b), "--json"]).output)
    assert data["counts"] == {"fixed": 3, "regressed": 1, "unchanged": 1}
    assert data["model_b"] == "scripted/tuned"


def test_runs_on_another_taskset_commit_are_refused(tmp_path: Path) -> None:
    a = _run(tmp_path, "base", A)
    other = _run(tmp_path, "other", B, fingerprint="b" * 64)
    with pytest.raises(ResultsError, match=re.escape("taskset: content:" + "a" * 64)):
        compare_runs(read_run(a), read_run(other))
    result = CliRunner().invoke(app, ["results", "compare", str(a), str(other)])
    assert result.exit_code == 1
    assert "do not compare" in result.output
