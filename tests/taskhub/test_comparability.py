"""Comparable numbers: the configuration fingerprint, reward ranges, components and groups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub import (
    EvalConfig,
    RewardInfo,
    comparability,
    describe_differences,
    evaluate,
    read_manifest,
    read_run,
    rescore,
    summarize,
    total_range,
    write_manifest,
)
from taskhub._cli import app
from taskhub._results import summarize_groups, task_field


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The oracle on 6 arith tasks with three reward settings (two of them re-scored)."""
    root = tmp_path_factory.mktemp("runs")
    config = EvalConfig(model="scripted/oracle", taskset="arith", limit=6, rewards=["exact"])
    out = {"exact": evaluate(config, run_dir=root / "exact").run_dir}
    for name, rewards in {
        "exact+fuzzy": ["exact", "fuzzy=0.5"],
        "gated": ["exact", "answer_present=gate"],
    }.items():
        out[name] = rescore(out["exact"], rewards, run_dir=root / name).run_dir
    return out


def test_run_json_stores_the_configuration_and_its_ranges(runs: dict[str, Path]) -> None:
    manifest = read_manifest(runs["exact+fuzzy"])
    stored = manifest.comparability
    assert stored is not None
    assert [(r.spec, r.weight, r.range) for r in stored.rewards] == [
        ("exact", 1.0, (0.0, 1.0)),
        ("fuzzy=0.5", 0.5, (0.0, 1.0)),
    ]
    assert stored.reward_range == (0.0, 1.5)
    assert stored.taskset == f"content:{manifest.taskset.fingerprint}"
    assert (stored.split, stored.env, stored.success_threshold) == ("test", "arith", 1.0)
    assert stored.rewards[1].version and stored.rewards[1].version.startswith("rapidfuzz ")
    # the gate adds nothing to the range
    assert read_manifest(runs["gated"]).comparability.reward_range == (0.0, 1.0)  # type: ignore[union-attr]


def test_old_runs_get_the_same_fingerprint_recomputed(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    manifest = read_manifest(runs["exact+fuzzy"])
    assert manifest.comparability is not None
    old = manifest.model_copy(update={"comparability": None})
    write_manifest(tmp_path, old)
    recomputed = comparability(read_manifest(tmp_path))
    assert recomputed == manifest.comparability
    assert recomputed.fingerprint == manifest.comparability.fingerprint


def test_differences_name_what_differs(runs: dict[str, Path]) -> None:
    a = comparability(read_manifest(runs["exact"]))
    b = comparability(read_manifest(runs["exact+fuzzy"]))
    assert a.fingerprint != b.fingerprint
    assert describe_differences(a, b) == ["rewards: exact vs exact, fuzzy=0.5"]
    hot = b.model_copy(update={"sampling": {**b.sampling, "temperature": 0.7}})
    assert describe_differences(b, hot) == ["sampling temperature: 0.0 vs 0.7"]
    assert describe_differences(b, hot, sampling=False) == []
    assert hot.scoring_fingerprint == b.scoring_fingerprint != hot.fingerprint


def test_total_range_follows_from_the_weights() -> None:
    unit = (0.0, 1.0)
    assert total_range([RewardInfo(spec="a", name="a", range=unit)]) == unit
    assert total_range(
        [
            RewardInfo(spec="a=2", name="a", weight=2.0, range=unit),
            RewardInfo(spec="b=-1", name="b", weight=-1.0, range=unit),
        ]
    ) == (-1.0, 2.0)
    assert total_range([RewardInfo(spec="env", name="env")]) is None
    assert total_range([RewardInfo(spec="g=gate", name="g", gate=True, range=unit)]) == unit


def test_summary_gives_each_component_and_a_total_inside_its_range(
    runs: dict[str, Path],
) -> None:
    run = read_run(runs["exact+fuzzy"])
    summary = summarize(run.records, comparability=comparability(run.manifest))
    assert summary.mean_reward == 1.5  # the oracle: 1 + 0.5 * 1, the top of [0, 1.5]
    assert summary.reward_range == (0.0, 1.5) and summary.interval == "bounded"
    assert summary.ci95 is not None and 0.0 <= summary.ci95[0] < 1.5 == summary.ci95[1]
    components = {c.name: c for c in summary.components}
    assert sorted(components) == ["exact", "fuzzy=0.5"]
    assert components["fuzzy=0.5"].weight == 0.5 and components["fuzzy=0.5"].mean == 1.0
    assert components["exact"].n == 6 and components["exact"].ci95 == pytest.approx(
        (6 / (6 + 2.571**2), 1.0)
    )
    # without the ranges, the plain t interval (degenerate here: every value is 1.5)
    assert summarize(run.records).interval == "t"


def test_groups_by_a_task_field(runs: dict[str, Path]) -> None:
    run = read_run(runs["exact"])
    task = run.records[0].task
    assert task_field(task, "family") == task.metadata["family"]
    assert task_field(task, "metadata.family") == task.metadata["family"]
    assert task_field(task, "reset.difficulty") == json.dumps(task.reset["difficulty"])
    assert task_field(task, "nothing.here") == "(none)"
    groups = summarize_groups(run.records, "family")
    assert sum(g.n_tasks for g in groups) == 6
    assert all(g.mean_reward == 1.0 and g.success_rate == 1.0 for g in groups)
    assert [g.value for g in groups] == sorted(g.value for g in groups)


def test_results_show_prints_components_ranges_and_groups(runs: dict[str, Path]) -> None:
    cli = CliRunner()
    result = cli.invoke(app, ["results", "show", str(runs["exact+fuzzy"]), "--by", "family"])
    assert result.exit_code == 0, result.output
    assert "exact, fuzzy=0.5  range [0, 1.5]" in result.output
    assert "reward components" in result.output and "fuzzy=0.5" in result.output
    assert "by family" in result.output
    data = json.loads(
        cli.invoke(
            app, ["results", "show", str(runs["exact+fuzzy"]), "--json", "--by", "family"]
        ).output
    )
    assert (
        data["comparability"]["fingerprint"]
        == comparability(read_manifest(runs["exact+fuzzy"])).fingerprint
    )
    assert [c["name"] for c in data["summary"]["components"]] == ["exact", "fuzzy=0.5"]
    assert data["summary"]["reward_range"] == [0.0, 1.5]
    assert sum(g["n_episodes"] for g in data["groups"]["family"]) == 6
