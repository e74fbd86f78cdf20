"""taskhub taskset profile: per-task pass rates written back as a new taskset revision."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from taskhub import (
    EvalConfig,
    ResultsError,
    TasksetCard,
    TasksetError,
    describe_taskset,
    evaluate,
    init_taskset,
    load_taskset,
    profile_taskset,
    push_taskset,
)
from taskhub._cli import app
from tests.hub.hub_server import HubServer

ROOT = Path(__file__).resolve().parents[2]
cli = CliRunner()


@pytest.fixture(scope="module")
def profiled(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """A Hub taskset, an oracle run and a noop run on it, and its profiled revision."""
    base = tmp_path_factory.mktemp("profile")
    lines = (ROOT / "tasksets/arith/data/train.jsonl").read_text().splitlines()[:5]
    (base / "rows.jsonl").write_text("\n".join(lines) + "\n")
    init_taskset(base / "rows.jsonl", base / "ts", env="arith", card=TasksetCard(max_steps=1))
    repo_id = make_repo_id()
    sha = push_taskset(base / "ts", repo_id, token=hf_token).commit_sha
    runs = [
        evaluate(
            EvalConfig(model=model, taskset=f"{repo_id}@{sha}", limit=4, samples=2),
            output_dir=base / "runs",
        ).run_dir
        for model in ("scripted/oracle", "scripted/noop")
    ]
    result = profile_taskset(runs, token=hf_token)
    return {"repo_id": repo_id, "sha": sha, "runs": runs, "result": result}


def test_profile_adds_pass_rates_and_difficulty_in_a_new_revision(
    profiled: dict[str, Any],
) -> None:
    result = profiled["result"]
    assert result.push is not None and result.push.commit_sha != profiled["sha"]
    assert result.models == ["scripted/oracle", "scripted/noop"]
    taskset = load_taskset(profiled["repo_id"])
    assert taskset.ref.commit_sha == result.push.commit_sha
    tasks = taskset.tasks("train")
    for task in tasks[:4]:
        assert (task.pass_rate, task.difficulty) == (0.5, 0.5)  # new columns
        assert task.profile == {
            "pass_rate": {"scripted/noop": 0.0, "scripted/oracle": 1.0},
            "mean_reward": {"scripted/noop": 0.0, "scripted/oracle": 1.0},
            "episodes": {"scripted/noop": 2, "scripted/oracle": 2},
        }
        assert task.metadata["family"] == "add"  # existing metadata kept
    assert (tasks[4].pass_rate, tasks[4].profile) == (None, None)  # not evaluated
    before = load_taskset(f"{profiled['repo_id']}@{profiled['sha']}").tasks("train")
    assert [t.reset for t in tasks] == [t.reset for t in before]
    # measuring a task does not change it: its results still match it by hash
    assert [t.content_hash() for t in tasks] == [t.content_hash() for t in before]
    info = describe_taskset(profiled["repo_id"])
    assert info.splits["train"].profiled == 4
    assert info.profile is not None and info.profile["runs"] == [
        json.loads((run / "run.json").read_text())["run_id"] for run in profiled["runs"]
    ]
    assert info.profile["taskset_commit"] == profiled["sha"]


def test_profile_refuses_to_undo_later_commits(profiled: dict[str, Any], hf_token: str) -> None:
    with pytest.raises(TasksetError, match="would undo the commits in between"):
        profile_taskset(profiled["runs"], token=hf_token)


def test_profile_of_runs_on_different_tasksets_is_refused(
    profiled: dict[str, Any], tmp_path: Path
) -> None:
    other = evaluate(
        EvalConfig(model="scripted/oracle", taskset="arith", limit=1), output_dir=tmp_path
    ).run_dir
    with pytest.raises(ResultsError, match="different tasksets or revisions"):
        profile_taskset([profiled["runs"][0], other], output=tmp_path / "out")

    result = cli.invoke(app, ["taskset", "profile", str(other), "--output", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert "profiled 1 tasks from 1 run(s) (scripted/oracle)" in result.output
    header = yaml.safe_load((tmp_path / "p/README.md").read_text().split("---")[1])
    assert header["taskhub_profile"]["models"] == ["scripted/oracle"]
    assert header["taskhub"]["env"] == "arith"
    profiled_rows = [t for t in load_taskset(str(tmp_path / "p")).tasks("test") if t.profile]
    assert len(profiled_rows) == 1 and profiled_rows[0].difficulty == 0.0
    local = cli.invoke(app, ["taskset", "profile", str(other)])
    assert local.exit_code == 1 and "pass an output folder" in local.output


ORACLE_PROFILE = {
    "pass_rate": {"scripted/oracle": 1.0},
    "mean_reward": {"scripted/oracle": 1.0},
    "episodes": {"scripted/oracle": 1},
}


def test_profile_writes_new_columns_into_parquet_and_csv_data_files(tmp_path: Path) -> None:
    """A Hub-style folder whose splits are parquet and CSV gets the columns in both formats."""
    rows = [
        json.loads(line)
        for line in (ROOT / "tasksets/arith/data/test.jsonl").read_text().splitlines()[:5]
    ]
    folder = tmp_path / "mixed"
    (folder / "data").mkdir(parents=True)
    header = (ROOT / "tasksets/arith/README.md").read_text().split("---")[1]
    header = header.replace("data/train.jsonl", "data/train.parquet").replace(
        "data/test.jsonl", "data/test.csv"
    )
    (folder / "README.md").write_text(f"---{header}---\n# mixed\n")
    as_text = [
        {**r, "reset": json.dumps(r["reset"]), "metadata": json.dumps(r["metadata"])} for r in rows
    ]
    pq.write_table(pa.Table.from_pylist(as_text[:2]), folder / "data/train.parquet")
    with (folder / "data/test.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(as_text[0]))
        writer.writeheader()
        writer.writerows(as_text[2:])
    before = load_taskset(str(folder))
    runs = [
        evaluate(
            EvalConfig(model="scripted/oracle", taskset=str(folder), split=split),
            output_dir=tmp_path / "runs",
        ).run_dir
        for split in ("train", "test")
    ]
    profile_taskset(runs, output=tmp_path / "profiled")
    after = load_taskset(str(tmp_path / "profiled"))
    for split in ("train", "test"):
        tasks = after.tasks(split)
        assert [(t.pass_rate, t.difficulty) for t in tasks] == [(1.0, 0.0)] * len(tasks)
        assert [t.profile for t in tasks] == [ORACLE_PROFILE] * len(tasks)
        assert [t.content_hash() for t in tasks] == [t.content_hash() for t in before.tasks(split)]
    assert "difficulty" in pq.read_table(tmp_path / "profiled/data/train.parquet").column_names
    csv_header = (tmp_path / "profiled/data/test.csv").read_text().splitlines()[0]
    assert csv_header.endswith("pass_rate,difficulty,profile")
