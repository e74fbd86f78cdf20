"""Data tables and episode files: the text of each, against the plain way of writing it."""

from __future__ import annotations

import base64
import csv
import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from taskhub.leaderboard._episodes import EPISODE_COLUMNS, EpisodeWriter
from taskhub.leaderboard._exports import _csv_value, write_table

from taskhub import iter_results_tables

from .corpus import IMG, SCRIPT, episode, write_run


def plain_json(value: Any) -> Any:
    """What a table's JSON holds for a cell: Python values, null for NaN, infinities and NA."""
    import pandas as pd

    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


def plain_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A row at a time, as ``json.dumps`` writes it."""
    return [
        json.dumps({k: plain_json(v) for k, v in row.items()}, ensure_ascii=False, allow_nan=False)
        for row in rows
    ]


def read_parts(site: Path, name: str, parts: int, suffix: str) -> list[str]:
    names = [name, *(f"{name}.{i + 1}" for i in range(1, parts))]
    return [(site / "data" / f"{part}{suffix}").read_text() for part in names]


def tricky_frame(n: int) -> Any:
    import pandas as pd

    rng = np.random.default_rng(3)
    floats = rng.normal(size=n) * 10.0 ** rng.integers(-8, 20, size=n)
    floats[::7] = np.nan
    floats[3::11] = np.inf
    return pd.DataFrame(
        {
            "task_id": [f"t-{i}" if i % 5 else f'{SCRIPT}"ünï\\{i}' for i in range(n)],
            "n": rng.integers(-(2**40), 2**40, size=n),
            "rate": floats,
            "flag": rng.integers(0, 2, size=n).astype(bool),
            "maybe": pd.Series([None if i % 3 else i / 3 for i in range(n)], dtype=object),
            "nested": pd.Series(
                [[i, {"k": IMG}] if i % 4 else {"a": None} for i in range(n)], dtype=object
            ),
            "numpy_scalars": pd.Series([np.int64(i) for i in range(n)], dtype=object),
            "count%s": pd.array([i if i % 6 else None for i in range(n)], dtype="Int64"),
            "formula": [("=1+1" if i % 9 == 0 else "-x" if i % 9 == 1 else "ok") for i in range(n)],
        }
    )


def test_a_frame_is_written_as_json_dumps_writes_each_row(tmp_path: Path) -> None:
    import pandas as pd

    frame = tricky_frame(500)
    columns = list(frame.columns)
    files = write_table(tmp_path, "t", frame, columns, part_bytes=4096)
    assert files.parts > 10
    lines = plain_lines(
        [dict(zip(columns, row, strict=True)) for row in frame.itertuples(index=False)]
    )
    texts = read_parts(tmp_path, "t", files.parts, ".json")
    assert [line for text in texts for line in text[2:-3].split(",\n")] == lines
    for text in texts:
        assert text.startswith("[\n") and text.endswith("\n]\n")
        assert len(text.encode()) <= 4096 + 4
    # a part holds as many rows as fit, and at least one
    sizes = [len(line.encode()) + 2 for line in lines]
    bounds, size = [0], 0
    for at, length in enumerate(sizes):
        if size and size + length > 4096:
            bounds.append(at)
            size = 0
        size += length
    rows_per_part = [len(json.loads(text)) for text in texts]
    assert rows_per_part == [b - a for a, b in zip(bounds, [*bounds[1:], len(lines)], strict=True)]
    # the CSV: what pandas writes for the same rows, formulas defused
    csv_texts = read_parts(tmp_path, "t", files.parts, ".csv")
    ends = [*bounds[1:], len(lines)]
    text_columns = [c for c in columns if pd.api.types.is_string_dtype(frame[c].dtype)]
    for text, start, stop in zip(csv_texts, bounds, ends, strict=True):
        piece = frame.iloc[start:stop]
        defused = piece.assign(**{c: piece[c].map(_csv_value) for c in text_columns})
        assert text == defused.to_csv(index=False, lineterminator="\n")
    rows = [r for text in csv_texts for r in csv.DictReader(text.splitlines())]
    assert [r["task_id"] for r in rows] == frame["task_id"].tolist()
    assert {r["formula"] for r in rows} == {"'=1+1", "'-x", "ok"}


def test_rows_are_written_as_json_dumps_writes_them(tmp_path: Path) -> None:
    import pandas as pd

    rows: list[dict[str, Any]] = [
        {"a": 1.5, "b": None, "c": [1, None], "d": SCRIPT, "e": float("nan")},
        {"a": np.float64(0.1), "c": {"x": True}, "d": "=cmd", "e": np.int32(3)},
    ]
    files = write_table(tmp_path, "rows", rows, ["a", "b", "c", "d", "e"])
    full = [{k: row.get(k) for k in "abcde"} for row in rows]
    assert (
        read_parts(tmp_path, "rows", 1, ".json")[0]
        == "[\n" + ",\n".join(plain_lines(full)) + "\n]\n"
    )
    assert files.parts == 1
    empty = write_table(tmp_path, "none", pd.DataFrame({"x": []}), ["x"])
    assert (empty.parts, read_parts(tmp_path, "none", 1, ".json")) == (1, ["[\n\n]\n"])


def test_a_frame_with_unencodable_values_fails_as_json_dumps_fails(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame({"x": pd.Series([[float("nan")]], dtype=object)})
    with pytest.raises(ValueError, match="Out of range float values"):
        write_table(tmp_path, "bad", frame, ["x"])


@pytest.mark.parametrize("batch_rows", [1, 7, 64])
def test_pages_are_the_records_lines_across_blocks(tmp_path: Path, batch_rows: int) -> None:
    """Pages cut across the reader's blocks still hold their records' lines, joined."""
    records = [episode("p", f"t-{i:02d}", observation=f"{SCRIPT} {i}") for i in range(40)]
    run = write_run(tmp_path / "runs", "p", records)
    writer = EpisodeWriter(tmp_path / "files", page_size=6, chunk_size=16)
    for table in iter_results_tables(run, columns=EPISODE_COLUMNS, batch_rows=batch_rows):
        writer.add(table)
    files = writer.close()
    assert (files.count, files.pages, files.chunks) == (40, 7, 3)
    lines = (run / "episodes.jsonl").read_text().splitlines()
    for number in range(files.pages):
        page = (tmp_path / "files" / f"page-{number:05d}.js").read_text()
        packed = base64.b64decode(page[len(f'TASKHUB.page({number},"') : -len('");\n')])
        assert gzip.decompress(packed).decode() == "\n".join(lines[6 * number : 6 * number + 6])


def test_index_files_hold_what_the_plain_lists_hold(tmp_path: Path) -> None:
    """Index columns from numpy and Arrow kernels equal the plain per-value lists."""
    import pyarrow as pa

    from taskhub import OUTCOMES

    tasks = ["b", "ä", "a", "z", "é", "a", "Z", "ä"]
    part = pa.table(
        {
            "task_id": tasks,
            "sample": [0, 1, 2, 3, 4, 5, 6, 7],
            "outcome": ["scored", "agent_error", "infra_error", "scored"] * 2,
            "reward": [1.0, None, 0.25, float("nan"), 0.0, None, 1e-07, 3.5],
            "success": [True, None, False, True, None, False, True, False],
            "num_steps": [1, 0, 3, 2, 1, 1, 1, 9],
            "error_type": [None, "ParseError", "EnvTimeout", None, "Ünknown", None, "A", "A"],
        }
    )
    names = sorted(set(tasks))
    errors = part["error_type"].to_pylist()
    error_names = sorted({e for e in errors if e is not None})
    expected = {
        "tasks": names,
        "t": [names.index(t) for t in tasks],
        "s": list(range(8)),
        "o": [OUTCOMES.index(o) for o in part["outcome"].to_pylist()],
        "r": part["reward"].to_pylist(),
        "k": [None if s is None else int(s) for s in part["success"].to_pylist()],
        "n": part["num_steps"].to_pylist(),
        "errors": error_names,
        "e": [-1 if e is None else error_names.index(e) for e in errors],
    }
    writer = EpisodeWriter(tmp_path, chunk_size=8)
    writer.add(part.append_column("record_line", pa.array(["{}\n"] * 8, pa.large_string())))
    writer.close()
    text = (tmp_path / "index-0000.js").read_text()
    assert text == (
        "TASKHUB.index(0,"
        + json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
        + ");\n"
    )
