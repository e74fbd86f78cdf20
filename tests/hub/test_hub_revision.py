"""The taskset revision is a field from the CLI to run.json; the Hub's failures say one thing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub import EvalConfig, evaluate, init_taskset, push_taskset, read_manifest
from taskhub._cli import app
from tests.hub.hub_server import HubServer
from tests.servers import free_port

ROWS = [
    {"task_id": "add-1", "reset": {"seed": 0, "family": "add", "difficulty": 1}, "answer": "37"},
    {"task_id": "add-2", "reset": {"seed": 0, "family": "add", "difficulty": 2}, "answer": "331"},
]
TASKHUB = str(Path(sys.executable).parent / "taskhub")
cli = CliRunner()


@pytest.fixture(scope="module")
def tagged(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, str]:
    """A taskset pushed and tagged v1, then main moved on: (repo id, v1's commit)."""
    root = tmp_path_factory.mktemp("tagged")
    rows = root / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    repo_id = make_repo_id()
    init_taskset(rows, root / "ts", env="arith", split="test")
    first = push_taskset(root / "ts", repo_id, tag="v1", token=hf_token)
    rows.write_text(json.dumps(ROWS[0]) + "\n")
    init_taskset(rows, root / "ts", env="arith", split="test", force=True)
    push_taskset(root / "ts", repo_id, token=hf_token)
    return repo_id, first.commit_sha


def test_the_revision_travels_as_a_field_to_run_json(
    tagged: tuple[str, str], tmp_path: Path
) -> None:
    repo_id, v1 = tagged
    result = cli.invoke(
        app,
        ["eval", "scripted/oracle", "auto", repo_id, "--revision", "v1"]
        + ["--run-dir", str(tmp_path / "run"), "--json"],
    )
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "run")
    assert (manifest.config.taskset, manifest.config.revision) == (repo_id, "v1")
    assert (manifest.taskset.revision, manifest.taskset.commit_sha) == ("v1", v1)
    assert manifest.n_planned == 2  # v1 has two rows; main has one
    # the Python API takes it as a field too, and a resume reads the pinned commit
    run = evaluate(
        EvalConfig(model="scripted/oracle", taskset=repo_id, revision="v1"),
        run_dir=tmp_path / "api",
    )
    assert run.manifest.taskset.commit_sha == v1


def test_revision_reads_and_branch_pushes(tagged: tuple[str, str], hf_token: str) -> None:
    repo_id, v1 = tagged
    shown = cli.invoke(app, ["taskset", "show", repo_id, "--revision", "v1", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["commit_sha"] == v1
    checked = cli.invoke(app, ["taskset", "check", repo_id, "--revision", "v1", "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["commit_sha"] == v1
    # --revision is no longer where a push goes
    wrong = cli.invoke(app, ["taskset", "push", ".", repo_id, "--revision", "dev"])
    assert wrong.exit_code == 2


def test_no_hub_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    for argv in (
        ["eval", "scripted/oracle", "auto", "someorg/sometasks"],
        ["taskset", "show", "someorg/sometasks"],
    ):
        result = subprocess.run(
            [TASKHUB, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("TasksetError: cannot reach the Hub for taskset someorg/")
        assert "check the network" in lines[0]


def test_hub_progress_bars_stay_out_of_taskset_show(
    tagged: tuple[str, str], tmp_path: Path
) -> None:
    repo_id, _ = tagged
    env = {k: v for k, v in os.environ.items() if "PROGRESS_BARS" not in k}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty cache: everything is downloaded
    result = subprocess.run(
        [TASKHUB, "taskset", "show", repo_id],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "split     test: 1 rows" in result.stdout
