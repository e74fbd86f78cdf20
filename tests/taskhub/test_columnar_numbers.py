"""Components, ranges, groups, cache counts and comparisons read as columns agree with records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub import (
    RewardComponent,
    Task,
    Usage,
    comparability,
    compare_runs,
    index_results,
    read_results,
    read_results_table,
    read_run,
    summarize,
    summarize_groups,
    task_field,
    task_field_column,
    write_results,
)
from taskhub._cli import app
from taskhub._results import SUMMARY_COLUMNS
from taskhub._results_table import INDEX_SUFFIX
from tests.leaderboard.corpus import episode, write_run

FIELDS = ["family", "reset.level", "metadata.tags", "nothing.here"]


def _records(run_id: str, shift: float) -> list:  # type: ignore[type-arg]
    """Tasks of two families and three levels, two samples each, components that vary."""
    out = []
    for i in range(6):
        for sample in range(2):
            record = episode(run_id, f"t{i}", sample=sample)
            exact = float((i + sample) % 2) if i != 5 else 1.0
            fuzzy = min(1.0, 0.25 * i + shift)
            components = [
                RewardComponent(name="exact", value=exact),
                RewardComponent(name="fuzzy=0.5", value=fuzzy, weight=0.5),
                RewardComponent(
                    name="judge", value=None, error="timed out" if i == sample else None
                ),
            ]
            total = exact + 0.5 * fuzzy
            task = Task(
                task_id=f"t{i}",
                reset={"level": i % 3},
                metadata={"family": "add" if i < 3 else "mul", "tags": ["a", i]},
            )
            out.append(
                record.model_copy(
                    update={
                        "task": task,
                        "reward_components": components,
                        "reward": total,
                        "success": total >= 1.0,
                        "usage": Usage(calls=2, cache_hits=i % 2, cache_misses=2 - i % 2),
                    }
                )
            )
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    rewards = ["exact", "fuzzy=0.5", "judge"]
    a = write_run(root, "a", _records("a", 0.0), model="scripted/a", samples=2, rewards=rewards)
    b = write_run(root, "b", _records("b", 0.3), model="scripted/b", samples=2, rewards=rewards)
    return a, b


@pytest.mark.parametrize("source", ["index", "records"])
def test_summary_and_groups_of_the_table_are_those_of_the_records(
    runs: tuple[Path, Path], source: str, tmp_path: Path
) -> None:
    run = read_run(runs[0])
    path = runs[0]
    if source == "records":  # the same run without its index: parsed from the records
        path = tmp_path / "run"
        path.mkdir()
        write_results(path / "episodes.jsonl", run.records)
        (path / f"episodes{INDEX_SUFFIX}").unlink()
    config = comparability(run.manifest)
    table = read_results_table(path, columns=SUMMARY_COLUMNS, task_fields=FIELDS)
    assert table.column_names == [*SUMMARY_COLUMNS, *map(task_field_column, FIELDS)]
    for field in FIELDS:
        expected = [task_field(r.task, field) for r in run.records]
        assert table[task_field_column(field)].to_pylist() == expected
    summary = summarize(table, n_planned=12, comparability=config)
    assert summary == summarize(run.records, n_planned=12, comparability=config)
    components = {c.name: c for c in summary.components}
    assert sorted(components) == ["exact", "fuzzy=0.5", "judge"]
    assert (components["judge"].n, components["judge"].errors) == (0, 2)
    assert components["fuzzy=0.5"].weight == 0.5 and components["exact"].n == 12
    assert summary.interval == "bounded" and summary.ci95 is not None
    assert summary.model_cache == {"hits": 6, "misses": 18}
    for field in FIELDS:
        assert summarize_groups(table, field, comparability=config) == summarize_groups(
            run.records, field, comparability=config
        )
    assert [g.value for g in summarize_groups(table, "family")] == ["add", "mul"]
    assert [g.value for g in summarize_groups(table, "nothing.here")] == ["(none)"]


def test_a_table_without_what_summaries_need_is_refused(runs: tuple[Path, Path]) -> None:
    table = read_results_table(runs[0], columns=["task_id", "reward", "success"])
    with pytest.raises(ValueError, match="lacks"):
        summarize(table)
    with pytest.raises(ValueError, match=r"task_fields=\['family'\]"):
        summarize_groups(table, "family")


def test_compare_reads_run_directories_as_columns(runs: tuple[Path, Path]) -> None:
    a, b = runs
    by_records = compare_runs(read_run(a), read_run(b))
    assert compare_runs(a, b) == by_records
    assert by_records.shared_tasks == 6 and by_records.mcnemar.pairs == 12
    # only the fuzzy component differs: B's is 0.3 higher, capped at 1
    gain = [0.5 * (min(1.0, 0.25 * i + 0.3) - min(1.0, 0.25 * i)) for i in range(6)]
    assert by_records.reward.difference == pytest.approx(sum(gain) / 6)


def test_results_show_by_reads_task_fields_without_records(runs: tuple[Path, Path]) -> None:
    result = CliRunner().invoke(
        app, ["results", "show", str(runs[0]), "--json", "--by", "family", "--by", "reset.level"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [g["value"] for g in data["groups"]["family"]] == ["add", "mul"]
    assert [g["value"] for g in data["groups"]["reset.level"]] == ["0", "1", "2"]
    assert data["summary"]["model_cache"] == {"hits": 6, "misses": 18}
    assert {c["name"] for c in data["summary"]["components"]} == {"exact", "fuzzy=0.5", "judge"}


def test_an_index_of_other_columns_is_rebuilt_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    write_results(path, [episode("r", "t0")])
    index = tmp_path / f"episodes{INDEX_SUFFIX}"
    lines = index.read_text().splitlines()
    # an index written by a version without the cache columns
    header = lines[0].split(",")
    drop = [header.index("cache_hits"), header.index("cache_misses")]
    index.write_text(
        "\n".join(
            ",".join(c for i, c in enumerate(line.split(",")) if i not in drop) for line in lines
        )
        + "\n"
    )
    write_results(path, [episode("r", "t1")])
    assert index.read_text().splitlines()[0] == lines[0]
    assert read_results_table(path, columns=["task_id", "cache_hits"]).to_pylist() == [
        {"task_id": "t0", "cache_hits": 0},
        {"task_id": "t1", "cache_hits": 0},
    ]
    assert index_results(path) == 2
    assert len(read_results(path)) == 2
