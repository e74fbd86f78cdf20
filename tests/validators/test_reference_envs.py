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

    reports = {r.name: r for r in asyncio.run(both())}
    # the tool env on its own: three validations at once overload a 2-core machine
    reports["ledger"] = asyncio.run(validate_async("ledger", ValidationConfig(growth_episodes=20)))
    return reports


@pytest.mark.parametrize("name", ["arith", "gridworld", "ledger"])
def test_reference_env_passes_cleanly(
    reference_reports: dict[str, ValidationReport], name: str
) -> None:
    report = reference_reports[name]
    # OpenEnv's create_app serves HTTP with a fresh env per request: a warning, nothing fails
    assert report.verdict == "warn" and report.exit_code == 0
    failing = [(c.id, c.severity) for c in report.checks if c.status in ("fail", "error")]
    assert failing == [("protocol.http_stateless", "warn")]
    assert report.taskset is not None and report.taskset.name == name
    assert report.target_kind == "builtin" and report.source_digest
    # RFC 008's ids taskhub does not implement are skips too, marked so
    skipped = {
        c.id for c in report.checks if c.status == "skip" and not c.measured.get("not_implemented")
    }
    # only the statistical checks (no --model) and, for gridworld's answer-less rows, leakage;
    # gridworld's rows have no string task key (size and difficulty are numbers) to misspell
    allowed = {c.id for c in report.checks if c.level == "statistical"}
    # runtime.http_episode leaves /ws servers to protocol.http_stateless; the taskset's rows
    # select the scenario (the seed need not); the manifests list no tasks
    allowed |= {"runtime.http_episode", "runtime.seed_effect", "taskset.manifest_tasks"}
    # their starts offer no set of options (rooms, legal moves) to play one by one
    allowed.add("semantic.reward_signal")
    if name != "ledger":  # only the tool env declares tools and a Task API
        allowed |= {"runtime.tool_declaration_accuracy", "runtime.task_declaration_accuracy"}
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


def test_the_tool_env_serves_what_it_declares(
    reference_reports: dict[str, ValidationReport],
) -> None:
    checks = {c.id: c for c in reference_reports["ledger"].checks}
    tools = checks["runtime.tool_declaration_accuracy"]
    assert tools.status == "pass" and tools.measured["served"] == ["lookup", "calculate", "submit"]
    tasks = checks["runtime.task_declaration_accuracy"]
    assert tasks.status == "pass" and tasks.measured["served"] == {"train": 200, "test": 100}
