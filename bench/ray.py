"""Ray executor: what a second node buys, and what Ray costs, measured in one run.

Starts a simulated 2-node Ray cluster on loopback (``ray.cluster_utils.Cluster``, one CPU per
node), then measures, each figure a ratio taken in this run:

1. Scaling. An env whose every step waits 20 ms (``--steps`` steps per episode), launched by
   each node's worker from an env folder: ``--episodes`` episodes on 2 nodes of N sessions
   (``--sessions``) each against 1 node of N. Throughput is episodes over the span from the
   first episode's start to the last one's end (worker and env start left out).
   Target: >= 1.8x.
2. Overhead. The reference arith run (``scripted/oracle`` on the built-in arith env and
   taskset, 200 tasks x ``--samples``) on the 2-node cluster against a plain run in this
   process, both on this machine's cores, wall time of ``evaluate`` each (env launch and
   worker start included; cluster start not). Target: <= 1.3x. Each run's time is split in
   three parts read off its records: start (``evaluate`` called to the first episode's
   start: env launch, and on Ray the worker processes too), the episodes' span (first start
   to last end) and stop (last end to ``evaluate``'s return: teardown). The machine's load
   average is printed beside the ratio: on a shared machine it moves the start-up most.
3. Cluster start, reported apart (seconds to start both nodes and connect).

    python bench/ray.py [--episodes 160] [--sessions 4] [--steps 5] [--samples 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as `python bench/ray.py`, this file's folder comes first on sys.path, and this file
# would be imported as `ray`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

from taskhub import EvalConfig, RayExecutor, evaluate, read_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = """
import asyncio

from server.fake import FakeEnv, observation

STEPS = {steps}


async def step(session, data):
    await asyncio.sleep(0.02)
    session.step_count += 1
    return observation({{"step": session.step_count}}, 1.0, session.step_count >= STEPS)


app = FakeEnv(on_step=step).app
"""


def slow_env(folder: Path, steps: int) -> Path:
    """An env folder served by tests/servers.py's FakeEnv, every step waiting 20 ms."""
    (folder / "server").mkdir(parents=True)
    (folder / "openenv.yaml").write_text(
        "spec_version: 1\nname: slow\ntype: space\nruntime: fastapi\napp: server.app:app\n"
    )
    (folder / "server" / "__init__.py").write_text("")
    shutil.copy(ROOT / "tests" / "servers.py", folder / "server" / "fake.py")
    (folder / "server" / "app.py").write_text(APP.format(steps=steps))
    return folder


def span(run_dir: Path) -> tuple[float, float]:
    """The first episode's start and the last one's end (seconds since the epoch)."""
    records = read_results(run_dir)
    start = min(r.started_at.timestamp() for r in records)
    end = max(r.started_at.timestamp() + r.duration_s for r in records)
    return start, end


def span_rate(run_dir: Path) -> float:
    """Episodes per second between the first episode's start and the last one's end."""
    start, end = span(run_dir)
    return len(read_results(run_dir)) / (end - start)


def timed_parts(arith: EvalConfig, output_dir: Path, **kwargs: Any) -> tuple[float, ...]:
    """Wall time of one ``evaluate``, then its start, episodes' span and stop."""
    before = time.time()
    run = evaluate(arith, output_dir=output_dir, **kwargs)
    after = time.time()
    first, last = span(run.run_dir)
    return after - before, first - before, last - first, after - last


def describe(parts: tuple[float, ...]) -> str:
    """``start S + episodes E + stop T`` of one run's ``timed_parts``."""
    return f"start {parts[1]:.2f} + episodes {parts[2]:.2f} + stop {parts[3]:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix="taskhub-bench-ray-"))
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        cluster_start = time.perf_counter() - started

        env = slow_env(work / "slow", args.steps)
        tasks = work / "tasks.jsonl"
        tasks.write_text(
            "".join(f'{{"task_id": "t{i:05d}", "answer": "x"}}\n' for i in range(args.episodes))
        )
        slow = EvalConfig(
            model="scripted/oracle",
            taskset=str(tasks),
            env=str(env),
            concurrency=args.sessions,
            max_sessions_per_env=args.sessions,
            max_steps=args.steps,
        )
        one, two = [], []
        for _ in range(args.repeats):  # interleaved, so that load drifts hit both alike
            run = evaluate(slow, output_dir=work / "runs", executor=RayExecutor(max_nodes=1))
            one.append(span_rate(run.run_dir))
            run = evaluate(slow, output_dir=work / "runs", executor=RayExecutor())
            two.append(span_rate(run.run_dir))

        arith = EvalConfig(
            model="scripted/oracle", taskset="arith", samples=args.samples, concurrency=4
        )
        plain: list[tuple[float, ...]] = []
        on_ray: list[tuple[float, ...]] = []
        load_before = os.getloadavg()[0]
        for _ in range(args.repeats):
            plain.append(timed_parts(arith, work / "runs"))
            on_ray.append(timed_parts(arith, work / "runs", executor=RayExecutor()))
        load_after = os.getloadavg()[0]
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)

    best_one, best_two = max(one), max(two)
    print(f"cluster start (2 nodes, connected): {cluster_start:.1f} s")
    print(
        f"scaling, {args.episodes} episodes x {args.steps} steps of 20 ms, {args.sessions} "
        f"sessions per node: 1 node {best_one:.1f} ep/s, 2 nodes {best_two:.1f} ep/s "
        f"-> {best_two / best_one:.2f}x (target >= 1.8); runs: "
        f"1 node {[round(x, 1) for x in one]}, 2 nodes {[round(x, 1) for x in two]}"
    )
    episodes = 200 * args.samples
    best_plain, best_ray = min(plain), min(on_ray)
    walls_plain, walls_ray = [p[0] for p in plain], [p[0] for p in on_ray]
    print(
        f"overhead, arith {episodes} episodes: plain {best_plain[0]:.1f} s, Ray 2 nodes "
        f"{best_ray[0]:.1f} s -> {best_ray[0] / best_plain[0]:.2f}x (target <= 1.3; load "
        f"average {load_before:.1f} -> {load_after:.1f}); runs: plain "
        f"{[round(x, 1) for x in walls_plain]}, Ray {[round(x, 1) for x in walls_ray]}; "
        f"median ratio {statistics.median(walls_ray) / statistics.median(walls_plain):.2f}"
    )
    print(f"  plain (fastest run): {describe(best_plain)}")
    print(
        f"  Ray (fastest run):   {describe(best_ray)}; start is the worker processes and one "
        "env launch per node, stop their teardown"
    )


if __name__ == "__main__":
    main()
