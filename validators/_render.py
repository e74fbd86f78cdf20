"""The report card: a ValidationReport as text a participant can act on.

Blockers come first (the failures that fail the env), each in plain words with what to do
and its evidence (a pair of observations or frames is shown as the fields that differ),
and the checks it kept from running folded into one line under it. Warnings and advisories
follow; passed checks are counted by level; the remaining skips are grouped by their reason.
``verbose`` adds every check with its measured values.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

from taskhub import CheckResult, ValidationReport

from ._policy import DEFAULT_POLICY, Policy, blocked_by, load_policy, policy_files, score_of

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "skip", "error": "ERR "}
#: Width the card wraps its text to.
WIDTH = 100
#: Evidence items shown under a finding, and differing fields shown per pair.
MAX_EVIDENCE = 2
MAX_DIFF_FIELDS = 6
#: Longest value shown in a diff or an evidence line.
MAX_VALUE = 120
#: Keys that hold the two sides of a comparison, in the evidence of the checks.
PAIRS = (
    ("first", "second"),
    ("expected", "got"),
    ("recorded", "replayed"),
    ("a", "b"),
    ("before", "after"),
)
#: Last lines of a log or traceback shown as evidence, and fields of an object.
MAX_LOG_LINES = 4
MAX_DICT_KEYS = 6
#: Ids named in a folded line before "+N more".
MAX_IDS = 6


def _policy_of(report: ValidationReport) -> Policy:
    """The shipped policy that judged ``report``, else the default (for its score weights)."""
    label = report.policy_version
    return load_policy(label if label in policy_files() else DEFAULT_POLICY)


def _short(value: Any, limit: int = MAX_VALUE) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = " ".join(text.split())
    if isinstance(value, str):
        text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clip(text: str, limit: int = MAX_VALUE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _flatten(value: Any, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value and depth < 8:
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key), depth + 1)
    elif isinstance(value, list) and value and depth < 8 and len(value) <= 50:
        for index, item in enumerate(value):
            yield from _flatten(item, f"{prefix}[{index}]", depth + 1)
    else:
        yield prefix or "(value)", value


def field_diff(first: Any, second: Any, *, limit: int = MAX_DIFF_FIELDS) -> list[str]:
    """The fields in which two JSON values differ: ``path: first -> second`` lines."""
    a, b = dict(_flatten(first)), dict(_flatten(second))
    missing = object()
    lines = []
    for path in list(a) + [p for p in b if p not in a]:
        left, right = a.get(path, missing), b.get(path, missing)
        if left == right:
            continue
        shown_left = "(absent)" if left is missing else _short(left, MAX_VALUE // 2)
        shown_right = "(absent)" if right is missing else _short(right, MAX_VALUE // 2)
        lines.append(f"{path}: {shown_left} -> {shown_right}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... {len(lines) - limit} more differing field(s)"]
    return lines


def _evidence_lines(item: Any) -> list[str]:
    """One evidence item as lines: a diff when it holds two sides of a comparison."""
    if isinstance(item, dict):
        diff = item.get("diff")
        if isinstance(diff, list) and diff:
            return [_short(d) if not isinstance(d, str) else d[:MAX_VALUE] for d in diff][
                :MAX_DIFF_FIELDS
            ]
        if isinstance(diff, str) and diff:
            return diff.splitlines()[:MAX_DIFF_FIELDS]
        for left, right in PAIRS:
            if left in item and right in item:
                context = {k: v for k, v in item.items() if k not in (left, right)}
                head = f"{left} vs {right}" + (f" ({_short(context, 60)})" if context else "")
                lines = field_diff(item[left], item[right])
                return [head + ":"] + ["  " + line for line in lines or ["no field differs"]]
    if isinstance(item, str) and "\n" in item.strip():
        # a log or a traceback: its last lines say what went wrong
        lines = [line.rstrip() for line in item.strip().splitlines() if line.strip()]
        shown = [
            line if len(line) <= MAX_VALUE else line[: MAX_VALUE - 3] + "..." for line in lines
        ]
        return (["..."] if len(shown) > MAX_LOG_LINES else []) + shown[-MAX_LOG_LINES:]
    if isinstance(item, str):
        return [_clip(" ".join(item.split()), 2 * MAX_VALUE)]
    if isinstance(item, dict) and item:
        # the short fields first: a count or a flag says more than a nested observation
        keys = sorted(item, key=lambda k: (isinstance(item[k], dict | list), str(k)))
        lines = [f"{k}: {_short(item[k], MAX_VALUE - len(str(k)) - 2)}" for k in keys]
        more = len(lines) - MAX_DICT_KEYS
        return lines[:MAX_DICT_KEYS] + ([f"... {more} more field(s)"] if more > 0 else [])
    return [_short(item, 2 * MAX_VALUE)]


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ") or [
        indent
    ]


def _names(ids: list[str]) -> str:
    shown = ", ".join(ids[:MAX_IDS])
    return shown + (f" and {len(ids) - MAX_IDS} more" if len(ids) > MAX_IDS else "")


def _sentence(text: str) -> str:
    """``text`` as a sentence: capitalized (unless it starts with a name such as a file's)."""
    text = text.strip()
    if not text:
        return text
    first = text.split(maxsplit=1)[0]
    if first.isalpha():
        text = text[0].upper() + text[1:]
    return text + ("" if text.endswith((".", "!", "?", ":")) else ".")


def _root(result: CheckResult, by_id: dict[str, CheckResult]) -> str | None:
    """The failed check at the end of ``result``'s chain of ``blocked_by`` skips."""
    seen: set[str] = set()
    current: CheckResult | None = result
    while current is not None and current.id not in seen:
        seen.add(current.id)
        blocker = blocked_by(current)
        if blocker is None:
            return current.id if current is not result else None
        current = by_id.get(blocker)
        if current is None:
            return blocker
    return None


def _finding(number: int, check: CheckResult, folded: list[str], verbose: bool) -> list[str]:
    """One failed check: what was found, what to do, the evidence, what it kept from running."""
    how = "could not run" if check.status == "error" else check.severity
    lines = _wrap(f"{number}. {_sentence(check.summary)}", "  ")
    lines.append(f"     {check.id} [{how}]")
    if check.remediation:
        # lines after the first are a file to write (YAML, a command): kept as they are
        first, *rest = check.remediation.rstrip().split("\n")
        lines += _wrap(f"fix: {first}", "     ")
        for line in rest:
            short = len(line) <= WIDTH - 7
            lines += [f"       {line}".rstrip()] if short else _wrap(line, "       ")
    evidence = check.evidence[: (len(check.evidence) if verbose else MAX_EVIDENCE)]
    if evidence:
        lines.append("     evidence:")
        for item in evidence:
            shown = _evidence_lines(item)
            lines += ["       - " + shown[0]] + ["         " + line for line in shown[1:]]
        if len(check.evidence) > len(evidence):
            lines.append(f"       ... {len(check.evidence) - len(evidence)} more (see --json)")
    if verbose and check.measured:
        lines += _wrap(f"measured: {_short(check.measured, 4 * MAX_VALUE)}", "     ")
    if folded:
        lines += _wrap(f"kept {len(folded)} check(s) from running: {_names(folded)}", "     ")
    return lines


def render_report(report: ValidationReport, *, verbose: bool = False) -> str:
    """Render ``report`` as a report card: blockers first, then warnings, then the rest.

    Args:
        report: The report.
        verbose: Also list every check (with its measured values) and every skip's reason.
    """
    policy = _policy_of(report)
    by_id = {c.id: c for c in report.checks}
    folded: dict[str, list[str]] = {}
    loose_skips: list[CheckResult] = []
    for check in report.checks:
        if check.status != "skip":
            continue
        root = _root(check, by_id)
        if root is not None and by_id.get(root) is not None and by_id[root].status != "skip":
            folded.setdefault(root, []).append(check.id)
        else:
            loose_skips.append(check)
    failing = [c for c in report.checks if c.status in ("fail", "error")]
    blockers = [c for c in failing if c.severity == "fail"]
    warnings = [c for c in failing if c.severity == "warn"]
    advisories = [c for c in failing if c.severity == "advisory"]
    context = [f"policy {report.policy_version or '?'}", f"lane {report.lane}"]
    if report.taskset:
        context.append(f"taskset {report.taskset.name}")
    if report.model:
        context.append(f"model {report.model}")
    lines = [
        f"{report.name}  ({report.target_kind}: {report.target})",
        "   ".join(context),
        "",
        f"verdict: {report.verdict.upper()} (exit {report.exit_code})   "
        f"score {score_of(report.checks, policy):g}/100   "
        f"{len(blockers)} blocker(s), {len(warnings)} warning(s)",
    ]
    if report.error is not None:  # as written: it may quote a traceback or pip's output
        lines.append(f"{report.error.type}: {report.error.message}")
    sections = (
        ("Blockers: each of these fails the env", blockers),
        ("Warnings: these make the verdict warn", warnings),
        ("Advisories: reported, they change nothing", advisories),
    )
    for title, checks in sections:
        if not checks:
            continue
        lines += ["", title]
        for number, check in enumerate(checks, 1):
            lines += _finding(number, check, folded.get(check.id, []), verbose)
    passed = [c for c in report.checks if c.status == "pass"]
    if passed:
        levels: dict[str, int] = {}
        for check in passed:
            levels[check.level] = levels.get(check.level, 0) + 1
        lines += [
            "",
            f"Passed: {len(passed)} check(s) ("
            + ", ".join(f"{level} {n}" for level, n in levels.items())
            + ")",
        ]
        if verbose:
            for check in passed:
                lines += _wrap(f"{_MARK['pass']} {check.id:<34} {check.summary}", "  ")
                if check.measured:
                    lines += _wrap(f"measured: {_short(check.measured, 4 * MAX_VALUE)}", "       ")
    if loose_skips:
        reasons: dict[str, list[str]] = {}
        unimplemented = [c for c in loose_skips if c.measured.get("not_implemented") is True]
        for check in loose_skips:
            if check not in unimplemented:
                reasons.setdefault(check.summary, []).append(check.id)
        if reasons:
            lines += ["", "Not run:"]
            for reason, ids in reasons.items():
                lines += _wrap(f"{len(ids)} because {reason}: {_names(ids)}", "  ")
        if unimplemented:
            lines += ["", f"Not implemented in taskhub: {len(unimplemented)} RFC 008 check(s)"]
            if verbose:
                for check in unimplemented:
                    lines += _wrap(f"{check.id}: {check.summary}", "  ")
            else:
                named = _names([c.id for c in unimplemented])
                lines += _wrap(f"{named} (--verbose says why)", "  ")
    counts = {s: sum(c.status == s for c in report.checks) for s in _MARK}
    lines += [
        "",
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped, "
        f"{counts['error']} errors in {report.duration_s:.1f}s",
    ]
    return "\n".join(lines)
