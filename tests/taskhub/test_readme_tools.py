"""The README's tool environment commands work as written (on a free port, not the shown one)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.servers import free_port, wait_served

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
BLOCK = next(body for lang, body in BLOCKS if lang == "bash" and "--from-env" in body)
LINES = [line.strip() for line in BLOCK.splitlines() if line.startswith("taskhub ")]
TASKHUB = str(Path(sys.executable).parent / "taskhub")


def test_serve_a_tool_env_build_a_taskset_from_its_tasks_and_run_it(tmp_path: Path) -> None:
    serve = next(line for line in LINES if line.startswith("taskhub env serve"))
    shown = re.search(r"--port (\d+)", serve).group(1)  # type: ignore[union-attr]
    port = str(free_port())
    server = subprocess.Popen(
        [TASKHUB, *shlex.split(serve.replace(shown, port))[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_served(port, server, "ledger")
        init, evaluate = [line for line in LINES if f"127.0.0.1:{shown}" in line]
        for command in (init, evaluate + " --json"):
            argv = shlex.split(command.replace(shown, port))
            result = subprocess.run(
                [TASKHUB, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300
            )
            assert result.returncode == 0, (command, result.stderr)
        assert (tmp_path / "ledger-tasks" / "data" / "test.jsonl").is_file()
        payload = json.loads(result.stdout)
        assert payload["summary"]["n_episodes"] == 5 and payload["summary"]["mean_reward"] == 0.0
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
