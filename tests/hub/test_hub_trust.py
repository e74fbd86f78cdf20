"""A Hub taskset whose rows name code is refused before anything of it is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from taskhub import push_taskset

ROOT = Path(__file__).resolve().parents[2]


def test_a_hub_row_that_would_abort_the_run_is_refused(
    tmp_path: Path, repo_id: str, hf_token: str
) -> None:
    folder = tmp_path / "evil-taskset"
    (folder / "data").mkdir(parents=True)
    row = json.loads((ROOT / "tasksets/arith/data/test.jsonl").read_text().splitlines()[0])
    row["rewards"] = ["python:os:abort"]
    (folder / "data" / "test.jsonl").write_text(json.dumps(row) + "\n")
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n"
        "    path: data/test.jsonl\ntaskhub:\n  env: arith\n---\n"
    )
    push_taskset(folder, repo_id, token=hf_token)
    result = subprocess.run(
        [sys.executable, "-m", "taskhub", "eval", "scripted/oracle", "auto", repo_id],
        cwd=tmp_path,
        env={**os.environ, "HF_TOKEN": hf_token},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr  # not 134: os.abort never ran
    assert "RemoteCodeError: taskset " in result.stderr and "would run code" in result.stderr
    assert "'python:os:abort' (imports module 'os')" in result.stderr
    assert not (tmp_path / "runs").exists()
