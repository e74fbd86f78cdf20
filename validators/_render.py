"""The report card: a ValidationReport as readable text for a terminal."""

from __future__ import annotations

from taskhub import ValidationReport

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "skip", "error": "ERR "}


def render_report(report: ValidationReport, *, verbose: bool = False) -> str:
    """Render ``report`` as a report card: one line per check, remediation under failures.

    Args:
        report: The report.
        verbose: Also list measured values of every check.
    """
    lines = [
        f"{report.name}  ({report.target_kind}: {report.target})",
        f"policy {report.policy.get('name', '?')}-{report.policy.get('version', '?')}"
        + (f"   taskset {report.taskset.name}" if report.taskset else "")
        + (f"   model {report.model}" if report.model else ""),
        "",
    ]
    level = None
    for check in report.checks:
        if check.level != level:
            level = check.level
            lines.append(f"{level}")
        weight = "" if check.status in ("pass", "skip") else f" [{check.severity}]"
        lines.append(f"  {_MARK[check.status]} {check.id:<34} {check.summary}{weight}")
        if check.status in ("fail", "error") and check.remediation:
            lines.append(f"       -> {check.remediation}")
        if verbose and check.measured:
            lines.append(f"       {check.measured}")
    counts = {s: sum(c.status == s for c in report.checks) for s in _MARK}
    lines += [
        "",
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped, "
        f"{counts['error']} errors in {report.duration_s:.1f}s",
        f"verdict: {report.verdict.upper()} (exit {report.exit_code})",
    ]
    if report.error is not None:
        lines.append(f"{report.error.type}: {report.error.message}")
    return "\n".join(lines)
