"""Helpers of the reference env tests: paths, taskset rows, env servers as subprocesses.

A plain module (not ``conftest``) so that test modules can import it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
ENVS_DIR = ROOT / "taskhub" / "_envs"
TASKSETS_DIR = ROOT / "tasksets"
ENV_NAMES = ("arith", "gridworld", "ledger")
SPLITS = ("train", "test")

#: Seconds a server subprocess gets to answer GET /health (imports take ~3 s on a quiet machine,
#: and this machine's speed varies a lot between runs).
STARTUP_TIMEOUT_S = 180.0


def read_rows(taskset: str, split: str) -> list[dict[str, Any]]:
    """The rows of a built-in taskset split, as stored."""
    path = TASKSETS_DIR / taskset / "data" / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EnvServer:
    """An env folder served by uvicorn in a subprocess, as a user would start it."""

    name: str
    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def log_tail(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]


def start_server(name: str, log_dir: Path) -> EnvServer:
    """Run ``python -m uvicorn server.app:app`` from the env's folder and wait for /health."""
    folder = ENVS_DIR / name
    port = free_port()
    log_path = log_dir / f"{name}-{port}.log"
    env = dict(os.environ)
    # The optional Gradio UI would slow the start and is not what is under test.
    env.pop("ENABLE_WEB_INTERFACE", None)
    argv = [sys.executable, "-m", "uvicorn", "server.app:app"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = EnvServer(name, folder, port, process, log_path)
    try:
        deadline = started + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} server exited with {process.returncode}:\n{server.log_tail()}"
                )
            try:
                if httpx.get(server.url + "/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{name} server not healthy after {STARTUP_TIMEOUT_S}s:\n{server.log_tail()}"
                )
            time.sleep(0.05)
    except BaseException:
        stop_server(server)
        raise
    server.startup_s = time.monotonic() - started
    return server


def stop_server(server: EnvServer) -> int:
    """Stop the server with SIGTERM (SIGKILL after 10 s); return its exit code."""
    process = server.process
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
