"""A ValidationReport in RFC 008's own report layout, for OpenEnv's tooling.

taskhub's report carries RFC 008's fields (``report_schema_version``, ``policy_version``,
``lane``, ``verdict``, each check's ``check_id``, ``status``, ``measured``, ``evidence`` and
``remediation``) beside its own. OpenEnv reads reports strictly (no unknown field), so
``rfc008_report`` writes the other way round: exactly the fields of OpenEnv's report version
2 (``ValidationReportV2``), with taskhub's values.
"""

from __future__ import annotations

import json
import re
from typing import Any

from taskhub import RFC008_REPORT_VERSION, ValidationReport

from ._policy import DEFAULT_POLICY, Policy, load_policy, policy_files

#: RFC 008's level number of each taskhub level.
LEVEL_NUMBERS = {
    "static": 1,
    "protocol": 2,
    "runtime": 2,
    "taskset": 2,
    "semantic": 3,
    "statistical": 4,
}
#: What RFC 008 allows as a check id.
CHECK_ID = re.compile(r"^[a-z_]+\.[a-z_]+$")
#: Longest evidence line written (RFC 008's evidence is lines of text).
MAX_EVIDENCE_LINE = 4000


def _line(item: Any) -> str:
    text = item if isinstance(item, str) else json.dumps(item, sort_keys=True, default=str)
    return text if len(text) <= MAX_EVIDENCE_LINE else text[: MAX_EVIDENCE_LINE - 3] + "..."


def rfc008_report(
    report: ValidationReport, policy: Policy | None = None, *, rfc008_ids_only: bool = False
) -> dict[str, Any]:
    """``report`` as RFC 008's report version 2, which OpenEnv's ``ValidationReportV2`` reads.

    Results are the checks whose ids RFC 008's id pattern admits; a ``local`` report leaves
    out the hub lane's ids (RFC 008 shows an author only what they can fix). Evidence becomes
    lines of text: the summary, then each item (JSON for structured ones). ``unsupported``
    and ``error`` verdicts, which RFC 008 gives as exit codes, are written ``fail``. The
    normalized manifest is not carried (``null``); the source digest is empty for a URL
    target.

    Args:
        report: The report.
        policy: Policy whose lanes decide which ids a local report leaves out (the report's
            own when it is a shipped one, else the default).
        rfc008_ids_only: Leave out taskhub's own check ids too, so that OpenEnv's policy can
            grade the results again (its ``apply_policy`` refuses ids it does not know). The
            verdict stays taskhub's.
    """
    if policy is None:
        label = report.policy_version
        policy = load_policy(label if label in policy_files() else DEFAULT_POLICY)
    results = []
    levels: set[int] = set()
    for check in report.checks:
        entry = policy.checks.get(check.id)
        if not CHECK_ID.match(check.id) or (rfc008_ids_only and not (entry and entry.rfc008)):
            continue
        if report.lane == "local" and entry is not None and entry.lane == "hub":
            continue
        if check.status != "skip":
            levels.add(LEVEL_NUMBERS[check.level])
        results.append(
            {
                "check_id": check.id,
                "status": check.status,
                "measured": check.measured,
                "evidence": [check.summary, *(_line(item) for item in check.evidence)],
                "remediation": check.remediation,
                "duration_s": max(check.duration_s, 0.0),
            }
        )
    return {
        "report_schema_version": RFC008_REPORT_VERSION,
        "target": report.target,
        "source_digest": report.source_digest or "",
        "signature": "openenv.yaml",
        "manifest": None,
        "policy_version": report.policy_version,
        "lane": report.lane,
        "levels_run": sorted(levels),
        "results": results,
        "verdict": report.verdict if report.verdict in ("pass", "warn", "fail") else "fail",
    }
