"""External rewards in a real run, then re-scoring the stored run without re-running it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from taskhub import (
    ConfigError,
    EvalConfig,
    ResultsError,
    RunResult,
    UnknownPluginError,
    evaluate,
    read_manifest,
    read_results,
    rescore,
)
from taskhub._cli import app
from tests.servers import FakeEnv, ModelScript, ModelServer, error, observation

REWARDS = ["math_verify", "answer_present=gate", "fuzzy=0.5", "judge:openai/grader=0.25"]
cli = CliRunner()


def policy(body: dict[str, Any]) -> str:
    """The evaluated model: the right number, boxed, off by one, or nothing, by task."""
    target = int(re.findall(r"say (\d+)", json.dumps(body["messages"]))[0])
    return [f"\\boxed{{{target}}}", str(target), str(target + 1), ""][target % 4]


def grader(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    return "Correct.\nSCORE: 9" if "\\boxed" in prompt else "Meh.\nSCORE: 4/8"


def reset(session: Any, data: dict[str, Any]) -> Any:
    if data.get("seed") == 9:
        return error("EXECUTION_ERROR", "the env cannot build task 9")
    session.target = int(data["seed"]) % 100
    session.done = False
    return observation({"question": f"say {session.target}"})


def step(session: Any, data: dict[str, Any]) -> Any:
    session.done = True
    ok = str(data.get("answer", "")).strip() == str(session.target)
    return observation({"feedback": "ok" if ok else "wrong"}, 1.0 if ok else 0.0, True)


@pytest.fixture(scope="module")
def servers() -> Iterator[ModelServer]:
    with (
        ModelServer(
            {"policy": ModelScript(reply=policy), "grader": ModelScript(reply=grader)}
        ) as model,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("TASKHUB_JUDGE_BASE_URL", model.base_url)
        yield model


@pytest.fixture(scope="module")
def run(servers: ModelServer, tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    folder = tmp_path_factory.mktemp("run")
    taskset = folder / "tasks.jsonl"
    rows = [{"task_id": f"t{i:02d}", "reset": {"seed": i}, "answer": str(i)} for i in range(12)]
    rows[10]["answer"] = "ten"  # not math: math_verify cannot score this row
    taskset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FakeEnv(on_reset=reset, on_step=step) as env:
        return evaluate(
            EvalConfig(
                model="openai/policy",
                base_url=servers.base_url,
                taskset=str(taskset),
                env=env.url,
                rewards=REWARDS,
                format_retries=0,
                max_retries=0,
            ),
            output_dir=folder / "runs",
        )


def by_id(path: Path) -> dict[str, Any]:
    return {r.task_id: r for r in read_results(path)}


def test_the_run_records_every_component_beside_the_total(run: RunResult) -> None:
    records = by_id(run.run_dir)
    boxed = records["t04"]  # \boxed{4}: math right, env wrong
    assert boxed.outcome == "scored" and boxed.env_reward == 0.0
    values = {c.name: c.value for c in boxed.reward_components}
    assert values == {
        "math_verify": 1.0,
        "answer_present=gate": 1.0,
        "fuzzy=0.5": pytest.approx(0.2),  # rapidfuzz: "4" within "\\boxed{4}"
        "judge:openai/grader=0.25": 0.9,
    }
    assert boxed.reward == pytest.approx(1.0 + 0.5 * 0.2 + 0.25 * 0.9)
    wrong = records["t02"]  # answered 3
    assert {c.name: c.value for c in wrong.reward_components}["math_verify"] == 0.0
    silent = records["t03"]  # an empty reply: the model's failure, and the gate shuts
    assert silent.outcome == "agent_error" and silent.reward == 0.0
    assert run.manifest.rewards[0].name == "math_verify"
    assert run.manifest.rewards[0].version.startswith("math-verify ")
    assert {p.name for p in run.manifest.rewards} == {
        "math_verify",
        "answer_present",
        "fuzzy",
        "judge",
    }


def test_a_reward_that_fails_keeps_the_rest_of_the_record(run: RunResult) -> None:
    ten = by_id(run.run_dir)["t10"]
    assert ten.outcome == "reward_error" and ten.reward is None and ten.success is None
    assert ten.error.boundary == "reward"
    assert "reward 'math_verify' failed on task 't10'" in ten.error.message
    assert "the reference answer 'ten' does not parse as math" in ten.error.message
    values = {c.name: c.value for c in ten.reward_components}
    assert values["answer_present=gate"] == 1.0 and values["math_verify"] is None
    assert ten.steps and ten.steps[0].action == {"answer": "11"}
    assert by_id(run.run_dir)["t09"].outcome == "infra_error"


def test_rescoring_with_the_same_rewards_gives_the_same_totals(
    run: RunResult, tmp_path: Path
) -> None:
    source_bytes = (run.run_dir / "episodes.jsonl").read_bytes()
    result = rescore(run.run_dir, REWARDS, output_dir=tmp_path)
    before, after = by_id(run.run_dir), by_id(result.run_dir)
    assert before.keys() == after.keys()
    for task_id, old in before.items():
        new = after[task_id]
        assert (new.outcome, new.reward, new.success) == (old.outcome, old.reward, old.success)
        assert new.reward_components == old.reward_components
        assert new.steps == old.steps and new.run_id == result.manifest.run_id
    assert result.summary.mean_reward == run.summary.mean_reward
    # the source is only read
    assert (run.run_dir / "episodes.jsonl").read_bytes() == source_bytes


def test_rescored_run_directory_records_where_it_came_from(run: RunResult, tmp_path: Path) -> None:
    result = rescore(run.run_dir, ["exact", "contains=0.5"], run_dir=tmp_path / "exact")
    manifest = read_manifest(tmp_path / "exact")
    assert manifest.parent_run == run.manifest.run_id != manifest.run_id
    assert manifest.status == "completed" and manifest.finished_at is not None
    assert manifest.config.rewards == ["exact", "contains=0.5"]
    assert [p.name for p in manifest.rewards] == ["exact", "contains"]
    assert manifest.n_planned == 12 and manifest.taskset == run.manifest.taskset
    records = by_id(tmp_path / "exact")
    assert records["t05"].reward == 1.5 and records["t05"].success
    assert records["t04"].reward == 0.5 and not records["t04"].success  # contains, not exact
    assert records["t06"].reward == 0.0 and records["t06"].outcome == "scored"
    assert records["t10"].outcome == "scored"  # exact can score the row math_verify could not
    infra = records["t09"]
    assert infra.outcome == "infra_error" and infra.reward_components == []
    assert infra.error == by_id(run.run_dir)["t09"].error
    assert result.summary.outcomes["infra_error"] == 1


def test_rewards_that_need_the_live_env_are_refused(run: RunResult, tmp_path: Path) -> None:
    for spec in ("env", "env:final=2"):
        with pytest.raises(ConfigError, match=f"reward '{spec}' needs the live environment"):
            rescore(run.run_dir, ["exact", spec], output_dir=tmp_path)
    with pytest.raises(UnknownPluginError, match="Did you mean 'math_verify'"):
        rescore(run.run_dir, ["math_verfy"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match="does not parse"):
        rescore(run.run_dir, ["=2"], output_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_rescore_refuses_what_is_not_a_run_or_would_overwrite_one(
    run: RunResult, tmp_path: Path
) -> None:
    with pytest.raises(ResultsError, match="is not a run directory"):
        rescore(tmp_path, ["exact"])
    with pytest.raises(ResultsError, match="already holds a run"):
        rescore(run.run_dir, ["exact"], run_dir=run.run_dir)


def test_rescore_command(run: RunResult, tmp_path: Path) -> None:
    target = tmp_path / "judged"
    result = cli.invoke(
        app,
        ["rescore", str(run.run_dir), "--reward", "exact", "--run-dir", str(target), "--json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["parent_run"] == run.manifest.run_id and payload["status"] == "completed"
    assert payload["summary"]["n_episodes"] == 12
    shown = cli.invoke(app, ["rescore", str(run.run_dir), "--reward", "exact", "-o", str(tmp_path)])
    assert shown.exit_code == 0 and "re-scored from run" in shown.stdout
    refused = cli.invoke(app, ["rescore", str(run.run_dir), "--reward", "env"])
    assert refused.exit_code == 1
    assert "ConfigError: reward 'env' needs the live environment" in refused.stderr
    missing = cli.invoke(app, ["rescore", str(run.run_dir)])
    assert missing.exit_code == 2


def test_rewards_list_command() -> None:
    result = cli.invoke(app, ["rewards", "list", "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {"env", "math_verify", "judge", "trl", "python", "openenv", "bleu"} <= rows.keys()
    assert rows["env"]["stateful"] and not rows["math_verify"]["stateful"]
    assert rows["math_verify"]["range"] == [0.0, 1.0] and rows["judge"]["arg"] == "model"
    table = cli.invoke(app, ["rewards", "list"])
    assert table.exit_code == 0 and "math_verify" in table.stdout


def test_unknown_reward_in_a_run_fails_before_any_episode(tmp_path: Path) -> None:
    with pytest.raises(UnknownPluginError, match="Did you mean 'rougeL'"):
        evaluate(
            EvalConfig(model="scripted/oracle", taskset="arith", rewards=["rougel"]),
            output_dir=tmp_path,
        )
    assert not any(tmp_path.iterdir())
