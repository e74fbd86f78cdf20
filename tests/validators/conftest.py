"""Shared fixtures of the validator tests: the defect corpus, validated once in batch mode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from taskhub import ValidationReport

HERE = Path(__file__).resolve().parent
ENVS = HERE / "envs"
QUIZ = HERE / "tasksets" / "quiz"

#: Each corpus env and the checks its one defect implies: exactly these fail, nothing else.
EXPECTED: dict[str, set[str]] = {
    "good": set(),
    "ignores_seed": {"runtime.seed_control", "runtime.episode_determinism"},
    "ignores_task_params": {"taskset.reset_params"},
    "constant_reward": {"semantic.oracle_max"},
    "every_option_wins": {"semantic.reward_signal"},
    "empty_answer_scores": {"semantic.floor_gap"},
    "answer_in_observation": {"semantic.no_solution_leakage"},
    "state_leaks_answer": {"runtime.oracle_containment"},
    "crashes_on_bad_action": {"protocol.malformed_input"},
    "shared_state": {"runtime.episode_isolation"},
    "never_terminates": {"runtime.termination"},
    "http_only": {"protocol.websocket", "runtime.episode_isolation", "runtime.http_episode"},
    "fake_endpoints": {
        "static.env_implementation",
        "protocol.metadata",
        "protocol.schema",
        "protocol.websocket",
        "protocol.episode",
    },
    "reward_out_of_range": {"runtime.reward_well_formed"},
    "broken_state": {"runtime.state_contract"},
    "substring_verifier": {"semantic.canary_floor"},
    # kills its server on a huge reply: the canary check fails, the server is relaunched, and
    # every later check still runs
    "dies_on_huge_reply": {"semantic.canary_floor"},
    "flaky_verifier": {"semantic.verifier_determinism"},
    "leaks_memory": {"runtime.resource_bounds"},
    "unpinned_deps": {"static.dependency_pinning"},
    "bad_manifest": {"static.manifest", "runtime.startup"},
    # the app named by its file: a manifest finding, and the env is still served and checked
    "app_as_path": {"static.manifest"},
    "accepts_after_done": {"runtime.step_after_done"},
    "schema_mismatch": {"runtime.observation_schema"},
    "single_session": {"protocol.concurrency"},
    "crash_on_start": {"runtime.startup"},
    "unpinned_tasks": {"static.task_distribution_pinning"},
    # hash() of a str is salted per process: determinism holds in one server, not after a restart
    "salted_hash": {"semantic.replayability"},
    "unknown_op_fallback": {"taskset.unknown_values_refused"},
    # the manifest lists tasks; reset takes their id and drops it: one task is all that runs
    "swallowed_task_key": {"taskset.manifest_tasks"},
    # the HTTP routes of a /ws server build a fresh env per request, as OpenEnv's create_app
    # does: its own finding, a warning (runtime.http_episode judges HTTP-only servers)
    "fresh_per_request": {"protocol.http_stateless"},
    # reset() takes no episode id (the env names its episodes) and the reward is null until
    # the end: both as OpenEnv allows, no defect
    "names_its_episodes": set(),
    # a package, as OpenEnv's envs are: its server imports `from ..models`; no defect
    "relative_imports": set(),
    # a hand-rolled server with several defects at once, and a manifest older than validation:
    "handrolled_global": {
        "static.resource_declaration",
        "static.timeout_ceiling",
        "protocol.health",
        "protocol.metadata",
        "protocol.schema",
        "protocol.websocket",
        "protocol.wire_format",
        "runtime.http_episode",
        "runtime.episode_isolation",
        "runtime.step_after_done",
    },
    # every request field optional: an empty step body is graded (outside the declared range,
    # which real replies keep), and a step after the end repeats the final observation
    "lenient_text": {
        "static.resource_declaration",
        "static.timeout_ceiling",
        "protocol.metadata",
        "protocol.schema",
        "protocol.websocket",
        "protocol.wire_format",
        "runtime.state_contract",
        "runtime.episode_isolation",
        "runtime.step_after_done",
        "runtime.http_episode",
        "protocol.malformed_input",
    },
    # not packaged for OpenEnv: no openenv.yaml, the app in a nested module that the
    # Dockerfile's `python -m` runs; HTTP only, one global env, no /schema, /metadata, /state
    "unpackaged": {
        "static.manifest",
        "protocol.metadata",
        "protocol.schema",
        "protocol.websocket",
        "runtime.state_contract",
        "runtime.episode_isolation",
    },
    # OpenEnv's wrapped body with the action typed Any: anything is played as the default
    "untyped_action": {
        "static.resource_declaration",
        "static.timeout_ceiling",
        "protocol.metadata",
        "protocol.schema",
        "protocol.websocket",
        "runtime.state_contract",
        "runtime.http_episode",
        "runtime.episode_isolation",
        "protocol.malformed_input",
    },
    # declared tasks that a reset taking no body can never select, on a hand-rolled server
    "reset_takes_nothing": {
        "static.resource_declaration",
        "static.timeout_ceiling",
        "protocol.metadata",
        "protocol.schema",
        "protocol.websocket",
        "protocol.wire_format",
        "runtime.state_contract",
        "runtime.http_episode",
        "taskset.reset_params",
        "taskset.manifest_tasks",
    },
}
#: Validation settings of the corpus runs: short deadlines, fewer growth episodes.
FAST = {
    "op_timeout_s": 3.0,
    "check_timeout_s": 60.0,
    "budget_s": 180.0,
    "growth_episodes": 12,
    "tasks": 4,
}


def failing(report: ValidationReport) -> set[str]:
    """Ids of the checks that failed or errored."""
    return {c.id for c in report.checks if c.status in ("fail", "error")}


@pytest.fixture(scope="session")
def corpus_batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Validate the whole corpus, plus an env that hangs, as one batch (3 workers)."""
    from taskhub.validators import (
        BatchConfig,
        ValidationConfig,
        read_submissions,
        validate_batch_async,
    )

    out = tmp_path_factory.mktemp("corpus-batch")
    # an env that ships its own taskset (its rows do not fit the quiz) is validated with it
    rows: list[dict[str, Any]] = [
        {"name": name, "folder": str(ENVS / name)}
        | ({"taskset": str(ENVS / name / "taskset")} if (ENVS / name / "taskset").is_dir() else {})
        for name in EXPECTED
    ]
    # the hang (a 60 s startup wait) outlasts its 30 s deadline: the batch must kill it and carry on
    rows.append({"name": "hangs", "folder": str(ENVS / "hangs"), "deadline_s": 30})
    submissions_file = out / "submissions.jsonl"
    submissions_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    submissions = read_submissions(submissions_file)
    config = BatchConfig(
        output=out / "reports",
        workers=3,
        deadline_s=150,
        validation=ValidationConfig(taskset=str(QUIZ), **FAST),
    )
    events: list[tuple[str, str]] = []
    summary = asyncio.run(
        validate_batch_async(
            submissions, config, progress=lambda s, r, how: events.append((s.name, how))
        )
    )
    reports = {
        s.name: ValidationReport.model_validate_json(
            (config.output / f"{s.file_stem}.json").read_text()
        )
        for s in submissions
    }
    return {
        "output": config.output,
        "reports": reports,
        "summary": summary,
        "events": events,
        "submissions": submissions,
        "config": config,
    }


def pin_installed(requirements: Path) -> None:
    """Pin ``requirements``' ``name==version`` lines to the versions installed here.

    An offline isolated install (``--isolated-venv`` with ``offline=True``) can only use the
    packages of this environment; the corpus envs pin the versions that were current when they
    were written, and a fresh install of the test extra takes newer ones.
    """
    import importlib.metadata

    lines = []
    for line in requirements.read_text().splitlines():
        name, sep, _ = line.partition("==")
        if sep:
            try:
                line = f"{name}=={importlib.metadata.version(name.strip())}"
            except importlib.metadata.PackageNotFoundError:
                pass
        lines.append(line)
    requirements.write_text("\n".join(lines) + "\n")
