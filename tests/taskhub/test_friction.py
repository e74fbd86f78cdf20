"""What a new user meets first: failures said on screen, usage errors, progress, Ctrl-C, resume."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub._cli import app
from tests.servers import FakeEnv, error, free_port

runner = CliRunner()
TASKHUB = str(Path(sys.executable).parent / "taskhub")


def _rows(folder: Path, count: int = 3) -> Path:
    rows = folder / "tasks.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"task_id": f"t{i}", "reset": {"seed": i}, "answer": str(i)}) + "\n"
            for i in range(count)
        )
    )
    return rows


def test_a_run_of_only_infra_errors_exits_1_saying_why(tmp_path: Path) -> None:
    """An env that does not fit the taskset: every reset fails."""
    refuse = FakeEnv(on_reset=lambda s, d: error("EXECUTION_ERROR", "unknown task family 'x'"))
    with refuse as env:
        result = runner.invoke(
            app,
            ["eval", "scripted/oracle", env.url, str(_rows(tmp_path)), "--max-retries", "0"]
            + ["-o", str(tmp_path / "runs")],
        )
    assert result.exit_code == 1, result.output
    assert "every episode (3) ended in an infra error" in result.stderr
    assert "unknown task family 'x'" in result.stderr


def test_progress_is_lines_when_not_a_terminal(tmp_path: Path) -> None:
    with FakeEnv() as env:
        url = env.url
        result = runner.invoke(
            app, ["eval", "scripted/oracle", url, str(_rows(tmp_path)), "-o", str(tmp_path)]
        )
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert "taskhub: loading model scripted/oracle..." in lines
    assert f"taskhub: starting env {url}..." in lines
    assert "episodes 0/3" in lines
    assert any(line.startswith("episodes 3/3 (100%)") and "finished" in line for line in lines)
    quiet = runner.invoke(
        app,
        ["eval", "scripted/oracle", "arith", "arith", "--limit", "1", "--no-progress"]
        + ["-o", str(tmp_path)],
    )
    assert quiet.exit_code == 0 and quiet.stderr == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["scriptd/oracle"], "Did you mean 'scripted'?"),
        (["oracle"], "Did you mean 'scripted/oracle'?"),
        (["scripted/oracel"], "Did you mean 'scripted/oracle'?"),
        (["local/smolm2-135m"], "Did you mean 'local/smollm2-135m'?"),
        (["openai/gpt-4o-mini"], "needs a base URL"),
        (["scripted/oracle", "auto", "arith", "--reward", "exactt"], "Did you mean 'exact'?"),
        (["scripted/oracle", "auto", "arith", "--reward", "exact:ci=x"], "unknown mode 'ci=x'"),
        (["scripted/oracle", "auto", "arith", "--reward", "fuzzy=abc"], "does not parse"),
    ],
    ids=["provider", "bare", "policy", "local", "no-base-url", "reward", "reward-arg", "spec"],
)
def test_bad_usage_is_exit_2_with_did_you_mean(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["eval", *argv, "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "runs").exists() and not any(tmp_path.iterdir())


def test_resume_of_a_finished_run_starts_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "done"
    first = runner.invoke(
        app,
        ["eval", "scripted/oracle", "arith", "arith", "--limit", "2", "--run-dir", str(run_dir)],
    )
    assert first.exit_code == 0, first.output
    before = (run_dir / "run.json").read_bytes()
    again = runner.invoke(app, ["eval", "--resume", str(run_dir)])
    assert again.exit_code == 0, again.output
    assert "is finished (2 episodes" in again.stdout and "nothing to resume" in again.stdout
    assert (run_dir / "run.json").read_bytes() == before  # no new session was started


def _interrupt(argv: list[str], ready: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI, send SIGINT once ``ready(stderr so far)`` holds, collect what it printed."""
    err = cwd / "stderr.txt"
    with err.open("w") as sink:
        process = subprocess.Popen(
            [TASKHUB, *argv],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + 120
        while not ready(err.read_text()) and time.monotonic() < deadline:  # type: ignore[operator]
            if process.poll() is not None:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        stdout, _ = process.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, process.returncode, stdout, err.read_text())


def test_ctrl_c_names_the_run_directory_to_resume(tmp_path: Path) -> None:
    async def slow_step(session, data):  # type: ignore[no-untyped-def]
        import asyncio

        from tests.servers import counting_step

        await asyncio.sleep(0.5)
        return counting_step(session, data)

    with FakeEnv(on_step=slow_step) as env:
        output = tmp_path / "runs"
        result = _interrupt(
            ["eval", "scripted/oracle", env.url, str(_rows(tmp_path, 40)), "-o", str(output)],
            lambda _: any(p.stat().st_size for p in output.glob("*/episodes.jsonl")),
            tmp_path,
        )
    assert result.returncode == 130, result.stderr
    (run_dir,) = list(output.iterdir())
    assert f"finished episodes are saved in {run_dir}" in result.stderr
    assert f"taskhub eval --resume {run_dir}" in result.stderr


def test_ctrl_c_before_the_run_starts_says_there_is_nothing_to_resume(tmp_path: Path) -> None:
    # a server that accepts connections and never answers: the run waits for the env
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", free_port()))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        result = _interrupt(
            ["eval", "scripted/oracle", url, str(_rows(tmp_path)), "-o", str(tmp_path / "runs")],
            lambda stderr: "starting env" in stderr,
            tmp_path,
        )
    assert result.returncode == 130, result.stderr
    assert "nothing to resume" in result.stderr
    assert "--resume RUN_DIR" not in result.stderr
