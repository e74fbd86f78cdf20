"""Runner throughput: taskhub's evaluate vs a minimal hand-written websockets loop.

Both drive the same reference env server (launched once, on loopback) through the same
exchange per episode: open a WebSocket session, reset with the row's kwargs, step the row's
oracle actions until done, close. taskhub adds everything a real run does on top (prompt
rendering, action parsing and validation, rewards, records written to disk, progress).

    python bench/runner.py [--episodes 300] [--repeats 5] [--envs gridworld arith ledger]

``ledger`` measures tool episodes: MCP ``call_tool`` steps, listed tools offered as functions,
scripted tool calls (native) recorded with their results.

Prints episodes/s and steps/s for both at 1 and 8 concurrent sessions, and the ratio
taskhub / raw (target: >= 0.8 at both).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from taskhub import EvalConfig, Task, evaluate_async, load_taskset
from taskhub.env import builtin_envs, launch_server, wait_healthy


def oracle_actions(task: Task) -> list[dict[str, Any]]:
    if task.oracle_actions:
        return [dict(a) for a in task.oracle_actions]
    return [{"answer": str(task.answer)}]


async def raw_loop(url: str, tasks: list[Task], concurrency: int) -> tuple[float, int]:
    """The baseline: the protocol exchange and nothing else."""
    ws_url = url.replace("http://", "ws://") + "/ws"
    queue: asyncio.Queue[Task] = asyncio.Queue()
    for task in tasks:
        queue.put_nowait(task)
    steps = 0

    async def worker() -> None:
        nonlocal steps
        while not queue.empty():
            task = queue.get_nowait()
            async with connect(ws_url, compression=None, max_size=4 * 1024 * 1024) as ws:
                await ws.send(json.dumps({"type": "reset", "data": dict(task.reset)}))
                reply = json.loads(await ws.recv())
                for action in oracle_actions(task):
                    if reply["data"]["done"]:
                        break
                    await ws.send(json.dumps({"type": "step", "data": action}))
                    reply = json.loads(await ws.recv())
                    steps += 1
                await ws.send(json.dumps({"type": "close"}))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, steps


async def taskhub_run(
    url: str, taskset: str, n: int, concurrency: int, out: Path
) -> tuple[float, int]:
    config = EvalConfig(
        model="scripted/oracle",
        taskset=taskset,
        env=url,
        split="train",
        limit=n,
        concurrency=concurrency,
        max_sessions_per_env=concurrency,
    )
    started = time.perf_counter()
    result = await evaluate_async(config, output_dir=out)
    elapsed = time.perf_counter() - started
    assert result.summary.outcomes["scored"] == n, result.summary.outcomes
    assert result.summary.mean_reward == 1.0
    steps = int(round((result.summary.mean_steps or 0) * n))
    return elapsed, steps


async def bench(name: str, episodes: int, repeats: int) -> list[dict[str, Any]]:
    server = launch_server(builtin_envs()[name], max_sessions=16)
    rows = []
    try:
        async with httpx.AsyncClient() as http:
            await wait_healthy(http, server.url, server=server)
        tasks = list(load_taskset(name).tasks("train"))[:episodes]
        with tempfile.TemporaryDirectory() as tmp:
            await raw_loop(server.url, tasks[:20], 2)  # warm up both sides
            await taskhub_run(server.url, name, 20, 2, Path(tmp))
            for concurrency in (1, 8):
                raw_t, th_t = [], []
                steps = 0
                for _ in range(repeats):  # interleaved, so drift hits both alike
                    elapsed, steps = await raw_loop(server.url, tasks, concurrency)
                    raw_t.append(elapsed)
                    elapsed, _ = await taskhub_run(
                        server.url, name, len(tasks), concurrency, Path(tmp)
                    )
                    th_t.append(elapsed)
                raw, th = statistics.median(raw_t), statistics.median(th_t)
                rows.append(
                    {
                        "env": name,
                        "concurrency": concurrency,
                        "episodes": len(tasks),
                        "steps": steps,
                        "raw_eps": len(tasks) / raw,
                        "taskhub_eps": len(tasks) / th,
                        "raw_steps_s": steps / raw,
                        "taskhub_steps_s": steps / th,
                        "ratio": raw / th,
                    }
                )
    finally:
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--episodes",
        type=int,
        default=300,
        help="episodes per measurement (at most the train split: 300 arith, 200 gridworld, "
        "200 ledger)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--envs", nargs="+", default=["gridworld", "arith", "ledger"])
    args = parser.parse_args()
    rows = []
    for name in args.envs:
        rows += asyncio.run(bench(name, args.episodes, args.repeats))
    print(
        f"{'env':<10} {'conc':>4} {'episodes':>8} {'raw ep/s':>9} {'taskhub ep/s':>12} "
        f"{'raw steps/s':>11} {'taskhub steps/s':>15} {'ratio':>6}"
    )
    for r in rows:
        print(
            f"{r['env']:<10} {r['concurrency']:>4} {r['episodes']:>8} {r['raw_eps']:>9.1f} "
            f"{r['taskhub_eps']:>12.1f} {r['raw_steps_s']:>11.1f} {r['taskhub_steps_s']:>15.1f} "
            f"{r['ratio']:>6.2f}"
        )
    worst = min(r["ratio"] for r in rows)
    print(
        f"worst ratio taskhub/raw: {worst:.2f} (target >= 0.80): "
        f"{'PASS' if worst >= 0.8 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
