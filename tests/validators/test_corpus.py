"""Every defective env fails exactly the checks its defect implies; the batch survives hangs
and crashes; a stopped batch resumes."""

from __future__ import annotations

import asyncio
import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.validators.conftest import ENVS, EXPECTED, failing

# the first test pays for the session fixture: the whole corpus validated as one batch
pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_env_fails_exactly_the_checks_its_defect_implies(
    corpus_batch: dict[str, Any], name: str
) -> None:
    report = corpus_batch["reports"][name]
    assert report.error is None, report.error
    assert failing(report) == EXPECTED[name], [
        (c.id, c.status, c.summary) for c in report.checks if c.status != "pass"
    ]
    severities = {c.severity for c in report.checks if c.id in EXPECTED[name]}
    expected_verdict = "pass" if not severities else ("fail" if "fail" in severities else "warn")
    assert report.verdict == expected_verdict
    assert report.exit_code == {"pass": 0, "warn": 0, "fail": 1}[expected_verdict]


def test_precision_and_recall_over_the_corpus(corpus_batch: dict[str, Any]) -> None:
    true_pos = false_pos = false_neg = 0
    for name, expected in EXPECTED.items():
        found = failing(corpus_batch["reports"][name])
        true_pos += len(found & expected)
        false_pos += len(found - expected)
        false_neg += len(expected - found)
    precision = true_pos / (true_pos + false_pos)
    recall = true_pos / (true_pos + false_neg)
    print(f"corpus: {len(EXPECTED)} envs, precision {precision:.3f}, recall {recall:.3f}")
    assert (precision, recall) == (1.0, 1.0)


def test_every_failed_check_carries_evidence_and_remediation(
    corpus_batch: dict[str, Any],
) -> None:
    for name in EXPECTED:
        for check in corpus_batch["reports"][name].checks:
            if check.status == "fail":
                assert check.remediation, (name, check.id)
                assert check.summary
            if check.status == "skip":
                assert check.summary  # the reason


def test_a_skip_names_the_dependency_that_did_not_pass(corpus_batch: dict[str, Any]) -> None:
    checks = {c.id: c for c in corpus_batch["reports"]["ignores_seed"].checks}
    # semantic checks need a deterministic env (RFC 008): skipped, with the reason
    assert checks["semantic.oracle_max"].status == "skip"
    assert "runtime.episode_determinism" in checks["semantic.oracle_max"].summary
    never = {c.id: c for c in corpus_batch["reports"]["never_terminates"].checks}
    assert never["runtime.step_after_done"].status == "skip"


def test_batch_kills_a_submission_that_hangs_and_keeps_its_finished_checks(
    corpus_batch: dict[str, Any],
) -> None:
    report = corpus_batch["reports"]["hangs"]
    assert report.verdict == "error" and report.exit_code == 3
    assert report.error is not None and report.error.type == "DeadlineExceeded"
    ids = [c.id for c in report.checks]
    assert "static.manifest" in ids  # written by the worker before it was killed
    # the worker and its env server are gone
    hangs = str(ENVS / "hangs")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        assert cwd != hangs, f"process {pid} of the hung submission survived"


def test_batch_survives_a_submission_that_crashes_on_start(corpus_batch: dict[str, Any]) -> None:
    report = corpus_batch["reports"]["crash_on_start"]
    startup = next(c for c in report.checks if c.id == "runtime.startup")
    assert startup.status == "fail"
    assert "QUIZ_API_KEY" in json.dumps(startup.evidence)  # the server's own traceback
    assert len(corpus_batch["reports"]) == len(EXPECTED) + 1


def test_summary_is_ranked_and_written_as_json_and_csv(corpus_batch: dict[str, Any]) -> None:
    output: Path = corpus_batch["output"]
    document = json.loads((output / "summary.json").read_text())
    rows = document["rows"]
    assert document["validated"] == len(EXPECTED) + 1 and document["pending"] == 0
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[0]["name"] == "good" and rows[0]["verdict"] == "pass"
    order = {"pass": 0, "warn": 1, "fail": 2, "unsupported": 3, "error": 4}
    assert [order[r["verdict"]] for r in rows] == sorted(order[r["verdict"]] for r in rows)
    assert rows[-1]["name"] == "hangs"
    with (output / "summary.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert [r["name"] for r in table] == [r["name"] for r in rows]
    shared = next(r for r in table if r["name"] == "shared_state")
    assert shared["failed_checks"] == "runtime.episode_isolation"
    assert (output / shared["report"]).is_file()


def test_a_stopped_batch_resumes_where_it_stopped(
    corpus_batch: dict[str, Any], tmp_path: Path
) -> None:
    from taskhub.validators import validate_batch_async

    output = tmp_path / "reports"
    output.mkdir()
    for path in corpus_batch["output"].glob("*.json"):
        if path.name not in ("good.json", "summary.json"):
            (output / path.name).write_text(path.read_text())
    config = corpus_batch["config"].model_copy(update={"output": output})
    events: list[tuple[str, str]] = []
    asyncio.run(
        validate_batch_async(
            corpus_batch["submissions"],
            config,
            progress=lambda s, r, how: events.append((s.name, how)),
        )
    )
    validated = [name for name, how in events if how == "validated"]
    assert validated == ["good"]
    assert len(events) == len(EXPECTED) + 1
    rows = json.loads((output / "summary.json").read_text())["rows"]
    assert rows[0]["name"] == "good"


def test_the_batch_budget_leaves_the_rest_for_a_resumed_run(tmp_path: Path) -> None:
    from taskhub.validators import BatchConfig, Submission, ValidationConfig, validate_batch

    from tests.servers import free_port

    submissions = [
        Submission(name=f"offline-{i}", target=f"http://127.0.0.1:{free_port()}") for i in range(3)
    ]
    config = BatchConfig(
        output=tmp_path, workers=1, budget_s=0.3, validation=ValidationConfig(op_timeout_s=1.0)
    )
    rows = validate_batch(submissions, config)
    summary = json.loads((tmp_path / "summary.json").read_text())
    # the first one was stopped at the budget; the others were not started
    assert [(r["name"], r["verdict"]) for r in rows] == [("offline-0", "error")]
    assert summary["pending"] == 2
    rows = validate_batch(submissions, config.model_copy(update={"budget_s": None}))
    assert sorted((r["name"], r["verdict"]) for r in rows) == [
        ("offline-0", "error"),
        ("offline-1", "fail"),
        ("offline-2", "fail"),
    ]


def test_replayability_names_the_first_difference(corpus_batch: dict[str, Any]) -> None:
    checks = {c.id: c for c in corpus_batch["reports"]["salted_hash"].checks}
    replay = checks["semantic.replayability"]
    assert replay.measured["server_restarted"] is True
    assert "at the reset, observation field 'question' was" in replay.summary
    assert replay.evidence and "difference" in replay.evidence[0]
    # the same env replays identically within one process: determinism passes
    assert checks["runtime.episode_determinism"].status == "pass"
    pinned = {c.id: c for c in corpus_batch["reports"]["unpinned_tasks"].checks}
    unpinned = pinned["static.task_distribution_pinning"]
    assert "load_dataset('quiz-org/arith-questions') has no revision" in unpinned.summary


def test_http_episodes_are_judged_by_transport(corpus_batch: dict[str, Any]) -> None:
    fresh = {c.id: c for c in corpus_batch["reports"]["fresh_per_request"].checks}
    stateless = fresh["protocol.http_stateless"]
    assert stateless.status == "fail" and stateless.severity == "warn"
    assert stateless.measured["http_stateless"] is True
    assert "fresh env per request" in stateless.summary and stateless.evidence
    assert fresh["runtime.http_episode"].status == "skip"
    hand = {c.id: c for c in corpus_batch["reports"]["handrolled_global"].checks}
    shared = hand["runtime.http_episode"]
    assert "a second HTTP client's reset changed the first client's episode" in shared.summary
    assert any("step_count: 1 -> 0" in d for d in shared.evidence[0]["diff"])
    assert hand["protocol.episode"].status == "pass"  # bare bodies, top-level observations
    assert "(/health answers 404)" in hand["runtime.startup"].summary


def test_declared_tasks_that_reset_cannot_select_are_named(corpus_batch: dict[str, Any]) -> None:
    swallowed = {c.id: c for c in corpus_batch["reports"]["swallowed_task_key"].checks}
    finding = swallowed["taskset.manifest_tasks"]
    assert "the key is dropped, so only one declared task can ever run" in finding.summary
    assert finding.severity == "warn" and finding.measured["source"] == "openenv.yaml"
    nothing = {c.id: c for c in corpus_batch["reports"]["reset_takes_nothing"].checks}
    finding = nothing["taskset.manifest_tasks"]
    assert "its reset route takes nothing: no task can be selected" in finding.summary
    assert finding.measured["named_tasks"] == ["task_easy"] * 3


def test_an_env_without_openenv_yaml_is_validated_where_its_dockerfile_serves_it(
    corpus_batch: dict[str, Any],
) -> None:
    report = corpus_batch["reports"]["unpackaged"]
    checks = {c.id: c for c in report.checks}
    manifest = checks["static.manifest"]
    assert manifest.summary.startswith("openenv.yaml is missing")
    assert manifest.measured["app"] == "quizapp.api.main:app"
    assert "python -m quizapp.api.main" in manifest.measured["app_found_by"]
    assert "app: quizapp.api.main:app" in str(manifest.remediation)  # what to write
    # the server ran and every level was checked on it
    for played in ("runtime.startup", "protocol.episode", "taskset.reset_params"):
        assert checks[played].status == "pass", checks[played].summary
    assert checks["semantic.oracle_max"].status == "pass"
    assert "has no state route" in checks["runtime.state_contract"].summary
    # what a manifest would declare is folded under the manifest's failure
    for folded in ("static.resource_declaration", "static.timeout_ceiling"):
        assert checks[folded].status == "skip"
        assert checks[folded].measured["blocked_by"] == "static.manifest"


#: Checks whose subject is /ws itself: their remediations name it on any env.
ABOUT_WS = {"protocol.websocket", "protocol.wire_format"}


def test_remediations_name_the_transport_the_env_plays_over(corpus_batch: dict[str, Any]) -> None:
    hand = {c.id: c for c in corpus_batch["reports"]["handrolled_global"].checks}
    isolation = hand["runtime.episode_isolation"]
    assert isolation.status == "fail" and isolation.measured["transport"] == "http"
    assert isolation.remediation is not None
    assert isolation.remediation.startswith(
        "Give each HTTP client's episode its own env: have /reset create one and return its "
        "id, and let /step"
    )
    assert "Refuse POST /step once the episode is over (answer HTTP 4xx)" in str(
        hand["runtime.step_after_done"].remediation
    )
    ws_isolation = {c.id: c for c in corpus_batch["reports"]["shared_state"].checks}
    assert "WebSocket session" in str(ws_isolation["runtime.episode_isolation"].remediation)
    # on every env that plays over HTTP, no failed check speaks of WebSocket sessions or frames
    over_http = 0
    for name in EXPECTED:
        checks = {c.id: c for c in corpus_batch["reports"][name].checks}
        if checks["protocol.episode"].measured.get("transport") != "http":
            continue
        over_http += 1
        for check in checks.values():
            if check.status != "fail" or check.id in ABOUT_WS or check.id.startswith("static."):
                continue
            words = str(check.remediation)
            assert not any(w in words for w in ("WebSocket", "/ws", "frame")), (name, check.id)
    assert over_http >= 5
