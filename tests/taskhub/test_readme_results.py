"""README.md's run-directory commands (show with groups, compare) work exactly as written."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
SECTION = README.split("## Run directories\n", 1)[1].split("\n## ", 1)[0]
BASH = [
    line.strip()
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", SECTION, re.DOTALL)
    if lang == "bash"
    for line in body.splitlines()
    if line.strip()
]
TASKHUB = str(Path(sys.executable).parent / "taskhub")


def test_readme_results_commands(tmp_path: Path) -> None:
    assert [" ".join(c.split()[1:3]) for c in BASH] == [
        "eval scripted/random", "eval scripted/oracle", "results show", "results compare"
    ]  # fmt: skip
    outputs = []
    for command in BASH:
        argv = [TASKHUB, *shlex.split(command)[1:]]
        result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (command, result.stderr)
        outputs.append(result.stdout)
    show, compare = outputs[2], outputs[3]
    assert "by family" in show and "range [0, 1]" in show and "(bounded)" in show
    assert "20 shared: 20 fixed, 0 regressed, 0 unchanged" in compare
    assert "McNemar" in compare and "pass@1" in compare
