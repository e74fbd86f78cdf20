"""The command line through typer's CliRunner, against real envs on loopback."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from taskhub._cli import app
from tests.servers import FakeEnv, free_port

runner = CliRunner()


def test_help_explains_the_arguments() -> None:
    result = runner.invoke(app, ["eval", "--help"])
    assert result.exit_code == 0
    for word in ("MODEL", "ENV", "TASKSET", "--concurrency", "--samples", "--resume", "--shard"):
        assert word in result.output


def test_eval_json_summary_and_results_show(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            "scripted/oracle",
            "auto",
            "arith",
            "--limit",
            "5",
            "--split",
            "train",
            "-o",
            str(tmp_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "completed"
    assert payload["summary"]["n_episodes"] == 5 and payload["summary"]["mean_reward"] == 1.0
    run_dir = Path(payload["run_dir"])
    shown = runner.invoke(app, ["results", "show", str(run_dir), "--json"])
    assert shown.exit_code == 0
    assert json.loads(shown.stdout)["summary"] == payload["summary"]
    table = runner.invoke(app, ["results", "show", str(run_dir)])
    assert "mean reward" in table.stdout and "1.000" in table.stdout
    assert "[train]" in table.stdout  # rich markup is escaped, not swallowed


def test_shard_and_limit(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            "scripted/oracle",
            "auto",
            "arith",
            "--shard",
            "1/50",
            "-o",
            str(tmp_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"]["n_episodes"] == 4  # 200 test tasks / 50


def test_errors_are_one_line_with_exit_1(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["eval", "scripted/oracle", "auto", "no-such-taskset", "-o", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("TasksetNotFound: taskset 'no-such-taskset'")
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["eval", "scripted/oracle", url, "arith", "-o", str(tmp_path)])
    assert result.exit_code == 1
    assert "EnvConnectError: cannot connect to ws://127.0.0.1" in result.stderr


def test_bad_usage_is_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "scripted/oracle", "auto", "arith", "--shard", "5/2"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["eval", "scripted/oracle", "auto", "arith", "--shard", "x"])
    assert result.exit_code == 2


def test_env_url_and_reward_flags(tmp_path: Path) -> None:
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"task_id": f"t{i}", "reset": {"seed": i}, "answer": str(i)}) + "\n"
            for i in range(3)
        )
    )
    with FakeEnv() as env:
        result = runner.invoke(
            app,
            [
                "eval",
                "scripted/oracle",
                env.url,
                str(rows),
                "--reward",
                "env:final=2",
                "-o",
                str(tmp_path),
                "--json",
            ],
        )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert summary["mean_reward"] == 2.0 and summary["success_rate"] == 1.0


def test_env_and_taskset_listing() -> None:
    envs = runner.invoke(app, ["env", "list", "--json"])
    assert {e["name"] for e in json.loads(envs.stdout)} >= {"arith", "gridworld"}
    tasksets = runner.invoke(app, ["taskset", "list", "--json"])
    rows = {t["name"]: t for t in json.loads(tasksets.stdout)}
    assert rows["arith"]["env"] == "arith" and rows["arith"]["splits"]["test"] >= 100


def test_progress_bar_draws_and_counts_errors(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            "scripted/noop",
            "auto",
            "arith",
            "--limit",
            "3",
            "--progress",
            "-o",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "episodes" in result.stderr and "3/3" in result.stderr
