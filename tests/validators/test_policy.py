"""The severity policy is data, and alone turns check results into a verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from taskhub import CheckResult, ConfigError


def result(
    check_id: str, status: str, severity: str = "fail", measured: dict | None = None
) -> CheckResult:
    return CheckResult(
        id=check_id,
        level="runtime",
        status=status,  # type: ignore[arg-type]
        severity=severity,  # type: ignore[arg-type]
        summary="",
        measured=measured or {},
    )


def test_default_policy_covers_every_registered_check() -> None:
    from taskhub.validators import load_policy, registered_checks

    policy = load_policy()
    assert policy.label == "taskhub-v2"
    ours = [s for s in registered_checks() if s.fn.__module__.startswith("taskhub.validators")]
    assert {spec.id for spec in ours} <= set(policy.checks)
    for spec in ours:
        assert policy.checks[spec.id].level == spec.level
    # what no check implements is one of RFC 008's ids, and the policy says why it is skipped
    for check_id in set(policy.checks) - {spec.id for spec in ours}:
        entry = policy.checks[check_id]
        assert entry.rfc008 and entry.unimplemented, check_id


def test_v2_is_rfc_008_severity_policy_v2() -> None:
    from taskhub.validators import load_policy

    rfc = {i: e for i, e in load_policy("taskhub-v2").checks.items() if e.rfc008}
    assert len(rfc) == 46
    severities = [e.severity for e in rfc.values()]
    assert (severities.count("fail"), severities.count("warn"), severities.count("advisory")) == (
        35,
        10,
        1,
    )
    assert [e.lane for e in rfc.values()].count("hub") == 12
    startup = rfc["runtime.startup"]
    assert (startup.severity, startup.lane, startup.level) == ("fail", "local", "runtime")
    assert all(i.split(".")[0] in ("hub", "statistical") for i, e in rfc.items() if e.lane == "hub")


def test_v2_matches_the_policy_openenv_ships() -> None:
    """The same ids, severities, lanes and levels as OpenEnv's own severity-v2.json."""
    validation = pytest.importorskip("openenv.validation")
    from importlib.resources import files

    from taskhub.validators import load_policy

    shipped = json.loads(
        files(validation.__name__).joinpath("policies", "severity-v2.json").read_text()
    )
    numbers = {"static": 1, "runtime": 2, "semantic": 3, "statistical": 4}
    theirs = {e["check_id"]: (e["severity"], e["lane"], e["level"]) for e in shipped["entries"]}
    ours = {
        i: (e.severity, e.lane, numbers[e.level])
        for i, e in load_policy("taskhub-v2").checks.items()
        if e.rfc008
    }
    assert ours == theirs
    assert (
        load_policy("taskhub-v2").bounds.max_oracle_tolerance
        == (shipped["bounds"]["max_oracle_tolerance"])
    )


def test_v1_is_kept_for_old_reports() -> None:
    from taskhub.validators import load_policy

    v1 = load_policy("taskhub-v1")
    assert v1.label == "taskhub-v1" and "static.sbom" not in v1.checks
    assert v1.severity("static.resource_declaration", legacy_manifest=True) == "fail"


def test_a_manifest_from_before_the_validation_block_gets_warnings_for_what_it_lacks() -> None:
    from taskhub.validators import load_policy

    policy = load_policy()
    for check_id in ("static.resource_declaration", "static.timeout_ceiling"):
        assert policy.severity(check_id) == "fail"
        assert policy.severity(check_id, legacy_manifest=True) == "warn"
    assert policy.severity("static.manifest", legacy_manifest=True) == "fail"


def test_unimplemented_ids_are_skips_with_the_reason_and_hub_ids_only_in_the_hub_lane() -> None:
    from taskhub.validators import load_policy

    policy = load_policy()
    local = {r.id: r for r in policy.unimplemented(["runtime.network_policy"], "local")}
    assert "runtime.network_policy" not in local  # implemented
    sbom = local["static.sbom"]
    assert (sbom.status, sbom.level, sbom.severity) == ("skip", "static", "fail")
    assert "container engine" in sbom.summary and sbom.measured == {"not_implemented": True}
    assert not any(i.startswith("hub.") for i in local)
    hub = {r.id for r in policy.unimplemented([], "hub")}
    assert {"hub.cosign_signature", "statistical.difficulty_separation"} <= hub
    assert set(local) < hub


def test_the_score_counts_blocked_skips_against_the_env_and_ignores_what_does_not_apply() -> None:
    from taskhub.validators import load_policy
    from taskhub.validators._policy import score_of

    policy = load_policy()
    ran = [result("a", "pass"), result("b", "pass", "warn"), result("c", "fail", "advisory")]
    assert score_of(ran, policy) == round(100 * 5 / 6, 1)
    not_applicable = [result("d", "skip"), result("e", "skip", measured={"not_implemented": True})]
    assert score_of(ran + not_applicable, policy) == score_of(ran, policy)
    blocked = [result("f", "skip", measured={"blocked_by": "runtime.startup"})]
    assert score_of(ran + blocked, policy) == round(100 * 5 / 9, 1)
    assert score_of([result("g", "error")], policy) == 0.0
    assert score_of([], policy) == 0.0


@pytest.mark.parametrize(
    ("statuses", "reached"),
    [
        ({"runtime.startup": "fail"}, "none"),
        ({"runtime.startup": "pass", "protocol.episode": "fail"}, "started"),
        ({"runtime.startup": "pass", "protocol.episode": "pass"}, "played"),
        # an episode played over a non-standard wire format: the deeper checks ran
        ({"protocol.episode": "fail", "runtime.seed_control": "fail"}, "played"),
        ({"runtime.startup": "pass", "runtime.seed_control": "skip"}, "started"),
    ],
)
def test_how_far_validation_got(statuses: dict[str, str], reached: str) -> None:
    from taskhub.validators._policy import reached as reached_of

    from taskhub import ValidationReport

    report = ValidationReport.model_validate(
        {
            "target": "t",
            "target_kind": "url",
            "name": "t",
            "verdict": "fail",
            "exit_code": 1,
            "started_at": "2026-01-01T00:00:00Z",
            "duration_s": 1.0,
            "taskhub_version": "0",
            "checks": [result(i, s).model_dump() for i, s in statuses.items()],
        }
    )
    assert reached_of(report) == reached


def test_rfc_ids_keep_rfc_008_severities() -> None:
    from taskhub.validators import load_policy

    policy = load_policy()
    rfc = {
        "static.manifest": "fail",
        "static.layout": "warn",
        "static.dependency_pinning": "fail",
        "runtime.reward_well_formed": "fail",
        "runtime.state_contract": "fail",
        "semantic.canary_floor": "fail",
        "statistical.headroom": "warn",
        "statistical.training_signal": "advisory",
    }
    for check_id, severity in rfc.items():
        assert policy.severity(check_id) == severity


@pytest.mark.parametrize(
    ("statuses", "verdict"),
    [
        ([("a", "pass", "fail")], "pass"),
        ([("a", "pass", "fail"), ("b", "fail", "fail")], "fail"),
        ([("a", "fail", "warn")], "warn"),
        ([("a", "fail", "advisory")], "pass"),
        ([("a", "skip", "fail")], "pass"),
        ([("a", "error", "fail")], "fail"),
        ([("a", "error", "warn"), ("b", "pass", "fail")], "warn"),
        ([("a", "fail", "warn"), ("b", "fail", "fail")], "fail"),
    ],
)
def test_verdict_rules(statuses: list[tuple[str, str, str]], verdict: str) -> None:
    from taskhub.validators import load_policy

    results = [result(i, s, sev) for i, s, sev in statuses]
    assert load_policy().verdict_of(results) == verdict


def test_a_policy_file_changes_the_verdict_without_code(tmp_path: Path) -> None:
    from taskhub.validators import load_policy, policy_files

    data = json.loads(policy_files()["taskhub-v2"].read_text())
    data["version"] = "strict"
    data["verdict"]["skip"] = "warn"
    data["checks"]["runtime.step_latency"]["severity"] = "fail"
    path = tmp_path / "strict.json"
    path.write_text(json.dumps(data))
    strict = load_policy(str(path))
    assert strict.label == "taskhub-strict"
    assert strict.verdict_of([result("x", "skip")]) == "warn"
    slow = result("runtime.step_latency", "fail", strict.severity("runtime.step_latency"))
    assert strict.verdict_of([slow]) == "fail"


def test_unknown_policy_is_a_config_error() -> None:
    from taskhub.validators import load_policy

    with pytest.raises(ConfigError, match=re.escape("unknown severity policy 'nope'")):
        load_policy("nope")


def test_a_third_party_check_runs_with_the_unlisted_severity() -> None:
    """The example of taskhub.validators._check's docstring, in a process of its own."""
    import subprocess
    import sys

    from tests.validators.conftest import ENVS

    code = f"""
from taskhub.validators import Finding, Subject, check, failed, passed
from taskhub.validators import ValidationConfig, validate

@check("acme/has_readme", level="static", order=19, needs=("folder",))
async def check_has_readme(subject: Subject) -> Finding:
    if (subject.root / "README.md").is_file():
        return passed("README.md is present")
    return failed("no README.md", "Add a README.md saying what the env measures.")

report = validate({str(ENVS / "good")!r}, ValidationConfig(checks=["acme/has_readme"]))
print([(c.id, c.status, c.severity) for c in report.checks if c.id.startswith("acme/")])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[('acme/has_readme', 'pass', 'warn')]"
