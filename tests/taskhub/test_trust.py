"""A taskset is data: the code its rows and card name runs only when the user trusts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub import EvalConfig, RemoteCodeError, evaluate, load_taskset
from taskhub._cli import app
from taskhub.training import TrainingEnv

ROOT = Path(__file__).resolve().parents[2]
cli = CliRunner()

EVILMOD = """\
from pathlib import Path
Path(__file__).with_name("EVILMOD_RAN").write_text("imported")

def score(completion):
    return 1.0
"""


def _taskset(folder: Path, *, row_rewards: list[str] | None, card: str = "") -> Path:
    """A one-split taskset of arith rows; ``row_rewards`` on the first row."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    lines = (ROOT / "tasksets" / "arith" / "data" / "test.jsonl").read_text().splitlines()[:2]
    rows = [json.loads(line) for line in lines]
    if row_rewards is not None:
        rows[0]["rewards"] = row_rewards
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n"
        f"    path: data/test.jsonl\ntaskhub:\n  env: arith\n{card}---\n# evil\n"
    )
    (folder / "evilmod.py").write_text(EVILMOD)
    return folder


def test_a_row_that_imports_code_is_refused_naming_it(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["python:evilmod:score"])
    config = EvalConfig(model="scripted/oracle", taskset=str(folder))
    with pytest.raises(RemoteCodeError) as caught:
        evaluate(config, output_dir=tmp_path / "runs")
    message = str(caught.value)
    assert "test row 0 (task_id=" in message
    assert "'python:evilmod:score' (imports module 'evilmod')" in message
    assert "--trust-remote-code" in message
    assert not (folder / "EVILMOD_RAN").exists()
    assert not (tmp_path / "runs").exists()  # refused before anything is written


def test_card_rewards_and_an_env_folder_are_refused_too(tmp_path: Path) -> None:
    env_folder = ROOT / "taskhub" / "_envs" / "arith"
    card = "  rewards: ['trl:evilmod:score', 'exact']\n"
    folder = _taskset(tmp_path / "evil", row_rewards=None, card=card)
    readme = (folder / "README.md").read_text().replace("env: arith", f"env: {env_folder}")
    (folder / "README.md").write_text(readme)
    with pytest.raises(RemoteCodeError) as caught:
        evaluate(EvalConfig(model="scripted/oracle", taskset=str(folder)), output_dir=tmp_path)
    assert caught.value.specs == [
        f"card env: {env_folder}",
        "card rewards: trl:evilmod:score",
    ]
    # the user's own ENV and rewards replace the card's: nothing of the taskset runs
    result = evaluate(
        EvalConfig(
            model="scripted/oracle", taskset=str(folder), env="arith", rewards=["exact"], limit=1
        ),
        output_dir=tmp_path / "runs",
    )
    assert result.summary.outcomes["scored"] == 1


def test_training_env_refuses_untrusted_code(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["openenv:evilmod:Rubric"])
    with pytest.raises(RemoteCodeError, match="openenv:evilmod:Rubric"):
        TrainingEnv(load_taskset(str(folder)))
    TrainingEnv(load_taskset(str(folder)), rewards=["exact"])  # the user's rewards: fine


def test_show_and_check_list_the_code_a_taskset_runs(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["python:evilmod:score", "exact"])
    shown = cli.invoke(app, ["taskset", "show", str(folder)])
    assert shown.exit_code == 0, shown.output
    assert "runs code (1; evaluating it needs --trust-remote-code):" in shown.output
    assert "test row 0 (task_id=" in shown.output and "python:evilmod:score" in shown.output
    checked = cli.invoke(app, ["taskset", "check", str(folder), "--json"])
    assert checked.exit_code == 0, checked.output
    assert len(json.loads(checked.output)["remote_code"]) == 1
    assert not (folder / "EVILMOD_RAN").exists()
    clean = cli.invoke(app, ["taskset", "check", "arith"])
    assert "runs code" not in clean.output


def _taskhub(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "taskhub", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_current_directory_is_never_on_the_path(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["python:evilmod:score"])
    refused = _taskhub(["eval", "scripted/oracle", "auto", ".", "-o", "runs"], folder)
    assert refused.returncode == 1, refused.stderr
    assert "RemoteCodeError: taskset 'evil' would run code" in refused.stderr
    # trusted, the module is still not imported from the folder the run started in
    trusted = _taskhub(
        ["eval", "scripted/oracle", "auto", ".", "-o", "runs", "--trust-remote-code"], folder
    )
    assert trusted.returncode == 1, trusted.stderr
    assert "cannot import module 'evilmod'" in trusted.stderr
    assert "the current directory is not on the Python path" in trusted.stderr
    assert not (folder / "EVILMOD_RAN").exists()
