"""Tasksets checked in bulk: the same tasks, hashes, fingerprints and errors as row by row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from taskhub import SchemaError, Task, load_taskset
from taskhub._rows import TaskRows, jsonl_rows, parquet_rows
from taskhub._taskset import BULK_MIN_BYTES, _read_files, _validate_rows, builtin_tasksets

ROWS: list[dict[str, Any]] = [
    {"task_id": "plain", "reset": {"seed": 1, "family": "add"}, "answer": "2"},
    {"task_id": "floats", "reset": {"x": 1e-05, "y": 1e16, "z": 0.1, "w": -0.0}, "answer": 3.5},
    {"task_id": "ünïcode ✓", "prompt": 'say "hi"\t\\', "metadata": {"é": [1, {"b": None}]}},
    {"task_id": "rewards", "rewards": "exact", "max_steps": 3, "answer": None, "reset": {}},
    {"task_id": "oracle", "oracle_actions": [{"move": "up"}, {"move": "down"}], "metadata": {}},
    {"task_id": "profiled", "pass_rate": 1, "difficulty": 0.0, "profile": {"m": {"n": 2}}},
    {"task_id": "big", "answer": 123456789012345678901234567890, "reset": {"v": [True, None]}},
]


def slow(split: str, paths: list[Path]) -> tuple[Task, ...]:
    """What Task validation, row by row, gives."""
    return _validate_rows(split, _read_files(paths))


def write_jsonl(path: Path, rows: list[Any], *, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows) + tail)
    return path


@pytest.mark.parametrize("name", sorted(builtin_tasksets()))
def test_builtin_tasksets_load_in_bulk_with_the_same_tasks_and_fingerprint(name: str) -> None:
    taskset = load_taskset(name)
    folder = builtin_tasksets()[name]
    digest_rows = {}
    for split, tasks in taskset.splits.items():
        paths = sorted((folder / "data").glob(f"{split}*.jsonl"))
        expected = slow(split, paths)
        # files this small load row by row; the bulk path gives the same rows and hashes
        assert sum(p.stat().st_size for p in paths) < BULK_MIN_BYTES
        assert list(tasks) == list(expected)
        bulk = jsonl_rows(split, paths)
        assert isinstance(bulk, TaskRows)
        assert list(bulk) == list(expected)
        assert bulk.content_hashes() == [t.content_hash() for t in expected]
        digest_rows[split] = expected
    # the fingerprint is what hashing every Task gives
    import hashlib

    digest = hashlib.sha256()
    for split, expected in digest_rows.items():
        digest.update(split.encode() + b"\n")
        for task in expected:
            digest.update(task.content_hash().encode() + b"\n")
    assert taskset.ref.fingerprint == digest.hexdigest()


def test_a_split_past_the_bulk_threshold_loads_in_bulk_as_task_validation_would(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "big"
    (folder / "data").mkdir(parents=True)
    pad = "x" * 200
    rows = [{"task_id": f"t{i}", "reset": {"seed": i}, "prompt": f"{pad} {i}"} for i in range(6000)]
    path = write_jsonl(folder / "data" / "train.jsonl", rows)
    assert path.stat().st_size >= BULK_MIN_BYTES
    tasks = load_taskset(str(folder)).tasks("train")
    assert isinstance(tasks, TaskRows)
    assert list(tasks) == list(slow("train", [path]))


def test_rows_of_every_shape_give_the_tasks_and_hashes_of_task_validation(
    tmp_path: Path,
) -> None:
    path = write_jsonl(tmp_path / "test.jsonl", ROWS, tail="\n  \r\n")  # blank lines at the end
    rows = jsonl_rows("test", [path])
    assert rows is not None and len(rows) == len(ROWS)
    expected = slow("test", [path])
    assert list(rows) == list(expected) and rows == expected
    assert rows.content_hashes() == [t.content_hash() for t in expected]
    assert rows.task_ids == [r["task_id"] for r in ROWS]
    assert rows[-1] == expected[-1] and rows[1:3] == expected[1:3]
    assert rows[::2].task_ids == [r["task_id"] for r in ROWS[::2]]
    assert rows[::2].content_hash(1) == expected[2].content_hash()
    assert expected[4] in rows and Task(task_id="oracle") not in rows
    with pytest.raises(IndexError):
        rows[len(ROWS)]


@pytest.mark.parametrize(
    "line",
    [
        '{"task_id": "a", "surprise": 1}',
        '{"task_id": "a", "reset": {"v": NaN}}',
        '{"task_id": "a", "answer": 1e400}',
        '{"task_id": ""}',
        '{"task_id": "a", "max_steps": 0}',
        '{"task_id": "a", "reset": "{\\"seed\\": 1}"}',
        '{"task_id": "a", "reset": null}',
        '["not", "an", "object"]',
        '{"task_id": "a", "prompt": "a\u2028b"}',
        '{"task_id": 7}',
        '{"task_id": "a", "oracle_actions": [1]}',
    ],
    ids=[
        "unknown-field",
        "nan",
        "overflowing-number",
        "empty-id",
        "max-steps-0",
        "json-text-reset",
        "null-reset",
        "not-an-object",
        "line-separator",
        "numeric-id",
        "oracle-not-objects",
    ],
)
def test_rows_the_bulk_check_cannot_vouch_for_get_task_validation(
    tmp_path: Path, line: str
) -> None:
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + line + "\n")
    assert jsonl_rows("test", [path]) is None
    try:
        expected: Any = slow("test", [path])
    except SchemaError as exc:
        with pytest.raises(SchemaError) as got:
            load_taskset(str(path))
        assert str(got.value) == str(exc).replace("test row", "train row")
        assert "row 1" in str(got.value) or "line 2" in str(got.value)
    else:  # valid after all (JSON text of an object): the same tasks
        assert list(load_taskset(str(path)).tasks("train")) == list(expected)


def test_duplicate_ids_are_named_with_both_rows(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    write_jsonl(tmp_path / "data" / "train.jsonl", ROWS[:2])
    write_jsonl(tmp_path / "data" / "test.jsonl", [ROWS[2], ROWS[1]])
    with pytest.raises(SchemaError, match=r"row 1: duplicate task_id 'floats' \(already used by"):
        load_taskset(str(tmp_path))


def bulk_equals_slow(path: Path, rows: list[dict]) -> list[Task]:
    """Write ``rows`` as parquet at ``path``: the bulk reader gives the ``Task`` path's rows and
    hashes. Returns those tasks."""
    pq.write_table(pa.Table.from_pylist(rows), path)
    fast = parquet_rows("train", [path])
    assert fast is not None
    expected = slow("train", [path])
    assert list(fast) == list(expected)
    assert fast.content_hashes() == [t.content_hash() for t in expected]
    return expected


@pytest.mark.parametrize(
    "last",
    [
        {"task_id": "c", "reset": {"seed": 3, "n": 1}, "metadata": {"tags": ["x"]}},
        {"task_id": "c", "reset": {"seed": 3, "n": 1}, "metadata": {"tags": [None]}},
        {"task_id": "c", "reset": {"seed": 3, "n": 1}, "metadata": {"tags": None}},
        {"task_id": "c", "reset": {"seed": 3, "n": 1}, "metadata": None},
    ],
    ids=["no-null", "null-in-a-list", "null-in-a-struct", "null-column"],
)
def test_parquet_rows_that_share_their_keys_load_as_the_rows_they_are(
    tmp_path: Path, last: dict
) -> None:
    # rows with the same keys hold no null: taken as Arrow gives them, without stripping
    rows = [
        {"task_id": "a", "reset": {"seed": 1, "n": 2}, "metadata": {"tags": ["p", "q"]}},
        {"task_id": "b", "reset": {"seed": 2, "n": 0}, "metadata": {"tags": []}},
        last,
    ]
    bulk_equals_slow(tmp_path / "train.parquet", rows)


def test_parquet_rows_are_checked_in_bulk_too(tmp_path: Path) -> None:
    rows = [
        {"task_id": "a", "reset": {"seed": 1, "n": 2}, "answer": "x", "max_steps": 4},
        {"task_id": "b", "reset": {"seed": 2}, "answer": "y", "rewards": ["exact"]},
        {"task_id": "c", "reset": {"seed": 3, "n": None}, "metadata": {"f": 0.5}},
    ]
    path = tmp_path / "train.parquet"
    expected = bulk_equals_slow(path, rows)
    assert list(load_taskset(str(path)).tasks("train")) == list(expected)
    # a NaN deep in a struct, or an unknown column: Task validation names it
    bad = rows[:2] + [{"task_id": "c", "reset": {"seed": float("nan")}}]
    pq.write_table(pa.Table.from_pylist(bad), path)
    assert parquet_rows("train", [path]) is None
    with pytest.raises(SchemaError, match=r"train row 2 .*reset\.seed is nan"):
        load_taskset(str(path))
    pq.write_table(pa.Table.from_pylist([{**rows[0], "surprise": 1}]), path)
    assert parquet_rows("train", [path]) is None
    with pytest.raises(SchemaError, match="unknown field"):
        load_taskset(str(path))


def test_floats_written_in_any_form_hash_as_task_validation_hashes_them(tmp_path: Path) -> None:
    lines = [
        '{"task_id": "a", "reset": {"x": 100000000000000000.0, "y": 0.00001, "z": 1E3}}',
        '{"task_id": "b", "answer": [12345678901234567.5, 0.0001, -0.000099]}',
        '{"task_id": "c", "metadata": {"text": "1e5 and 0.00001 in words"}}',
    ]
    path = tmp_path / "test.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rows = jsonl_rows("test", [path])
    assert rows is not None
    assert rows.content_hashes() == [t.content_hash() for t in slow("test", [path])]
