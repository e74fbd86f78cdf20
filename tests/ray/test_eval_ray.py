"""``evaluate(config, executor=RayExecutor(...))`` on a 2-node cluster: the records of a plain run.

Every (task, sample) is written once by the driver, whatever happens to the workers: a worker
SIGKILLed mid-run hands its chunk back, a run that lost every worker resumes. The run begins
with the first worker up; the other joins it when it is up. Chunks shrink as the episodes run
out.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
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
from taskhub._ray import CHUNK_SHARE, chunk_size
from tests.rewards.test_pool import wait_gone
from tests.servers import FakeEnv, observation
from tests.taskhub.test_runner import stable, write_taskset

ROOT = Path(__file__).resolve().parents[2]
SLOW_APP = """
import asyncio

from server.fake import FakeEnv, observation


async def step(session, data):
    await asyncio.sleep(0.15)
    return observation({}, 1.0 if str(data.get("answer")) == str(session.target) else 0.0, True)


app = FakeEnv(on_step=step).app
"""


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [stable(r) for r in sorted(read_results(run_dir), key=lambda r: r.key())]


async def _slow_step(session, data):
    await asyncio.sleep(0.15)
    return observation({}, 1.0 if str(data.get("answer")) == str(session.target) else 0.0, True)


@pytest.fixture(scope="module")
def slow_env():
    with FakeEnv(on_step=_slow_step) as env:
        yield env


@pytest.fixture(scope="module")
def slow_env_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slow env as a folder: each node's worker launches a server of its own."""
    folder = tmp_path_factory.mktemp("slow") / "slow"
    (folder / "server").mkdir(parents=True)
    (folder / "openenv.yaml").write_text(
        "spec_version: 1\nname: slow\ntype: space\nruntime: fastapi\napp: server.app:app\n"
    )
    (folder / "server" / "__init__.py").write_text("")
    shutil.copy(ROOT / "tests" / "servers.py", folder / "server" / "fake.py")
    (folder / "server" / "app.py").write_text(SLOW_APP)
    return folder


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
    assert manifest.executor.version
    assert read_manifest(plain.run_dir).executor.kind == "local"  # type: ignore[union-attr]
    # each worker up in time to play launched its own gridworld server, named in run.json (a
    # node whose worker came up after the last episode played none)
    nodes = manifest.executor.nodes
    assert 1 <= nodes <= 2 and len({w.node_id for w in executor.workers}) == nodes
    assert manifest.env is not None and len(manifest.env.urls) == nodes
    # ... launched as soon as its actor was up, before it imported the runner
    for worker in executor.workers:
        phases = worker.phases
        assert list(phases) == ["actor up", "env launched", "runner imported", "env up"]
        assert sorted(phases.values()) == list(phases.values())
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
    ray_cluster: Any, slow_env_folder: Path, tmp_path: Path
) -> None:
    taskset = write_taskset(tmp_path / "ts", 30)
    config = EvalConfig(
        model="scripted/oracle",
        taskset=str(taskset),
        env=str(slow_env_folder),
        samples=2,
        concurrency=2,
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
    assert all("env launched" in w.phases for w in executor.workers)  # an env folder
    # the worker that came up second joined the run: its node and its own server are named
    manifest = read_manifest(run_dir)
    assert manifest.executor is not None and manifest.executor.nodes == 2
    assert len({w.node_id for w in executor.workers}) == 2
    assert manifest.env is not None and len(set(manifest.env.urls)) == 2


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
    os.kill(executor.workers[0].pid, signal.SIGKILL)
    # the other worker may come up later: it is killed as soon as it is
    _wait(lambda: len(executor.workers) == 2, "the second worker")
    os.kill(executor.workers[1].pid, signal.SIGKILL)
    # an env at a URL is shared: no worker launches one
    assert all("env launched" not in w.phases for w in executor.workers)
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


def test_chunks_are_a_share_of_the_episodes_left() -> None:
    # a quarter of each worker's share while many are left, the concurrency at the end
    assert CHUNK_SHARE == 4
    assert chunk_size(400, 1, 4) == 100
    assert chunk_size(400, 2, 4) == 50
    assert chunk_size(30, 2, 4) == 4
    assert chunk_size(3, 1, 4) == 3  # never more than are left
    assert chunk_size(10, 0, 2) == 3  # every worker lost, one starting again: as for one


def test_a_run_is_carried_by_a_few_shrinking_chunks(ray_cluster: Any, tmp_path: Path) -> None:
    config = EvalConfig(
        model="scripted/oracle", taskset="arith", limit=50, samples=2, concurrency=4
    )
    executor = RayExecutor(ray_cluster.address, max_nodes=1)
    run = evaluate(config, output_dir=tmp_path, executor=executor)
    assert run.manifest.status == "completed"
    keys = [r.key() for r in read_results(run.run_dir)]
    assert len(keys) == len(set(keys)) == 100
    (worker,) = executor.workers
    expected, left = [], 100
    while left:
        expected.append(chunk_size(left, 1, 4))
        left -= expected[-1]
    assert worker.chunks == expected == [25, 19, 14, 11, 8, 6, 5, 4, 4, 4]
    # with --fail-fast a failure stops the run within a chunk: chunks are the concurrency
    fail_fast = config.model_copy(update={"fail_fast": True})
    executor = RayExecutor(ray_cluster.address, max_nodes=1)
    evaluate(fail_fast, output_dir=tmp_path, executor=executor)
    assert executor.workers[0].chunks == [4] * 25


def test_a_node_loads_its_worker_and_launches_its_env_without_taskhub(tmp_path: Path) -> None:
    """The actor class travels by value: the node's env starts before taskhub is imported."""
    from ray import cloudpickle

    from taskhub._ray import node_worker
    from taskhub._ray_node import EarlyLaunch
    from taskhub.env import builtin_envs
    from taskhub.env._launch import server_command

    launch = EarlyLaunch(server_command(builtin_envs()["arith"]), builtin="arith", max_sessions=2)
    script = """
import asyncio, json, pickle, sys, time, urllib.request
cls, launch = pickle.loads(sys.stdin.buffer.read())
worker = cls(launch)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "taskhub")
((folder, port, process, log),) = worker.early
deadline, status = time.monotonic() + 120, None
while status is None and time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
            status = reply.status
    except OSError:
        time.sleep(0.1)
asyncio.run(worker.stop())
phases = list(worker.phases)
print(json.dumps({"loaded": loaded, "status": status, "exit": process.poll(), "phases": phases}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=cloudpickle.dumps((node_worker(), launch)),
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    out = json.loads(result.stdout)
    assert out["loaded"] == []  # not even taskhub's own package
    assert out["status"] == 200 and out["exit"] is not None  # it served, and was stopped
    assert out["phases"] == ["actor up", "env launched"]


def test_a_killed_node_workers_folder_is_removed_by_the_next_worker_on_its_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed with its env server cannot remove its folder; the next one does."""
    from taskhub._ray_node import FOLDER_PREFIX, EarlyLaunch, NodeWorker
    from taskhub.env import builtin_envs
    from taskhub.env._launch import server_command

    launch = EarlyLaunch(server_command(builtin_envs()["arith"]), builtin="arith", max_sessions=2)
    script = """
import pickle, sys, time
from taskhub._ray_node import NodeWorker
worker = NodeWorker(pickle.loads(sys.stdin.buffer.read()))
print(worker.log_dir, worker.early[0][2].pid, flush=True)
time.sleep(300)
"""
    victim = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert victim.stdin is not None and victim.stdout is not None
    victim.stdin.write(pickle.dumps(launch))
    victim.stdin.close()
    folder_text, server_pid = victim.stdout.readline().decode().split()
    lost = Path(folder_text)
    assert lost.parent == tmp_path and (lost / "env-logs").is_dir()
    victim.kill()  # SIGKILL: nothing of the worker runs after it
    victim.wait(30)
    victim.stdout.close()
    assert wait_gone(int(server_pid), timeout=30)  # its env server dies with it
    assert lost.is_dir()
    # another host's folder (a container sharing the folder) and a live process's stay
    elsewhere = tmp_path / f"{FOLDER_PREFIX}elsewhere"
    elsewhere.mkdir()
    (elsewhere / "owner").write_text(f"another-host {victim.pid}")
    alive = tmp_path / f"{FOLDER_PREFIX}alive"
    alive.mkdir()
    (alive / "owner").write_text(lost.joinpath("owner").read_text().rsplit(" ", 1)[0] + " 1")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    worker = NodeWorker()
    assert not lost.exists()
    assert elsewhere.is_dir() and alive.is_dir() and worker.log_dir.is_dir()
    asyncio.run(worker.stop())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([elsewhere.name, alive.name])
