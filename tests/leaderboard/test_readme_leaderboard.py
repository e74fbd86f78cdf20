"""README.md's `taskhub leaderboard` commands work exactly as written (the server on a free
port, not the shown one, which another test run may hold)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.servers import free_port

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
BASH = [
    line.strip()
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", README, re.DOTALL)
    if lang == "bash"
    for line in body.splitlines()
]
COMMANDS = [line for line in BASH if line.startswith("taskhub leaderboard ")]
TASKHUB = str(Path(sys.executable).parent / "taskhub")


def test_readme_leaderboard_commands(tmp_path: Path) -> None:
    assert [c.split()[2] for c in COMMANDS] == ["build", "serve"]
    build, serve = COMMANDS
    # the runs the build reads: what the README's evaluating section makes
    setup = [TASKHUB, "eval", "scripted/oracle", "auto", "arith", "--limit", "3"]
    subprocess.run(setup, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    built = subprocess.run(
        [TASKHUB, *shlex.split(build)[1:]], cwd=tmp_path, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    shown = re.search(r"--port (\d+)", serve).group(1)  # type: ignore[union-attr]
    port = str(free_port())
    server = subprocess.Popen(
        [TASKHUB, *shlex.split(serve.replace(f"--port {shown}", f"--port {port}"))[1:]],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/index.html", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert page.status_code == 200 and "scripted/oracle" in page.text
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(10)
