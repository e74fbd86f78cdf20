"""The leaderboard's statistics: hand-computed values, and agreement with taskhub.summarize."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest
from taskhub.leaderboard import build_site
from taskhub.leaderboard._stats import overlaps, rank_with_ties, summarize_table
from typer.testing import CliRunner

from taskhub import read_results, read_results_table, summarize
from taskhub._cli import app

from .corpus import episode, write_run


@pytest.fixture
def hand_run(tmp_path: Path) -> Path:
    """Task a: rewards 1,0,0,0. Task b: 1,1,0,0 and one infra error."""
    records = [episode("h", "a", sample=s, reward=r) for s, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    records += [episode("h", "b", sample=s, reward=r) for s, r in enumerate([1.0, 1.0, 0.0, 0.0])]
    records.append(episode("h", "b", sample=4, reward=None, outcome="infra_error"))
    return write_run(tmp_path, "h", records)


def test_hand_computed_values(hand_run: Path) -> None:
    s = summarize_table(read_results_table(hand_run)).summary
    assert (s.n_episodes, s.n_rewarded, s.n_tasks) == (9, 8, 2)
    # mean 3/8; sample variance (3 * 0.625^2 + 5 * 0.375^2) / 7 = 1.875 / 7
    assert s.mean_reward == 0.375
    # 4 samples per task: tasks, not episodes, are the independent draws (cluster-robust).
    # Deviations from 0.375 summed per task: a: 0.625 - 3 * 0.375 = -0.5; b: 2 * 0.625 -
    # 2 * 0.375 = 0.5. Variance C / (C - 1) * (0.25 + 0.25) / 8^2 = 2 * 0.5 / 64 = 1 / 64.
    assert s.stderr == pytest.approx(0.125)
    # Student t with C - 1 = 1 degree of freedom: 12.706. Two tasks say little.
    assert s.ci95 == pytest.approx((0.375 - 12.706 * 0.125, 0.375 + 12.706 * 0.125))
    # the success rate (3 of 8) gets the same interval, clipped to [0, 1]
    assert s.success_rate == 0.375
    assert s.success_ci95 == pytest.approx((0.0, 1.0))
    # unbiased pass@k: task a (n=4, c=1): 1/4, 1 - C(3,2)/C(4,2) = 1/2, 1
    #                  task b (n=4, c=2): 1/2, 1 - C(2,2)/C(4,2) = 5/6, 1
    assert s.pass_at_k == pytest.approx(
        {"pass@1": 0.375, "pass@2": (0.5 + 5 / 6) / 2, "pass@4": 1.0}
    )
    assert s.outcomes == {"scored": 8, "agent_error": 0, "infra_error": 1, "reward_error": 0}
    assert s.error_rates["infra_error"] == pytest.approx(1 / 9)
    assert s.samples_per_task is None  # 4 and 5 episodes


def test_hand_computed_values_with_one_sample_per_task(tmp_path: Path) -> None:
    """Rewards 1,0,0,0,1,1,0,0 on eight tasks: the i.i.d. t and Wilson intervals."""
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    run = write_run(tmp_path, "h", [episode("h", f"t{i}", reward=r) for i, r in enumerate(rewards)])
    s = summarize_table(read_results_table(run)).summary
    # mean 3/8; sample variance (3 * 0.625^2 + 5 * 0.375^2) / 7 = 1.875 / 7
    assert s.stderr == pytest.approx(math.sqrt(1.875 / 7 / 8))  # 0.182981
    assert s.stderr == pytest.approx(0.182981, abs=1e-6)
    # Student t, 7 degrees of freedom: 2.365
    assert s.ci95 == pytest.approx((-0.057750, 0.807750), abs=1e-5)
    # Wilson interval of 3 successes in 8
    assert s.success_ci95 == pytest.approx((0.136844, 0.694258), abs=1e-5)
    assert s == summarize(read_results(run)).model_copy(update={"per_task": []})


def assert_agrees(path: Path | list[Path]) -> None:
    paths = path if isinstance(path, list) else [path]
    records = [r for p in paths for r in read_results(p)]
    table = pa.concat_tables([read_results_table(p) for p in paths])
    stats = summarize_table(table)
    expected = summarize(records)
    assert stats.summary == expected.model_copy(update={"per_task": []})
    got = stats.per_task.to_dict("records")
    assert len(got) == len(expected.per_task)
    for row, task in zip(got, expected.per_task, strict=True):
        assert row["task_id"] == task.task_id
        assert (row["n"], row["scored"], row["successes"]) == (task.n, task.scored, task.successes)
        for key in ("mean_reward", "pass_rate"):
            value = None if row[key] is None or math.isnan(row[key]) else row[key]
            want = getattr(task, key)
            assert value == (None if want is None else pytest.approx(want, rel=1e-12))


def test_agrees_with_summarize_on_a_real_run(real_run: Path) -> None:
    assert_agrees(real_run)


def test_agrees_with_summarize_on_every_corpus_run(corpus: Path) -> None:
    runs = sorted((corpus / "runs").iterdir())
    assert len(runs) == 6
    for run in runs:
        assert_agrees(run)


def test_pooled_shards_agree_with_summarize_of_all_their_records(corpus: Path) -> None:
    assert_agrees([corpus / "runs" / "run-beta-arith-0", corpus / "runs" / "run-beta-arith-1"])


def test_site_and_results_show_print_the_same_numbers(real_run: Path, tmp_path: Path) -> None:
    build_site([real_run], tmp_path / "site")
    (path,) = (tmp_path / "site" / "data" / "runs").glob("*.summary.json")
    site = json.loads(path.read_text())
    shown = CliRunner().invoke(app, ["results", "show", str(real_run), "--json"])
    assert shown.exit_code == 0, shown.output
    cli = json.loads(shown.output)["summary"]
    cli["per_task"] = []
    assert site == cli
    page = (tmp_path / "site" / "runs" / path.name.replace(".summary.json", ".html")).read_text()
    assert f"<strong>{cli['mean_reward']:.3f}</strong>" in page


def test_rank_counts_only_models_better_beyond_their_intervals() -> None:
    intervals = [
        (0.85, 0.80, 0.90),  # A
        (0.90, 0.85, 0.95),  # B: overlaps A
        (0.76, 0.70, 0.82),  # D: overlaps A, below B's interval
        (0.55, 0.50, 0.60),  # C: below all
        (0.99, None, None),  # one episode: no interval, tied with all
        (None, None, None),  # no reward at all
    ]
    assert rank_with_ties(intervals) == [1, 1, 2, 4, 1, 0]
    assert overlaps((0.80, 0.90), (0.70, 0.82))
    assert not overlaps((0.80, 0.90), (0.50, 0.60))
    assert overlaps((None, None), (0.5, 0.6))


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1.5, None, float("nan"), -0.0, 1e300]),
        pa.array([True, None, False]),
        pa.array([3, None, -(2**62)]),
        pa.chunked_array([pa.array([1.0, 2.0]), pa.array([None, 4.0])]),
        pa.array([], pa.float64()),
    ],
    ids=["floats", "bools", "ints", "chunked", "empty"],
)
def test_python_values_are_what_to_pylist_gives(column: pa.Array | pa.ChunkedArray) -> None:
    from taskhub.leaderboard._stats import python_values

    values = python_values(column)
    expected = column.to_pylist()
    assert [type(v) for v in values] == [type(v) for v in expected]
    assert [repr(v) for v in values] == [repr(v) for v in expected]
