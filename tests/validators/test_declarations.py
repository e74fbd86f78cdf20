"""runtime.tool_declaration_accuracy and runtime.task_declaration_accuracy on envs that
declare what they do not serve (copies of real env folders with edited manifests)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import yaml

from taskhub import ValidationReport
from tests.validators.conftest import ENVS

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ["runtime.tool_declaration_accuracy", "runtime.task_declaration_accuracy"]


def declare(source: Path, target: Path, capabilities: dict) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = yaml.safe_load((target / "openenv.yaml").read_text())
    manifest["validation"]["capabilities"].update(capabilities)
    (target / "openenv.yaml").write_text(yaml.safe_dump(manifest))
    return target


def validate_both(*folders: Path) -> list[ValidationReport]:
    from taskhub.validators import ValidationConfig, validate_async

    config = ValidationConfig(checks=CHECKS, op_timeout_s=15.0)

    async def run() -> list[ValidationReport]:
        return await asyncio.gather(*(validate_async(str(f), config) for f in folders))

    return asyncio.run(run())


def test_declarations_that_differ_from_what_is_served_fail(tmp_path: Path) -> None:
    ledger = declare(
        ROOT / "taskhub" / "_envs" / "ledger",
        tmp_path / "ledger",
        {"declared_tools": ["lookup", "search"], "declared_task_count": {"test": 99, "dev": 5}},
    )
    # the corpus env finds its shared protocol server in the folder beside it
    shutil.copytree(ENVS / "_lite", tmp_path / "_lite")
    plain = declare(
        ENVS / "good", tmp_path / "good", {"declared_tools": ["answer"], "task_api": True}
    )
    wrong, missing = validate_both(ledger, plain)
    checks = {c.id: c for c in wrong.checks}
    tools = checks["runtime.tool_declaration_accuracy"]
    assert tools.status == "fail" and tools.severity == "fail"
    assert tools.summary == (
        "the declared tools differ from the listed ones (declared but not served: search; "
        "served but not declared: calculate, submit)"
    )
    assert tools.remediation and "declared_tools" in tools.remediation
    tasks = checks["runtime.task_declaration_accuracy"]
    assert tasks.status == "fail" and tasks.measured["served"] == {"train": 200, "test": 100}
    assert set(tasks.evidence) == {
        "split 'test' declares 99 tasks, serves 100",
        "split 'dev' is declared (5 tasks) but not served",
        "split 'train' is served but not declared",
    }
    assert wrong.verdict == "fail"
    checks = {c.id: c for c in missing.checks}
    assert checks["runtime.tool_declaration_accuracy"].summary.startswith(
        "openenv.yaml declares 1 tool(s) but the env lists none"
    )
    assert checks["runtime.task_declaration_accuracy"].summary.startswith(
        "openenv.yaml declares the Task API but the env does not serve it"
    )
