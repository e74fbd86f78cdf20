"""``taskhub results merge``: shards run apart become the one run they are parts of."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub import (
    EvalConfig,
    ResultsError,
    evaluate,
    merge_runs,
    read_manifest,
    read_results,
    resume,
    select_tasks,
)
from taskhub._cli import app
from taskhub._taskset import load_taskset
from tests.servers import FakeEnv
from tests.taskhub.test_runner import stable, write_taskset

runner = CliRunner()
CONFIG: dict[str, object] = {}


def _config(**update: object) -> EvalConfig:
    return EvalConfig(**{**CONFIG, "limit": 6, "samples": 2, "seed": 3, **update})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """One plain run of 6 tasks x 2 samples, and the same evaluation as shards 0/2 and 1/2."""
    root = tmp_path_factory.mktemp("merge")
    taskset = write_taskset(root / "ts", 8)
    with FakeEnv() as env:
        CONFIG.update(model="scripted/random", taskset=str(taskset), env=env.url)
        made = {"plain": evaluate(_config(), run_dir=root / "plain").run_dir}
        for index in (0, 1):
            made[f"shard{index}"] = evaluate(
                _config(shard=(index, 2)), run_dir=root / f"shard{index}"
            ).run_dir
        yield made


def _by_key(run_dir: Path) -> list[dict]:
    return [stable(r) for r in sorted(read_results(run_dir), key=lambda r: r.key())]


def test_limit_comes_before_shard_so_shards_split_the_limited_tasks() -> None:
    taskset = load_taskset("arith")
    _, limited = select_tasks(
        taskset, EvalConfig(model="scripted/oracle", taskset="arith", limit=9)
    )
    shards = [
        select_tasks(taskset, EvalConfig(model="m/x", taskset="arith", limit=9, shard=(i, 3)))[1]
        for i in range(3)
    ]
    assert [len(s) for s in shards] == [3, 3, 3]
    assert sorted(t.task_id for s in shards for t in s) == sorted(t.task_id for t in limited)


def test_merged_shards_equal_one_run(runs: dict[str, Path], tmp_path: Path) -> None:
    result = merge_runs([runs["shard0"], runs["shard1"]], tmp_path / "merged")
    assert result.duplicates == 0
    manifest = read_manifest(tmp_path / "merged")
    plain = read_manifest(runs["plain"])
    assert manifest.status == "completed" and manifest.n_planned == plain.n_planned == 12
    assert manifest.config.shard is None
    assert manifest.merged_from == [read_manifest(runs[s]).run_id for s in ("shard0", "shard1")]
    records = read_results(tmp_path / "merged")
    assert {r.run_id for r in records} == {manifest.run_id}
    assert len({r.key() for r in records}) == len(records) == 12
    assert _by_key(tmp_path / "merged") == _by_key(runs["plain"])
    assert result.summary.mean_reward == pytest.approx(evaluate_summary(runs["plain"]).mean_reward)


def evaluate_summary(run_dir: Path):
    from taskhub import summarize

    return summarize(read_results(run_dir), n_planned=read_manifest(run_dir).n_planned)


def test_the_leaderboard_reads_the_merged_directory_as_one_run(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    from taskhub.leaderboard import resolve_inputs
    from taskhub.leaderboard._board import assemble

    merge_runs([runs["shard1"], runs["shard0"]], tmp_path / "site-runs" / "merged")
    board = assemble(resolve_inputs([tmp_path / "site-runs"]))
    plain = assemble(resolve_inputs([runs["plain"]]))
    assert len(board.runs) == 1
    merged, alone = board.runs[0].stats, plain.runs[0].stats
    volatile = {"mean_duration_s", "model_time_s", "queue_time_s", "tokens_per_s"}  # timings
    assert merged.summary.model_dump(exclude=volatile) == alone.summary.model_dump(exclude=volatile)
    assert merged.per_task.equals(alone.per_task)
    assert merged.components == alone.components


def test_a_shard_given_twice_keeps_one_record_per_episode(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    result = merge_runs([runs["shard0"], runs["shard0"], runs["shard1"]], tmp_path / "m")
    assert result.duplicates == len(read_results(runs["shard0"]))
    keys = [r.key() for r in read_results(tmp_path / "m")]
    assert len(keys) == len(set(keys)) == 12
    assert read_manifest(tmp_path / "m").n_planned == 12


def test_missing_shards_leave_a_run_that_resume_completes(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    result = merge_runs([runs["shard1"]], tmp_path / "half")
    assert result.manifest.status == "interrupted"
    assert result.manifest.n_planned == 12  # the taskset counts the missing shard's episodes
    assert result.summary.n_episodes == 6
    # the merged run is the unsharded evaluation: --resume runs the episodes no shard wrote
    resumed = resume(result.run_dir)
    assert resumed.manifest.status == "completed"
    assert _by_key(result.run_dir) == _by_key(runs["plain"])


def test_a_mix_is_refused_naming_the_difference(runs: dict[str, Path], tmp_path: Path) -> None:
    seeded = evaluate(_config(shard=(1, 2), seed=4), run_dir=tmp_path / "seed4").run_dir
    with pytest.raises(ResultsError, match=r"differ in seed \(3 vs 4\)"):
        merge_runs([runs["shard0"], seeded], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    oracle = evaluate(
        _config(shard=(1, 2), model="scripted/oracle"), run_dir=tmp_path / "o"
    ).run_dir
    with pytest.raises(ResultsError, match=re.escape("differ in model ('scripted/random' vs")):
        merge_runs([runs["shard0"], oracle], tmp_path / "bad")
    with pytest.raises(ResultsError, match="already holds a run"):
        merge_runs([runs["shard0"]], runs["shard1"])


def test_cli_merge(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cli"
    result = runner.invoke(
        app,
        ["results", "merge", str(runs["shard0"]), str(runs["shard1"]), "-o", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "completed" and payload["summary"]["n_episodes"] == 12
    refused = runner.invoke(app, ["results", "merge", str(runs["shard0"]), "-o", str(out)])
    assert refused.exit_code == 1
    assert refused.stderr.startswith("ResultsError: ")


def test_readme_shards_then_merge(tmp_path: Path) -> None:
    from tests.test_readme import COMMANDS, run

    sequence = [c for c in COMMANDS if "runs/shard-" in c]
    assert [c.split()[1] for c in sequence] == ["eval", "eval", "results"]
    for command in sequence:
        result = run(command, tmp_path)
        assert result.returncode == 0, (command, result.stderr)
    manifest = read_manifest(tmp_path / "runs" / "merged")
    assert manifest.status == "completed" and manifest.n_planned == 20
    assert len(read_results(tmp_path / "runs" / "merged")) == 20
