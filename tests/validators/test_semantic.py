"""Oracles from the manifest, the "no oracle" failure, and the leakage rule."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import httpx
import pytest
from taskhub.validators import ValidationConfig, validate

from taskhub import Task
from taskhub.env import launch_server, wait_healthy
from tests.validators.conftest import ENVS, FAST, QUIZ

sys.path.insert(0, str(ENVS / "_lite"))
from openenv_lite import make_question  # noqa: E402


@pytest.fixture
def env_with_oracle(tmp_path: Path) -> Path:
    shutil.copytree(ENVS / "_lite", tmp_path / "_lite")
    folder = tmp_path / "env"
    shutil.copytree(ENVS / "good", folder)
    rows = []
    for seed in (1, 2, 3):
        _, answer = make_question(seed, "mul", 2)
        rows.append({"reset": {"seed": seed, "op": "mul", "digits": 2}, "answer": answer})
    (folder / "oracle").mkdir()
    (folder / "oracle" / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = folder / "openenv.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "    verifier:\n",
            "    oracle:\n      form: script\n      location: oracle/episodes.jsonl\n"
            "    verifier:\n",
        )
    )
    return folder


def test_the_manifest_declares_a_data_oracle(env_with_oracle: Path) -> None:
    from taskhub.validators import ValidationConfig, validate

    report = validate(
        str(env_with_oracle), ValidationConfig(checks=["semantic.oracle_max"], **FAST)
    )
    oracle = next(c for c in report.checks if c.id == "semantic.oracle_max")
    assert oracle.status == "pass", oracle
    assert oracle.measured["source"] == "manifest" and oracle.measured["tasks"] == 3
    assert report.taskset is None


def test_no_oracle_skips_semantic_oracle_max_saying_what_would_enable_it() -> None:
    from taskhub.validators import ValidationConfig, validate

    report = validate(str(ENVS / "good"), ValidationConfig(checks=["semantic.oracle_max"], **FAST))
    oracle = next(c for c in report.checks if c.id == "semantic.oracle_max")
    assert oracle.status == "skip" and "no oracle" in oracle.summary
    assert oracle.remediation is not None and "oracle_actions" in oracle.remediation
    assert report.verdict == "pass"


def test_leaking_paths_need_the_answer_in_most_tasks() -> None:
    from taskhub.validators._semantic import leaking_paths

    tasks = [Task(task_id=f"t{i}", answer=a) for i, a in enumerate(["11", "42", "7", "1234"])]
    leaky = [(t, [{"question": "q", "hint": f"expected {t.answer}"}]) for t in tasks]
    leaks, checked = leaking_paths(leaky)
    assert checked == 4 and set(leaks) == {"hint"}
    # an answer that happens to appear in one question (5 * 1 = 5) is not a leak
    chance = [
        (tasks[0], [{"question": "What is 3 + 8?"}]),
        (tasks[1], [{"question": "What is 42 * 1?"}]),
        (tasks[2], [{"question": "What is 2 + 5?"}]),
        (tasks[3], [{"question": "What is 1000 + 234?"}]),
    ]
    assert leaking_paths(chance)[0] == {}
    exact = [(t, [{"nested": {"target": int(t.answer)}}]) for t in tasks]  # type: ignore[arg-type]
    assert set(leaking_paths(exact)[0]) == {"nested.target"}


def test_replayability_of_a_running_server_replays_in_fresh_sessions_without_a_restart(
    tmp_path: Path,
) -> None:
    """A URL target cannot be restarted: the check says so, and the salted hash goes unseen."""
    server = launch_server(ENVS / "salted_hash", log_dir=tmp_path)
    try:

        async def healthy() -> None:
            async with httpx.AsyncClient() as http:
                await wait_healthy(http, server.url, timeout=60, server=server)

        asyncio.run(healthy())
        config = ValidationConfig(
            taskset=str(QUIZ), checks=["semantic.replayability", "semantic.oracle_max"], **FAST
        )
        report = validate(server.url, config)
    finally:
        server.stop()
    replay = next(c for c in report.checks if c.id == "semantic.replayability")
    assert replay.status == "pass", replay.summary
    assert replay.measured["server_restarted"] is False
    assert replay.measured["pythonhashseed"] is None
    assert "in fresh sessions" in replay.summary and replay.measured["episodes"] == 4
