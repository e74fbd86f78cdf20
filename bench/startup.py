"""Start of a run on a remote env server: the first episodes' sessions open beside the probe.

A run probes the transport on one WebSocket session (a handshake and a reset) before it knows
the server speaks OpenEnv over ``/ws``. Its other sessions used to open only after that, so a
run against a remote server (a Hugging Face Space, a cluster's env) paid the round trips of
opening a session twice before its first episodes began: TCP, the handshake, the reset. When
the probe is still running after ``SLOW_PROBE_S``, the first episodes' sessions now open beside
it and send their first reset as soon as they are open.

The reference arith env is served on loopback and reached directly, and through a proxy that
holds every chunk it forwards for ``--latency-ms`` / 2 each way (a server that far away). The
same run (``--episodes`` scripted arith episodes, ``--sessions`` at once) is played against
both, interleaved, in two ways: as taskhub plays it, and with the sessions opened after the
probe (what a server answering faster than ``SLOW_PROBE_S`` gets: the constant raised for
those runs). The bench prints each wall time and what the distance cost each run, in round
trips.

    python bench/startup.py [--latency-ms 100] [--episodes 16] [--sessions 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

import taskhub.env._launch as launch
from taskhub import EvalConfig, evaluate_async
from taskhub.env import builtin_envs, launch_server, wait_healthy
from taskhub.env._spawn import free_port

DEFAULT_SLOW_PROBE_S = launch.SLOW_PROBE_S


def proxy(port: int, upstream: int, one_way_s: float) -> None:
    """Forward 127.0.0.1:``port`` to ``upstream``, every chunk held ``one_way_s``, in order."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        held: collections.deque[tuple[float, bytes]] = collections.deque()
        arrived = asyncio.Event()
        ended = False

        async def forward() -> None:
            while held or not ended:
                if not held:
                    arrived.clear()
                    await arrived.wait()
                    continue
                due, data = held[0]
                await asyncio.sleep(max(0.0, due - loop.time()))
                held.popleft()
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.create_task(forward())
        try:
            while data := await reader.read(65536):
                held.append((loop.time() + one_way_s, data))
                arrived.set()
        except ConnectionError:
            pass
        ended = True
        arrived.set()
        try:
            await task
        except ConnectionError:
            pass

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def play(url: str, episodes: int, sessions: int, out: Path, *, beside: bool) -> float:
    """Wall seconds of a run; ``beside=False`` opens the sessions after the probe."""
    launch.SLOW_PROBE_S = DEFAULT_SLOW_PROBE_S if beside else math.inf
    config = EvalConfig(
        model="scripted/oracle",
        taskset="arith",
        env=url,
        split="train",
        limit=episodes,
        concurrency=sessions,
    )
    started = time.perf_counter()
    result = await evaluate_async(config, output_dir=out)
    elapsed = time.perf_counter() - started
    assert result.summary.outcomes["scored"] == episodes, result.summary
    return elapsed


async def bench(latency_s: float, episodes: int, sessions: int, repeats: int) -> None:
    env = launch_server(builtin_envs()["arith"], max_sessions=64)
    port = free_port()
    relay = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--proxy",
            str(port),
            str(env.port),
            "--latency-ms",
            str(latency_s * 1e3),
        ]
    )
    servers = {"near": env.url, "far": f"http://127.0.0.1:{port}"}
    try:
        async with httpx.AsyncClient() as http:
            await wait_healthy(http, env.url, server=env)
            await wait_healthy(http, servers["far"], timeout=60)
        walls: dict[tuple[str, bool], list[float]] = {
            (name, beside): [] for name in servers for beside in (False, True)
        }
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            for url in servers.values():  # warm up
                await play(url, sessions, sessions, out, beside=True)
            for _ in range(repeats):  # interleaved: drift hits every contender alike
                for (name, beside), times in walls.items():
                    times.append(await play(servers[name], episodes, sessions, out, beside=beside))
    finally:
        launch.SLOW_PROBE_S = DEFAULT_SLOW_PROBE_S
        relay.terminate()
        relay.wait(10)
        env.stop()
    wall = {key: statistics.median(times) for key, times in walls.items()}
    print(
        f"{episodes} arith episodes at {sessions} sessions, the server {latency_s * 1e3:.0f} ms "
        f"away (round trip) or on loopback, median of {repeats}"
    )
    print(f"{'sessions opened':<18} {'near s':>8} {'far s':>8} {'round trips':>12}")
    for beside, label in ((False, "after the probe"), (True, "beside the probe")):
        near, far = wall[("near", beside)], wall[("far", beside)]
        print(f"{label:<18} {near:>8.3f} {far:>8.3f} {(far - near) / latency_s:>12.1f}")
    ratio = wall[("far", False)] / wall[("far", True)]
    print(f"the far server's run, after / beside: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--proxy", type=int, nargs=2, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy:
        proxy(args.proxy[0], args.proxy[1], args.latency_ms / 2e3)
        return
    asyncio.run(bench(args.latency_ms / 1e3, args.episodes, args.sessions, args.repeats))


if __name__ == "__main__":
    main()
