"""Task rows and taskset loading: round-trips, every built-in taskset, and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from taskhub import (
    SchemaError,
    Task,
    TasksetNotFound,
    builtin_tasksets,
    canonical_json,
    load_taskset,
)

ROWS = [
    {"task_id": "a", "reset": {"seed": 1, "family": "add"}, "answer": "3"},
    {
        "task_id": "b",
        "reset": {"seed": 2, "size": 5},
        "oracle_actions": [{"move": "up"}],
        "max_steps": 4,
        "metadata": {"difficulty": 2},
    },
    {
        "task_id": "c",
        "reset": {"task_spec": {"split": "test", "index": 3}},
        "prompt": "Solve it.",
        "rewards": ["exact", "fuzzy=0.5"],
    },
    {"task_id": "d", "answer": {"move": "left"}},
]


@pytest.mark.parametrize("row", ROWS, ids=[r["task_id"] for r in ROWS])
def test_row_task_row_round_trip(row: dict) -> None:
    task = Task.model_validate(row)
    assert task.to_row() == row
    assert Task.model_validate(task.to_row()) == task


def test_content_hash_is_canonical_and_ignores_defaults() -> None:
    a = Task.model_validate({"task_id": "x", "reset": {"b": 1, "a": 2}})
    b = Task.model_validate({"reset": {"a": 2, "b": 1}, "task_id": "x", "metadata": {}})
    assert a.content_hash() == b.content_hash()
    assert a.content_hash() != Task(task_id="x", reset={"a": 2}).content_hash()
    assert canonical_json({"b": [1, {"d": "é"}], "a": None}) == '{"a":null,"b":[1,{"d":"é"}]}'


def test_reset_may_be_json_text() -> None:
    task = Task.model_validate({"task_id": "x", "reset": '{"seed": 3, "size": 4}'})
    assert task.reset == {"seed": 3, "size": 4}


@pytest.mark.parametrize("name", sorted(builtin_tasksets()))
def test_every_builtin_taskset_loads_with_200_tasks_and_both_splits(name: str) -> None:
    taskset = load_taskset(name)
    assert {"train", "test"} <= set(taskset.splits)
    assert sum(len(t) for t in taskset.splits.values()) >= 200
    assert taskset.card.env == name
    assert taskset.ref.kind == "builtin" and len(taskset.ref.fingerprint) == 64
    for task in taskset.tasks("test"):
        assert task.answer is not None or task.oracle_actions


def write_folder(folder: Path, rows_by_split: dict[str, list[dict]], card: str = "") -> Path:
    (folder / "data").mkdir(parents=True)
    files = []
    for split, rows in rows_by_split.items():
        (folder / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        files.append(f"  - split: {split}\n    path: data/{split}.jsonl\n")
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        + "".join(files)
        + card
        + "---\n# tasks\n"
    )
    return folder


def test_folder_with_card_binds_env_and_defaults(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "ts",
        {"train": ROWS[:2], "test": ROWS[2:]},
        card="taskhub:\n  env: arith\n  rewards: exact\n  max_steps: 3\n",
    )
    taskset = load_taskset(str(folder))
    assert taskset.card.env == "arith" and taskset.card.rewards == ["exact"]
    assert taskset.default_split() == "test"
    assert [t.task_id for t in taskset.tasks()] == ["c", "d"]
    assert taskset.ref.kind == "local" and taskset.ref.name == "ts"


def test_single_jsonl_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    taskset = load_taskset(str(path))
    assert taskset.ref.kind == "file" and [t.task_id for t in taskset.tasks()] == list("abcd")


def test_parquet_keeps_each_rows_own_reset_kwargs(tmp_path: Path) -> None:
    rows = [
        {"task_id": "a", "reset": {"seed": 1, "family": "add"}},
        {"task_id": "b", "reset": {"seed": 2, "size": 5}},
    ]
    path = tmp_path / "tasks.parquet"
    # Arrow unifies the struct: row a gets size=null and row b family=null.
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = load_taskset(str(path)).tasks()
    assert [t.reset for t in tasks] == [{"seed": 1, "family": "add"}, {"seed": 2, "size": 5}]


def test_parquet_with_json_text_columns(tmp_path: Path) -> None:
    rows = [{"task_id": "a", "reset": json.dumps({"seed": 1, "opt": None})}]
    path = tmp_path / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert load_taskset(str(path)).tasks()[0].reset == {"seed": 1, "opt": None}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"reset": {}}], "train row 0 (tasks.jsonl line 1): field 'task_id': Field required"),
        (
            [{"task_id": "a"}, {"task_id": "a"}],
            "train row 1: duplicate task_id 'a' (already used by train row 0)",
        ),
        (
            [{"task_id": "a", "reset": "not json"}],
            "train row 0 (task_id='a') (tasks.jsonl line 1): field 'reset': Value error, reset is "
            "a string that is not JSON",
        ),
        ([{"task_id": "a", "reset": [1, 2]}], "field 'reset': Input should be a valid dictionary"),
        (
            [{"task_id": "a", "reset": {"x": float("nan")}}],
            "reset.x is nan, which is not valid JSON",
        ),
        (
            [{"task_id": "a", "reward_spec": "exact"}],
            "field 'reward_spec': unknown field; Task fields are task_id, reset",
        ),
        ([{"task_id": "a", "max_steps": 0}], "field 'max_steps': Input should be greater than"),
        (["just a string"], "train row 0 (tasks.jsonl line 1): a row must be a JSON object"),
    ],
    ids=[
        "no-task-id",
        "duplicate-id",
        "reset-not-json",
        "reset-not-object",
        "nan",
        "unknown-field",
        "max-steps-0",
        "not-object",
    ],
)
def test_bad_rows_name_row_and_field(tmp_path: Path, rows: list, message: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SchemaError, match=re.escape(message)):
        load_taskset(str(path))


def test_errors_are_collected_over_rows(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"reset": {}}) + "\n" for _ in range(15)))
    with pytest.raises(SchemaError, match=r"15 invalid row field\(s\)(.|\n)*and 5 more") as info:
        load_taskset(str(path))
    assert info.value.row == 0 and info.value.field == "task_id"


def test_invalid_json_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"task_id": "a"}\n{"task_id": \n')
    with pytest.raises(SchemaError, match=r"tasks.jsonl line 2: not valid JSON"):
        load_taskset(str(path))


def test_bad_card_names_the_field(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "ts", {"test": ROWS}, card="taskhub:\n  env: arith\n  rewardz: x\n"
    )
    with pytest.raises(SchemaError, match=r"taskhub.rewardz: Extra inputs are not permitted"):
        load_taskset(str(folder))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("arihm", "Did you mean 'arith'?"),
        ("./missing-folder", "does not exist"),
        ("missing.jsonl", "does not exist"),
    ],
)
def test_missing_taskset(source: str, message: str) -> None:
    with pytest.raises(TasksetNotFound, match=re.escape(message)):
        load_taskset(source)


def test_missing_split(tmp_path: Path) -> None:
    taskset = load_taskset("arith")
    with pytest.raises(TasksetNotFound, match="has no split 'validation'; splits: "):
        taskset.tasks("validation")


def _folder(tmp_path: Path, rows: list[dict]) -> Path:
    folder = tmp_path / "kept"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_an_unchanged_taskset_is_loaded_once_and_any_change_loads_it_again(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path, ROWS)
    first = load_taskset(str(folder))
    assert load_taskset(str(folder)) is first  # nothing changed: the rows are not read again
    # a row changed, same size: the file's modification time tells
    data = folder / "data" / "test.jsonl"
    data.write_text(data.read_text().replace('"answer": "3"', '"answer": "4"'))
    changed = load_taskset(str(folder))
    assert changed is not first and changed.tasks()[0].answer == "4"
    assert changed.ref.fingerprint != first.ref.fingerprint
    # a file added next to the data: the folder's contents differ
    (folder / "README.md").write_text("---\ntaskhub:\n  description: kept\n---\n")
    described = load_taskset(str(folder))
    assert described is not changed and described.card.description == "kept"
    # the same folder named another way is another source: its ref says how it was named
    assert load_taskset(str(folder) + "/").ref.source == str(folder) + "/"


def test_a_file_removed_or_broken_since_the_last_load_is_read_again(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ROWS)
    load_taskset(str(folder))
    (folder / "data" / "test.jsonl").write_text('{"task_id": "a", "oops": 1}\n')
    with pytest.raises(SchemaError, match="oops"):
        load_taskset(str(folder))
    (folder / "data" / "test.jsonl").unlink()
    with pytest.raises(TasksetNotFound):
        load_taskset(str(folder))


@pytest.mark.parametrize("name", sorted(builtin_tasksets()))
def test_a_tasksets_known_hashes_are_its_rows_content_hashes(name: str) -> None:
    taskset = load_taskset(name)
    for split in taskset.splits:
        for task in taskset.tasks(split):
            assert taskset.content_hash(task) == task.content_hash()
    stranger = Task(task_id="x", answer="1")
    assert taskset.content_hash(stranger) == stranger.content_hash()
