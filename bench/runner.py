"""Runner throughput: taskhub's evaluate against OpenEnv's own client and a raw websockets loop.

Every contender drives the same reference env server (launched once, on loopback) through the
same exchange per episode: reset with the row's kwargs, step the row's oracle actions until
done. The baselines keep one WebSocket session per worker and reset it again for each episode,
as OpenEnv's client does:

- ``raw``: a hand-written ``websockets`` loop, the protocol exchange and nothing else;
- ``openenv``: OpenEnv's own async client (``GenericEnvClient``), one per worker;
- ``raw_fresh``: the raw loop opening a new connection per episode (for reference).

``ledger`` measures tool episodes: MCP ``call_tool`` steps, listed tools offered as functions,
scripted tool calls (native) recorded with their results.

taskhub adds everything a real run does on top (taskset loading, prompt rendering, action
parsing and validation, rewards, records written to disk). Measurements are interleaved, so
drift of a shared machine hits every contender alike, and each figure is the median of the
repeats.

    python bench/runner.py [--episodes 300] [--samples 1] [--repeats 5]
        [--envs gridworld arith ledger]

Prints episodes/s of each at 1 and 8 concurrent sessions, and the ratios taskhub / openenv
(target >= 1.0) and taskhub / raw (target >= 0.9) on gridworld and arith, the reference envs
the targets were set on (ledger, the tool env, is judged the same way beside them): of the
medians, which the targets are judged on, and the lowest and highest of the repeats' own
ratios (how much the machine moved); under each row, the CPU milliseconds per episode of this
process (the client) and of the env server, medians of the repeats (at 1 session an episode
lasts about the sum of both).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from overlap import process_cpu  # bench/ is on the path of a bench script
from websockets.asyncio.client import connect

from taskhub import EvalConfig, Task, evaluate_async, load_taskset
from taskhub.env import builtin_envs, launch_server, wait_healthy

TARGET_OPENENV = 1.0
TARGET_RAW = 0.9
#: The reference envs the targets were set on; ledger (a tool env) is measured beside them.
TARGET_ENVS = ("gridworld", "arith")


def oracle_actions(task: Task) -> list[dict[str, Any]]:
    if task.oracle_actions:
        return [dict(a) for a in task.oracle_actions]
    return [{"answer": str(task.answer)}]


def _queue(tasks: list[Task], samples: int) -> asyncio.Queue[Task]:
    queue: asyncio.Queue[Task] = asyncio.Queue()
    for task in tasks:
        for _ in range(samples):
            queue.put_nowait(task)
    return queue


async def _timed(workers: int, worker: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - started


async def _raw_episode(ws: Any, task: Task) -> None:
    await ws.send(json.dumps({"type": "reset", "data": dict(task.reset)}))
    reply = json.loads(await ws.recv())
    for action in oracle_actions(task):
        if reply["data"]["done"]:
            break
        await ws.send(json.dumps({"type": "step", "data": action}))
        reply = json.loads(await ws.recv())
    assert reply["data"]["done"] and reply["data"]["reward"] == 1.0, reply


async def raw_loop(url: str, tasks: list[Task], samples: int, concurrency: int) -> float:
    """One WebSocket session per worker, reset again for each episode."""
    ws_url = url.replace("http://", "ws://") + "/ws"
    queue = _queue(tasks, samples)

    async def worker() -> None:
        async with connect(ws_url, compression=None, max_size=4 * 1024 * 1024) as ws:
            while not queue.empty():
                await _raw_episode(ws, queue.get_nowait())
            await ws.send(json.dumps({"type": "close"}))

    return await _timed(concurrency, worker)


async def raw_fresh_loop(url: str, tasks: list[Task], samples: int, concurrency: int) -> float:
    """A new WebSocket session for every episode."""
    ws_url = url.replace("http://", "ws://") + "/ws"
    queue = _queue(tasks, samples)

    async def worker() -> None:
        while not queue.empty():
            task = queue.get_nowait()
            async with connect(ws_url, compression=None, max_size=4 * 1024 * 1024) as ws:
                await _raw_episode(ws, task)
                await ws.send(json.dumps({"type": "close"}))

    return await _timed(concurrency, worker)


async def openenv_loop(url: str, tasks: list[Task], samples: int, concurrency: int) -> float:
    """OpenEnv's own async client, one session per worker, reset again for each episode."""
    from openenv.core.generic_client import GenericEnvClient

    queue = _queue(tasks, samples)

    async def worker() -> None:
        async with GenericEnvClient(base_url=url) as env:
            while not queue.empty():
                task = queue.get_nowait()
                result = await env.reset(**task.reset)
                for action in oracle_actions(task):
                    if result.done:
                        break
                    result = await env.step(action)
                assert result.done and result.reward == 1.0, result

    return await _timed(concurrency, worker)


async def taskhub_run(
    url: str, taskset: str, n: int, samples: int, concurrency: int, out: Path
) -> float:
    config = EvalConfig(
        model="scripted/oracle",
        taskset=taskset,
        env=url,
        split="train",
        limit=n,
        samples=samples,
        concurrency=concurrency,
        max_sessions_per_env=concurrency,
    )
    started = time.perf_counter()
    result = await evaluate_async(config, output_dir=out)
    elapsed = time.perf_counter() - started
    assert result.summary.outcomes["scored"] == n * samples, result.summary.outcomes
    assert result.summary.mean_reward == 1.0
    return elapsed


CONTENDERS = ("taskhub", "openenv", "raw", "raw_fresh")


async def bench(
    name: str, n: int, samples: int, repeats: int, report: Callable[[dict[str, Any]], None]
) -> list[dict[str, Any]]:
    server = launch_server(builtin_envs()[name], max_sessions=16)
    rows = []
    try:
        async with httpx.AsyncClient() as http:
            await wait_healthy(http, server.url, server=server)
        tasks = list(load_taskset(name).tasks("train"))[:n]
        episodes = len(tasks) * samples
        steps = sum(len(oracle_actions(t)) for t in tasks) * samples
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            runs: dict[str, Callable[[int], Awaitable[float]]] = {
                "taskhub": lambda c: taskhub_run(server.url, name, len(tasks), samples, c, out),
                "openenv": lambda c: openenv_loop(server.url, tasks, samples, c),
                "raw": lambda c: raw_loop(server.url, tasks, samples, c),
                "raw_fresh": lambda c: raw_fresh_loop(server.url, tasks, samples, c),
            }
            for run in runs.values():  # warm up every side
                await run(2)
            for concurrency in (1, 8):
                times: dict[str, list[float]] = {k: [] for k in runs}
                # CPU seconds of this process (the client) and of the env server, per run
                cpu: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
                for _ in range(repeats):  # interleaved, so drift hits every contender alike
                    for key, run in runs.items():
                        client, env = time.process_time(), process_cpu(server.process.pid)
                        times[key].append(await run(concurrency))
                        cpu[key].append(
                            (
                                time.process_time() - client,
                                process_cpu(server.process.pid) - env,
                            )
                        )
                median = {k: statistics.median(v) for k, v in times.items()}
                row: dict[str, Any] = {
                    "env": name,
                    "concurrency": concurrency,
                    "episodes": episodes,
                    "steps": steps,
                }
                for key in runs:
                    row[f"{key}_eps"] = episodes / median[key]
                    for side, at in (("client", 0), ("server", 1)):
                        row[f"{key}_{side}_ms"] = (
                            statistics.median(c[at] for c in cpu[key]) / episodes * 1e3
                        )
                row["vs_openenv"] = median["openenv"] / median["taskhub"]
                row["vs_raw"] = median["raw"] / median["taskhub"]
                # each repeat's own ratio (its contenders ran back to back): how far one
                # repeat strays shows how much the machine moved under the medians
                for base in ("openenv", "raw"):
                    paired = [b / t for b, t in zip(times[base], times["taskhub"], strict=True)]
                    row[f"spread_{base}"] = (min(paired), max(paired))
                report(row)
                rows.append(row)
    finally:
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--episodes",
        type=int,
        default=300,
        help="train tasks per measurement (at most the train split: 300 arith, 200 gridworld, "
        "200 ledger)",
    )
    parser.add_argument(
        "--samples", type=int, default=1, help="episodes per task (one session plays several)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--envs", nargs="+", default=["gridworld", "arith", "ledger"])
    args = parser.parse_args()
    header = f"{'env':<10} {'conc':>4} {'episodes':>8} {'steps':>6} " + " ".join(
        f"{k + ' ep/s':>14}" for k in CONTENDERS
    )
    print(
        header + f" {'vs openenv':>10} {'vs raw':>7} {'per repeat: vs openenv':>23} {'vs raw':>10}",
        flush=True,
    )

    def report(r: dict[str, Any]) -> None:  # each row as it is measured: a long run shows progress
        spreads = " ".join(
            f"{r['spread_' + base][0]:.2f}-{r['spread_' + base][1]:.2f}".rjust(width)
            for base, width in (("openenv", 23), ("raw", 10))
        )
        print(
            f"{r['env']:<10} {r['concurrency']:>4} {r['episodes']:>8} {r['steps']:>6} "
            + " ".join(f"{r[k + '_eps']:>14.1f}" for k in CONTENDERS)
            + f" {r['vs_openenv']:>10.2f} {r['vs_raw']:>7.2f} {spreads}",
            flush=True,
        )
        print(
            f"{'':<10} {'':>4} {'CPU ms/ep':>15}: "
            + " ".join(
                f"{r[k + '_client_ms']:>5.2f} + {r[k + '_server_ms']:>5.2f}" for k in CONTENDERS
            )
            + "  (client + env server, medians)",
            flush=True,
        )

    rows = []
    for name in args.envs:
        rows += asyncio.run(bench(name, args.episodes, args.samples, args.repeats, report))
    for label, group in (
        ("the target's envs", [r for r in rows if r["env"] in TARGET_ENVS]),
        ("beside them", [r for r in rows if r["env"] not in TARGET_ENVS]),
    ):
        if not group:
            continue
        worst_openenv = min(r["vs_openenv"] for r in group)
        worst_raw = min(r["vs_raw"] for r in group)
        ok = worst_openenv >= TARGET_OPENENV and worst_raw >= TARGET_RAW
        names = ", ".join(dict.fromkeys(r["env"] for r in group))
        print(
            f"{label} ({names}): worst taskhub/openenv {worst_openenv:.2f} (target >= "
            f"{TARGET_OPENENV}), worst taskhub/raw {worst_raw:.2f} (target >= {TARGET_RAW}): "
            f"{'PASS' if ok else 'FAIL'}"
        )


if __name__ == "__main__":
    main()
