"""``taskhub validate``: report card, JSON report, exit codes, batch mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub import ValidationReport
from taskhub._cli import app
from tests.validators.conftest import ENVS, QUIZ

runner = CliRunner()
FAST = ["--op-timeout", "3", "--taskset", str(QUIZ)]


def test_json_report_and_output_file_of_a_passing_env(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = runner.invoke(
        app, ["validate", str(ENVS / "good"), *FAST, "--json", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = ValidationReport.model_validate_json(result.stdout)
    assert report.verdict == "pass" and report.name == "good"
    assert ValidationReport.model_validate_json(out.read_text()) == report


def test_report_card_of_a_failing_env_exits_1(tmp_path: Path) -> None:
    rfc = tmp_path / "rfc008.json"
    result = runner.invoke(
        app,
        [
            "validate",
            str(ENVS / "empty_answer_scores"),
            *FAST,
            "--check",
            "semantic.floor_gap",
            "--rfc008",
            str(rfc),
        ],
    )
    assert result.exit_code == 1, result.output
    card = result.stdout
    assert "verdict: FAIL (exit 1)" in card.splitlines()[3]  # the verdict comes first
    assert "Blockers: each of these fails the env" in card
    assert "semantic.floor_gap [fail]" in card
    assert "fix: The verifier rewards no work" in card
    # the file OpenEnv's own report model reads
    validation = pytest.importorskip("openenv.validation.report")
    document = validation.ValidationReportV2.model_validate_json(rfc.read_text())
    assert document.verdict.value == "fail" and document.policy_version == "taskhub-v2"
    floor = next(r for r in document.results if r.check_id == "semantic.floor_gap")
    assert floor.status.value == "fail" and floor.remediation


def test_a_folder_that_is_not_an_env_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert "no openenv.yaml" in result.stdout


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert runner.invoke(app, ["validate"]).exit_code == 2
    missing = runner.invoke(
        app, ["validate", str(ENVS / "good"), "--taskset", str(tmp_path / "no-such.jsonl")]
    )
    assert missing.exit_code == 2
    unknown = runner.invoke(app, ["validate", str(ENVS / "good"), "--check", "nope.nope"])
    assert unknown.exit_code == 2 and "unknown check id" in unknown.output
    both = runner.invoke(app, ["validate", "arith", "--batch", str(tmp_path / "x.jsonl")])
    assert both.exit_code == 2


def test_batch_command_writes_reports_and_a_ranked_summary(tmp_path: Path) -> None:
    subs = tmp_path / "subs.jsonl"
    subs.write_text(
        json.dumps({"name": "good", "folder": str(ENVS / "good")})
        + "\n"
        + json.dumps({"name": "unpinned", "folder": str(ENVS / "unpinned_deps")})
        + "\n"
    )
    out = tmp_path / "out"
    args = [
        "validate",
        "--batch",
        str(subs),
        "--out",
        str(out),
        *FAST,
        "--check",
        "static.dependency_pinning",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (out / "good.json").is_file() and (out / "unpinned.json").is_file()
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["name"], r["verdict"]) for r in rows] == [("good", "pass"), ("unpinned", "fail")]
    again = runner.invoke(app, [*args, "--json"])
    assert again.exit_code == 0
    assert [r["name"] for r in json.loads(again.stdout)] == ["good", "unpinned"]
    assert "resumed" in again.stderr


def test_a_validation_stopped_by_sigterm_keeps_the_checks_that_finished(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from tests.validators.test_batch import corpus_copy, processes_under

    root = corpus_copy(tmp_path, "hangs")
    out = tmp_path / "report.json"
    taskhub = str(Path(sys.executable).parent / "taskhub")
    argv = [taskhub, "validate", str(root / "hangs"), "--json", "--output", str(out)]
    argv += ["--startup-timeout", "120", "--taskset", str(QUIZ)]
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # the static checks are done once the env's server runs
        while not [p for p in processes_under(root / "hangs") if "uvicorn" in p]:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the env's server never started"
            time.sleep(0.2)
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM" in stderr
    report = ValidationReport.model_validate_json(out.read_text())
    assert ValidationReport.model_validate_json(stdout) == report
    assert report.error is not None and report.error.type == "Interrupted"
    by_id = {c.id: c for c in report.checks}
    assert by_id["static.manifest"].status == "pass"
    assert by_id["runtime.startup"].status == "error"
    assert by_id["runtime.startup"].summary == "the validation was stopped during this check"
    assert by_id["protocol.episode"].summary == (
        "the validation was stopped before this check started"
    )
    assert report.verdict in ("fail", "warn")  # judged on what finished
    assert processes_under(root / "hangs", wait_s=10) == []  # the env server went with it
