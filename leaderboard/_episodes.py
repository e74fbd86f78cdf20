"""The episode browser's data: a run's episodes as small JavaScript files loaded on demand.

Browsers refuse ``fetch()`` of local files, so the site ships data as scripts that call a
registration function, added to the page with a ``<script>`` tag when needed (works from
``file://`` and any static host):

- ``index-NNNN.js``: ``TASKHUB.index(N, {...})``, the columns the browser filters on (task id,
  sample, outcome, reward, success, steps, error type) of ``chunk_size`` episodes;
- ``page-NNNNN.js``: ``TASKHUB.page(N, [...])``, the full records of ``page_size`` episodes,
  copied byte for byte from the results file (JSON is JavaScript), opened one at a time.

Episode ``i`` (in file order) is entry ``i % chunk_size`` of index chunk ``i // chunk_size`` and
record ``i % page_size`` of page ``i // page_size``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from taskhub import OUTCOMES

#: Bytes of records a page file aims at: opening an episode loads one page, and every file
#: costs its creation (fewer, larger files build faster; ~0.5 MB parses in milliseconds).
PAGE_BYTES = 512 * 1024
#: Bounds of the records per page chosen from ``PAGE_BYTES``.
PAGE_SIZES = (10, 1000)
CHUNK_SIZE = 10_000
# Pages joined per Arrow call: bounds the memory of the joined text.
_PAGES_PER_BATCH = 100


@dataclass(frozen=True)
class EpisodeFiles:
    """Where a run's episodes were written, as the browser needs to know it."""

    count: int
    page_size: int
    pages: int
    chunk_size: int
    chunks: int


def write_episodes(
    folder: Path, table: pa.Table, *, page_size: int | None = None, chunk_size: int = CHUNK_SIZE
) -> EpisodeFiles:
    """Write the index chunks and record pages of one run into ``folder``.

    Args:
        folder: Created if missing.
        table: The run's rows of ``read_results_table``, with ``record_json``.
        page_size: Records per page file; by default as many as make about ``PAGE_BYTES``.
        chunk_size: Episodes per index file.

    Returns:
        The layout written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    count = table.num_rows
    chunks = -(-count // chunk_size)
    for chunk in range(chunks):
        part = table.slice(chunk * chunk_size, chunk_size)
        data = _index_columns(part)
        (folder / f"index-{chunk:04d}.js").write_text(
            f"TASKHUB.index({chunk},{_js(data)});\n", encoding="utf-8"
        )
    if page_size is None:
        size = pc.sum(pc.binary_length(table["record_json"])).as_py() or 0
        average = max(size / count, 1) if count else 1
        page_size = min(max(round(PAGE_BYTES / average), PAGE_SIZES[0]), PAGE_SIZES[1])
    pages = -(-count // page_size)
    records = table["record_json"].combine_chunks() if count else None
    for first in range(0, pages, _PAGES_PER_BATCH):
        last = min(pages, first + _PAGES_PER_BATCH)
        start, stop = first * page_size, min(count, last * page_size)
        assert records is not None
        batch = records.slice(start, stop - start)
        bounds = [min(i * page_size, stop - start) for i in range(last - first + 1)]
        lists = pa.LargeListArray.from_arrays(pa.array(bounds, pa.int64()), batch)
        joined = pc.binary_join(lists, pa.scalar(",\n", pa.large_string()))
        for offset, text in enumerate(joined):
            with (folder / f"page-{first + offset:05d}.js").open("wb") as f:
                f.write(b"TASKHUB.page(%d,[\n" % (first + offset))
                f.write(text.as_buffer())
                f.write(b"\n]);\n")
    return EpisodeFiles(
        count=count, page_size=page_size, pages=pages, chunk_size=chunk_size, chunks=chunks
    )


def _index_columns(part: pa.Table) -> dict[str, Any]:
    tasks = part["task_id"].to_pylist()
    task_names = sorted(set(tasks))
    task_codes = {name: i for i, name in enumerate(task_names)}
    errors = part["error_type"].to_pylist()
    error_names = sorted({e for e in errors if e is not None})
    error_codes = {name: i for i, name in enumerate(error_names)}
    success = part["success"].to_pylist()
    return {
        "tasks": task_names,
        "t": [task_codes[t] for t in tasks],
        "s": part["sample"].to_pylist(),
        "o": [OUTCOMES.index(o) for o in part["outcome"].to_pylist()],
        "r": part["reward"].to_pylist(),
        "k": [None if s is None else int(s) for s in success],
        "n": part["num_steps"].to_pylist(),
        "errors": error_names,
        "e": [-1 if e is None else error_codes[e] for e in errors],
    }


def _js(value: Any) -> str:
    """JSON as a JavaScript literal (NaN and Infinity are JavaScript too)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
