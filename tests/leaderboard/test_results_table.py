"""taskhub.read_results_table, the fast reader: it agrees with read_results, record for record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskhub import EpisodeRecord, ResultsError, read_results, read_results_table

from .corpus import IMG, SCRIPT, episode, write_run


def expected_rows(path: Path) -> list[dict[str, Any]]:
    """What read_results gives, in the table's column layout."""
    lines = [
        line.rstrip(b" \t\r\n").decode()
        for line in (path / "episodes.jsonl").read_bytes().splitlines(keepends=True)
        if line.endswith(b"\n") and line.strip()
    ]
    rows = []
    for record, line in zip(read_results(path), lines, strict=True):
        rows.append(
            {
                "run_id": record.run_id,
                "task_id": record.task_id,
                "sample": record.sample,
                "seed": record.seed,
                "outcome": record.outcome,
                "reward": record.reward,
                "success": record.success,
                "error_type": record.error.type if record.error else None,
                "attempts": record.attempts,
                "num_steps": record.num_steps,
                "prompt_tokens": record.usage.prompt_tokens,
                "model_calls": record.usage.calls,
                "env_time_s": record.env_time_s,
                "reward_components": [
                    c.model_dump(include={"name", "value", "weight", "gate", "error"})
                    for c in record.reward_components
                ],
                "record_json": line,
            }
        )
    return rows


def table_rows(path: Path, **kwargs: Any) -> list[dict[str, Any]]:
    table = read_results_table(path, **kwargs)
    keys = list(expected_rows(path)[0]) if table.num_rows else []
    return [{k: row[k] for k in keys} for row in table.to_pylist()]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    records = [
        episode("r", "t-0", reward=1.0, observation=f"{SCRIPT} ünïcode ✓"),
        episode("r", "t-0", sample=1, reward=0.0, reply=IMG, steps=3),
        episode("r", "t-1", reward=None, outcome="infra_error"),
        episode("r", "t-2", reward=0.5, threshold=0.4),
    ]
    return write_run(tmp_path, "r", records)


def test_fast_path_agrees_with_read_results(run: Path) -> None:
    assert table_rows(run) == expected_rows(run)
    assert table_rows(run, validate=True) == expected_rows(run)
    table = read_results_table(run)
    assert table.column_names[-1] == "record_json"
    for text, record in zip(table["record_json"].to_pylist(), read_results(run), strict=True):
        assert EpisodeRecord.model_validate_json(text) == record


def test_lines_are_taken_as_read_results_takes_them(run: Path) -> None:
    path = run / "episodes.jsonl"
    lines = path.read_bytes().splitlines()
    # blank lines, CRLF endings, trailing spaces, and a torn last line
    path.write_bytes(
        lines[0]
        + b"\r\n\n   \n"
        + lines[1]
        + b"  \n"
        + b"\n".join(lines[2:])
        + b"\n"
        + lines[0][:50]
    )
    assert len(read_results(run)) == 4
    assert table_rows(run) == expected_rows(run)
    # An unknown key only the fast path tolerates: it, not the fallback, read these lines.
    path.write_bytes(path.read_bytes().replace(b'"split":', b'"surprise":1,"split":', 1))
    with pytest.raises(ResultsError):
        read_results(run)
    assert read_results_table(run).num_rows == 4


def test_fields_left_at_their_defaults_are_filled_in(tmp_path: Path) -> None:
    record = episode("r", "t-0").model_dump(mode="json", exclude_defaults=True)
    for key in ("attempts", "num_steps", "usage", "env_time_s", "reward_components", "steps"):
        record.pop(key, None)
    folder = write_run(tmp_path, "r", [])
    (folder / "episodes.jsonl").write_text(json.dumps(record) + "\n")
    assert table_rows(folder) == expected_rows(folder)
    row = read_results_table(folder).to_pylist()[0]
    assert (row["attempts"], row["num_steps"], row["model_calls"], row["env_time_s"]) == (
        1,
        0,
        0,
        0.0,
    )


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.update(outcome="crashed"),
        lambda r: r.update(reward="high"),
        lambda r: r.pop("task_id"),
        lambda r: r.update(sample=1.5),
        lambda r: r.update(usage={"calls": "x"}),
    ],
    ids=["bad-outcome", "reward-type", "missing-task-id", "float-sample", "usage-type"],
)
def test_invalid_records_raise_what_read_results_raises(run: Path, mutate: Any) -> None:
    path = run / "episodes.jsonl"
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    mutate(bad)
    lines[1] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsError) as expected:
        read_results(run)
    with pytest.raises(ResultsError) as fast:
        read_results_table(run)
    assert str(fast.value) == str(expected.value)
    assert "line 2" in str(fast.value)


def test_broken_json_and_bad_utf8_raise_what_read_results_raises(run: Path) -> None:
    path = run / "episodes.jsonl"
    good = path.read_bytes()
    for broken in (good.replace(b'"steps":[', b'"steps":[,', 1), good.replace(b"4", b"\xff", 1)):
        path.write_bytes(broken)
        with pytest.raises(ResultsError) as expected:
            read_results(run)
        with pytest.raises(ResultsError) as fast:
            read_results_table(run)
        assert str(fast.value) == str(expected.value)


def test_unknown_keys_pass_the_fast_path_and_fail_full_validation(run: Path) -> None:
    # Documented: the fast path checks the columns it returns; validate=True checks everything.
    path = run / "episodes.jsonl"
    path.write_text(path.read_text().replace('"split":', '"surprise":1,"split":', 1))
    with pytest.raises(ResultsError) as expected:
        read_results(run)
    assert read_results_table(run).num_rows == 4
    with pytest.raises(ResultsError) as full:
        read_results_table(run, validate=True)
    assert str(full.value) == str(expected.value)


def test_missing_and_empty_files_give_empty_tables(tmp_path: Path) -> None:
    assert read_results_table(tmp_path / "nowhere.jsonl").num_rows == 0
    (tmp_path / "episodes.jsonl").write_text("")
    assert read_results_table(tmp_path).num_rows == 0
    (tmp_path / "episodes.jsonl").write_text('{"torn": ')
    assert read_results_table(tmp_path).num_rows == 0
    assert read_results(tmp_path) == []


def test_long_lines_are_read(tmp_path: Path) -> None:
    # pyarrow reads in blocks: a record longer than a block must still parse.
    records = [episode("r", "t-0", steps=3, observation="x" * 3_000_000), episode("r", "t-1")]
    folder = write_run(tmp_path, "r", records)
    assert table_rows(folder) == expected_rows(folder)
