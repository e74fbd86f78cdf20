"""Tasksets checked in bulk: the same tasks, hashes, fingerprints and errors as row by row."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from taskhub import SchemaError, Task, canonical_json, load_taskset
from taskhub._canonical import row_texts, supported
from taskhub._limits import MAX_JSON_DEPTH
from taskhub._rows import TaskRows, jsonl_rows, parquet_rows, row_rewards
from taskhub._schema import MEASURED_FIELDS
from taskhub._taskset import BULK_MIN_BYTES, _read_files, _validate_rows, builtin_tasksets

MEASURED = set(MEASURED_FIELDS)

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


def same_as_slow(bulk: TaskRows | None, split: str, path: Path) -> tuple[Task, ...]:
    """``bulk`` (a bulk reader's rows of ``path``) holds the tasks and hashes that ``Task``
    validation gives; returns those tasks."""
    assert bulk is not None
    expected = slow(split, [path])
    assert list(bulk) == list(expected)
    assert bulk.content_hashes() == [t.content_hash() for t in expected]
    return expected


def bulk_equals_slow(path: Path, rows: list[dict]) -> tuple[Task, ...]:
    """Write ``rows`` as parquet at ``path``: the bulk reader gives the ``Task`` path's rows and
    hashes. Returns those tasks."""
    pq.write_table(pa.Table.from_pylist(rows), path)
    return same_as_slow(parquet_rows("train", [path]), "train", path)


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


# --- the hashed text made without a Task: exact for every row, or the slow path is taken ------


def test_msgspec_writes_floats_as_json_dumps_between_1e_4_and_1e16() -> None:
    # _Floats relies on this: inside the range the two writers agree, outside it they do not
    encode = msgspec.json.Encoder(order="sorted").encode
    rng = random.Random(20261205)
    floats = [0.0, -0.0, 1e-4, math.nextafter(1e-4, 1), math.nextafter(1e16, 0), 1e15, 0.1]
    floats += [2.0**53, 2.0**53 + 2, 123.0, 9999999999999998.0, 0.30000000000000004]
    for _ in range(200_000):
        value = rng.uniform(1, 2) * 2.0 ** rng.randint(-14, 54)
        if 1e-4 <= value < 1e16:
            floats.append(value * rng.choice((1, -1)))
    floats += [float(rng.randint(1, 10**16 - 1)) for _ in range(10_000)]
    differ = [v for v in floats if encode(v) != canonical_json(v).encode()]
    assert not differ
    assert all(encode(v) != canonical_json(v).encode() for v in (1e16, 1e-5, -1.5e300, 5e-5))


TRICKY: list[dict[str, Any]] = [
    {
        "task_id": "floats",
        "reset": {"a": 1e16, "b": 0.1, "c": -0.0, "d": 1e-05, "e": 12345678901234567.0},
        "answer": [0.0001, 9999999999999998.0, 5e-324, 1.7976931348623157e308, 2.5],
    },
    {
        "task_id": "ints",
        "reset": {"big": 18446744073709551616, "small": -(2**63) - 1},
        "answer": [0, -1, 2**63, 10**40],
    },
    {
        "task_id": "text",
        "prompt": 'quote " backslash \\ newline \n tab \t nul \x00 unit \x1f del \x7f é ✓ 😀',
        "metadata": {"ключ": "значение", "": "empty key", 'a"b': 1, "\n": 2, "Z": 3, "a": 4},
    },
    {
        "task_id": "nested",
        "reset": {"l": [[1, [2, {"x": None}]], {}], "o": {"z": {"y": {"x": [True, False, None]}}}},
        "answer": {"k": None, "j": {}},
    },
    {
        "task_id": "defaults",
        "reset": {},
        "metadata": {},
        "answer": None,
        "prompt": None,
        "rewards": None,
        "max_steps": None,
        "oracle_actions": None,
    },
    {"task_id": "rewards-text", "rewards": "exact", "oracle_actions": [], "answer": ""},
    {"task_id": "measured", "pass_rate": 0.5, "difficulty": 0.5, "profile": {"m": {"n": 1}}},
    {"task_id": "bools", "answer": False, "reset": {"t": True, "n": None}, "max_steps": 1},
]


@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "utf-8"])
def test_tricky_json_lines_rows_hash_as_task_validation_hashes_them(
    tmp_path: Path, ascii_only: bool
) -> None:
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in TRICKY))
    same_as_slow(jsonl_rows("test", [path]), "test", path)


def test_a_file_of_many_chunks_and_shapes_hashes_as_task_validation(tmp_path: Path) -> None:
    # rows of 1 KB: 18 MB in 4 MB chunks, each taking another way through jsonl_rows
    pad = "p" * 1000
    rows: list[dict[str, Any]] = []
    for i in range(9000):  # the shape of the first row: decoded as structs after chunk 1
        seed = 1e-5 if i == 5000 else i  # a float msgspec writes otherwise, in chunk 2
        rows.append({"task_id": f"a{i}", "reset": {"seed": seed, "family": "add"}, "prompt": pad})
    for i in range(3000):  # another shape: decoded as dicts from here on
        rows.append({"task_id": f"b{i}", "reset": {"seed": i}, "metadata": {"k": i}, "prompt": pad})
    for i in range(3000):  # measured rows
        rows.append({"task_id": f"c{i}", "pass_rate": i / 3000, "prompt": pad})
    for i in range(3000):  # now and then a float msgspec writes otherwise
        reset = {"x": 1e-5 if i % 1000 == 7 else 0.5}
        rows.append({"task_id": f"d{i}", "reset": reset, "prompt": pad})
    path = tmp_path / "train.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines[100:100] = ["", "   "]  # blank lines hold no row
    path.write_text("\n".join(lines))  # and no newline at the end
    got = jsonl_rows("train", [path])
    assert got is not None and len(got) == len(rows)
    expected = slow("train", [path])
    assert got.content_hashes() == [t.content_hash() for t in expected]
    assert got.task_ids == [r["task_id"] for r in rows]
    assert [got[i] for i in range(0, len(rows), 997)] == list(expected[::997])
    assert got[-1] == expected[-1]


def named_rewards(tasks: Any) -> list[tuple[int, str, tuple[str, ...]]]:
    """What ``row_rewards`` gives, read from each ``Task``."""
    return [(i, t.task_id, tuple(t.rewards)) for i, t in enumerate(tasks) if t.rewards]


def test_the_rewards_rows_name_are_read_at_load_as_their_tasks_give_them(tmp_path: Path) -> None:
    # every way through the bulk decoders (shaped structs, plain rows, measured rows, a spec as
    # one string, a key written with escapes), two files, slices, parquet: the specs of the
    # rows that name any, without a Task built, equal to the tasks'
    rows: list[dict[str, Any]] = []
    for i in range(6000):
        rewards = {"rewards": ["exact", f"r{i}"]} if i % 997 == 3 else {}
        rows.append({"task_id": f"a{i}", "reset": {"seed": i, "family": "add"}, **rewards})
    rows.append({"task_id": "one", "rewards": "exact", "pass_rate": 0.5})
    rows.append({"task_id": "empty", "rewards": []})
    rows.append({"task_id": "plain", "reset": {"seed": 1}, "rewards": ["math_verify"]})
    lines = [json.dumps(r) for r in rows]
    lines.append('{"task_id": "escaped", "\\u0072ewards": ["judge"]}')
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("\n".join(lines[:4000]) + "\n")
    second.write_text("\n".join(lines[4000:]) + "\n")
    got = jsonl_rows("train", [first, second])
    assert got is not None
    expected = slow("train", [first, second])
    assert expected[-1].rewards == ["judge"] and expected[-4].rewards == ["exact"]
    assert list(got.row_rewards()) == named_rewards(expected) != []
    assert list(row_rewards(got)) == list(row_rewards(expected)) == named_rewards(expected)
    assert list(got[3990:].row_rewards()) == named_rewards(expected[3990:])
    assert list(got[::3].row_rewards()) == named_rewards(expected[::3])
    parquet = [{"task_id": "p", "rewards": ["exact"]}, {"task_id": "q"}, {"task_id": "r"}]
    parquet[2]["rewards"] = ["judge", "exact"]
    path = tmp_path / "train.parquet"
    tasks = bulk_equals_slow(path, parquet)
    loaded = parquet_rows("train", [path])
    assert loaded is not None and list(loaded.row_rewards()) == named_rewards(tasks)


@pytest.mark.parametrize("escaped", [False, True], ids=["named", "escaped-keys"])
def test_rows_of_one_shape_with_keys_of_every_kind_hash_as_task_validation(
    tmp_path: Path, escaped: bool
) -> None:
    # past the first chunk these rows are decoded as structs named by the first row's keys:
    # empty, upper case, non-ASCII and outside the BMP, sorted as Python sorts them (keys
    # that need an escape stay dict keys: msgspec refuses them as names)
    keys = ["ключ", "", "Z", "a", "\uffff", "😀", "é", "e e"]
    if escaped:
        keys += ['a"b', "\n", "e\\"]
    pad = "p" * 1000
    rows = [
        {
            "task_id": f"t{i}",
            "reset": {key: [i, key] for key in keys},
            "metadata": {key: {"n": None} for key in reversed(keys)},
            "prompt": pad,
        }
        for i in range(6000)
    ]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    got = jsonl_rows("train", [path])
    assert got is not None
    expected = slow("train", [path])
    assert got.content_hashes() == [t.content_hash() for t in expected]
    assert got[5999] == expected[5999]


def test_crlf_lines_load_in_bulk_and_a_lone_carriage_return_does_not(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\r\n" for r in ROWS) + b"\r\n")
    rows = jsonl_rows("test", [path])
    assert rows is not None
    assert rows.content_hashes() == [t.content_hash() for t in slow("test", [path])]
    path.write_bytes(b'{"task_id": "a",\r"answer": 1}\n')  # splitlines breaks this line
    assert jsonl_rows("test", [path]) is None
    with pytest.raises(SchemaError, match="test.jsonl line 1: not valid JSON"):
        load_taskset(str(path))


def test_rows_nested_past_the_limit_get_task_validation(tmp_path: Path) -> None:
    def row(depth: int) -> str:  # the row object, reset and depth - 2 lists
        lists = depth - 2
        return '{"task_id": "deep", "reset": {"a": ' + "[" * lists + "]" * lists + "}}"

    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + row(MAX_JSON_DEPTH) + "\n")
    rows = jsonl_rows("test", [path])
    assert rows is not None and list(rows) == list(slow("test", [path]))
    path.write_text(json.dumps(ROWS[0]) + "\n" + row(MAX_JSON_DEPTH + 1) + "\n")
    assert jsonl_rows("test", [path]) is None
    with pytest.raises(SchemaError, match="line 2: not valid JSON: nested deeper than 100"):
        load_taskset(str(path))


def test_two_rows_on_one_line_get_task_validation(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    path.write_text('{"task_id": "a"} {"task_id": "b"}\n{"task_id": "c"}\n')
    assert jsonl_rows("test", [path]) is None
    with pytest.raises(SchemaError, match="line 1: not valid JSON"):
        load_taskset(str(path))


def test_bulk_json_lines_loading_needs_no_pyarrow(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "train.jsonl", [{"task_id": f"t{i}", "prompt": "x" * 300} for i in range(5000)]
    )
    assert path.stat().st_size >= BULK_MIN_BYTES
    script = (
        "import sys\nfrom taskhub import load_taskset\n"
        f"assert type(load_taskset({str(path)!r}).tasks()).__name__ == 'TaskRows'\n"
        "load_taskset('arith')\n"
        "print('pyarrow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- parquet: the canonical text built a column at a time --------------------------------------


def tricky_table() -> pa.Table:
    """Every type the column-wise text handles, with nulls where each kind of null means
    something else (an absent key, a JSON null, a default)."""
    item = pa.struct([("a", pa.int64()), ("b", pa.string())])
    reset = pa.struct(
        [
            ("i8", pa.int8()),
            ("u64", pa.uint64()),
            ("i64", pa.int64()),
            ("f32", pa.float32()),
            ("f64", pa.float64()),
            ("flag", pa.bool_()),
            ("text", pa.string()),
            ("ints", pa.list_(pa.int64())),
            ("items", pa.large_list(item)),
            ("never", pa.null()),
            ("inner", pa.struct([("x", pa.int64()), ("y", pa.string())])),
        ]
    )
    metadata = pa.struct(
        [('a"b', pa.int64()), ("é", pa.string()), ("Z", pa.int64()), ("", pa.bool_())]
    )
    answer = pa.struct([("k", pa.int64()), ("l", pa.list_(pa.float64())), ("n", pa.null())])
    profile = pa.struct([("m", pa.float64())])
    schema = pa.schema(
        [
            ("task_id", pa.string()),
            ("reset", reset),
            ("metadata", metadata),
            ("answer", answer),
            ("prompt", pa.large_string()),
            ("rewards", pa.list_(pa.string())),
            ("max_steps", pa.int32()),
            ("oracle_actions", pa.list_(item)),
            ("pass_rate", pa.float64()),
            ("profile", profile),
        ]
    )
    every_control = "".join(chr(c) for c in range(32))
    rows: list[dict[str, Any]] = [
        {
            "task_id": 'esc " \\ ' + every_control + " é ✓ 😀",
            "reset": {
                "i8": -128,
                "u64": 2**64 - 1,
                "i64": -(2**63),
                "f32": 0.1,
                "f64": 1e16,
                "flag": True,
                "text": "a\nb",
                "ints": [1, None, 3],
                "items": [{"a": 1, "b": None}, None, {"a": None, "b": "x"}],
                "inner": {"x": 1, "y": None},
            },
            "metadata": {'a"b': 1, "é": "ü", "Z": None, "": False},
            "answer": {"k": None, "l": [1.0, None, -0.0, 1e-05], "n": None},
            "prompt": "line\r\nnext\ttab",
            "rewards": ["exact", "fuzzy=0.5"],
            "max_steps": 3,
            "oracle_actions": [{"a": 1, "b": None}],
            "pass_rate": 0.25,
            "profile": {"m": 1.0},
        },
        {  # every key of reset and metadata null: {} (the default), left out
            "task_id": "empty",
            "reset": {},
            "metadata": {},
            "answer": {"k": 1, "l": [], "n": None},
            "oracle_actions": [],
        },
        {"task_id": "nulls"},  # every column null: the keys are absent
        {
            "task_id": "floats",
            "reset": {"f64": 12345678901234567.0, "f32": -3.5, "ints": [], "items": []},
            "answer": {"l": [5e-324, 1.7976931348623157e308, 0.30000000000000004]},
            "rewards": [],
        },
    ]
    return pa.Table.from_pylist(rows, schema=schema)


def test_tricky_parquet_rows_hash_as_task_validation_hashes_them(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    pq.write_table(tricky_table(), path)
    same_as_slow(parquet_rows("train", [path]), "train", path)


def test_the_column_wise_text_of_a_slice_is_the_text_of_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    pq.write_table(tricky_table(), path)
    table = pq.read_table(path)
    tasks = slow("train", [path])
    for start, stop in [(0, 4), (1, 3), (2, 4), (3, 4)]:
        texts = row_texts(table.slice(start, stop - start)).to_pylist()
        assert texts == [
            canonical_json(t.model_dump(mode="json", exclude_defaults=True, exclude=MEASURED))
            for t in tasks[start:stop]
        ]


@pytest.mark.parametrize(
    "kind",
    [
        pa.timestamp("s"),
        pa.date32(),
        pa.binary(),
        pa.decimal128(5, 2),
        pa.float16(),
        pa.dictionary(pa.int32(), pa.string()),
        pa.map_(pa.string(), pa.int64()),
        pa.struct([("a", pa.int64()), ("a", pa.int64())]),
        pa.list_(pa.timestamp("s")),
    ],
    ids=str,
)
def test_types_without_an_exact_text_are_refused(kind: pa.DataType) -> None:
    assert not supported(kind)
    assert not supported(pa.struct([("x", kind)]))


def test_a_parquet_value_task_refuses_is_not_hashed_in_bulk(tmp_path: Path) -> None:
    # a timestamp inside reset: Task refuses it, so the bulk path must not take it
    path = tmp_path / "train.parquet"
    table = pa.table(
        {"task_id": ["a"], "reset": pa.array([{"at": 0}], pa.struct([("at", pa.timestamp("s"))]))}
    )
    pq.write_table(table, path)
    assert parquet_rows("train", [path]) is None
    with pytest.raises(SchemaError, match=r"train row 0 .*field 'reset\.at'"):
        load_taskset(str(path))


def test_bulk_parquet_loading_needs_no_pandas(tmp_path: Path) -> None:
    # pa.array and pa.scalar import pandas (a second on a cold start): the bulk path and the
    # tasks read afterwards build their Arrow values without them
    path = tmp_path / "train.parquet"
    pq.write_table(tricky_table(), path)
    script = (
        "import sys\nfrom taskhub import load_taskset\n"
        f"tasks = load_taskset({str(path)!r}).tasks()\n"
        "assert type(tasks).__name__ == 'TaskRows' and tasks[0] != tasks[-1]\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
