"""The episode browser's data: a run's episodes as small JavaScript files loaded on demand.

Browsers refuse ``fetch()`` of local files, so the site ships data as scripts that call a
registration function, added to the page with a ``<script>`` tag when needed (works from
``file://`` and any static host):

- ``index-NNNN.js``: ``TASKHUB.index(N, {...})``, the columns the browser filters on (task id,
  sample, outcome, reward, success, steps, error type) of ``chunk_size`` episodes;
- ``page-NNNNN.js``: ``TASKHUB.page(N, "...")``, the full records of ``page_size`` episodes, each
  stored once: their lines as in the results file, gzip-compressed and base64-encoded (the
  browser inflates them with ``DecompressionStream``), opened one page at a time. A page's
  text is a slice of the bytes read from the results file (``record_line``), compressed
  without being parsed or copied.

Episode ``i`` (in file order) is entry ``i % chunk_size`` of index chunk ``i // chunk_size`` and
record ``i % page_size`` of page ``i // page_size``. Runs are written as they are read, a block
of records at a time (``EpisodeWriter``), so that a run of any size is never held in memory;
pages are compressed on worker threads. The compressor is ISA-L's (``isal``): its gzip streams
are what zlib's are to any reader, made several times faster, and compressing trajectories
was most of a site's build time.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from isal import isal_zlib

from taskhub import OUTCOMES

from ._stats import python_values

#: Bytes of records (uncompressed) a page file aims at: opening an episode loads one page, and
#: every file costs its creation. Compressed, a page is a small fraction of this.
PAGE_BYTES = 2 * 1024 * 1024
#: Bounds of the records per page chosen from ``PAGE_BYTES``.
PAGE_SIZES = (10, 4000)
CHUNK_SIZE = 10_000
#: Columns of ``taskhub.read_results_table`` the episode files are made of.
EPISODE_COLUMNS = (
    "task_id",
    "sample",
    "outcome",
    "reward",
    "success",
    "num_steps",
    "error_type",
    "record_line",
)
#: ISA-L's level 1 (of 0-3): on trajectories, smaller pages than zlib's level 1 in a seventh of
#: its time.
_LEVEL = 1
#: Pages compressed at once at most, per run (bounds the memory they hold).
_IN_FLIGHT = 8


@dataclass(frozen=True)
class EpisodeFiles:
    """Where a run's episodes were written, as the browser needs to know it."""

    count: int
    page_size: int
    pages: int
    chunk_size: int
    chunks: int


class EpisodeWriter:
    """Writes a run's index chunks and record pages as blocks of its episodes arrive.

    Example::

        writer = EpisodeWriter(folder)
        for table in iter_results_tables(run, columns=EPISODE_COLUMNS):
            writer.add(table)
        files = writer.close()
    """

    def __init__(
        self,
        folder: Path,
        *,
        page_size: int | None = None,
        chunk_size: int = CHUNK_SIZE,
        executor: Executor | None = None,
    ) -> None:
        """Write into ``folder`` (created if missing).

        Args:
            folder: The run's episode folder.
            page_size: Records per page file; by default as many as make about
                ``PAGE_BYTES``, judged from the first block of episodes.
            chunk_size: Episodes per index file.
            executor: Where pages are compressed and written (here, one after another, if
                None).
        """
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.page_size = page_size
        self.chunk_size = chunk_size
        self.executor = executor
        self.count = 0
        self._index: list[pa.Table] = []
        self._index_rows = 0
        self._lines: list[pa.Array] = []
        self._line_rows = 0
        self._chunks = 0
        self._pages = 0
        self._writing: list[Future[None]] = []

    def add(self, table: pa.Table) -> None:
        """Add the next episodes: rows of ``read_results_table`` with ``EPISODE_COLUMNS``."""
        if table.num_rows == 0:
            return
        lines = table["record_line"]
        chunks = lines.chunks if isinstance(lines, pa.ChunkedArray) else [lines]
        if self.page_size is None:
            # as long as the records' JSON: their lines less the line breaks
            size = sum(_text_bytes(chunk, 0, len(chunk)) for chunk in chunks) - table.num_rows
            average = max(size / table.num_rows, 1)
            self.page_size = min(max(round(PAGE_BYTES / average), PAGE_SIZES[0]), PAGE_SIZES[1])
        self.count += table.num_rows
        self._index.append(table.drop_columns(["record_line"]))
        self._index_rows += table.num_rows
        self._lines.extend(chunk for chunk in chunks if len(chunk))
        self._line_rows += table.num_rows
        self._flush(final=False)

    def close(self) -> EpisodeFiles:
        """Write what is left and wait for every page; return the layout written (again)."""
        self._flush(final=True)
        for future in self._writing:
            future.result()
        self._writing = []
        return EpisodeFiles(
            count=self.count,
            page_size=self.page_size or PAGE_SIZES[0],
            pages=self._pages,
            chunk_size=self.chunk_size,
            chunks=self._chunks,
        )

    def _flush(self, *, final: bool) -> None:
        while self._index_rows >= self.chunk_size or (final and self._index_rows):
            part = pa.concat_tables(self._index)
            chunk, rest = part.slice(0, self.chunk_size), part.slice(self.chunk_size)
            text = f"TASKHUB.index({self._chunks},{_js(_index_columns(chunk))});\n"
            (self.folder / f"index-{self._chunks:04d}.js").write_text(text, encoding="utf-8")
            self._chunks += 1
            self._index, self._index_rows = [rest], rest.num_rows
        size = self.page_size or PAGE_SIZES[0]
        while self._line_rows >= size or (final and self._line_rows):
            self._write_page(self._pages, self._take_page(min(size, self._line_rows)))
            self._pages += 1

    def _take_page(self, rows: int) -> list[pa.Buffer]:
        """The text of the next ``rows`` pending records: their lines, the last one's break cut.

        Slices of the buffers the lines were read into, one per block of records the page
        spans (usually one).
        """
        parts: list[pa.Buffer] = []
        while rows:
            lines = self._lines[0]
            taken = min(rows, len(lines))
            start = _line_offsets(lines)[0]
            parts.append(lines.buffers()[2].slice(start, _text_bytes(lines, 0, taken)))
            if taken == len(lines):
                self._lines.pop(0)
            else:
                self._lines[0] = lines.slice(taken)
            rows -= taken
            self._line_rows -= taken
        parts[-1] = parts[-1].slice(0, parts[-1].size - 1)
        return parts

    def _write_page(self, number: int, text: list[pa.Buffer]) -> None:
        job = _page_job(self.folder / f"page-{number:05d}.js", number, text)
        if self.executor is None:
            job()
            return
        running = []
        for future in self._writing:
            if future.done():
                future.result()  # raises what the page's job raised
            else:
                running.append(future)
        self._writing = running
        while len(self._writing) >= _IN_FLIGHT:
            self._writing.pop(0).result()
        self._writing.append(self.executor.submit(job))


def _line_offsets(lines: pa.Array) -> Any:
    """Where each of ``lines`` (a large string array) starts in its data buffer, and the end."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    return offsets[lines.offset : lines.offset + len(lines) + 1]


def _text_bytes(lines: pa.Array, start: int, stop: int) -> int:
    """Bytes of ``lines[start:stop]``, back to back in the array's data buffer."""
    offsets = _line_offsets(lines)
    return int(offsets[stop] - offsets[start])


def _page_job(path: Path, number: int, text: list[pa.Buffer]) -> Callable[[], None]:
    def write() -> None:
        # A page spanning two blocks is joined first: one call, the bytes of one text.
        whole = memoryview(text[0]) if len(text) == 1 else b"".join(text)
        packed = isal_zlib.compress(whole, _LEVEL, 31)  # 31: a gzip stream
        with path.open("wb") as f:
            f.write(b'TASKHUB.page(%d,"' % number)
            f.write(base64.b64encode(packed))
            f.write(b'");\n')

    return write


def _index_columns(part: pa.Table) -> dict[str, Any]:
    # Python lists come from numpy (tens of nanoseconds a value) rather than from Arrow's
    # to_pylist (a Python object built per value): an index file holds 10,000 episodes.
    task_names, task_codes = _codes(part["task_id"])
    error_names, error_codes = _codes(part["error_type"])
    outcomes = pc.index_in(part["outcome"], value_set=pa.array(OUTCOMES))
    return {
        "tasks": task_names,
        "t": task_codes,
        "s": python_values(part["sample"]),
        "o": python_values(outcomes),
        "r": python_values(part["reward"]),
        "k": python_values(pc.cast(part["success"], pa.int64())),
        "n": python_values(part["num_steps"]),
        "errors": error_names,
        "e": error_codes,
    }


def _codes(column: pa.ChunkedArray) -> tuple[list[str], list[int]]:
    """The distinct values of a text column, sorted, and each row's place among them (-1: null).

    Sorted as Python sorts text: UTF-8 bytes sort in code point order.
    """
    names = pc.drop_null(pc.unique(column)).sort()
    codes = pc.fill_null(pc.index_in(column, value_set=names), -1)
    return names.to_pylist(), python_values(codes)


def _js(value: Any) -> str:
    """JSON as a JavaScript literal (NaN and Infinity are JavaScript too)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
