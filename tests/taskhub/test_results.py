"""Statistics against hand-computed values, and the results files' round-trip and repair."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from taskhub import (
    EpisodeRecord,
    ResultsError,
    RewardComponent,
    StepRecord,
    Task,
    mean_ci,
    pass_at_k,
    read_results,
    read_results_table,
    summarize,
    wilson_interval,
    write_results,
)
from taskhub._results import (
    SUMMARY_COLUMNS,
    SummaryColumns,
    repair_results,
    summarize_rows,
    summary_json,
)
from taskhub._stats import t_critical_95


def record(
    task_id: str,
    sample: int,
    reward: float | None,
    outcome: str = "scored",
    success: bool | None = None,
) -> EpisodeRecord:
    return EpisodeRecord(
        run_id="r",
        episode_id=f"{task_id}-{sample}",
        task_id=task_id,
        task_hash="h",
        split="test",
        sample=sample,
        seed=1,
        outcome=outcome,
        reward=reward,
        success=(reward is not None and reward >= 1.0) if success is None else success,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        duration_s=0.5,
        steps=[
            StepRecord(
                index=0, action={"answer": "1"}, observation={"q": "é"}, reward=reward, done=True
            )
        ],
        task=Task(task_id=task_id, reset={"seed": 1}, answer="1"),
    )


def test_mean_stderr_ci_by_hand() -> None:
    # values 1, 2, 3, 4: mean 2.5, sample sd sqrt(5/3), se sqrt(5/3)/2 = 0.6455, t(3) = 3.182
    mean, se, low, high = mean_ci([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert se == pytest.approx(0.645497, abs=1e-6)
    assert low == pytest.approx(2.5 - 3.182 * 0.645497, abs=1e-5)
    assert high == pytest.approx(2.5 + 3.182 * 0.645497, abs=1e-5)
    assert mean_ci([]) == (None, None, None, None)
    assert mean_ci([0.7]) == (0.7, None, None, None)


def test_clustered_stderr_by_hand() -> None:
    # tasks x: 1, 1; y: 0, 0; z: 1, 0. Mean 0.5; deviation sums x: 1, y: -1, z: 0.
    # Variance C / (C - 1) * sum^2 / n^2 = 3 / 2 * 2 / 36 = 1 / 12; t(C - 1 = 2) = 4.303
    values = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    mean, se, low, high = mean_ci(values, ["x", "x", "y", "y", "z", "z"])
    assert mean == 0.5
    assert se == pytest.approx(math.sqrt(1 / 12))  # 0.288675
    assert (low, high) == pytest.approx((0.5 - 4.303 * 0.288675, 0.5 + 4.303 * 0.288675))
    # the i.i.d. error of the same values is smaller: sample variance 0.3, se sqrt(0.3 / 6)
    assert mean_ci(values)[1] == pytest.approx(math.sqrt(0.05))
    # one value per task, or a single task's samples: the i.i.d. formula, exactly
    assert mean_ci(values, ["a", "b", "c", "d", "e", "f"]) == mean_ci(values)
    assert mean_ci(values, ["x"] * 6) == mean_ci(values)
    with pytest.raises(ValueError):
        mean_ci(values, ["x"])


def test_success_interval_wilson_or_clustered() -> None:
    from taskhub import success_interval, wilson_interval

    assert success_interval([1.0, 0.0, 1.0], ["a", "b", "c"]) == wilson_interval(2, 3)
    assert success_interval([1.0, 0.0, 1.0], ["a", "a", "a"]) == wilson_interval(2, 3)
    low, high = success_interval([1.0, 1.0, 0.0, 0.0, 1.0, 0.0], ["x", "x", "y", "y", "z", "z"])
    assert (low, high) == (0.0, 1.0)  # 0.5 +- 1.242, clipped
    assert success_interval([], []) == (None, None)


@pytest.mark.parametrize(
    ("df", "t"),
    [
        (1, 12.706),
        (10, 2.228),
        (30, 2.042),
        (40, 2.021),
        (60, 2.000),
        (120, 1.980),
        (10_000, 1.960),
    ],
)
def test_t_critical_values(df: int, t: float) -> None:
    assert t_critical_95(df) == pytest.approx(t, abs=1.5e-3)


def test_wilson_interval_by_hand() -> None:
    low, high = wilson_interval(0, 10)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),
        (5, 5, 3, 1.0),
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - math.comb(3, 2) / math.comb(5, 2)),  # 0.7
        (10, 3, 4, 1 - math.comb(7, 4) / math.comb(10, 4)),
        (200, 1, 100, 0.5),
    ],
)
def test_pass_at_k_unbiased_estimator(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_k_above_n() -> None:
    with pytest.raises(ValueError, match="needs 1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_summary_counts_errors_with_denominators() -> None:
    records = [
        record("a", 0, 1.0),
        record("a", 1, 0.0),
        record("b", 0, 1.0),
        record("b", 1, None, outcome="infra_error", success=False),
        record("c", 0, 0.0, outcome="agent_error"),
        record("c", 1, 0.0),
    ]
    records[3] = records[3].model_copy(update={"success": None})
    summary = summarize(records, n_planned=6)
    assert summary.n_episodes == 6 and summary.n_tasks == 3
    assert summary.outcomes == {"scored": 4, "agent_error": 1, "infra_error": 1, "reward_error": 0}
    assert summary.error_rates["infra_error"] == pytest.approx(1 / 6)
    assert summary.n_rewarded == 5 and summary.mean_reward == pytest.approx(0.4)
    assert summary.success_rate == pytest.approx(2 / 5)
    # pass@1 per task: a 1/2, b 1/1, c 0/2 -> mean 0.5; k=2 needs 2 samples for every task
    assert summary.pass_at_k == {"pass@1": pytest.approx(0.5)}
    by_task = {t.task_id: t for t in summary.per_task}
    assert by_task["b"].n == 2 and by_task["b"].scored == 1 and by_task["b"].pass_rate == 1.0


def test_summary_json_from_rows_is_the_summary_models_own_text() -> None:
    # what `results show --json` writes without a TaskSummary per task: None where a task has
    # no reward or no judged episode, ids out of order in the records
    records = [
        record("b", 0, 1.0),
        record("a", 0, 0.25, success=False),
        record("c", 0, None, outcome="infra_error", success=False),
        record("a", 1, 0.5, success=False),
    ]
    records[2] = records[2].model_copy(update={"success": None})
    summary, rows = summarize_rows(records, n_planned=5)
    assert summary.per_task == [] and [r["task_id"] for r in rows] == ["a", "b", "c"]
    assert rows[2]["mean_reward"] is None and rows[2]["pass_rate"] is None
    whole = summarize(records, n_planned=5)
    for indent in (2, 4):
        assert summary_json(summary, rows, indent=indent) == whole.model_dump_json(indent=indent)
    with pytest.raises(ValueError, match="per_task is left empty"):
        summary_json(whole, rows)


def test_summary_columns_summarize_as_the_records_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what a run keeps of each episode for its summary, over blocks of 3 rows, started from the
    # table a resume reads: every number the same as from the records themselves
    monkeypatch.setattr(SummaryColumns, "BLOCK", 3)
    records = [
        record(f"t{i % 4}", i // 4, [1.0, 0.0, 0.5, None][i % 4], success=i % 3 == 0)
        for i in range(11)
    ]
    records[3] = records[3].model_copy(update={"outcome": "infra_error", "success": None})
    records[5] = records[5].model_copy(
        update={
            "reward_components": [
                RewardComponent(name="exact", value=1.0, weight=2.0),
                RewardComponent(name="judge", value=None, weight=1.0, error="timeout"),
            ],
            "queue_time_s": 0.25,
        }
    )
    write_results(tmp_path / "episodes.jsonl", records[:4])
    columns = SummaryColumns(read_results_table(tmp_path, columns=(*SUMMARY_COLUMNS, "sample")))
    for r in records[4:]:
        columns.append(r)
    assert len(columns) == 11
    assert summarize(columns.table(), n_planned=12) == summarize(records, n_planned=12)
    assert summarize(SummaryColumns().table()) == summarize([])


def test_jsonl_round_trip_and_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    records = [record("a", 0, 1.0), record("b", 0, 0.0)]
    assert write_results(path, records) == 2
    assert read_results(path) == records
    with path.open("ab") as f:
        f.write(records[0].model_dump_json().encode()[:50])  # killed mid-write
    assert read_results(path) == records
    assert repair_results(path) == 50
    assert read_results(path) == records and path.read_bytes().endswith(b"\n")


@pytest.mark.parametrize("tail", [7, 64, 1 << 16])
def test_a_torn_line_is_cut_from_the_end_whatever_its_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: int
) -> None:
    # the file is read back from its end, a few bytes at a time here: a torn line longer than
    # what is read at once, a file that is one torn line, an empty one, a whole one
    monkeypatch.setattr("taskhub._results._TAIL_BYTES", tail)
    path = tmp_path / "episodes.jsonl"
    records = [record("a", 0, 1.0), record("b", 0, 0.0)]
    write_results(path, records)
    whole = path.read_bytes()
    torn = records[0].model_dump_json().encode()[:300]
    path.write_bytes(whole + torn)
    assert repair_results(path) == 300 and path.read_bytes() == whole
    assert repair_results(path) == 0 and path.read_bytes() == whole
    path.write_bytes(torn)
    assert repair_results(path) == 300 and path.read_bytes() == b""
    assert repair_results(path) == 0 and path.read_bytes() == b""


def test_corrupt_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    write_results(path, [record("a", 0, 1.0)])
    with path.open("a") as f:
        f.write('{"not": "a record"}\n')
    write_results(path, [record("b", 0, 1.0)])
    with pytest.raises(
        ResultsError, match=r"episodes.jsonl line 2: field 'run_id': Field required"
    ):
        read_results(path)


def test_records_leave_out_the_measured_columns_of_their_task(tmp_path: Path) -> None:
    profiled = record("a", 0, 1.0).model_copy(
        update={
            "task": Task(
                task_id="a", reset={"seed": 1}, pass_rate=0.5, difficulty=0.5, profile={"n": 2}
            )
        }
    )
    text = profiled.model_dump_json()
    assert '"pass_rate"' not in text and '"profile"' not in text and '"difficulty"' not in text
    assert "pass_rate" not in profiled.model_dump()["task"]
    write_results(tmp_path / "episodes.jsonl", [profiled])
    (back,) = read_results(tmp_path / "episodes.jsonl")
    assert back.task.task_id == "a" and back.task.profile is None
    # what the hash covers is the same with or without the measurements
    assert profiled.task.content_hash() == Task(task_id="a", reset={"seed": 1}).content_hash()


def test_tokens_per_second_count_model_time_not_queue_wait(tmp_path: Path) -> None:
    from taskhub import Usage

    records = [
        record("a", 0, 1.0).model_copy(
            update={
                "usage": Usage(prompt_tokens=10, completion_tokens=30, calls=1),
                "model_time_s": 2.0,
                "queue_time_s": 5.0,
            }
        ),
        record("b", 0, 1.0).model_copy(
            update={"usage": Usage(completion_tokens=10, calls=1), "model_time_s": 2.0}
        ),
    ]
    summary = summarize(records)
    assert summary.tokens_per_s == pytest.approx(10.0)  # 40 tokens in 4 s of model time
    assert summary.model_time_s == 4.0 and summary.queue_time_s == 5.0
    assert summarize([record("c", 0, 1.0)]).tokens_per_s is None  # a scripted policy
    write_results(tmp_path / "episodes.jsonl", records)
    table = read_results_table(tmp_path)
    assert table["queue_time_s"].to_pylist() == [5.0, 0.0]
    assert read_results_table(tmp_path, validate=True)["queue_time_s"].to_pylist() == [5.0, 0.0]


def test_records_written_before_queue_time_was_recorded_still_load(tmp_path: Path) -> None:
    line = record("a", 0, 1.0).model_dump(mode="json")
    del line["queue_time_s"]
    for step in line["steps"]:
        del step["queue_time_s"]
    (tmp_path / "episodes.jsonl").write_text(json.dumps(line) + "\n")
    (old,) = read_results(tmp_path)
    assert old.queue_time_s == 0.0 and old.steps[0].queue_time_s == 0.0
    assert read_results_table(tmp_path)["queue_time_s"].to_pylist() == [0.0]
