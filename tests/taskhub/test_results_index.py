"""The results index a run writes as it goes: used only when it matches, and it agrees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskhub import (
    RESULT_COLUMNS,
    ErrorInfo,
    ResultsError,
    index_results,
    iter_results_tables,
    read_results,
    read_results_table,
    summarize,
    write_results,
)
from taskhub._results import ResultsWriter, repair_results
from taskhub._results_table import INDEX_COLUMNS
from tests.leaderboard.corpus import IMG, SCRIPT, episode


def records() -> list:  # type: ignore[type-arg]
    return [
        episode("r", "t-0", reward=1.0, observation=f"{SCRIPT} ünïcode ✓"),
        episode("r", 't-"1",x', sample=1, reward=0.0, reply=IMG, steps=3),
        episode(
            "r",
            "t-2",
            reward=None,
            outcome="infra_error",
            error=ErrorInfo(type="EnvTimeout", message="a\nmulti-line\nmessage", boundary="env"),
        ),
        episode("r", " ", reward=0.5, threshold=0.4),
        episode(
            "r",
            "NA",
            reward=None,
            outcome="reward_error",
            error=ErrorInfo(type="", message="", boundary="reward"),
        ),
    ]


def full_parse(path: Path) -> list[dict]:  # type: ignore[type-arg]
    """The table read from the records themselves (the index moved away)."""
    index = path.with_name("episodes.index.csv")
    saved = index.read_bytes()
    index.unlink()
    try:
        return read_results_table(path).to_pylist()
    finally:
        index.write_bytes(saved)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "episodes.jsonl"
    write_results(path, records())
    return path


def test_the_writer_indexes_every_record_and_the_index_agrees(results: Path) -> None:
    index = results.with_name("episodes.index.csv")
    assert index.read_text().count("\n") == 1 + len(records())
    assert read_results_table(results).to_pylist() == full_parse(results)
    indexed = [*INDEX_COLUMNS, "record_json"]  # every column the index gives
    full = [{k: row[k] for k in indexed} for row in full_parse(results)]
    assert read_results_table(results, columns=indexed).to_pylist() == full
    # what index_results builds from the records is what the writer wrote, byte for byte
    written = index.read_bytes()
    assert index_results(results) == len(records())
    assert index.read_bytes() == written
    table = read_results_table(results, columns=["task_id", "error_type", "record_json"])
    assert table.column_names == ["task_id", "error_type", "record_json"]
    assert table["task_id"].to_pylist() == ["t-0", 't-"1",x', "t-2", " ", "NA"]
    assert table["error_type"].to_pylist() == [None, None, "EnvTimeout", None, ""]
    assert table["record_json"].to_pylist() == results.read_text().splitlines()


def test_the_index_is_what_is_read_when_it_matches(results: Path) -> None:
    index = results.with_name("episodes.index.csv")
    # the index says something the records do not: the index is what gets read
    text = index.read_text().replace(",1.0,true,", ",0.25,true,", 1)
    assert text != index.read_text()
    index.write_text(text)
    assert read_results_table(results, columns=["reward"])["reward"][0].as_py() == 0.25
    table = read_results_table(results, columns=[*INDEX_COLUMNS, "record_json"])
    assert table["reward"][0].as_py() == 0.25
    assert table["reward_components"][0].as_py()[0]["name"] == "env"
    # columns the index does not hold come from the records
    assert read_results_table(results, columns=["reward", "run_id"])["reward"][0].as_py() == 1.0
    # validate=True always reads the records
    assert read_results_table(results, validate=True)["reward"][0].as_py() == 1.0


def test_records_changed_after_their_index_are_read_from_the_records(results: Path) -> None:
    data = results.read_bytes()
    results.write_bytes(data.replace(b'"reward":1.0', b'"reward":0.0', 1))  # same size
    assert read_results_table(results, columns=["reward"])["reward"][0].as_py() == 0.0
    # an index newer than the records, but that does not end where they end, is not used
    results.write_bytes(data + data.splitlines(keepends=True)[0])
    os.utime(results.with_name("episodes.index.csv"))
    every = iter_results_tables(results, columns=["reward"], one_per_episode=False)
    assert sum(table.num_rows for table in every) == len(records()) + 1
    # the line repeats an episode: readers count it once
    assert read_results_table(results, columns=["reward"]).num_rows == len(records())


def test_a_torn_record_and_resuming_keep_the_index_right(results: Path) -> None:
    line = results.read_bytes().splitlines(keepends=True)[0]
    with results.open("ab") as f:
        f.write(line[:40])  # killed mid-write
    assert read_results_table(results).num_rows == len(records())
    assert repair_results(results) == 40
    with ResultsWriter(results) as writer:  # --resume: the index is rebuilt, then appended to
        writer.write(episode("r", "t-9", reward=1.0))
    assert read_results_table(results).to_pylist() == full_parse(results)
    assert len(read_results(results)) == len(records()) + 1
    index = results.with_name("episodes.index.csv")
    written = index.read_bytes()
    index_results(results)
    assert index.read_bytes() == written


def test_a_task_id_with_a_line_break_goes_without_an_index(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    write_results(path, [episode("r", "a"), episode("r", "b\nc"), episode("r", "d")])
    assert not (tmp_path / "episodes.index.csv").exists()
    assert read_results_table(path)["task_id"].to_pylist() == ["a", "b\nc", "d"]


def test_an_invalid_record_is_named_and_leaves_no_index(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    write_results(path, [episode("r", "a")])
    with path.open("a") as f:
        f.write('{"not": "a record"}\n')
    write_results(path, [episode("r", "b")])  # cannot index what does not validate
    assert not (tmp_path / "episodes.index.csv").exists()
    with pytest.raises(ResultsError, match="line 2: field 'run_id'"):
        read_results_table(path)


@pytest.mark.parametrize("source", ["index", "records"])
def test_tables_come_in_bounded_batches_in_file_order(results: Path, source: str) -> None:
    if source == "records":
        results.with_name("episodes.index.csv").unlink()
    tables = list(
        iter_results_tables(
            results, columns=["task_id", "record_json"], batch_rows=2, block_bytes=1
        )
    )
    assert len(tables) >= 3 if source == "index" else len(tables) == len(records())
    assert [t for table in tables for t in table["task_id"].to_pylist()] == [
        r.task_id for r in records()
    ]
    assert all(table.num_rows <= 2 for table in tables)


def test_summaries_of_records_and_of_tables_agree(results: Path) -> None:
    table = read_results_table(results, columns=RESULT_COLUMNS[:-1])
    assert summarize(table, n_planned=7) == summarize(read_results(results), n_planned=7)


def test_an_index_with_other_columns_is_rebuilt_before_rows_are_added(results: Path) -> None:
    import csv
    import io

    index = results.with_name("episodes.index.csv")
    header = index.read_text().splitlines()[0]
    # the index as a version without the queue_time_s column wrote it
    table = list(csv.reader(io.StringIO(index.read_text())))
    at = table[0].index("queue_time_s")
    old = io.StringIO()
    csv.writer(old, lineterminator="\n").writerows([r[:at] + r[at + 1 :] for r in table])
    index.write_text(old.getvalue())
    with ResultsWriter(results) as writer:  # --resume of that run
        writer.write(episode("r", "t-9", reward=1.0).model_copy(update={"queue_time_s": 1.5}))
    assert index.read_text().splitlines()[0] == header
    assert read_results_table(results).to_pylist() == full_parse(results)
    assert read_results_table(results, columns=["queue_time_s"])["queue_time_s"][-1].as_py() == 1.5


@pytest.mark.parametrize("source", ["index", "records", "validated"])
def test_record_lines_are_the_file_as_read(results: Path, source: str) -> None:
    """``record_line``: each line with its break, back to back as in the file."""
    if source != "index":
        results.with_name("episodes.index.csv").unlink()
    lines = results.read_text().splitlines(keepends=True)
    tables = list(
        iter_results_tables(
            results,
            columns=["task_id", "record_line", "record_json"],
            batch_rows=2,
            block_bytes=1 << 20,
            validate=source == "validated",
        )
    )
    values = [line for table in tables for line in table["record_line"].to_pylist()]
    assert values == lines
    assert [j for t in tables for j in t["record_json"].to_pylist()] == [
        line.rstrip("\n") for line in lines
    ]
    # a table's lines are one slice of one buffer: the records' JSON Lines text
    for table in tables:
        for chunk in table["record_line"].chunks:
            offsets = chunk.buffers()[1].to_pybytes()
            start, end = (
                int.from_bytes(offsets[8 * i : 8 * i + 8], "little")
                for i in (chunk.offset, chunk.offset + len(chunk))
            )
            assert chunk.buffers()[2][start:end].to_pybytes().decode() == "".join(chunk.to_pylist())
    # not among the default columns
    assert "record_line" not in read_results_table(results).column_names


def test_record_lines_skip_blank_lines_and_keep_what_ends_a_line(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    write_results(path, [episode("r", "a"), episode("r", "b")])
    first, second = path.read_text().splitlines()
    path.write_text(f"{first}  \r\n\n{second}\n")  # no index matches this any more
    table = read_results_table(path, columns=["task_id", "record_line", "record_json"])
    assert table["task_id"].to_pylist() == ["a", "b"]
    assert table["record_line"].to_pylist() == [f"{first}  \r\n", f"{second}\n"]
    assert table["record_json"].to_pylist() == [first, second]


def test_task_fields_are_read_from_record_lines_too(results: Path) -> None:
    plain = read_results_table(results, columns=["task_id"], task_fields=["family"])
    with_lines = read_results_table(
        results, columns=["task_id", "record_line"], task_fields=["family"]
    )
    assert plain.column_names == ["task_id", "task.family"]
    assert with_lines.column_names == ["task_id", "record_line", "task.family"]
    assert plain["task.family"].to_pylist() == with_lines["task.family"].to_pylist()
    assert plain["task.family"].to_pylist() == ["add"] * len(records())


def test_unknown_columns_are_named_with_every_column(results: Path) -> None:
    with pytest.raises(ValueError, match="record_lines.*'record_line'"):
        read_results_table(results, columns=["record_lines"])


def test_components_repeated_over_many_records_read_as_from_the_records(tmp_path: Path) -> None:
    """Runs repeat a few component texts: each is parsed once, every row gets its own."""
    path = tmp_path / "episodes.jsonl"
    many = [episode("r", f"t-{i}", reward=[1.0, 0.0, None][i % 3], sample=i % 2) for i in range(60)]
    write_results(path, many)
    columns = ["task_id", "reward_components"]
    from_index = read_results_table(path, columns=columns).to_pylist()
    assert from_index == [{k: row[k] for k in columns} for row in full_parse(path)]
    assert [r["reward_components"][0]["value"] for r in from_index[:3]] == [1.0, 0.0, None]


@pytest.mark.parametrize("source", ["index", "records"])
def test_a_summary_read_counts_what_it_drops_and_reads_the_file_once(
    tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import taskhub._results_table as results_table
    from taskhub._results import SUMMARY_COLUMNS
    from taskhub._results_table import read_results_table_dropped

    assert "sample" not in SUMMARY_COLUMNS  # a key column the read adds, then drops
    path = tmp_path / "episodes.jsonl"
    first = records()
    # t-0 recorded twice (two writers at once); t-2's infra error played again, and scored
    write_results(path, [*first, first[0], episode("r", "t-2", reward=1.0)])
    if source == "records":
        path.with_name("episodes.index.csv").unlink()
    passes = []
    read_index = results_table._read_index
    monkeypatch.setattr(results_table, "_read_index", lambda *a: passes.append(a) or read_index(*a))
    table, duplicates, retried = read_results_table_dropped(path, columns=SUMMARY_COLUMNS)
    assert len(passes) == 1  # the code before read the file a second time to count
    assert (duplicates, retried) == (1, 1)
    assert table.column_names == list(SUMMARY_COLUMNS)
    assert table.to_pylist() == read_results_table(path, columns=SUMMARY_COLUMNS).to_pylist()
    assert table.num_rows == len(first)
