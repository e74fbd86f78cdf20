"""Reports: RFC 008's fields (old reports still load), the report card, RFC 008's own layout,
and the ranked summary."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import pytest

from taskhub import CheckResult, ValidationReport

#: A report as taskhub wrote them before the RFC 008 fields existed.
OLD_REPORT: dict[str, Any] = {
    "schema_version": 1,
    "target": "envs/quiz",
    "target_kind": "folder",
    "name": "quiz",
    "policy": {"name": "taskhub", "version": "v1"},
    "verdict": "pass",
    "exit_code": 0,
    "checks": [
        {
            "id": "static.manifest",
            "level": "static",
            "status": "pass",
            "severity": "fail",
            "summary": "ok",
            "measured": {},
            "evidence": [],
            "remediation": None,
            "duration_s": 0.01,
        }
    ],
    "started_at": "2026-11-01T10:00:00Z",
    "duration_s": 1.5,
    "taskhub_version": "0.1.0",
    "error": None,
    "source_digest": "ab" * 32,
}


def check(
    check_id: str,
    status: str,
    severity: str = "fail",
    *,
    level: str = "runtime",
    summary: str = "",
    **fields: Any,
) -> dict[str, Any]:
    return {
        "id": check_id,
        "level": level,
        "status": status,
        "severity": severity,
        "summary": summary or f"{check_id} {status}",
        **fields,
    }


def report(
    name: str, verdict: str, checks: list[dict[str, Any]], **fields: Any
) -> ValidationReport:
    return ValidationReport.model_validate(
        {
            **OLD_REPORT,
            "name": name,
            "policy": {"name": "taskhub", "version": "v2"},
            "verdict": verdict,
            "exit_code": {"pass": 0, "warn": 0, "fail": 1, "unsupported": 2, "error": 3}[verdict],
            "checks": checks,
            **fields,
        }
    )


#: An env that played and failed: a seed defect that kept two checks from running.
PLAYED = [
    check("static.manifest", "pass", level="static"),
    check("runtime.startup", "pass"),
    check("protocol.episode", "pass", level="protocol"),
    check(
        "runtime.seed_control",
        "fail",
        summary="two resets with seed 7 gave different initial observations",
        remediation="Seed every generator from reset(seed=...).",
        evidence=[
            {
                "seed": 7,
                "first": {"observation": {"board": "a", "turn": 1}},
                "second": {"observation": {"board": "b", "turn": 1}},
            }
        ],
    ),
    check(
        "taskset.reset_params",
        "skip",
        level="taskset",
        summary="depends on runtime.seed_control, which did not pass",
        measured={"blocked_by": "runtime.seed_control"},
    ),
    check(
        "taskset.unknown_values_refused",
        "skip",
        level="taskset",
        summary="depends on taskset.reset_params, which did not pass",
        measured={"blocked_by": "taskset.reset_params"},
    ),
    check(
        "protocol.concurrency",
        "fail",
        "warn",
        level="protocol",
        summary="1 of 4 sessions served",
        remediation="Serve more sessions.",
    ),
    check(
        "statistical.headroom",
        "skip",
        "warn",
        level="statistical",
        summary="no model was given (--model)",
    ),
    check(
        "static.sbom",
        "skip",
        level="static",
        summary="not implemented: reads the software bill of materials: needs a container engine",
        measured={"not_implemented": True},
    ),
]
#: An env that never started: everything after its startup was kept from running.
NEVER_STARTED = [
    check("static.manifest", "pass", level="static"),
    check("static.layout", "pass", "warn", level="static"),
    check("runtime.startup", "fail", summary="the server did not start"),
    *(
        check(i, "skip", level="protocol", measured={"blocked_by": "runtime.startup"})
        for i in ("protocol.health", "protocol.episode", "runtime.seed_control")
    ),
]


def test_an_old_report_loads_with_the_rfc_008_fields_filled_in() -> None:
    old = ValidationReport.model_validate(OLD_REPORT)
    assert (old.report_schema_version, old.policy_version, old.lane) == ("2", "taskhub-v1", "local")
    dumped = json.loads(old.model_dump_json())
    assert dumped["checks"][0]["check_id"] == "static.manifest"
    assert {"report_schema_version", "policy_version", "lane", "verdict"} <= dumped.keys()
    assert ValidationReport.model_validate(dumped) == old  # what it writes, it reads back
    with pytest.raises(ValueError, match="differs from id"):
        CheckResult.model_validate({**OLD_REPORT["checks"][0], "check_id": "static.layout"})
    hub = ValidationReport.model_validate({**OLD_REPORT, "model": "openai/m"})
    assert hub.lane == "hub"


def test_the_report_card_leads_with_blockers_and_folds_what_they_kept_from_running() -> None:
    from taskhub.validators import render_report

    card = render_report(report("seedy", "fail", PLAYED))
    lines = card.splitlines()
    assert lines[3].startswith("verdict: FAIL (exit 1)   score ")
    order = [
        card.index(title)
        for title in ("Blockers:", "Warnings:", "Passed: 3", "Not run:", "Not implemented")
    ]
    assert order == sorted(order)
    assert "1. Two resets with seed 7 gave different initial observations." in card
    assert "fix: Seed every generator from reset(seed=...)." in card
    # the evidence is the fields that differ, not two whole observations
    assert "observation.board: 'a' -> 'b'" in card and "turn" not in card
    # the two checks the seed failure kept from running, in one line under it
    folded = next(line for line in lines if "kept 2 check(s) from running" in line)
    assert "taskset.reset_params, taskset.unknown_values_refused" in folded
    assert lines.index(folded) < card[: card.index("Warnings:")].count("\n") + 1
    assert "1 because no model was given (--model): statistical.headroom" in card
    verbose = render_report(report("seedy", "fail", PLAYED), verbose=True)
    assert "static.sbom: not implemented: reads the software bill of materials" in verbose


def test_rfc_008_layout_is_what_openenv_reads() -> None:
    validation = pytest.importorskip("openenv.validation")
    import jsonschema
    from openenv.validation.policy import apply_policy, load_policy
    from openenv.validation.report import ValidationReportV2
    from openenv.validation.types import Lane
    from taskhub.validators import rfc008_report

    ours = report("seedy", "fail", PLAYED)
    document = rfc008_report(ours)
    schema = json.loads(
        files(validation.__name__).joinpath("schemas", "report-v2.schema.json").read_text()
    )
    jsonschema.validate(document, schema)
    theirs = ValidationReportV2.model_validate(document)
    assert theirs.verdict.value == "fail" and theirs.lane.value == "local"
    assert [lv.value for lv in theirs.levels_run] == [1, 2]
    ids = [r.check_id for r in theirs.results]
    assert "statistical.headroom" not in ids  # a local report shows no hub-lane check
    seed = next(r for r in theirs.results if r.check_id == "runtime.seed_control")
    assert seed.evidence[0] == "two resets with seed 7 gave different initial observations"
    assert json.loads(seed.evidence[1])["seed"] == 7
    # RFC 008's ids alone: OpenEnv's own policy v2 can grade them again
    only = ValidationReportV2.model_validate(rfc008_report(ours, rfc008_ids_only=True))
    assert "protocol.episode" not in [r.check_id for r in only.results]
    assert apply_policy(only.results, load_policy("v2"), Lane.LOCAL).value == "fail"
    hub = rfc008_report(report("seedy", "fail", PLAYED, model="openai/m"))
    assert hub["lane"] == "hub"
    assert "statistical.headroom" in [r["check_id"] for r in hub["results"]]
    assert rfc008_report(report("x", "error", []))["verdict"] == "fail"


def test_an_env_that_never_started_ranks_below_every_env_that_played() -> None:
    from taskhub.validators import summary_rows

    rows = summary_rows(
        [
            ("never.json", report("never-started", "fail", NEVER_STARTED)),
            ("seedy.json", report("seedy", "fail", PLAYED)),
            ("clean.json", report("clean", "pass", PLAYED[:3])),
        ]
    )
    assert [(r["name"], r["reached"]) for r in rows] == [
        ("clean", "played"),
        ("seedy", "played"),
        ("never-started", "none"),
    ]
    never = rows[-1]
    # the three checks its startup failure blocked count against it
    assert never["blocked"] == 3 and never["score"] == round(100 * 5 / 17, 1)
    assert rows[0]["score"] == 100.0 > rows[1]["score"] > never["score"]


@pytest.mark.parametrize(
    ("requirement", "advice"),
    [
        ("openenv-core>=0.2.2", "openenv-core==0.2.2"),
        ("openenv[core]>=0.2.1", "openenv[core]==0.2.1"),
        ("fastapi", "openenv==0.10.0"),
    ],
)
def test_the_pinning_advice_fits_the_env_era(tmp_path: Any, requirement: str, advice: str) -> None:
    """An env written for openenv-core 0.2 is told to pin that, not to move to openenv 0.10."""
    import shutil

    from taskhub.validators import ValidationConfig, validate

    from tests.validators.conftest import ENVS

    folder = tmp_path / "env"
    shutil.copytree(ENVS / "good", folder)
    (folder / "server" / "requirements.txt").write_text(requirement + "\n")
    (folder / "pyproject.toml").unlink()
    found = validate(str(folder), ValidationConfig(checks=["static.dependency_pinning"]))
    pinning = next(c for c in found.checks if c.id == "static.dependency_pinning")
    assert pinning.status == "fail" and pinning.remediation is not None
    assert f"Pin the OpenEnv library exactly ({advice})" in pinning.remediation


def test_a_manifest_written_before_the_validation_block_is_warned_not_failed(
    tmp_path: Any,
) -> None:
    import shutil

    import yaml
    from taskhub.validators import ValidationConfig, render_report, validate

    from tests.validators.conftest import ENVS

    folder = tmp_path / "env"
    shutil.copytree(ENVS / "good", folder)
    manifest = yaml.safe_load((folder / "openenv.yaml").read_text())
    del manifest["validation"]
    (folder / "openenv.yaml").write_text(yaml.safe_dump(manifest))
    wanted = ["static.manifest", "static.resource_declaration", "static.timeout_ceiling"]
    found = validate(str(folder), ValidationConfig(checks=wanted))
    checks = {c.id: c for c in found.checks}
    assert checks["static.manifest"].status == "pass"
    for check_id in wanted[1:]:
        assert (checks[check_id].status, checks[check_id].severity) == ("fail", "warn")
    assert found.verdict == "warn" and found.exit_code == 0
    assert "Warnings: these make the verdict warn" in render_report(found)
