"""Validation reports of real submissions scored against what is known to be wrong with them.

    python bench/real_envs.py score REPORTS [--baseline REPORTS] [--json]
    python bench/real_envs.py url --out REPORTS [--taskhub BIN]      # run_corpus.sh lane
    python bench/real_envs.py folder --out REPORTS --python PY       # folder batch lane

The real envs (``../shared/real-envs/``: ``envs.json`` recipes, ``truth.json`` defect classes)
are validated as URL targets (``run_corpus.sh`` starts each one by its recipe, ``taskhub
validate URL`` runs against it) or as a folder batch (each exported tree is copied to a
scratch folder, never validated in place, and ``taskhub validate --batch`` launches it with
``--python``, the interpreter that has the env's dependencies). ``score`` reads the reports:

- per defect class, how many known defects were *caught for the right reason*: a check that
  describes the class failed (``CLASS_CHECKS`` below maps check ids to classes);
- flags on classes known to be fine there (a check of such a class failed: a false alarm);
- envs on which an episode was played (``protocol.episode`` passed).

An env without a report (its recipe did not start it, in the URL lane) counts for no class in
that lane; in the URL lane no static check runs, so C9 (packaging) is counted only in the folder
lane. Besides failed checks, an ``unsupported`` verdict names C9 when the folder has no
openenv.yaml and C1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# beside the checkout (../shared/real-envs), unless REAL_ENVS names it
REAL = Path(os.environ.get("REAL_ENVS", ROOT.parent / "shared" / "real-envs"))
TREES = Path(os.environ.get("TREES", "/tmp/real-envs/trees"))

#: The checks whose failure describes each defect class.
CLASS_CHECKS: dict[str, frozenset[str]] = {
    "C1": frozenset({"runtime.startup", "protocol.episode"}),
    "C2": frozenset(
        {"runtime.http_episode", "runtime.episode_isolation", "protocol.http_stateless"}
    ),
    "C3": frozenset({"runtime.seed_control", "runtime.seed_effect", "runtime.episode_determinism"}),
    "C4": frozenset(
        {"taskset.unknown_values_refused", "taskset.reset_params", "taskset.manifest_tasks"}
    ),
    "C5": frozenset({"runtime.termination", "runtime.step_after_done"}),
    "C6": frozenset({"protocol.malformed_input"}),
    "C7": frozenset(
        {
            "runtime.reward_well_formed",
            "semantic.floor_gap",
            "semantic.reward_signal",
            "semantic.oracle_max",
        }
    ),
    "C8": frozenset(
        {
            "runtime.oracle_containment",
            "runtime.state_contract",
            "runtime.observation_schema",
            "semantic.no_solution_leakage",
            "static.env_implementation",
        }
    ),
    "C9": frozenset({"static.manifest", "static.layout", "static.dependency_pinning"}),
    "C10": frozenset(
        {
            "protocol.health",
            "protocol.metadata",
            "protocol.schema",
            "protocol.concurrency",
            "protocol.http_stateless",
            "runtime.state_contract",
        }
    ),
}
CLASSES = list(CLASS_CHECKS)


def load_truth() -> dict[str, Any]:
    """``truth.json``'s envs, by ``OWNER+NAME``."""
    envs: dict[str, Any] = json.loads((REAL / "truth.json").read_text())["envs"]
    return envs


def find_report(folder: Path, name: str) -> dict[str, Any] | None:
    """The report of env ``name`` (``OWNER+NAME``) in ``folder``, by any of the lanes' names."""
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip("-.")
    for candidate in (f"{name}.report.json", f"{name}.json", f"{safe}.json"):
        path = folder / candidate
        if path.is_file():
            try:
                report: dict[str, Any] = json.loads(path.read_text())
                return report
            except ValueError:
                return None
    return None


#: A check that describes two classes does so for one reason or the other, told by its summary:
#: ``runtime.state_contract`` names a missing state route (C10) or a state that does not
#: describe the episode (C8); ``protocol.http_stateless`` names HTTP episodes that do not
#: carry (C2), and a ``GET /state`` that fails (C10) when that is how it showed.
REASONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("runtime.state_contract", "C10"): ("no state route", "HTTP 404", "HTTP 500", "failed:"),
    ("runtime.state_contract", "C8"): ("violation",),
    ("protocol.http_stateless", "C10"): ("GET /state failed",),
}


def failing(report: dict[str, Any], klass: str | None = None) -> set[str]:
    """Ids of the checks that failed (for ``klass``'s reason, when given).

    A check in ``error`` could not run (the budget ran out, the check crashed): it found
    nothing about the env, so it neither catches a defect nor flags a fine class.
    """
    out = set()
    for c in report.get("checks", []):
        if c["status"] != "fail":
            continue
        words = REASONS.get((c["id"], klass or ""))
        if words is not None and not any(w in c.get("summary", "") for w in words):
            continue
        out.add(c["id"])
    return out


def _unsupported_as(report: dict[str, Any]) -> str | None:
    """The class an ``unsupported`` verdict names: C9 without an openenv.yaml, else C1."""
    if report.get("verdict") != "unsupported":
        return None
    message = str((report.get("error") or {}).get("message", ""))
    return "C9" if "openenv.yaml" in message else "C1"


def caught(report: dict[str, Any], klass: str) -> bool:
    """Whether the report names the class: a check describing it failed."""
    if _unsupported_as(report) == klass:
        return True
    return bool(failing(report, klass) & CLASS_CHECKS[klass])


def played(report: dict[str, Any]) -> bool:
    """Whether an episode was played (``protocol.episode`` passed)."""
    return any(
        c["id"] == "protocol.episode" and c["status"] == "pass" for c in report.get("checks", [])
    )


def score(folder: Path) -> dict[str, Any]:
    """Score every report in ``folder`` against ``truth.json``."""
    truth = load_truth()
    url_lane = any(folder.glob("*.report.json"))
    per_class = {
        k: {"known": 0, "caught": 0, "flags": 0, "missed": [], "flagged": []} for k in CLASSES
    }
    envs: dict[str, Any] = {}
    for name, known in sorted(truth.items()):
        report = find_report(folder, name)
        if report is None:
            envs[name] = {"report": False}
            continue
        row: dict[str, Any] = {
            "report": True,
            "verdict": report.get("verdict"),
            "played": played(report),
            "caught": [],
            "missed": [],
            "flags": [],
        }
        for klass in known["defects"]:
            if url_lane and klass == "C9":
                continue  # packaging is read from files: not in the URL lane
            per_class[klass]["known"] += 1
            if caught(report, klass):
                per_class[klass]["caught"] += 1
                row["caught"].append(klass)
            else:
                per_class[klass]["missed"].append(name)
                row["missed"].append(klass)
        for klass in known["known_fine"]:
            hits = sorted(failing(report, klass) & CLASS_CHECKS[klass])
            if _unsupported_as(report) == klass:
                hits.append("verdict unsupported")
            if hits:
                per_class[klass]["flags"] += 1
                per_class[klass]["flagged"].append(f"{name}: {', '.join(hits)}")
                row["flags"].append(f"{klass} ({', '.join(hits)})")
        envs[name] = row
    known_total = sum(v["known"] for v in per_class.values())
    caught_total = sum(v["caught"] for v in per_class.values())
    reported = [e for e in envs.values() if e["report"]]
    return {
        "reports": len(reported),
        "played": sum(bool(e.get("played")) for e in reported),
        "known": known_total,
        "caught": caught_total,
        "recall": round(caught_total / known_total, 3) if known_total else None,
        "flags": sum(v["flags"] for v in per_class.values()),
        "classes": per_class,
        "envs": envs,
    }


def show(result: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    """Print the score (and the baseline's, as before -> after)."""

    def pair(key: str, klass: str | None = None) -> str:
        now = result["classes"][klass][key] if klass else result[key]
        if baseline is None:
            return str(now)
        before = baseline["classes"][klass][key] if klass else baseline[key]
        return f"{before} -> {now}"

    print(f"reports: {pair('reports')}, episode played on: {pair('played')}")
    print(f"known defects caught for the right reason: {pair('caught')} of {result['known']}")
    print(f"flags on known-fine classes: {pair('flags')}")
    print(f"{'class':6} {'caught/known':>16} {'flags':>8}")
    for klass in CLASSES:
        row = result["classes"][klass]
        print(f"{klass:6} {pair('caught', klass):>12}/{row['known']:<3} {pair('flags', klass):>8}")
    for klass in CLASSES:
        row = result["classes"][klass]
        if row["missed"]:
            print(f"  {klass} missed: {', '.join(row['missed'])}")
        for flag in row["flagged"]:
            print(f"  {klass} flag: {flag}")
    for name, env in result["envs"].items():
        if env["report"] and not env["played"]:
            print(f"  no episode played: {name} ({env['verdict']})")


def run_url(out: Path, taskhub: str, extra: list[str]) -> None:
    """Start each env by its recipe and validate its URL (``run_corpus.sh``)."""
    out.mkdir(parents=True, exist_ok=True)
    command = (
        f'{taskhub} validate "$ENV_BASE_URL" --json {" ".join(extra)} '
        '--output "$RESULTS/$ENV_NAME.report.json" > "$RESULTS/$ENV_NAME.stdout" '
        '2> "$RESULTS/$ENV_NAME.stderr"'
    )
    env = {**os.environ, "RESULTS": str(out), "VALIDATE_CMD": command, "TREES": str(TREES)}
    subprocess.run(["bash", str(REAL / "run_corpus.sh")], env=env, check=False)


def run_folder(out: Path, python: str, workers: int, budget: float, deadline: float) -> None:
    """Copy each exported tree to a scratch folder and validate the copies as one batch."""
    recipes = json.loads((REAL / "envs.json").read_text())
    scratch = Path(tempfile.mkdtemp(prefix="taskhub-real-envs-"))
    rows = []
    for recipe in recipes:
        name = recipe["repo"].replace("/", "+")
        tree = TREES / name
        if not tree.is_dir():
            print(f"{name}: no exported tree at {tree}", file=sys.stderr)
            continue
        copy = scratch / name
        shutil.copytree(tree, copy, symlinks=True)
        folder = copy / (recipe.get("subdir") or ".")
        rows.append({"name": name, "folder": str(folder.resolve())})
    submissions = scratch / "submissions.jsonl"
    submissions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out.mkdir(parents=True, exist_ok=True)
    from taskhub.validators import (
        BatchConfig,
        ValidationConfig,
        read_submissions,
        validate_batch,
    )

    # the batch of `taskhub validate --batch`, with the servers run by `python`
    config = BatchConfig(
        output=out,
        workers=workers,
        deadline_s=deadline,
        validation=ValidationConfig(python=python, budget_s=budget),
    )
    try:
        validate_batch(read_submissions(submissions), config)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    scoring = commands.add_parser("score", help="score a folder of reports")
    scoring.add_argument("reports", type=Path)
    scoring.add_argument("--baseline", type=Path, help="reports of the baseline run")
    scoring.add_argument("--json", action="store_true")
    url = commands.add_parser("url", help="validate each env by URL (run_corpus.sh)")
    url.add_argument("--out", type=Path, required=True)
    url.add_argument("--taskhub", default="taskhub", help="the taskhub command to run")
    url.add_argument("extra", nargs="*", help="more taskhub validate options (after --)")
    folder = commands.add_parser("folder", help="validate copies of the trees as a batch")
    folder.add_argument("--out", type=Path, required=True)
    folder.add_argument("--python", required=True, help="interpreter with the envs' deps")
    folder.add_argument("--workers", type=int, default=2)
    folder.add_argument("--budget", type=float, default=270.0, help="budget of one validation")
    folder.add_argument("--deadline", type=float, default=330.0, help="deadline of one env")
    args = parser.parse_args()
    if args.command == "url":
        run_url(args.out, args.taskhub, args.extra)
        args.command, args.reports, args.baseline, args.json = "score", args.out, None, False
    elif args.command == "folder":
        run_folder(args.out, args.python, args.workers, args.budget, args.deadline)
        args.command, args.reports, args.baseline, args.json = "score", args.out, None, False
    result = score(args.reports)
    baseline = score(args.baseline) if args.baseline else None
    if args.json:
        print(json.dumps({"result": result, "baseline": baseline}, indent=2))
    else:
        show(result, baseline)


if __name__ == "__main__":
    main()
