"""Machine-readable copies of every table (CSV and JSON) and Hugging Face model-index YAML."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ._board import Cell

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
        text_columns = [
            c
            for c in columns
            if frame[c].dtype == object or pd.api.types.is_string_dtype(frame[c].dtype)
        ]
        records = [
            dict(zip(columns, values, strict=True))
            for values in frame.itertuples(index=False, name=None)
        ]
    else:
        records = [{c: row.get(c) for c in columns} for row in rows]
    # One row per line, each dumped by the C encoder (indent= would use the Python one).
    lines = [
        json.dumps({c: _json_value(v) for c, v in r.items()}, ensure_ascii=False, allow_nan=False)
        for r in records
    ]
    bounds = [0]
    size = 0
    for index, line in enumerate(lines):
        length = len(line.encode("utf-8")) + 2
        if size and size + length > part_bytes:
            bounds.append(index)
            size = 0
        size += length
    bounds.append(len(lines))
    files = TableFiles(f"data/{name}", len(bounds) - 1)
    for part, (start, stop) in enumerate(itertools.pairwise(bounds)):
        path = site / files.part(part)
        if isinstance(rows, pd.DataFrame):
            piece = frame.iloc[start:stop]
            piece.assign(**{c: piece[c].map(_csv_value) for c in text_columns}).to_csv(
                path.with_name(path.name + ".csv"), index=False, lineterminator="\n"
            )
        else:
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(
                {c: "" if r[c] is None else _csv_value(r[c]) for c in columns}
                for r in records[start:stop]
            )
            path.with_name(path.name + ".csv").write_text(text.getvalue(), encoding="utf-8")
        path.with_name(path.name + ".json").write_text(
            "[\n" + ",\n".join(lines[start:stop]) + "\n]\n", encoding="utf-8"
        )
    return files


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
