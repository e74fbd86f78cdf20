"""``taskhub validate --batch FILE --ray ADDRESS``: a Ray task per submission, each on time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from taskhub import ValidationReport
from taskhub._cli import app
from tests.validators.conftest import ENVS, QUIZ

runner = CliRunner()


def test_a_batch_with_a_hanging_submission_ends_within_its_deadline(
    ray_cluster: Any, tmp_path: Path
) -> None:
    subs = tmp_path / "subs.jsonl"
    subs.write_text(
        json.dumps({"name": "good", "folder": str(ENVS / "good")})
        + "\n"
        + json.dumps({"name": "hangs", "folder": str(ENVS / "hangs"), "deadline_s": 25})
        + "\n"
    )
    out = tmp_path / "out"
    started = time.monotonic()
    result = runner.invoke(
        app,
        ["validate", "--batch", str(subs), "--out", str(out), "--ray", ray_cluster.address]
        + ["--op-timeout", "3", "--taskset", str(QUIZ), "--check", "protocol.health"]
        + ["--startup-timeout", "600", "--deadline", "300"],
    )
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.output
    good = ValidationReport.model_validate_json((out / "good.json").read_text())
    hangs = ValidationReport.model_validate_json((out / "hangs.json").read_text())
    assert good.verdict == "pass", good.error
    assert hangs.verdict == "error" and hangs.error is not None
    assert hangs.error.type == "DeadlineExceeded" and "Ray task was stopped" in hangs.error.message
    # the hanging submission cost its deadline, not the env's 600 s startup timeout
    assert elapsed < 25 + 120, elapsed
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["name"], r["verdict"]) for r in rows] == [("good", "pass"), ("hangs", "error")]
