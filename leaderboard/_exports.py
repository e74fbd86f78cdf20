"""Machine-readable copies of every table (CSV and JSON) and Hugging Face model-index YAML."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ._board import Cell

#: The encoder ``json.dumps(..., ensure_ascii=False)`` uses for text (C when available).
_encode_string: Callable[[str], str] = json.encoder.encode_basestring

_FORMULA = ("=", "+", "-", "@", "\t", "\r")


#: Bytes of rows a table's JSON file holds at most: a larger table is written in parts, so
#: that no file of a site is large (a browser or a spreadsheet opens each part at once).
PART_BYTES = 512 * 1024


class TableFiles(str):
    """Where a table was written: ``data/<name>`` (its first part), and how many parts.

    The text is the path of the first part without extension; part ``i`` (from 0) is
    ``part(i)``: ``data/<name>``, then ``data/<name>.2``, ``data/<name>.3``...
    """

    parts: int

    def __new__(cls, path: str, parts: int = 1) -> TableFiles:
        """The table at ``path`` (without extension), in ``parts`` parts."""
        files = super().__new__(cls, path)
        files.parts = parts
        return files

    def part(self, index: int) -> str:
        """The path of part ``index`` (from 0), without extension."""
        return str(self) if index == 0 else f"{self}.{index + 1}"

    @property
    def names(self) -> list[str]:
        """The path of every part, without extension."""
        return [self.part(i) for i in range(self.parts)]


def write_table(
    site: Path,
    name: str,
    rows: Sequence[dict[str, Any]] | pd.DataFrame,
    columns: list[str],
    *,
    part_bytes: int = PART_BYTES,
) -> TableFiles:
    """Write ``data/<name>.csv`` and ``data/<name>.json`` under ``site``, in parts if large.

    Args:
        site: The site folder.
        name: Path of the table below ``data/``, without extension.
        rows: One mapping per row, or a frame.
        columns: Columns, in order.
        part_bytes: Bytes of JSON a part holds at most (a part holds one row at least).

    Returns:
        The paths written, relative to the site, without extension (``data/<name>``...).
    """
    base = site / "data" / name
    base.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(rows, pd.DataFrame):
        frame = rows[columns]
        cells = [_json_column(frame[c]) for c in columns]
        count = len(frame)
        csv_rows = _csv_rows(_csv_frame(frame))
    else:
        records = [{c: row.get(c) for c in columns} for row in rows]
        cells = [[_json_cell(r[c]) for r in records] for c in columns]
        count = len(records)
        csv_rows = [
            tuple("" if r[c] is None else _csv_value(r[c]) for c in columns) for r in records
        ]
    lines = _json_lines(columns, cells, count)
    bounds = _part_bounds(lines, part_bytes)
    files = TableFiles(f"data/{name}", len(bounds) - 1)
    for part, (start, stop) in enumerate(itertools.pairwise(bounds)):
        path = site / files.part(part)
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(csv_rows[start:stop])
        path.with_name(path.name + ".csv").write_text(text.getvalue(), encoding="utf-8")
        path.with_name(path.name + ".json").write_text(
            "[\n" + ",\n".join(lines[start:stop]) + "\n]\n", encoding="utf-8"
        )
    return files


# A table's JSON is one ``json.dumps(row, ensure_ascii=False, allow_nan=False)`` per row, of
# the row's values made JSON-safe by ``_json_value``. Dumping row by row costs microseconds a
# cell, seconds for the per-task tables of a million episodes; so the cells are encoded a
# column at a time (a numeric column in one pass) and joined into the same text.


def _json_cell(value: Any) -> str:
    """One value as ``json.dumps`` writes it inside a row (after ``_json_value``)."""
    kind = type(value)
    if kind is str:
        return _encode_string(value)
    if value is None:
        return "null"
    if kind is float:
        return float.__repr__(value) if math.isfinite(value) else "null"
    if kind is int:
        return int.__repr__(value)
    return json.dumps(_json_value(value), ensure_ascii=False, allow_nan=False)


def _json_column(column: pd.Series[Any]) -> list[str]:
    """Every cell of a frame's column, as ``_json_cell`` writes it."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":
        return list(map(int.__repr__, column.to_numpy().tolist()))
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        values = column.to_numpy()
        cells = list(map(float.__repr__, values.tolist()))
        for at in np.flatnonzero(~np.isfinite(values)).tolist():
            cells[at] = "null"
        return cells
    if isinstance(dtype, np.dtype) and dtype.kind == "b":
        return ["true" if v else "false" for v in column.to_numpy().tolist()]
    items = column.tolist()
    if _is_text(column) and not column.hasnans:
        return list(map(_encode_string, items))
    return [_json_cell(v) for v in items]


def _is_text(column: pd.Series[Any]) -> bool:
    """Whether ``column`` is of pandas' string dtype: text only, missing values aside."""
    return isinstance(column.dtype, pd.StringDtype)


def _json_lines(columns: list[str], cells: list[list[str]], count: int) -> list[str]:
    """Rows of cells as JSON objects, keys in ``columns`` order (``json.dumps``' separators)."""
    if not columns:
        return ["{}"] * count
    keys = [_encode_string(c).replace("%", "%%") + ": %s" for c in columns]
    template = "{" + ", ".join(keys) + "}"
    return [template % row for row in zip(*cells, strict=True)]


def _part_bounds(lines: list[str], part_bytes: int) -> list[int]:
    """Where the table's parts start (and the last ends): at most ``part_bytes`` of JSON each.

    A part holds a row at least; each row counts its bytes and the two of its separator.
    """
    sizes = np.fromiter(
        (len(line) if line.isascii() else len(line.encode("utf-8")) for line in lines),
        dtype=np.int64,
        count=len(lines),
    )
    ends = np.cumsum(sizes + 2)
    bounds = [0]
    while bounds[-1] < len(lines):
        start = bounds[-1]
        before = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, before + part_bytes, side="right"))
        bounds.append(max(stop, start + 1))
    if len(bounds) == 1:
        bounds.append(0)
    return bounds


def _csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``_csv_value`` applied to its text columns (those it would change)."""
    changed = {}
    for name in frame.columns:
        column = frame[name]
        if not (column.dtype == object or pd.api.types.is_string_dtype(column.dtype)):
            continue
        if _is_text(column):
            needed = bool(column.str.startswith(_FORMULA).fillna(False).any())
        else:
            needed = any(
                isinstance(v, list | dict) or (isinstance(v, str) and v.startswith(_FORMULA))
                for v in column.tolist()
            )
        if needed:
            changed[name] = column.map(_csv_value)
    return frame.assign(**changed) if changed else frame


def _csv_rows(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """The rows of ``frame`` as ``DataFrame.to_csv`` hands them to the csv module.

    Its conversions, without its per-call cost (a table is written in many parts): floats as
    numpy writes them (``astype(str)``), missing values as empty cells, anything else as is.
    """
    columns = []
    for name in frame.columns:
        column = frame[name]
        missing = column.isna().to_numpy()
        if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f":
            values = column.to_numpy().astype(str).astype(object)
        elif isinstance(column.dtype, np.dtype):
            values = np.array(column.to_numpy(), dtype=object)
        else:
            values = np.asarray(column.array.astype(object))
        values[missing] = ""
        columns.append(values.tolist())
    return list(zip(*columns, strict=True)) if columns else [() for _ in range(len(frame))]


def _csv_value(value: Any) -> Any:
    if isinstance(value, list | dict):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if isinstance(value, str) and value.startswith(_FORMULA):
        # A spreadsheet would run a cell starting like this as a formula (CSV injection).
        return "'" + value
    return value


def _json_value(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN and infinities (and pandas' NA) to null."""
    if hasattr(value, "item") and not isinstance(value, list | dict | str):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA:
        return None
    return value


def model_index(cell: Cell) -> str:
    """The Hugging Face model-card ``model-index`` YAML of one (model, taskset) cell.

    ``dataset.revision`` is the taskset's resolved Hub commit; a taskset that was not loaded from
    the Hub has none, and its content fingerprint is given under ``dataset.args`` instead, beside
    the cell's configuration fingerprint and reward specs (one entry per configuration: a
    taskset scored two ways gives two). Each reward component gets its own metric.

    Args:
        cell: The cell.

    Returns:
        YAML text to paste into (or merge with) the model card's metadata.
    """
    summary = cell.stats.summary
    column = cell.column
    manifest = cell.runs[0].manifest
    dataset: dict[str, Any] = {
        "name": column.name,
        "type": column.repo_id or column.name,
    }
    if column.revision_kind == "commit":
        dataset["revision"] = column.revision
    dataset["split"] = column.split
    config = column.comparability
    dataset["args"] = {
        "taskhub_fingerprint": manifest.taskset.fingerprint,
        "taskhub_config": cell.fingerprint,
        "rewards": ", ".join(r.spec for r in config.rewards),
    }
    metrics: list[dict[str, Any]] = []
    if summary.mean_reward is not None:
        interval = (
            f", 95% CI [{summary.ci95[0]:.4f}, {summary.ci95[1]:.4f}]" if summary.ci95 else ""
        )
        metrics.append(
            {
                "type": "mean_reward",
                "value": round(summary.mean_reward, 4),
                "name": f"Mean reward (n={summary.n_rewarded}{interval})",
            }
        )
    if summary.success_rate is not None:
        metrics.append(
            {
                "type": "success_rate",
                "value": round(summary.success_rate, 4),
                "name": "Success rate",
            }
        )
    for name, value in summary.pass_at_k.items():
        metrics.append({"type": name, "value": round(value, 4), "name": f"{name} (unbiased)"})
    if len(summary.components) > 1:
        for component in summary.components:
            if component.mean is None:
                continue
            metrics.append(
                {
                    "type": f"reward/{component.name}",
                    "value": round(component.mean, 4),
                    "name": f"Reward component {component.name} (n={component.n})",
                }
            )
    envs = sorted({r.env.name for r in cell.runs if r.env is not None})
    document = {
        "model-index": [
            {
                "name": manifest.model.name,
                "results": [
                    {
                        "task": {
                            "type": "reinforcement-learning",
                            "name": "OpenEnv " + ", ".join(envs) if envs else "OpenEnv",
                        },
                        "dataset": dataset,
                        "metrics": metrics,
                    }
                ],
            }
        ]
    }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
