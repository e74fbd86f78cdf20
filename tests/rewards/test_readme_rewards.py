"""README.md's rewards commands work exactly as written, in order."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
SECTION = README.split("## Rewards\n", 1)[1].split("\n## ", 1)[0]
BASH = [
    line.strip()
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", SECTION, re.DOTALL)
    if lang == "bash"
    for line in body.splitlines()
    if line.strip()
]
TASKHUB = str(Path(sys.executable).parent / "taskhub")


def test_readme_rewards_commands(tmp_path: Path) -> None:
    assert [c.split()[1] for c in BASH] == ["eval", "rescore", "results", "rewards"]
    outputs = []
    for command in BASH:
        argv = [TASKHUB, *shlex.split(command)[1:]]
        result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (command, result.stderr)
        outputs.append(result.stdout)
    assert "re-scored from run" in outputs[1] and "mean reward" in outputs[2]
    assert "math_verify" in outputs[3] and "rougeL" in outputs[3]
    source = json.loads((tmp_path / "runs" / "math" / "run.json").read_text())
    rescored = json.loads((tmp_path / "runs" / "math-text" / "run.json").read_text())
    assert rescored["parent_run"] == source["run_id"]
    assert [r["name"] for r in source["rewards"]] == ["math_verify", "answer_present"]
    assert [r["name"] for r in rescored["rewards"]] == ["exact", "fuzzy"]
    episodes = (tmp_path / "runs" / "math-text" / "episodes.jsonl").read_text().splitlines()
    scores = [json.loads(line)["reward"] for line in episodes]
    assert scores == [1.5] * 10  # the oracle's answers, exact and fuzzy
