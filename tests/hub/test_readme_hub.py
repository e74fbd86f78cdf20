"""README's Hub section runs as written, line by line, against the loopback Hub."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from huggingface_hub import HfApi

from taskhub import load_taskset, pull_results, read_run
from tests.hub.hub_server import HubServer

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, re.DOTALL)
HUB_BLOCK = next(body for lang, body in BLOCKS if lang == "bash" and "taskset push" in body)
LINES = [line.strip() for line in HUB_BLOCK.splitlines() if line.strip()]


def test_the_hub_section_runs_as_written(
    hub_server: HubServer, hf_token: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "HF_TOKEN": hf_token,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    assert [line.split()[1] for line in LINES if line.startswith("taskhub ")] == [
        "taskset", "taskset", "taskset", "taskset", "eval", "results", "taskset"
    ]  # fmt: skip
    outputs = []
    for line in LINES:
        result = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, (line, result.stdout, result.stderr)
        outputs.append(result.stdout)

    api = HfApi(token=hf_token)
    v1 = api.list_repo_refs("my-org/arith-mini", repo_type="dataset").tags[0].target_commit
    show = outputs[LINES.index("taskhub taskset show my-org/arith-mini@v1")]
    assert v1 in show and "test: 2 rows" in show and "env       arith" in show

    run = read_run(tmp_path / "runs" / "hub-demo")
    assert run.manifest.taskset.commit_sha == v1
    assert [r.reward for r in run.records] == [1.0, 1.0]

    pulled = pull_results("my-org/arith-results")
    assert [read_run(d).manifest.run_id for d in pulled] == [run.manifest.run_id]

    profiled = load_taskset("my-org/arith-mini")  # main moved on: the profile revision
    assert profiled.ref.commit_sha != v1
    assert [(t.pass_rate, t.difficulty) for t in profiled.tasks("test")] == [(1.0, 0.0)] * 2
    assert [t.profile["pass_rate"] for t in profiled.tasks("test") if t.profile] == [
        {"scripted/oracle": 1.0}
    ] * 2
    assert json.loads((tmp_path / "tasks.jsonl").read_text().splitlines()[0])["task_id"] == "add-1"
