"""Overlap: with a model that takes 50 ms a reply, 8 sessions should run 64 episodes ~8x faster.

A loopback OpenAI-compatible model server (its own process) answers every chat completion after
``--delay-ms``; taskhub's ``openai/`` backend talks to it over HTTP as to any remote model.
The reference env server is launched once. The same 64 arith episodes (one model call each)
run at 1 and at 8 concurrent sessions, interleaved, and the bench prints the median wall time
of each, the speed-up (target >= 7x), and where the time went: the run's fixed cost (taskset,
env probing, manifest; measured by a 1-episode run), the per-episode time beyond the model's,
and the CPU each process spent per episode: taskhub's (this process), the env server's and the
model server's (read from /proc). All three share the machine's cores: at 8 sessions taskhub's
CPU per episode, times 8, is what each round of episodes adds to the model's reply time.

A raw loop plays the same episodes against the same servers in the same run, interleaved: the
same exchange (a session per worker, a completion per episode, the step with the next reset
behind it) and nothing else. Its speed-up is what these cores allow any client; the bench
prints taskhub's against it. The model server runs on asyncio's loop and h11 whatever is
installed, so its CPU per reply does not change with the environment (uvloop, httptools).

    python bench/overlap.py [--episodes 64] [--delay-ms 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
from websockets.asyncio.client import connect

from taskhub import EvalConfig, Task, evaluate_async, load_taskset
from taskhub.env import builtin_envs, launch_server, wait_healthy
from taskhub.env._spawn import free_port

TARGET = 7.0


def serve_model(port: int, delay_s: float) -> None:
    """Run the loopback model: every completion is ``\\boxed{0}``, sent after ``delay_s``."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def complete(request: Request) -> Response:
        body = await request.json()
        await asyncio.sleep(delay_s)
        return JSONResponse(
            {
                "id": "bench",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "\\boxed{0}"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44},
            }
        )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", complete, methods=["POST"]),
            Route("/health", health),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio", http="h11")


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used, from /proc; NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(
    env_url: str,
    model_url: str,
    episodes: int,
    concurrency: int,
    out: Path,
    servers: tuple[int, int] = (0, 0),
) -> tuple[float, float, float, float]:
    """Wall and CPU seconds of one run: this process's (taskhub), then the env server's and the
    model server's (``servers``: their pids)."""
    config = EvalConfig(
        model="openai/loopback",
        base_url=model_url,
        api_key="unused",
        taskset="arith",
        env=env_url,
        split="train",
        limit=episodes,
        concurrency=concurrency,
        max_sessions_per_env=concurrency,
    )
    before = [process_cpu(pid) for pid in servers]
    started, cpu = time.perf_counter(), time.process_time()
    result = await evaluate_async(config, output_dir=out)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    env_cpu, model_cpu = (process_cpu(pid) - b for pid, b in zip(servers, before, strict=True))
    assert result.summary.n_episodes == episodes, result.summary
    assert result.summary.outcomes["infra_error"] == 0, result.summary.outcomes
    return elapsed, cpu, env_cpu, model_cpu


async def raw_run(env_url: str, model_url: str, tasks: list[Task], concurrency: int) -> float:
    """Wall seconds of the same episodes played by a hand-written loop, nothing else.

    The same exchange as taskhub's: one WebSocket session per worker, opened in the run; a chat
    completion per episode with the question; its answer as the step, with the worker's next
    reset in the same write behind it. No taskset, probe, prompt template, parsing, reward,
    record or manifest: the speed-up this loop reaches is what the machine allows.
    """
    ws_url = env_url.replace("http://", "ws://") + "/ws"
    queue = list(reversed(tasks))

    async def worker(http: aiohttp.ClientSession) -> None:
        if not queue:
            return
        async with connect(ws_url, compression=None, max_size=4 * 1024 * 1024) as ws:
            await ws.send(json.dumps({"type": "reset", "data": dict(queue.pop().reset)}))
            observation = json.loads(await ws.recv())["data"]["observation"]
            while True:
                messages = [
                    {"role": "system", "content": "Answer with \\boxed{N}."},
                    {"role": "user", "content": json.dumps(observation)},
                ]
                body = {"model": "loopback", "messages": messages, "temperature": 0.0}
                async with http.post(model_url + "/chat/completions", json=body) as reply:
                    content = (await reply.json())["choices"][0]["message"]["content"]
                answer = content.removeprefix("\\boxed{").removesuffix("}")
                after = queue.pop() if queue else None
                frames = [{"type": "step", "data": {"answer": answer}}]
                if after is not None:
                    frames.append({"type": "reset", "data": dict(after.reset)})
                async with ws.send_context():  # the frames in one write, as taskhub sends them
                    for frame in frames:
                        ws.protocol.send_text(json.dumps(frame).encode())
                    ws.transport.write(b"".join(ws.protocol.data_to_send()))
                json.loads(await ws.recv())  # the step's reply
                if after is None:
                    return
                observation = json.loads(await ws.recv())["data"]["observation"]

    started = time.perf_counter()
    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    return time.perf_counter() - started


async def bench(episodes: int, delay_s: float, repeats: int) -> None:
    env = launch_server(builtin_envs()["arith"], max_sessions=16)
    port = free_port()
    model = subprocess.Popen(
        [sys.executable, __file__, "--serve-model", str(port), "--delay-ms", str(delay_s * 1e3)]
    )
    model_url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            await wait_healthy(http, env.url, server=env)
            await wait_healthy(http, model_url)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            times: dict[str, list[tuple[float, ...]]] = {"1": [], "8": [], "fixed": []}
            pids = (env.process.pid, model.pid)
            raw: dict[int, list[float]] = {1: [], 8: []}
            tasks = load_taskset("arith").splits["train"][:episodes]
            await run(env.url, model_url + "/v1", 8, 8, out)  # warm up
            await raw_run(env.url, model_url + "/v1", tasks[:8], 8)
            for _ in range(repeats):  # interleaved, so drift hits every contender alike
                for key, n, sessions in (("1", episodes, 1), ("8", episodes, 8), ("fixed", 1, 1)):
                    times[key].append(await run(env.url, model_url + "/v1", n, sessions, out, pids))
                for sessions in (1, 8):
                    raw[sessions].append(await raw_run(env.url, model_url + "/v1", tasks, sessions))
    finally:
        model.terminate()
        model.wait(10)
        env.stop()
    wall = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
    cpu = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
    servers = {k: [statistics.median(t[i] for t in v) for i in (2, 3)] for k, v in times.items()}
    one, eight = wall["1"], wall["8"]
    fixed_run = wall["fixed"] - delay_s  # a 1-episode run minus its one model call
    print(f"{episodes} episodes, model reply {delay_s * 1e3:.0f} ms, median of {repeats}")
    print(
        f"{'sessions':>8} {'wall s':>8} {'ideal s':>8} {'beyond model/ep ms':>19} "
        f"{'CPU/ep ms: taskhub':>18} {'env':>5} {'model':>5}"
    )
    for n in (1, 8):
        ideal = episodes / n * delay_s
        beyond = (wall[str(n)] - fixed_run - ideal) / (episodes / n) * 1e3
        per_episode = (cpu[str(n)] - cpu["fixed"]) / (episodes - 1) * 1e3
        env_ms, model_ms = (c / episodes * 1e3 for c in servers[str(n)])
        print(
            f"{n:>8} {wall[str(n)]:>8.2f} {ideal:>8.2f} {beyond:>19.1f} {per_episode:>18.2f} "
            f"{env_ms:>5.2f} {model_ms:>5.2f}"
        )
    print(
        f"fixed cost of a run (taskset, env probe, manifest): {fixed_run * 1e3:.0f} ms wall, "
        f"{cpu['fixed'] * 1e3:.0f} ms CPU"
    )
    speedup = one / eight
    paired = [a[0] / b[0] for a, b in zip(times["1"], times["8"], strict=True)]
    print(f"each repeat's own speed-up: {min(paired):.2f}x to {max(paired):.2f}x")
    raw_one, raw_eight = (statistics.median(raw[n]) for n in (1, 8))
    raw_paired = [a / b for a, b in zip(raw[1], raw[8], strict=True)]
    print(
        f"raw loop (the same exchange, nothing else): 1 session {raw_one:.2f} s, 8 sessions "
        f"{raw_eight:.2f} s, speed-up {raw_one / raw_eight:.2f}x "
        f"(repeats {min(raw_paired):.2f}x to {max(raw_paired):.2f}x)"
    )
    print(f"taskhub's speed-up / the raw loop's: {speedup / (raw_one / raw_eight):.3f}")
    print(f"speed-up 8 vs 1 sessions: {speedup:.2f}x (target >= {TARGET}x): ", end="")
    print("PASS" if speedup >= TARGET else "FAIL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--serve-model", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model:
        serve_model(args.serve_model, args.delay_ms / 1e3)
        return
    asyncio.run(bench(args.episodes, args.delay_ms / 1e3, args.repeats))


if __name__ == "__main__":
    main()
