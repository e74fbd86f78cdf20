"""The ``taskhub validate`` commands of README.md work as written, from a checkout's root."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from taskhub import ValidationReport

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BASH = [
    line.strip()
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", README, re.DOTALL)
    if lang == "bash"
    for line in body.splitlines()
]
COMMANDS = [line for line in BASH if line.startswith("taskhub validate")]
#: What each README command must do (its exit code and the files it must leave).
EXPECTED = {
    "taskhub validate tests/validators/envs/good --taskset tests/validators/tasksets/quiz": (
        0,
        [],
    ),
    "taskhub validate tests/validators/envs/shared_state --taskset tests/validators/tasksets/quiz"
    " --json --output shared_state.json": (1, ["shared_state.json"]),
    "taskhub validate --batch tests/validators/example-submissions.jsonl --out validation "
    "--workers 2": (0, ["validation/summary.json", "validation/summary.csv"]),
}


def checkout(tmp_path: Path) -> Path:
    """The parts of a checkout the commands read, copied under ``tmp_path``."""
    source = ROOT / "tests" / "validators"
    target = tmp_path / "tests" / "validators"
    for rel in (
        "envs/_lite",
        "envs/good",
        "envs/shared_state",
        "envs/crash_on_start",
        "tasksets/quiz",
    ):
        shutil.copytree(source / rel, target / rel, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(source / "example-submissions.jsonl", target)
    return tmp_path


def test_readme_validate_commands_work_as_written(tmp_path: Path) -> None:
    assert set(COMMANDS) == set(EXPECTED), set(COMMANDS) ^ set(EXPECTED)
    cwd = checkout(tmp_path)
    taskhub = str(Path(sys.executable).parent / "taskhub")
    outputs = {}
    for command in COMMANDS:
        code, files = EXPECTED[command]
        argv = [taskhub, *shlex.split(command)[1:]]
        result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
        assert result.returncode == code, (command, result.stdout[-2000:], result.stderr[-2000:])
        for name in files:
            assert (cwd / name).is_file(), (command, name)
        outputs[command] = result.stdout
    assert "verdict: PASS (exit 0)" in outputs[COMMANDS[0]]
    report = ValidationReport.model_validate_json((cwd / "shared_state.json").read_text())
    assert [c.id for c in report.checks if c.status == "fail"] == ["runtime.episode_isolation"]
    summary = json.loads((cwd / "validation" / "summary.json").read_text())
    assert [(r["name"], r["verdict"]) for r in summary["rows"]] == [
        ("good", "pass"),
        ("shared-state", "fail"),
        ("crash-on-start", "fail"),
    ]
