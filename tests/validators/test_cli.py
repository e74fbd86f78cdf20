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
