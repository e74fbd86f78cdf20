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
   worker start included; cluster start not). Target: <= 1.3x. The episodes' own span is
   printed beside it, to tell start-up from per-episode cost.
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


def span_rate(run_dir: Path) -> float:
    """Episodes per second between the first episode's start and the last one's end."""
    records = read_results(run_dir)
    start = min(r.started_at.timestamp() for r in records)
    end = max(r.started_at.timestamp() + r.duration_s for r in records)
    return len(records) / (end - start)


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
        plain, on_ray, plain_rate, ray_rate = [], [], [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            run = evaluate(arith, output_dir=work / "runs")
            plain.append(time.perf_counter() - t)
            plain_rate.append(span_rate(run.run_dir))
            t = time.perf_counter()
            run = evaluate(arith, output_dir=work / "runs", executor=RayExecutor())
            on_ray.append(time.perf_counter() - t)
            ray_rate.append(span_rate(run.run_dir))
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
    print(
        f"overhead, arith {episodes} episodes: plain {min(plain):.1f} s, Ray 2 nodes "
        f"{min(on_ray):.1f} s -> {min(on_ray) / min(plain):.2f}x (target <= 1.3); runs: "
        f"plain {[round(x, 1) for x in plain]}, Ray {[round(x, 1) for x in on_ray]}; "
        f"median ratio {statistics.median(on_ray) / statistics.median(plain):.2f}"
    )
    print(
        f"  of which episodes alone (first start to last end): plain {max(plain_rate):.1f} "
        f"ep/s, Ray {max(ray_rate):.1f} ep/s -> {max(plain_rate) / max(ray_rate):.2f}x; the "
        "rest is start-up (worker processes, one env launch per node)"
    )


if __name__ == "__main__":
    main()
