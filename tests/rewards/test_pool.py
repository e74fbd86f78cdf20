"""The reward process pool: results, errors, deadlines that kill hung workers, clean exits."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from taskhub.rewards import RewardPool

from taskhub import BoundReward, RewardError, RewardSpec, create, registry, score_episode
from tests.rewards import pool_jobs
from tests.rewards.episodes import episode

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not reaped by its parent yet) counts as gone
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def pool() -> Iterator[RewardPool]:
    pool = RewardPool(workers=1)
    yield pool
    pool.shutdown()


def test_results_and_errors_come_back(pool: RewardPool) -> None:
    assert pool.wait_ready(60)
    assert pool.submit(pool_jobs.echo, {"a": [1, 2]}, timeout_s=30).result(30) == {"a": [1, 2]}
    with pytest.raises(RewardError, match="ValueError: the scorer broke"):
        pool.submit(pool_jobs.boom, timeout_s=30).result(30)
    with pytest.raises(RewardError, match="could not be sent back"):
        pool.submit(pool_jobs.unpicklable_result, timeout_s=30).result(30)
    with pytest.raises(RewardError, match="cannot run in a worker process"):
        pool.submit(pool_jobs.echo, lambda: None, timeout_s=30)


def test_a_hung_call_is_killed_at_its_deadline_and_the_next_one_runs(pool: RewardPool) -> None:
    before = pool.submit(pool_jobs.pid, timeout_s=30).result(30)
    kills = pool.kills
    started = time.monotonic()
    hung = pool.submit(pool_jobs.spin, timeout_s=0.5, label="spin")
    after = pool.submit(pool_jobs.pid, timeout_s=30)  # queued behind the hung call
    with pytest.raises(RewardError, match=r"spin: it did not finish within 0.5s \(its worker"):
        hung.result(30)
    assert time.monotonic() - started < 10
    new_pid = after.result(30)
    assert new_pid != before and pool.kills == kills + 1
    assert wait_gone(before)


def test_a_worker_that_dies_fails_its_call_only(pool: RewardPool) -> None:
    dying = pool.submit(pool_jobs.crash, timeout_s=30, label="crash")
    with pytest.raises(RewardError, match=r"crash: its worker process died \(exit code 3\)"):
        dying.result(30)
    assert pool.submit(pool_jobs.echo, 7, timeout_s=30).result(30) == 7


def test_the_event_loop_keeps_running_while_a_call_hangs(pool: RewardPool) -> None:
    async def main() -> tuple[int, list[object]]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.ensure_future(ticker())
        results = await asyncio.gather(
            pool.run(pool_jobs.sleep, 0.6, timeout_s=30),
            *(pool.run(pool_jobs.echo, i, timeout_s=30) for i in range(20)),
            return_exceptions=True,
        )
        task.cancel()
        return ticks, results

    ticks, results = asyncio.run(main())
    assert results == [0.6, *range(20)]
    assert ticks >= 10  # about 30 while the worker slept


def test_shutdown_stops_the_workers_and_fails_what_is_queued() -> None:
    pool = RewardPool(workers=1)
    pid = pool.submit(pool_jobs.pid, timeout_s=30).result(30)
    running = pool.submit(pool_jobs.sleep, 30, timeout_s=60)
    queued = pool.submit(pool_jobs.echo, 1, timeout_s=60)
    pool.shutdown()
    for future in (running, queued):
        with pytest.raises(RewardError, match="shut down"):
            future.result(10)
    assert wait_gone(pid)
    with pytest.raises(RewardError, match="shut down"):
        pool.submit(pool_jobs.echo, 1, timeout_s=1)


@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_workers_end_with_their_process(ending: str, tmp_path: Path) -> None:
    # a script without a __main__ guard: workers must not re-run it
    script = tmp_path / "user_script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal, sys
            sys.path.insert(0, {str(ROOT)!r})
            from taskhub.rewards import RewardPool
            from tests.rewards import pool_jobs
            pool = RewardPool(workers=1)
            print(pool.submit(pool_jobs.pid, timeout_s=60).result(60), flush=True)
            pool.submit(pool_jobs.spin, timeout_s=600)  # busy when its owner goes
            if {ending!r} == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    worker = int(out.stdout.split()[0])
    assert wait_gone(worker, timeout=15), out.stderr


def test_math_verify_on_a_pathological_answer_is_a_reward_error_not_a_hang() -> None:
    # a deadline the first call (sympy imported in a fresh worker) meets on a loaded machine
    fn, plugin = create("reward", "math_verify", timeout_s=5.0)
    bound = BoundReward(
        RewardSpec.parse("math_verify"), fn, plugin, registry.lookup("reward", "math_verify")
    )

    async def main() -> list[tuple[object, float | None, str | None]]:
        records = [
            episode("$9^{9^{9^{9}}}$", "5", task_id="tower"),
            episode("5", "5", task_id="fine"),
        ]
        return list(await asyncio.gather(*(score_episode(r, [bound]) for r in records)))

    started = time.monotonic()
    (_, tower_total, tower_error), (_, fine_total, fine_error) = asyncio.run(main())
    assert time.monotonic() - started < 120  # a hang, not a slow machine
    assert tower_total is None and tower_error is not None
    assert "reward 'math_verify' failed on task 'tower'" in tower_error
    assert "did not finish within 5s (its worker process was killed)" in tower_error
    assert fine_total == 1.0 and fine_error is None


def test_workers_that_cannot_start_fail_the_calls_instead_of_hanging() -> None:
    pool = RewardPool(workers=1, preload=["tests.rewards.exits_on_import"])
    try:
        future = pool.submit(pool_jobs.echo, 1, timeout_s=5)
        with pytest.raises(RewardError, match=r"cannot start \(exit code 5"):
            future.result(60)
        with pytest.raises(RewardError, match="cannot start"):
            pool.submit(pool_jobs.echo, 1, timeout_s=5)
    finally:
        pool.shutdown()


SHADOWED = """
import math, sys
from taskhub import RewardError
from taskhub.rewards import RewardPool
{shadow}
pool = RewardPool(workers=2)
try:
    print("result", pool.submit(math.factorial, 5, timeout_s=5).result(60))
except RewardError as exc:
    print("error", exc)
pool.shutdown()
"""


def shadowed_run(tmp_path: Path, *, shadow_path: bool) -> dict[str, str]:
    """Run a pool where an old or partial source tree lurks: its ``taskhub/__init__.py``
    imports a module the tree lacks."""
    tree = tmp_path / "checkout"
    (tree / "taskhub").mkdir(parents=True)
    (tree / "taskhub" / "__init__.py").write_text("from taskhub._gone import everything\n")
    # either on the path the workers inherit, or as the current directory
    shadow = f"sys.path.insert(0, {str(tree)!r})" if shadow_path else ""
    script = tmp_path / "script.py"
    script.write_text(SHADOWED.format(shadow=shadow))
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tree, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


def test_workers_that_cannot_import_taskhub_fail_the_pool_at_once_with_their_error(
    tmp_path: Path,
) -> None:
    got = shadowed_run(tmp_path, shadow_path=True)
    assert "result" not in got  # and not a TimeoutError after 60 s: it did not hang
    # the worker's own error, naming what shadows the install
    assert re.fullmatch(
        r"reward: reward worker processes cannot start \((ModuleNotFound|Import)Error: .*\)",
        got["error"],
    )
    assert "No module named 'taskhub._gone'" in got["error"]


def test_a_source_tree_in_the_current_directory_does_not_shadow_the_workers_install(
    tmp_path: Path,
) -> None:
    assert shadowed_run(tmp_path, shadow_path=False)["result"] == "120"


def test_calls_that_come_one_by_one_while_batches_run_gather_into_fuller_batches() -> None:
    from taskhub.rewards._batch import MicroBatcher

    async def main(max_running: int | None) -> list[list[int]]:
        batches: list[list[int]] = []
        release = asyncio.Event()

        async def handler(items: list[int]) -> list[int]:
            batches.append(items)
            await release.wait()
            return [item * 10 for item in items]

        batcher = MicroBatcher(handler, 4, max_running=max_running)
        calls = []
        for item in range(7):  # one call per turn of the loop, as episodes end in a rescore
            calls.append(asyncio.ensure_future(batcher(item)))
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        held = [list(b) for b in batches]
        release.set()
        assert await asyncio.gather(*calls) == [item * 10 for item in range(7)]
        return [held, batches]

    # one batch running holds the others back: they gather (4 fill a batch, which goes at once)
    held, batches = asyncio.run(main(1))
    assert held == [[0], [1, 2, 3, 4]]
    assert batches == [[0], [1, 2, 3, 4], [5, 6]]
    # without a bound, each turn's call is a batch of its own
    held, batches = asyncio.run(main(None))
    assert batches == [[item] for item in range(7)]


def test_a_rescore_sized_burst_reaches_the_pool_in_few_jobs() -> None:
    """Calls arriving one by one while the pool works on earlier ones share its jobs."""
    from taskhub.rewards._batch import RUNNING_PER_WORKER, PoolCalls

    class Counting(RewardPool):
        jobs = 0

        def submit(self, fn, /, *args, timeout_s, label=""):  # type: ignore[no-untyped-def]
            Counting.jobs += 1
            return super().submit(fn, *args, timeout_s=timeout_s, label=label)

    pool = Counting(workers=1)
    try:
        assert pool.wait_ready(60)
        calls = PoolCalls(pool, pool_jobs.sleep, timeout_s=30, label="sleep")

        async def main() -> list[float]:
            started = []
            for _ in range(40):
                started.append(asyncio.ensure_future(calls(0.01)))
                await asyncio.sleep(0)
            return await asyncio.gather(*started)

        assert asyncio.run(main()) == [0.01] * 40
        # the first batches go alone; the calls that come while they run fill batches of 8
        assert Counting.jobs <= RUNNING_PER_WORKER + 40 // 8 + 1, Counting.jobs
    finally:
        pool.shutdown()
