"""The built-in reference envs pass every check, with their own tasksets."""

from __future__ import annotations

import asyncio

import pytest

from taskhub import ValidationReport


@pytest.fixture(scope="module")
def reference_reports() -> dict[str, ValidationReport]:
    from taskhub.validators import ValidationConfig, validate_async

    async def both() -> list[ValidationReport]:
        config = ValidationConfig(growth_episodes=20)
        return await asyncio.gather(
            validate_async("arith", config), validate_async("gridworld", config)
        )

    return {r.name: r for r in asyncio.run(both())}


@pytest.mark.parametrize("name", ["arith", "gridworld"])
def test_reference_env_passes_cleanly(
    reference_reports: dict[str, ValidationReport], name: str
) -> None:
    report = reference_reports[name]
    assert report.verdict == "pass" and report.exit_code == 0
    assert [c.id for c in report.checks if c.status in ("fail", "error")] == []
    assert report.taskset is not None and report.taskset.name == name
    assert report.target_kind == "builtin" and report.source_digest
    skipped = {c.id for c in report.checks if c.status == "skip"}
    # only the statistical checks (no --model) and, for gridworld's answer-less rows, leakage;
    # gridworld's rows have no string task key (size and difficulty are numbers) to misspell
    allowed = {c.id for c in report.checks if c.level == "statistical"}
    # OpenEnv's create_app serves HTTP statelessly (reported, not failed); the taskset's rows
    # select the scenario (the seed need not); the manifests list no tasks
    allowed |= {"runtime.http_episode", "runtime.seed_effect", "taskset.manifest_tasks"}
    if name == "gridworld":
        allowed |= {
            "semantic.no_solution_leakage",
            "runtime.oracle_containment",
            "taskset.unknown_values_refused",
        }
    assert skipped == allowed
    ids = {c.id for c in report.checks}
    for rfc_id in (
        "static.manifest",
        "runtime.reward_well_formed",
        "runtime.state_contract",
        "runtime.seed_control",
        "runtime.episode_determinism",
        "runtime.episode_isolation",
        "semantic.oracle_max",
        "semantic.floor_gap",
        "semantic.canary_floor",
        "semantic.no_solution_leakage",
    ):
        assert rfc_id in ids
