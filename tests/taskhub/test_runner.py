"""The runner end to end: real reference envs and scriptable envs on loopback, real clients."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from taskhub import (
    ConfigError,
    EvalConfig,
    ModelAuthError,
    ResultsError,
    UnknownPluginError,
    evaluate,
    read_manifest,
    read_results,
    resume,
)
from taskhub.env import builtin_envs, launch_server, wait_healthy
from tests.servers import (
    CLOSE,
    FakeEnv,
    ModelScript,
    ModelServer,
    counting_reset,
    counting_step,
    observation,
)

VOLATILE = {"run_id", "started_at", "duration_s", "env_time_s", "model_time_s"}


def write_taskset(folder: Path, n: int, *, extra: dict | None = None) -> Path:
    """A jsonl taskset of 'say N' tasks for FakeEnv's default behaviour."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tasks.jsonl"
    with path.open("w") as f:
        for i in range(n):
            row = {"task_id": f"t{i:03d}", "reset": {"seed": i}, "answer": str(i), **(extra or {})}
            f.write(json.dumps(row) + "\n")
    return path


def stable(record) -> dict:
    data = record.model_dump(mode="json", exclude=VOLATILE)
    for step in data["steps"]:
        step.pop("latency_s")
        step.pop("model_latency_s")
    return data


@pytest.mark.parametrize("name", ["arith", "gridworld"])
def test_oracle_reaches_max_reward_on_reference_envs(name: str, tmp_path: Path) -> None:
    result = evaluate(
        EvalConfig(model="scripted/oracle", taskset=name, limit=12, concurrency=4),
        output_dir=tmp_path,
    )
    assert result.manifest.status == "completed"
    records = read_results(result.run_dir)
    assert len(records) == 12
    assert all(r.outcome == "scored" and r.reward == 1.0 and r.success for r in records)
    assert result.summary.mean_reward == 1.0
    assert result.summary.pass_at_k == {"pass@1": 1.0}
    manifest = read_manifest(result.run_dir)
    assert manifest.env is not None and manifest.env.kind == "builtin"
    assert manifest.env.metadata and manifest.env.metadata.get("name")
    assert manifest.taskset.fingerprint and manifest.split == "test"
    assert [p.name for p in manifest.rewards] == ["env"]
    if name == "gridworld":
        assert max(r.num_steps for r in records) > 1
        assert all(r.terminated and not r.truncated for r in records)


def test_same_seed_and_scripted_policy_give_identical_records(tmp_path: Path) -> None:
    config = EvalConfig(
        model="scripted/random", taskset="gridworld", limit=6, concurrency=3, seed=11, max_steps=8
    )
    first = sorted(
        read_results(evaluate(config, output_dir=tmp_path / "a").run_dir), key=lambda r: r.key()
    )
    second = sorted(
        read_results(evaluate(config, output_dir=tmp_path / "b").run_dir), key=lambda r: r.key()
    )
    assert [stable(r) for r in first] == [stable(r) for r in second]
    other = EvalConfig(**{**config.model_dump(), "seed": 12})
    third = sorted(
        read_results(evaluate(other, output_dir=tmp_path / "c").run_dir), key=lambda r: r.key()
    )
    assert [r.steps for r in third] != [r.steps for r in first]


def test_samples_give_pass_at_k(tmp_path: Path) -> None:
    result = evaluate(
        EvalConfig(model="scripted/oracle", taskset="arith", limit=3, samples=4),
        output_dir=tmp_path,
    )
    assert result.summary.n_episodes == 12
    assert sorted({r.sample for r in read_results(result.run_dir)}) == [0, 1, 2, 3]
    assert set(result.summary.pass_at_k) == {"pass@1", "pass@2", "pass@4"}


def test_capacity_is_back_pressure_not_failure(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 12)

    async def slow_step(session, data):
        await asyncio.sleep(0.05)
        return observation({}, 1.0, True)

    with FakeEnv(capacity=2, on_step=slow_step) as env:
        result = evaluate(
            EvalConfig(model="scripted/oracle", taskset=str(taskset), env=env.url, concurrency=6),
            output_dir=tmp_path,
        )
        assert env.max_active <= 2
    records = read_results(result.run_dir)
    assert len(records) == 12 and all(r.outcome == "scored" for r in records)
    assert all(r.attempts == 1 for r in records)


def test_capacity_that_comes_back_is_used_again(tmp_path: Path) -> None:
    """A shared server full at first frees up: the learnt limit is probed upward again."""
    from taskhub.env import CAPACITY_PROBE_EVERY

    taskset = write_taskset(tmp_path / "ts", 5 * CAPACITY_PROBE_EVERY)

    async def slow_step(session, data):
        await asyncio.sleep(0.01)
        env.capacity = 3  # the other clients left
        return observation({}, 1.0, True)

    with FakeEnv(capacity=1, on_step=slow_step) as env:
        result = evaluate(
            EvalConfig(model="scripted/oracle", taskset=str(taskset), env=env.url, concurrency=6),
            output_dir=tmp_path,
        )
        assert env.max_active == 3  # grew back from 1, and never past what the server took
    records = read_results(result.run_dir)
    assert len(records) == 5 * CAPACITY_PROBE_EVERY
    assert all(r.outcome == "scored" and r.attempts == 1 for r in records)


def test_real_openenv_capacity_limit_is_respected(tmp_path: Path) -> None:
    server = launch_server(builtin_envs()["arith"], max_sessions=2, log_dir=tmp_path / "logs")
    try:
        asyncio.run(_healthy(server))
        result = evaluate(
            EvalConfig(
                model="scripted/oracle", taskset="arith", env=server.url, limit=16, concurrency=8
            ),
            output_dir=tmp_path,
        )
    finally:
        server.stop()
    records = read_results(result.run_dir)
    assert len(records) == 16 and all(r.outcome == "scored" and r.reward == 1.0 for r in records)


async def _healthy(server) -> None:
    async with httpx.AsyncClient() as http:
        await wait_healthy(http, server.url, server=server)


def test_infra_errors_are_retried_then_recorded_without_stopping_the_run(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 6)
    failures = {"t001": 1, "t002": 99}  # t001 recovers after one failure, t002 never does

    def step(session, data):
        task = f"t{session.target:03d}"
        if failures.get(task, 0) > 0:
            failures[task] -= 1
            return CLOSE
        return observation({}, 1.0, True)

    with FakeEnv(on_step=step) as env:
        result = evaluate(
            EvalConfig(model="scripted/oracle", taskset=str(taskset), env=env.url, max_retries=2),
            output_dir=tmp_path,
        )
    by_id = {r.task_id: r for r in read_results(result.run_dir)}
    assert result.manifest.status == "completed" and len(by_id) == 6
    assert by_id["t001"].outcome == "scored" and by_id["t001"].attempts == 2
    assert by_id["t002"].outcome == "infra_error" and by_id["t002"].attempts == 3
    assert by_id["t002"].error is not None and by_id["t002"].error.type == "EnvClosedError"
    assert by_id["t002"].reward is None
    assert result.summary.outcomes["infra_error"] == 1
    assert result.summary.n_rewarded == 5


def test_unparseable_replies_are_agent_errors_with_the_correction_shown(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 2)
    schema = {
        "type": "object",
        "properties": {
            "move": {"type": "string", "enum": ["up", "down"]},
            "speed": {"type": "integer"},
        },
        "required": ["move", "speed"],
    }
    with (
        ModelServer({"m": ModelScript(reply="I don't know")}) as model,
        FakeEnv(action_schema=schema) as env,
    ):
        result = evaluate(
            EvalConfig(
                model="openai/m",
                base_url=model.base_url,
                taskset=str(taskset),
                env=env.url,
                format_retries=2,
            ),
            output_dir=tmp_path,
        )
    records = read_results(result.run_dir)
    assert all(r.outcome == "agent_error" for r in records)
    record = records[0]
    assert record.error is not None and record.error.type == "AgentFormatError"
    assert record.reward == 0.0  # the model's failure counts, with what it earned
    assert record.usage.calls == 3 and record.usage.prompt_tokens == 33
    corrections = [m.content for m in record.messages if "could not be used" in m.content]
    assert len(corrections) == 2
    assert result.summary.outcomes["agent_error"] == 2 and result.summary.mean_reward == 0.0


def test_openai_backend_end_to_end_records_usage_and_sampling(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 3)
    with (
        ModelServer({"m": ModelScript(reply=lambda body: "1")}, api_key="sk-test") as model,
        FakeEnv() as env,
    ):
        result = evaluate(
            EvalConfig(
                model="openai/m",
                base_url=model.base_url,
                api_key="sk-test",
                taskset=str(taskset),
                env=env.url,
                sampling={"temperature": 0.7, "max_tokens": 12, "stop": ["\n"]},
            ),
            output_dir=tmp_path,
        )
        body = model.requests[0]["body"]
    by_id = {r.task_id: r for r in read_results(result.run_dir)}
    assert by_id["t001"].reward == 1.0 and by_id["t000"].reward == 0.0
    assert body["temperature"] == 0.7 and body["max_tokens"] == 12 and body["stop"] == ["\n"]
    assert isinstance(body["seed"], int)
    assert body["messages"][0]["role"] == "system"
    assert by_id["t001"].usage.completion_tokens == 3
    text = (result.run_dir / "run.json").read_text()
    assert (
        "sk-test" not in text and "sk-test" not in (result.run_dir / "episodes.jsonl").read_text()
    )


def test_bad_credentials_stop_the_run_and_keep_it_resumable(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 4)
    with ModelServer(api_key="right") as model, FakeEnv() as env:
        config = EvalConfig(
            model="openai/m",
            base_url=model.base_url,
            api_key="wrong",
            taskset=str(taskset),
            env=env.url,
            concurrency=1,
        )
        with pytest.raises(ModelAuthError, match="API key is missing or wrong"):
            evaluate(config, run_dir=tmp_path / "run")
        assert read_manifest(tmp_path / "run").status == "failed"
        finished = resume(tmp_path / "run", api_key="right")
    assert finished.manifest.status == "completed"
    assert len(read_results(tmp_path / "run")) == 4


def test_fail_fast_stops_at_the_first_unscored_episode(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 20)
    with FakeEnv(on_step=lambda s, d: CLOSE) as env:
        result = evaluate(
            EvalConfig(
                model="scripted/oracle",
                taskset=str(taskset),
                env=env.url,
                fail_fast=True,
                max_retries=0,
                concurrency=1,
            ),
            output_dir=tmp_path,
        )
    assert result.manifest.status == "failed"
    assert len(read_results(result.run_dir)) == 1


def test_bad_configuration_fails_before_any_episode(tmp_path: Path) -> None:
    with pytest.raises(
        UnknownPluginError, match=re.escape("unknown reward 'evn'. Did you mean 'env'?")
    ):
        evaluate(
            EvalConfig(model="scripted/oracle", taskset="arith", rewards=["evn"]),
            output_dir=tmp_path,
        )
    with pytest.raises(ConfigError, match="needs a base URL"):
        evaluate(EvalConfig(model="openai/gpt-4o-mini", taskset="arith"), output_dir=tmp_path)
    with pytest.raises(UnknownPluginError, match="unknown model 'nope'"):
        evaluate(EvalConfig(model="nope/x", taskset="arith"), output_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_existing_run_dir_is_not_overwritten(tmp_path: Path) -> None:
    config = EvalConfig(model="scripted/oracle", taskset="arith", limit=1)
    evaluate(config, run_dir=tmp_path / "run")
    with pytest.raises(ResultsError, match="already holds a run; use `taskhub eval --resume"):
        evaluate(config, run_dir=tmp_path / "run")


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "taskhub._cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


def _wait_for_records(path: Path, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {n} records")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["sigkill", "ctrl-c"])
def test_interrupted_run_resumes_to_the_same_episode_set(tmp_path: Path, sig: int) -> None:
    taskset = write_taskset(tmp_path / "ts", 24)

    async def slow_step(session, data):
        await asyncio.sleep(0.15)
        return observation({}, 1.0 if str(data.get("answer")) == str(session.target) else 0.0, True)

    with FakeEnv(on_step=slow_step) as env:
        args = [
            "eval",
            "scripted/oracle",
            env.url,
            str(taskset),
            "--concurrency",
            "2",
            "--samples",
            "2",
            "--no-progress",
        ]
        run_dir = tmp_path / "run"
        proc = _cli(*args, "--run-dir", str(run_dir))
        _wait_for_records(run_dir / "episodes.jsonl", 6)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        before = read_results(run_dir)
        assert 6 <= len(before) < 48
        if sig == signal.SIGINT:
            assert proc.returncode == 130, err
            assert b"--resume" in err
            assert read_manifest(run_dir).status == "interrupted"
        resumed = _cli("eval", "--resume", str(run_dir), "--no-progress")
        out, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err.decode()
        full = _cli(*args, "--run-dir", str(tmp_path / "full"))
        full.communicate(timeout=120)
    after = read_results(run_dir)
    keys = [r.key() for r in after]
    assert len(keys) == len(set(keys)) == 48  # nothing repeated, nothing lost
    reference = read_results(tmp_path / "full")
    assert sorted(keys) == sorted(r.key() for r in reference)
    assert sorted((r.key(), r.reward) for r in after) == sorted(
        (r.key(), r.reward) for r in reference
    )
    manifest = read_manifest(run_dir)
    assert manifest.status == "completed" and len(manifest.sessions) == 2


def test_launched_env_stops_when_the_runner_is_killed(tmp_path: Path) -> None:
    proc = _cli(
        "eval",
        "scripted/oracle",
        "gridworld",
        "gridworld",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-progress",
        "--concurrency",
        "1",
    )
    _wait_for_records(tmp_path / "run" / "episodes.jsonl", 1, timeout=120)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    pids = [int(p) for p in children.stdout.split()]
    assert pids, "the env server should be a child of the runner"
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_replicas_spread_episodes_over_launched_servers(tmp_path: Path) -> None:
    result = evaluate(
        EvalConfig(model="scripted/oracle", taskset="arith", limit=12, concurrency=4, replicas=2),
        output_dir=tmp_path,
    )
    assert result.manifest.env is not None and len(result.manifest.env.urls) == 2
    assert len({u for u in result.manifest.env.urls}) == 2
    assert result.summary.mean_reward == 1.0 and result.summary.n_episodes == 12
    logs = sorted((result.run_dir / "env-logs").glob("*.log"))
    assert len(logs) == 2


def test_env_folder_on_disk_is_launched(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "my_env"
    shutil.copytree(
        builtin_envs()["gridworld"], folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    result = evaluate(
        EvalConfig(model="scripted/oracle", taskset="gridworld", env=str(folder), limit=3),
        output_dir=tmp_path / "runs",
    )
    assert result.manifest.env is not None and result.manifest.env.kind == "folder"
    assert result.manifest.env.path == str(folder)
    assert result.summary.mean_reward == 1.0


def test_http_only_env_runs_one_episode_at_a_time(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 5)
    with FakeEnv(ws=False) as env:
        result = evaluate(
            EvalConfig(model="scripted/oracle", taskset=str(taskset), env=env.url, concurrency=4),
            output_dir=tmp_path,
        )
    assert result.manifest.env is not None and result.manifest.env.transport == "http"
    assert result.summary.mean_reward == 1.0 and result.summary.n_episodes == 5


def test_hanging_env_is_an_infra_error_after_retries(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 2)

    def step(session, data):
        return None if session.target == 1 else observation({}, 1.0, True)

    with FakeEnv(on_step=step) as env:
        result = evaluate(
            EvalConfig(
                model="scripted/oracle",
                taskset=str(taskset),
                env=env.url,
                step_timeout_s=0.3,
                max_retries=1,
            ),
            output_dir=tmp_path,
        )
    by_id = {r.task_id: r for r in read_results(result.run_dir)}
    assert by_id["t000"].outcome == "scored"
    assert by_id["t001"].outcome == "infra_error" and by_id["t001"].attempts == 2
    assert by_id["t001"].error is not None and by_id["t001"].error.type == "EnvTimeout"
    assert by_id["t001"].initial_observation == {"question": "say 1", "metadata": {}}


def test_a_resume_holds_no_record_of_the_episodes_played_before(tmp_path: Path) -> None:
    """Resuming reads what the summary needs of earlier episodes, not their records: a run of a
    million episodes resumes in the memory of a few columns."""
    import tracemalloc

    from taskhub import index_results, write_manifest

    padding = "x" * 80_000  # in every observation: each record holds 160 kB of trajectory

    def big_reset(session, data):
        frame = counting_reset(session, data)
        frame["data"]["observation"]["padding"] = padding
        return frame

    def big_step(session, data):
        frame = counting_step(session, data)
        if frame["type"] == "observation":
            frame["data"]["observation"]["padding"] = padding
        return frame

    taskset = write_taskset(tmp_path / "ts", 100)
    run_dir = tmp_path / "run"
    with FakeEnv(on_reset=big_reset, on_step=big_step) as env:
        config = EvalConfig(model="scripted/oracle", taskset=str(taskset), env=env.url)
        evaluate(config, run_dir=run_dir)
        # the last episode lost, as a run stopped before it was recorded
        episodes = run_dir / "episodes.jsonl"
        lines = episodes.read_bytes().splitlines(keepends=True)
        assert len(lines) == 100 and len(lines[-1]) > 160_000
        episodes.write_bytes(b"".join(lines[:-1]))
        index_results(run_dir)  # in step with the records, as the run keeps it
        manifest = read_manifest(run_dir)
        write_manifest(run_dir, manifest.model_copy(update={"status": "interrupted"}))
        tracemalloc.start()
        try:
            result = resume(run_dir)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.summary.n_episodes == 100 and result.summary.mean_reward == 1.0
    assert [r.task_id for r in read_results(run_dir)][-1] == "t099"
    # the 99 records would take 16 MB and more (the file itself is 16 MB): 1.3 MB here
    assert peak < 8_000_000, f"the resume held {peak / 1e6:.1f} MB at its peak"
