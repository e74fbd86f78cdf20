"""``evaluate(config, executor=RayExecutor(...))`` on a 2-node cluster: the records of a plain run.

Every (task, sample) is written once by the driver, whatever happens to the workers: a worker
SIGKILLed mid-run hands its chunk back, a run that lost every worker resumes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from taskhub import (
    EvalConfig,
    ExecutorError,
    RayExecutor,
    RunResult,
    evaluate,
    read_manifest,
    read_results,
    resume,
)
from tests.servers import FakeEnv, observation
from tests.taskhub.test_runner import stable, write_taskset


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [stable(r) for r in sorted(read_results(run_dir), key=lambda r: r.key())]


async def _slow_step(session, data):
    await asyncio.sleep(0.15)
    return observation({}, 1.0 if str(data.get("answer")) == str(session.target) else 0.0, True)


@pytest.fixture(scope="module")
def slow_env():
    with FakeEnv(on_step=_slow_step) as env:
        yield env


def test_a_ray_run_equals_a_plain_run(ray_cluster: Any, tmp_path: Path) -> None:
    config = EvalConfig(
        model="scripted/random",
        taskset="gridworld",
        limit=6,
        samples=2,
        seed=5,
        max_steps=6,
        concurrency=2,
    )
    executor = RayExecutor(ray_cluster.address)
    on_ray = evaluate(config, output_dir=tmp_path, executor=executor)
    plain = evaluate(config, output_dir=tmp_path)
    assert on_ray.manifest.status == "completed"
    assert _records(on_ray.run_dir) == _records(plain.run_dir)
    manifest = read_manifest(on_ray.run_dir)
    assert manifest.executor is not None and manifest.executor.kind == "ray"
    assert manifest.executor.nodes == 2 and manifest.executor.version
    assert read_manifest(plain.run_dir).executor.kind == "local"  # type: ignore[union-attr]
    # each node launched its own gridworld server; both are named in run.json
    assert len({w.node_id for w in executor.workers}) == 2
    assert manifest.env is not None and len(manifest.env.urls) == 2
    assert manifest.config == read_manifest(plain.run_dir).config
    # how the model acted on the tool env is the workers' model's, as in a plain run
    plain_model = read_manifest(plain.run_dir).model
    assert manifest.model is not None and plain_model is not None
    assert plain_model.tool_calling is not None
    assert manifest.model.tool_calling == plain_model.tool_calling


def _run_in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def _wait(predicate: Any, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _count(run_dir: Path) -> int:
    path = run_dir / "episodes.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def test_a_worker_killed_mid_run_leaves_every_episode_exactly_once(
    ray_cluster: Any, slow_env: FakeEnv, tmp_path: Path
) -> None:
    taskset = write_taskset(tmp_path / "ts", 30)
    config = EvalConfig(
        model="scripted/oracle", taskset=str(taskset), env=slow_env.url, samples=2, concurrency=2
    )
    executor = RayExecutor(ray_cluster.address, chunk_size=4)
    run_dir = tmp_path / "run"
    thread, out = _run_in_thread(lambda: evaluate(config, run_dir=run_dir, executor=executor))
    _wait(lambda: _count(run_dir) >= 6, "the first records")
    victim = executor.workers[0]
    os.kill(victim.pid, signal.SIGKILL)
    thread.join(300)
    assert "error" not in out, out.get("error")
    result: RunResult = out["result"]
    assert result.manifest.status == "completed"
    keys = [r.key() for r in read_results(run_dir)]
    assert len(keys) == len(set(keys)) == 60
    assert all(r.reward == 1.0 for r in read_results(run_dir))
    assert not executor.workers[0].alive and executor.workers[1].alive


def test_a_run_that_lost_every_worker_resumes_on_ray(
    ray_cluster: Any, slow_env: FakeEnv, tmp_path: Path
) -> None:
    taskset = write_taskset(tmp_path / "ts", 30)
    config = EvalConfig(
        model="scripted/oracle", taskset=str(taskset), env=slow_env.url, samples=2, concurrency=2
    )
    executor = RayExecutor(ray_cluster.address, chunk_size=4)
    run_dir = tmp_path / "run"
    thread, out = _run_in_thread(lambda: evaluate(config, run_dir=run_dir, executor=executor))
    _wait(lambda: _count(run_dir) >= 4, "the first records")
    for worker in executor.workers:
        os.kill(worker.pid, signal.SIGKILL)
    thread.join(300)
    assert isinstance(out.get("error"), ExecutorError), out
    assert "every Ray worker was lost" in str(out["error"])
    before = read_results(run_dir)
    assert 4 <= len(before) < 60
    assert read_manifest(run_dir).status == "failed"
    resumed = resume(run_dir, executor=RayExecutor(ray_cluster.address))
    assert resumed.manifest.status == "completed"
    records = read_results(run_dir)
    keys = [r.key() for r in records]
    assert len(keys) == len(set(keys)) == 60
    assert {r.run_id for r in records} == {resumed.manifest.run_id}
    assert len(resumed.manifest.sessions) == 2
