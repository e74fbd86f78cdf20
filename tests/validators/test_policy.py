"""The severity policy is data, and alone turns check results into a verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from taskhub import CheckResult, ConfigError


def result(check_id: str, status: str, severity: str = "fail") -> CheckResult:
    return CheckResult(id=check_id, level="runtime", status=status, severity=severity, summary="")  # type: ignore[arg-type]


def test_shipped_policy_covers_every_registered_check() -> None:
    from taskhub.validators import load_policy, registered_checks

    policy = load_policy()
    assert policy.label == "taskhub-v1"
    ours = [s for s in registered_checks() if s.fn.__module__.startswith("taskhub.validators")]
    assert {spec.id for spec in ours} == set(policy.checks)
    for spec in ours:
        assert policy.checks[spec.id].level == spec.level


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

    data = json.loads(policy_files()["taskhub-v1"].read_text())
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
