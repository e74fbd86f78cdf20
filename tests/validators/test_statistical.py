"""Statistical checks: a model plays the taskset G times per task (RFC 008 level 4)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest

from tests.servers import ModelScript, ModelServer
from tests.validators.conftest import ENVS, FAST, QUIZ

STATISTICAL = [
    "statistical.reward_reachability",
    "statistical.headroom",
    "statistical.variance_bound",
    "statistical.training_signal",
]


def coin_flip_solver(body: dict[str, Any]) -> str:
    """Right about half the time, decided by the request's seed (so samples differ)."""
    question = body["messages"][-1]["content"]
    match = re.search(r"What is (\d+) ([+*-]) (\d+)", question)
    if match is None:
        return "0"
    a, op, b = int(match[1]), match[2], int(match[3])
    right = {"+": a + b, "-": a - b, "*": a * b}[op]
    coin = hashlib.sha256(json.dumps([question, body.get("seed")]).encode()).digest()[0] % 2
    return str(right if coin else right + 1)


def test_group_signal_formula() -> None:
    from taskhub.validators._statistical import group_signal

    assert group_signal(0.0, 4) == 0.0 and group_signal(1.0, 4) == 0.0
    assert group_signal(0.5, 4) == pytest.approx(1 - 2 * 0.5**4)


def test_statistical_checks_with_a_model() -> None:
    from taskhub.validators import ValidationConfig, validate

    scripts = {"coin": ModelScript(reply=coin_flip_solver), "oracle": ModelScript()}
    with ModelServer(scripts) as models:
        config = ValidationConfig(
            taskset=str(QUIZ),
            model="openai/coin",
            base_url=models.base_url,
            samples=4,
            stat_tasks=9,
            checks=STATISTICAL,
            **FAST,
        )
        report = validate(str(ENVS / "good"), config)
    checks = {c.id: c for c in report.checks}
    assert report.model == "openai/coin"
    for check_id in STATISTICAL:
        assert checks[check_id].status in ("pass", "fail"), checks[check_id]
    reach = checks["statistical.reward_reachability"]
    assert reach.status == "pass" and 0 < reach.measured["pass_rate"] < 1
    assert checks["statistical.headroom"].status == "pass"
    signal = checks["statistical.training_signal"]
    assert signal.measured["group_size"] == 4 and signal.measured["tasks"] == 9
    rows = signal.measured["per_task"]
    assert all(
        r["signal"] == pytest.approx(1 - r["p"] ** 4 - (1 - r["p"]) ** 4, abs=1e-3) for r in rows
    )
    assert signal.status == "pass" and signal.measured["mean_signal"] > 0.1
    variance = checks["statistical.variance_bound"]
    assert variance.measured["ci95_half_width"] is not None


def test_statistical_checks_are_skipped_without_a_model() -> None:
    from taskhub.validators import ValidationConfig, validate

    config = ValidationConfig(taskset=str(QUIZ), checks=STATISTICAL, **FAST)
    report = validate(str(ENVS / "good"), config)
    for check in report.checks:
        if check.level == "statistical":
            assert check.status == "skip" and "--model" in check.summary
