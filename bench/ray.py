"""Ray executor: what a second node buys, and what Ray costs, measured in one run.

Starts two simulated Ray clusters on loopback, one after the other (``ray.cluster_utils.Cluster``),
and measures three ratios, each between runs made here, alternated so that the machine's load
drifts hit both sides alike (the fastest run of each side is compared; the median ratio and
every run are printed too):

1. Scaling, on 2 nodes of one CPU each. An env whose every step waits 20 ms (``--steps`` steps
   per episode), launched by each node's worker from an env folder: ``--episodes`` episodes on
   2 nodes of N sessions (``--sessions``) each against 1 node of N. Throughput is episodes
   over the span from the first episode's start to the last one's end (worker and env start
   left out). Target: >= 1.8x.
2. Overhead at equal cores, on one Ray node of 2 CPUs. The reference arith run
   (``scripted/oracle`` on the built-in arith env and taskset, 200 tasks x ``--samples``,
   concurrency 4) on Ray against a plain run in this process, alternated. Both have this
   machine's 2 cores, one env server and one client process playing the episodes; Ray adds
   its worker process (its start and imports), the chunks sent to it and the records sent
   back to the one writer. Target: <= 1.3x.
3. Overhead on the 2 nodes of one CPU (printed beside it; no target). The same arith run on
   the scaling cluster: on top of 2., a second worker process and a second env server start
   on the same 2 cores, and the episodes are played by two clients and two servers.
4. Cluster starts, reported apart (seconds to start the nodes and connect): in no figure.

Each run's wall time (of ``evaluate``: env launch and worker start included) is split in three
parts read off its records: start (``evaluate`` called to the first episode's start: taskset,
env launch, and on Ray the worker processes too), the episodes' span (first start to last end)
and stop (last end to ``evaluate``'s return: teardown). A Ray run also shows when each of its
workers reached each step of its start (``WorkerInfo.phases``), in seconds from ``evaluate``'s
call: its actor ran in its process (``actor up``), it launched its env servers (``env
launched``: before it imports the runner), it had imported the runner, its env answered
(``env up``); and the sizes of the chunks it played. The CPU seconds of every process of
the run are read from /proc (sampled every 0.1 s: this process, the worker processes, the env
servers and Ray's own processes; a process that lived less than that is missed), and the
machine's load average is printed beside each run: it is a shared machine, and its load moves
the start-up most.

    python bench/ray.py [--episodes 160] [--sessions 4] [--steps 5] [--samples 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# Run as `python bench/ray.py`, this file's folder comes first on sys.path, and this file
# would be imported as `ray`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

from taskhub import EvalConfig, RayExecutor, WorkerInfo, evaluate, read_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
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


# --- CPU seconds of a run's processes -------------------------------------------------------


def _processes() -> dict[int, tuple[int, str, float, str]]:
    """Every process: pid -> (parent pid, start time, CPU seconds so far, command line)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        out[int(entry)] = (int(fields[1]), fields[19], cpu, command.decode(errors="replace"))
    return out


OTHER = "Ray's processes"


def _kind(pid: int, command: str) -> str:
    if pid == os.getpid():
        return "this process"
    if "uvicorn" in command:
        return "env servers"
    if command.startswith("ray::") and "IDLE" not in command:
        return "worker processes"
    return OTHER


class CpuMeter:
    """CPU seconds used by this process and its descendants while it runs, by kind of process.

    Every process below this one (Ray's processes, which ``Cluster`` starts as children of
    this one, the worker processes below them, the env servers) is sampled every
    ``interval`` seconds; a process counts from its first sample if it was there when the
    meter started, else from zero, to its last sample.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.first: dict[tuple[int, str], float] = {}
        self.last: dict[tuple[int, str], tuple[float, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self, initial: bool) -> None:
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, (parent, *_rest) in procs.items():
            children.setdefault(parent, []).append(pid)
        todo = [os.getpid()]
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            _parent, started, cpu, command = procs[pid]
            key = (pid, started)
            if initial:
                self.first[key] = cpu
            kind = _kind(pid, command)
            # An idle Ray worker becomes a worker process; one that exits loses its command
            # line: the kind is the most specific one seen.
            if kind == OTHER and key in self.last:
                kind = self.last[key][1]
            self.last[key] = (cpu, kind)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample(initial=False)

    def __enter__(self) -> CpuMeter:
        self._sample(initial=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(initial=False)

    def by_kind(self) -> dict[str, float]:
        """CPU seconds per kind of process over the meter's span."""
        totals: dict[str, float] = {}
        for key, (cpu, kind) in self.last.items():
            totals[kind] = totals.get(kind, 0.0) + cpu - self.first.get(key, 0.0)
        return totals


# --- one measured run -------------------------------------------------------------------------


@dataclass
class Run:
    """One ``evaluate`` of the arith run: its wall time, parts, CPU and the machine's load."""

    wall: float
    start: float
    episodes: float
    stop: float
    cpu: dict[str, float]
    load: float
    workers: list[str] = field(default_factory=list)

    def describe(self) -> str:
        cpu = ", ".join(f"{kind} {s:.2f}" for kind, s in sorted(self.cpu.items()))
        return (
            f"{self.wall:.2f} s = start {self.start:.2f} + episodes {self.episodes:.2f} + "
            f"stop {self.stop:.2f}; CPU {sum(self.cpu.values()):.2f} s ({cpu}); "
            f"load {self.load:.1f}"
        )


def timed(arith: EvalConfig, output_dir: Path, executor: RayExecutor | None = None) -> Run:
    """Run ``arith`` once: wall time, its parts, CPU seconds by process, load average."""
    load = os.getloadavg()[0]
    with CpuMeter() as meter:
        before = time.time()
        run = evaluate(arith, output_dir=output_dir, executor=executor)
        after = time.time()
    first, last = span(run.run_dir)
    workers = [] if executor is None else [describe_worker(w, before) for w in executor.workers]
    return Run(
        after - before, first - before, last - first, after - last, meter.by_kind(), load, workers
    )


def describe_worker(worker: WorkerInfo, began: float) -> str:
    """When one worker reached each step of its start (from ``began``), and its chunks."""
    steps = ", ".join(f"{name} +{at - began:.2f}" for name, at in worker.phases.items())
    return f"worker on node {worker.node_id[:8]}: {steps}; chunks {worker.chunks}"


@contextmanager
def cluster(nodes: int, cpus: int) -> Iterator[float]:
    """A simulated cluster of ``nodes`` nodes of ``cpus`` CPUs, connected; yields its start time."""
    import ray
    from ray.cluster_utils import Cluster

    started = time.perf_counter()
    simulated = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus})
    try:
        for _ in range(nodes - 1):
            simulated.add_node(num_cpus=cpus)
        simulated.wait_for_nodes()
        ray.init(address=simulated.address, log_to_driver=False)
        yield time.perf_counter() - started
    finally:
        ray.shutdown()
        simulated.shutdown()


def overhead(arith: EvalConfig, work: Path, repeats: int) -> tuple[list[Run], list[Run]]:
    """The arith run in this process and on the connected cluster, alternated."""
    plain, on_ray = [], []
    for _ in range(repeats):  # alternated, so that load drifts hit both alike
        plain.append(timed(arith, work / "runs"))
        on_ray.append(timed(arith, work / "runs", RayExecutor()))
    return plain, on_ray


def report(title: str, plain: list[Run], on_ray: list[Run], target: str) -> None:
    """Print one overhead figure: the fastest runs' ratio, every run, and the parts of each."""
    best_plain = min(plain, key=lambda r: r.wall)
    best_ray = min(on_ray, key=lambda r: r.wall)
    median_plain = statistics.median(r.wall for r in plain)
    median_ray = statistics.median(r.wall for r in on_ray)
    cpu_plain = statistics.median(sum(r.cpu.values()) for r in plain)
    cpu_ray = statistics.median(sum(r.cpu.values()) for r in on_ray)
    print(
        f"{title}: plain {best_plain.wall:.2f} s, Ray {best_ray.wall:.2f} s -> "
        f"{best_ray.wall / best_plain.wall:.2f}x ({target}); median ratio "
        f"{median_ray / median_plain:.2f}; median CPU plain {cpu_plain:.2f} s, Ray "
        f"{cpu_ray:.2f} s -> {cpu_ray / cpu_plain:.2f}x"
    )
    for name, runs in (("plain", plain), ("Ray", on_ray)):
        for i, run in enumerate(runs, 1):
            print(f"  {name} run {i}: {run.describe()}")
            for line in run.workers:
                print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="taskhub-bench-ray-"))
    arith = EvalConfig(
        model="scripted/oracle", taskset="arith", samples=args.samples, concurrency=4
    )
    try:
        with cluster(nodes=2, cpus=1) as two_nodes_start:
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
            plain_two, ray_two = overhead(arith, work, args.repeats)
        with cluster(nodes=1, cpus=2) as one_node_start:
            plain_one, ray_one = overhead(arith, work, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"cluster start, apart: 2 nodes of 1 CPU {two_nodes_start:.1f} s, "
        f"1 node of 2 CPUs {one_node_start:.1f} s"
    )
    best_one, best_two = max(one), max(two)
    print(
        f"scaling, {args.episodes} episodes x {args.steps} steps of 20 ms, {args.sessions} "
        f"sessions per node: 1 node {best_one:.1f} ep/s, 2 nodes {best_two:.1f} ep/s "
        f"-> {best_two / best_one:.2f}x (target >= 1.8); runs: "
        f"1 node {[round(x, 1) for x in one]}, 2 nodes {[round(x, 1) for x in two]}"
    )
    episodes = 200 * args.samples
    report(
        f"overhead at equal cores, arith {episodes} episodes, 1 Ray node of 2 CPUs (one worker "
        "process, one env server)",
        plain_one,
        ray_one,
        "target <= 1.3",
    )
    report(
        f"overhead on 2 Ray nodes of 1 CPU, arith {episodes} episodes (also a second worker "
        "process and env server on the same 2 cores)",
        plain_two,
        ray_two,
        "no target: beside the one above",
    )


if __name__ == "__main__":
    main()
