"""Episode records as Arrow columns: a streaming reader, and the index a run writes as it goes.

A million records are a gigabyte or more of JSON, most of it trajectories that summaries never
read. ``iter_results_tables`` reads them in blocks of bounded size and returns only the columns
asked for. Two sources feed it:

- the **index** ``episodes.index.csv``, written beside ``episodes.jsonl`` by ``ResultsWriter``
  (one CSV row per record, written and flushed with the record: its byte offset and length in
  ``episodes.jsonl`` and its scalar columns). Parsing it is several times faster than parsing
  the records; it is used only when it covers the results file exactly (contiguous offsets that
  end where the file's last complete line ends) and is not older than the file;
- the **records** themselves, parsed by pyarrow's JSON reader, block by block, the columns
  below only; a block that does not parse goes through ``EpisodeRecord`` validation, which
  raises the error ``read_results`` raises (its line number named).

``record_json`` (each record's line as stored) is read from the file either way, block by block,
so that a caller writing every record somewhere (the leaderboard) never holds them all.
``record_line`` is the same line with its line break, asked for by name: a block's lines are
the file's bytes as read, so consecutive records are one slice of a buffer, their JSON Lines
text, with nothing copied. Fields of the task rows (``task_fields``, for breakdowns by
``metadata.family``...) come from those lines too: each line's ``task`` is decoded and the
rest of the record skipped.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec
from pydantic import ValidationError

from taskhub._errors import ResultsError
from taskhub._limits import loads_bounded
from taskhub._schema import OUTCOMES, EpisodeRecord, Task

if TYPE_CHECKING:
    import pyarrow

logger = logging.getLogger(__name__)

EPISODES = "episodes.jsonl"
#: Suffix of the index beside a results file: ``episodes.jsonl`` -> ``episodes.index.csv``.
INDEX_SUFFIX = ".index.csv"
#: Bytes of records parsed at once (a longer record is read whole).
BLOCK_BYTES = 1 << 25
#: Records per table yielded from the index (bounds the ``record_json`` held at once).
BATCH_ROWS = 65_536
#: The group label of tasks that lack a field (``task_field``).
MISSING_GROUP = "(none)"

#: The columns of a results table, in order.
RESULT_COLUMNS = (
    "run_id",
    "episode_id",
    "task_id",
    "task_hash",
    "split",
    "sample",
    "seed",
    "outcome",
    "reward",
    "success",
    "env_reward",
    "error_type",
    "error_message",
    "attempts",
    "terminated",
    "truncated",
    "num_steps",
    "prompt_tokens",
    "completion_tokens",
    "model_calls",
    "cache_hits",
    "cache_misses",
    "duration_s",
    "env_time_s",
    "model_time_s",
    "queue_time_s",
    "reward_components",
    "record_json",
)
#: Columns a results table has only when asked for by name (not in ``RESULT_COLUMNS``).
EXTRA_COLUMNS = ("record_line",)
#: The columns holding a record's line (``record_line`` with its line break).
_LINE_COLUMNS = frozenset({"record_json", "record_line"})
#: Columns read from a record's ``usage``.
_USAGE_COLUMNS = frozenset(
    {"prompt_tokens", "completion_tokens", "model_calls", "cache_hits", "cache_misses"}
)
#: Columns the index leaves out: long or per-run constant text the summaries do not read.
_NOT_INDEXED = frozenset({"run_id", "episode_id", "task_hash", "error_message", "record_json"})
#: The index's columns, after ``offset`` and ``length``.
INDEX_COLUMNS = tuple(c for c in RESULT_COLUMNS if c not in _NOT_INDEXED)
# Required fields of a record, checked present in the JSON fast path.
_REQUIRED = (
    "run_id", "episode_id", "task_id", "task_hash", "split", "sample", "outcome",
    "duration_s", "started_at", "task",
)  # fmt: skip
_DEFAULTS: dict[str, object] = {
    "attempts": 1,
    "terminated": False,
    "truncated": False,
    "num_steps": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "model_calls": 0,
    "cache_hits": 0,
    "cache_misses": 0,
    "env_time_s": 0.0,
    "model_time_s": 0.0,
    "queue_time_s": 0.0,
}


def _types() -> dict[str, pyarrow.DataType]:
    import pyarrow as pa

    text, integer, real, flag = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    kinds = {
        "sample": integer, "seed": integer, "attempts": integer, "num_steps": integer,
        "prompt_tokens": integer, "completion_tokens": integer, "model_calls": integer,
        "cache_hits": integer, "cache_misses": integer,
        "reward": real, "env_reward": real, "duration_s": real, "env_time_s": real,
        "model_time_s": real, "queue_time_s": real, "success": flag, "terminated": flag,
        "truncated": flag,
        "reward_components": pa.list_(_component_type()), "record_json": pa.large_string(),
    }  # fmt: skip
    kinds["record_line"] = pa.large_string()
    return {name: kinds.get(name, text) for name in (*RESULT_COLUMNS, *EXTRA_COLUMNS)}


def _component_type() -> pyarrow.DataType:
    import pyarrow as pa

    return pa.struct(
        [
            ("name", pa.string()),
            ("value", pa.float64()),
            ("weight", pa.float64()),
            ("gate", pa.bool_()),
            ("error", pa.string()),
        ]
    )


def results_schema(columns: Sequence[str] | None = None) -> pyarrow.Schema:
    """The Arrow schema of a results table with ``columns`` (all of ``RESULT_COLUMNS`` by default).

    Raises:
        ValueError: A column is not one of ``RESULT_COLUMNS`` or ``EXTRA_COLUMNS``.
    """
    import pyarrow as pa

    types = _types()
    names = RESULT_COLUMNS if columns is None else tuple(columns)
    unknown = [c for c in names if c not in types]
    if unknown:
        raise ValueError(
            f"unknown results column(s) {unknown}; columns are {[*RESULT_COLUMNS, *EXTRA_COLUMNS]}"
        )
    return pa.schema([(name, types[name]) for name in names])


def index_path(path: Path) -> Path:
    """Where the index of the results file ``path`` lives."""
    return path.with_name(path.name.removesuffix(".jsonl") + INDEX_SUFFIX)


def _results_file(path: Path) -> Path:
    path = Path(path)
    return path / EPISODES if path.is_dir() else path


def iter_results_tables(
    path: Path,
    *,
    columns: Sequence[str] | None = None,
    validate: bool = False,
    batch_rows: int = BATCH_ROWS,
    block_bytes: int = BLOCK_BYTES,
    one_per_episode: bool = True,
    task_fields: Sequence[str] = (),
) -> Iterator[pyarrow.Table]:
    """Yield the records of a results file or run directory as Arrow tables, in file order.

    Each table holds a block of records (at most a few tens of megabytes of them), so that a
    run of any size is read in bounded memory. Lines are taken as ``read_results`` takes them
    (a torn last line and blank lines are skipped) and every column holds what
    ``read_results`` would give, defaults filled in. See ``read_results_table`` for the
    columns and what is checked.

    Args:
        path: An ``episodes.jsonl`` file or a run directory.
        columns: Columns to return, from ``RESULT_COLUMNS`` (all of them by default) and
            ``EXTRA_COLUMNS``.
        validate: Validate every record as an ``EpisodeRecord`` (slow).
        batch_rows: Records per table read from the index.
        block_bytes: Bytes of records per table parsed from the records.
        one_per_episode: Keep one record per (task, sample), as ``read_results`` does: the
            newest usable one, else the newest (an ``infra_error`` run again with ``--resume
            --retry infra`` stays in the file as history). Finding them reads the key columns
            first, from the index when there is one. ``False`` yields every line.
        task_fields: Fields of each record's task row to add as columns (see
            ``read_results_table``).

    Yields:
        Tables with ``columns`` (and those of ``task_fields``), none when the file does not
        exist or holds no record.

    Raises:
        ResultsError: A complete line is not a valid record (its number is named).
        ValueError: A column is unknown.
    """
    path = _results_file(path)
    schema = results_schema(columns)
    fields = tuple(dict.fromkeys(task_fields))
    if not path.is_file() or path.stat().st_size == 0:
        return
    read = schema
    if fields and not _LINE_COLUMNS & set(schema.names):
        # task rows are read from the records themselves, block by block
        read = results_schema([*schema.names, "record_line"])
    for table in _one_per_episode_tables(
        path, read, validate, batch_rows, block_bytes, one_per_episode
    ):
        if fields:
            table = _with_task_fields(path, table, fields, keep_json=read is schema)
        yield table


def _one_per_episode_tables(
    path: Path,
    schema: pyarrow.Schema,
    validate: bool,
    batch_rows: int,
    block_bytes: int,
    one_per_episode: bool,
) -> Iterator[pyarrow.Table]:
    import pyarrow as pa

    keys = _KEY_COLUMNS if one_per_episode else ()
    index = None if validate else _read_index(path, [*schema.names, *keys])
    if index is not None:
        # the index holds every record's key columns: the kept rows are found in it, and it
        # is parsed once
        tables = _from_index(path, index, schema, max(1, batch_rows))
        keep = _logged(path, *_keep_mask(index))[0] if one_per_episode else None
    else:
        tables = _parsed_tables(path, schema, validate, block_bytes)
        keep = _kept_rows(path, block_bytes)[0] if one_per_episode else None
    if keep is None:
        yield from tables
        return
    start = 0
    for table in tables:
        mask = keep[start : start + table.num_rows]
        start += table.num_rows
        yield table if mask.all() else table.filter(pa.array(mask))


def task_field_column(field: str) -> str:
    """The name of the column ``task_fields=[field]`` adds to a results table: ``task.FIELD``."""
    return f"task.{field}"


def task_field(task: Task | Mapping[str, object], path: str) -> str:
    """The value of a task's field as a group label: ``metadata.family``, ``difficulty``...

    A dotted path into the task row; a path whose first part is not a task field is looked up
    under ``metadata``, then under ``reset`` (so ``family`` finds ``metadata.family`` or
    ``reset.family``). Values that are not text are given as JSON; a missing one is
    ``(none)``.
    """
    row = task.model_dump(mode="json") if isinstance(task, Task) else task
    parts = path.split(".")
    candidates = [parts] if parts[0] in row else [["metadata", *parts], ["reset", *parts]]
    for candidate in candidates:
        value: object = row
        for part in candidate:
            value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return MISSING_GROUP


class _TaskOf(msgspec.Struct):
    """A record's task row, left as JSON text (the rest of the record is skipped unread)."""

    task: msgspec.Raw


_TASK_DECODER = msgspec.json.Decoder(_TaskOf)


def _with_task_fields(
    path: Path, table: pyarrow.Table, fields: Sequence[str], *, keep_json: bool
) -> pyarrow.Table:
    """``table`` with a ``task.FIELD`` column per field, read from its records' lines."""
    import numpy as np
    import pyarrow as pa

    labels: list[list[str]] = [[] for _ in fields]
    line = "record_line" if "record_line" in table.column_names else "record_json"
    for chunk in table[line].chunks:
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64)
        offsets = offsets[chunk.offset : chunk.offset + len(chunk) + 1]
        data = memoryview(chunk.buffers()[2])
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            try:
                row = loads_bounded(bytes(_TASK_DECODER.decode(data[start:end]).task))
            except (msgspec.DecodeError, ValueError) as exc:
                raise ResultsError(
                    f"{path}: a record's task row cannot be read ({exc}); check the file with "
                    f"taskhub results show {path} after validating it"
                ) from None
            for values, field in zip(labels, fields, strict=True):
                values.append(task_field(row, field))
    for values, field in zip(labels, fields, strict=True):
        table = table.append_column(task_field_column(field), pa.array(values, pa.string()))
    return table if keep_json else table.drop_columns([line])


def _tables(
    path: Path, schema: pyarrow.Schema, validate: bool, batch_rows: int, block_bytes: int
) -> Iterator[pyarrow.Table]:
    """Every record of ``path`` as tables of ``schema``, history included."""
    if not validate:
        index = _read_index(path, schema.names)
        if index is not None:
            yield from _from_index(path, index, schema, max(1, batch_rows))
            return
    yield from _parsed_tables(path, schema, validate, block_bytes)


def _parsed_tables(
    path: Path, schema: pyarrow.Schema, validate: bool, block_bytes: int
) -> Iterator[pyarrow.Table]:
    """Every record of ``path`` as tables of ``schema``, parsed from the records."""
    for block in _blocks(path, max(1, block_bytes)):
        yield _parse_block(path, block, schema, validate=validate)


def read_results_table(
    path: Path,
    *,
    validate: bool = False,
    columns: Sequence[str] | None = None,
    task_fields: Sequence[str] = (),
) -> pyarrow.Table:
    """Return the records of a results file or run directory as an Arrow table, in file order.

    The fast path for large runs: a run's index (``episodes.index.csv``, written as the run
    goes) or pyarrow's JSON reader give the columns below, a million records in seconds, where
    building an ``EpisodeRecord`` per line takes minutes. Lines are taken as ``read_results``
    takes them (torn last line and blank lines skipped) and every column holds what
    ``read_results`` would give, defaults filled in.

    Columns: ``run_id``, ``episode_id``, ``task_id``, ``task_hash``, ``split``, ``sample``,
    ``seed``, ``outcome``, ``reward``, ``success``, ``env_reward``, ``error_type``,
    ``error_message``, ``attempts``, ``terminated``, ``truncated``, ``num_steps``,
    ``prompt_tokens``, ``completion_tokens``, ``model_calls``, ``cache_hits``, ``cache_misses``,
    ``duration_s``, ``env_time_s``, ``model_time_s``, ``queue_time_s``, ``reward_components``
    (list of ``name``, ``value``, ``weight``, ``gate``, ``error``) and ``record_json``: the
    record's line as stored, without its line break. Ask for fewer with ``columns``: a summary
    that needs no ``record_json`` reads far less. One more column is given only when named in
    ``columns``: ``record_line``, the record's line as stored with its line break (and any
    spaces before it), whose values lie back to back as the lines lay in the file (the
    records' JSON Lines text, sliced from what was read, nothing copied).

    ``task_fields`` adds a string column ``task.FIELD`` per field: the value of each record's
    task row as ``task_field`` gives it (``metadata.family``; ``(none)`` when missing). The
    index holds no task rows: these are read from the records, block by block, skipping the
    rest of each record.

    The fast path checks that the file is UTF-8 JSON, one object per line, and the types and
    presence of the fields it returns; a file that fails any of that goes through
    ``EpisodeRecord`` validation instead, which raises ``read_results``'s error. It does not
    check what it does not return (unknown keys, the steps, messages and task row): pass
    ``validate=True`` to validate every line as an ``EpisodeRecord``, exactly as
    ``read_results`` does (and as slowly).

    Args:
        path: An ``episodes.jsonl`` file or a run directory.
        validate: Validate every record in full.
        columns: Columns to return (all of them by default), in the order given.
        task_fields: Task fields to add as columns (after ``columns``), in the order given.

    Returns:
        A ``pyarrow.Table``, one row per episode (see ``iter_results_tables``); empty when the
        file does not exist.

    Raises:
        ResultsError: A complete line is not a valid record (its number is named).
        ValueError: A column is unknown.
    """
    return _read_counted(path, validate, columns, task_fields, counted=False)[0]


def read_results_table_dropped(
    path: Path, *, columns: Sequence[str] | None = None, task_fields: Sequence[str] = ()
) -> tuple[pyarrow.Table, int, int]:
    """``read_results_table`` of one file, and how many of its records readers drop.

    Returns:
        The table, then ``duplicates`` (extra usable records of an episode recorded twice: two
        writers at once) and ``retried`` (``infra_error`` attempts a later attempt replaced;
        see ``deduplicate``).
    """
    return _read_counted(path, False, columns, task_fields, counted=True)


def _read_counted(
    path: Path,
    validate: bool,
    columns: Sequence[str] | None,
    task_fields: Sequence[str],
    *,
    counted: bool,
) -> tuple[pyarrow.Table, int, int]:
    """The table, and (when ``counted``, else zeros) the records dropped from it."""
    import pyarrow as pa

    names = results_schema(columns).names
    # With the key columns in the table, the kept rows are found (and the dropped ones counted)
    # in the table itself. To count them, the keys not asked for are read beside the others
    # and dropped after: the records, or their index, are read once.
    extra = [c for c in _KEY_COLUMNS if c not in names] if counted else []
    keyed = set(_KEY_COLUMNS) <= {*names, *extra}
    tables = list(
        iter_results_tables(
            path,
            columns=[*names, *extra],
            validate=validate,
            task_fields=task_fields,
            one_per_episode=not keyed,
        )
    )
    if not tables:
        empty = results_schema(columns).empty_table()
        for field in dict.fromkeys(task_fields):
            empty = empty.append_column(task_field_column(field), pa.array([], pa.string()))
        return empty, 0, 0
    table = pa.concat_tables(tables).combine_chunks()
    if not keyed:
        return table, 0, 0
    keep, duplicates, retried = _logged(_results_file(path), *_keep_mask(table))
    table = table if keep is None else table.filter(pa.array(keep))
    return table.drop_columns(extra), duplicates, retried


#: Columns that name a record's episode and decide which of its records is kept.
_KEY_COLUMNS = ("task_id", "sample", "outcome")


def _kept_rows(path: Path, block_bytes: int) -> tuple[Any, int, int]:
    """A boolean mask over every record of ``path``: the one kept for each (task, sample).

    ``None`` when every episode has one record (the usual case: nothing to drop); then the
    counts of ``read_results_table_dropped``. Dropped records are logged as ``read_results``
    logs them.
    """
    return _logged(path, *_one_per_episode(path, block_bytes))


def _logged(path: Path, keep: Any, duplicates: int, retried: int) -> tuple[Any, int, int]:
    if duplicates:
        logger.warning(
            "%s: dropped %d duplicate record(s) of episodes recorded twice (two writers at "
            "once?); each episode counts once",
            path,
            duplicates,
        )
    if retried:
        logger.info("%s: %d infra-error attempt(s) replaced by a retry", path, retried)
    return keep, duplicates, retried


def _one_per_episode(path: Path, block_bytes: int) -> tuple[Any, int, int]:
    """The mask of ``_kept_rows`` (``None``: keep all), duplicates and retried attempts."""
    import pyarrow as pa

    parts = list(_tables(path, results_schema(_KEY_COLUMNS), False, BATCH_ROWS, block_bytes))
    if not parts:
        return None, 0, 0
    return _keep_mask(pa.concat_tables(parts).combine_chunks())


def _keep_mask(table: pyarrow.Table) -> tuple[Any, int, int]:
    """``_one_per_episode`` of a table holding the ``_KEY_COLUMNS`` of every record."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    if n < 2:
        return None, 0, 0
    keys = pc.binary_join_element_wise(
        table["task_id"], pc.cast(table["sample"], pa.string()), "\x00"
    )
    if pc.count_distinct(keys).as_py() == n:
        return None, 0, 0
    usable = pc.cast(pc.not_equal(table["outcome"], "infra_error"), pa.int64())
    # the newest usable row wins, else the newest: every score is distinct
    score = pc.add(pa.array(np.arange(n, dtype=np.int64)), pc.multiply(usable, n))
    best = pa.table({"key": keys, "score": score}).group_by("key").aggregate([("score", "max")])
    keep = pc.is_in(score, best["score_max"])
    usable_total = pc.sum(usable).as_py() or 0
    kept_usable = pc.sum(pc.filter(usable, keep)).as_py() or 0
    duplicates = usable_total - kept_usable
    retried = n - (pc.sum(pc.cast(keep, pa.int64())).as_py() or 0) - duplicates
    return keep.to_numpy(zero_copy_only=False), duplicates, retried


# --- reading the records ---------------------------------------------------------------------


class _Block:
    """Complete lines of a results file: their bytes, where they start, their first number."""

    __slots__ = ("data", "offset", "first_line")

    def __init__(self, data: bytes, offset: int, first_line: int) -> None:
        self.data = data
        self.offset = offset
        self.first_line = first_line


def _blocks(path: Path, size: int = BLOCK_BYTES) -> Iterator[_Block]:
    """The file's complete lines in blocks of about ``size`` bytes (a torn last line dropped)."""
    offset = 0
    line = 1
    carry = b""
    with path.open("rb") as f:
        while True:
            chunk = f.read(size)
            if not chunk:
                return  # what is left in ``carry`` has no line break: torn
            data = carry + chunk if carry else chunk
            end = data.rfind(b"\n") + 1
            if end == 0:
                carry = data  # a line longer than a block: read on
                continue
            block, carry = data[:end], data[end:]
            yield _Block(block, offset, line)
            offset += len(block)
            line += block.count(b"\n")


def _lines(block: _Block) -> tuple[Any, Any]:
    """The block's lines as a string array (each with its line break) and their offsets."""
    import numpy as np
    import pyarrow as pa

    view = np.frombuffer(block.data, dtype=np.uint8)
    newlines = np.flatnonzero(view == 10)
    starts = np.concatenate([[0], newlines + 1]).astype(np.int64)
    lines = pa.LargeStringArray.from_buffers(
        len(newlines), pa.py_buffer(starts), pa.py_buffer(block.data)
    )
    return lines, starts[:-1]


def _parse_schema() -> pyarrow.Schema:
    import pyarrow as pa

    types = _types()
    direct = [
        c for c in RESULT_COLUMNS if c in EpisodeRecord.model_fields and c != "reward_components"
    ]
    fields = [(name, types[name]) for name in direct]
    fields += [
        ("error", pa.struct([("type", pa.string()), ("message", pa.string())])),
        (
            "usage",
            pa.struct(
                [
                    ("prompt_tokens", pa.int64()),
                    ("completion_tokens", pa.int64()),
                    ("calls", pa.int64()),
                    ("cache_hits", pa.int64()),
                    ("cache_misses", pa.int64()),
                ]
            ),
        ),
        ("reward_components", pa.list_(_component_type())),
        # Parsed only to check that these required fields are present.
        ("started_at", pa.string()),
        ("task", pa.struct([("task_id", pa.string())])),
    ]
    return pa.schema(fields)


def _parse_block(
    path: Path, block: _Block, schema: pyarrow.Schema, *, validate: bool
) -> pyarrow.Table:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if validate:
        return _validated(path, block, schema)
    raw_lines, _ = _lines(block)
    try:
        raw_lines.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return _validated(path, block, schema)
    lines = pc.utf8_rtrim(raw_lines, characters=" \t\r\n")
    lengths = pc.binary_length(lines)
    if len(lines) and pc.min(lengths).as_py() == 0:
        blank = pc.greater(lengths, 0)
        lines, raw_lines = lines.filter(blank), raw_lines.filter(blank)
    if len(lines) == 0:
        return schema.empty_table()
    longest = pc.max(lengths).as_py() or 0
    parse = _parse_schema()
    try:
        parsed = pj.read_json(
            pa.BufferReader(block.data),
            read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * longest + 2)),
            parse_options=pj.ParseOptions(
                explicit_schema=parse, unexpected_field_behavior="ignore"
            ),
        ).combine_chunks()
    except pa.ArrowInvalid:
        return _validated(path, block, schema)
    if (
        parsed.num_rows != len(lines)
        or any(parsed[name].null_count for name in _REQUIRED)
        or not pc.all(pc.is_in(parsed["outcome"], pa.array(OUTCOMES))).as_py()
    ):
        return _validated(path, block, schema)
    arrays = []
    for name in schema.names:
        if name == "record_json":
            array: Any = lines
        elif name == "record_line":
            array = raw_lines
        elif name in ("error_type", "error_message"):
            array = pc.struct_field(parsed["error"].chunk(0), name.removeprefix("error_"))
        elif name in _USAGE_COLUMNS:
            field = "calls" if name == "model_calls" else name
            array = pc.struct_field(parsed["usage"].chunk(0), field)
        elif name == "reward_components":
            array = _filled_components(parsed["reward_components"])
        else:
            array = parsed[name]
        if name in _DEFAULTS:
            array = pc.fill_null(array, pa.scalar(_DEFAULTS[name], schema.field(name).type))
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def _filled_components(column: Any) -> Any:
    """Reward components with ``weight`` and ``gate`` defaults filled in, [] for none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = pa.list_(_component_type())
    components = pc.fill_null(column, pa.scalar([], kind))
    if isinstance(components, pa.ChunkedArray):
        components = components.combine_chunks()
    values = components.flatten()  # relative to the array's first offset, as made relative below
    filled = pa.StructArray.from_arrays(
        [
            values.field("name"),
            values.field("value"),
            pc.fill_null(values.field("weight"), 1.0),
            pc.fill_null(values.field("gate"), False),
            values.field("error"),
        ],
        fields=list(_component_type()),
    )
    offsets = components.offsets
    return pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), filled)


def _validated(path: Path, block: _Block, schema: pyarrow.Schema) -> pyarrow.Table:
    """The block's records validated one by one; raises ``read_results``'s error."""
    import pyarrow as pa

    rows = []
    for number, raw in enumerate(block.data.splitlines(keepends=True), start=block.first_line):
        if not raw.strip():
            continue
        try:
            record = EpisodeRecord.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise ResultsError(f"{path} line {number}: field {field!r}: {first['msg']}") from None
        row = record_columns(record)
        row["record_json"] = raw.rstrip(b" \t\r\n").decode("utf-8")
        row["record_line"] = raw.decode("utf-8")
        rows.append({name: row[name] for name in schema.names})
    return pa.Table.from_pylist(rows, schema=schema)


#: The results columns that are a record's own fields (read with ``getattr``).
_RECORD_FIELDS = tuple(
    name
    for name in RESULT_COLUMNS
    if name in EpisodeRecord.model_fields and name != "reward_components"
)


def record_columns(record: EpisodeRecord) -> dict[str, Any]:
    """One record's values of every results column but ``record_json``."""
    row: dict[str, Any] = {name: getattr(record, name) for name in _RECORD_FIELDS}
    row.update(
        error_type=record.error.type if record.error else None,
        error_message=record.error.message if record.error else None,
        prompt_tokens=record.usage.prompt_tokens,
        completion_tokens=record.usage.completion_tokens,
        model_calls=record.usage.calls,
        cache_hits=record.usage.cache_hits,
        cache_misses=record.usage.cache_misses,
        reward_components=[
            {"name": c.name, "value": c.value, "weight": c.weight, "gate": c.gate, "error": c.error}
            for c in record.reward_components
        ],
    )
    return row


# --- the index -------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    """A CSV cell as pyarrow reads it back: null empty, text quoted, JSON for lists."""
    if value is None:
        return ""
    kind = type(value)  # exact types first: every record's cells go through here
    if kind is float:
        return repr(value) if math.isfinite(value) else ""
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is str:
        text: str = value
        return '"' + (text.replace('"', '""') if '"' in text else text) + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, list):
        value = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return '"' + str(value).replace('"', '""') + '"'


class IndexWriter:
    """Appends a results file's index rows, one flushed row per record written."""

    def __init__(self, results: Path) -> None:
        """Open the index of ``results`` for appending, rebuilt first if it does not match."""
        self.path = index_path(results)
        self._file: IO[bytes] | None = None
        if not _index_matches(results):
            try:
                index_results(results)
            except ResultsError:  # an invalid record: readers will say so; no index meanwhile
                self.path.unlink(missing_ok=True)
                return
        self._file = self.path.open("ab")

    def write(self, record: EpisodeRecord, offset: int, length: int) -> None:
        """Append the row of ``record``, stored at ``offset`` in ``length`` bytes."""
        if self._file is None:
            return
        row = record_columns(record)
        cells = [str(offset), str(length)] + [_cell(row[name]) for name in INDEX_COLUMNS]
        text = ",".join(cells)
        if "\n" in text or "\r" in text:
            # A line break in a task id or error type would need CSV's multi-line rows, which
            # pyarrow cannot read in parallel: this run goes without an index.
            self.close()
            self.path.unlink(missing_ok=True)
            return
        self._file.write(text.encode("utf-8") + b"\n")
        self._file.flush()

    def close(self) -> None:
        """Close the index file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _header() -> bytes:
    return (",".join(("offset", "length", *INDEX_COLUMNS)) + "\n").encode()


def index_results(path: Path) -> int:
    """Write the index of a results file (or run directory) from its records.

    ``ResultsWriter`` keeps the index as it writes; this builds it for results written
    otherwise (by an older taskhub, or copied without it), so that large runs read fast.

    Args:
        path: An ``episodes.jsonl`` file or a run directory.

    Returns:
        The number of records indexed.

    Raises:
        ResultsError: A complete line is not a valid record (its number is named).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    path = _results_file(path)
    target = index_path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    schema = results_schema(INDEX_COLUMNS)
    count = 0
    with tmp.open("wb") as out:
        out.write(_header())
        if path.is_file():
            for block in _blocks(path):
                table = _parse_block(path, block, schema, validate=False)
                lines, starts = _lines(block)
                lengths = pc.binary_length(lines).to_numpy()  # line breaks included
                keep = pc.greater(pc.binary_length(pc.utf8_rtrim(lines, " \t\r\n")), 0)
                offsets = pa.array(starts + block.offset).filter(keep)
                sizes = pa.array(lengths).filter(keep)
                buffer = io.StringIO()
                for offset, length, row in zip(
                    offsets.to_pylist(), sizes.to_pylist(), table.to_pylist(), strict=True
                ):
                    cells = [str(offset), str(length)] + [_cell(row[c]) for c in INDEX_COLUMNS]
                    text = ",".join(cells)
                    if "\n" in text or "\r" in text:
                        tmp.unlink()
                        target.unlink(missing_ok=True)
                        return 0
                    buffer.write(text + "\n")
                out.write(buffer.getvalue().encode("utf-8"))
                count += table.num_rows
    os.replace(tmp, target)
    return count


def _complete_size(path: Path) -> int:
    """Bytes of ``path`` up to the end of its last complete line."""
    size = path.stat().st_size
    with path.open("rb") as f:
        position = size
        while position > 0:
            step = min(position, 1 << 16)
            position -= step
            f.seek(position)
            chunk = f.read(step)
            at = chunk.rfind(b"\n")
            if at >= 0:
                return position + at + 1
    return 0


def _index_matches(path: Path) -> bool:
    """Whether the index of ``path`` describes exactly its complete lines (see the module).

    Its header must name this version's columns: an index with others is rebuilt before rows
    are added to it.
    """
    try:
        with index_path(path).open("rb") as f:
            if f.readline() != _header():
                return False
    except OSError:
        return False
    return _read_index(path, ()) is not None


def _read_index(path: Path, columns: Sequence[str]) -> pyarrow.Table | None:
    """The index rows of ``path`` with ``columns`` (plus offset and length), if it matches."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pv

    index = index_path(path)
    wanted = list(dict.fromkeys(c for c in columns if c not in _LINE_COLUMNS))
    try:
        stat, index_stat = path.stat(), index.stat()
    except OSError:
        return None
    if index_stat.st_mtime_ns < stat.st_mtime_ns:
        return None  # the records changed after their index was written
    with index.open("rb") as f:
        header = f.readline().decode("utf-8", "replace").rstrip("\n").split(",")
        if index_stat.st_size > len(_header()):
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                return None  # a torn last row
    if header[:2] != ["offset", "length"] or not set(wanted) <= set(header):
        return None
    types = _types()
    kinds = {"offset": pa.int64(), "length": pa.int64()}
    for name in header[2:]:
        if name in types:
            kinds[name] = pa.string() if name == "reward_components" else types[name]
    try:
        table = pv.read_csv(
            index,
            read_options=pv.ReadOptions(block_size=1 << 24),
            convert_options=pv.ConvertOptions(
                column_types=kinds,
                include_columns=["offset", "length", *wanted],
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
                true_values=["true"],
                false_values=["false"],
            ),
        ).combine_chunks()
    except (pa.ArrowInvalid, OSError):
        return None
    # Parsing held several times the table (the text, its blocks, the chunks combined): Arrow's
    # pool keeps what was freed for itself, out of reach of the Python objects a reader makes
    # next (a summary of 250k tasks). Handed back, a 1M-row read holds 300 MB less (2 ms).
    pa.default_memory_pool().release_unused()
    offsets = table["offset"].to_numpy()
    lengths = table["length"].to_numpy()
    end = int(offsets[-1] + lengths[-1]) if len(offsets) else 0
    if end != _complete_size(path):
        return None
    if len(offsets) and (
        offsets[0] != 0 or not np.array_equal(offsets[1:], offsets[:-1] + lengths[:-1])
    ):
        return None  # blank lines or edits between records
    return table


def _from_index(
    path: Path, index: pyarrow.Table, schema: pyarrow.Schema, batch_rows: int
) -> Iterator[pyarrow.Table]:
    import pyarrow as pa
    import pyarrow.compute as pc

    with contextlib.ExitStack() as stack:
        lines_wanted = bool(_LINE_COLUMNS & set(schema.names))
        f = stack.enter_context(path.open("rb")) if lines_wanted else None
        for start in range(0, index.num_rows, batch_rows):
            part = index.slice(start, batch_rows)
            lines = None
            if f is not None:
                lines = _record_lines(f, part)
            arrays = []
            for name in schema.names:
                if name == "record_line":
                    arrays.append(lines)
                elif name == "record_json":
                    arrays.append(pc.utf8_rtrim(lines, characters="\n"))
                elif name == "reward_components":
                    arrays.append(_parse_components(part[name]))
                else:
                    arrays.append(part[name])
            yield pa.Table.from_arrays(arrays, schema=schema)


def _record_lines(f: io.BufferedReader, part: pyarrow.Table) -> Any:
    """The lines an index slice points to, read from the results file, line breaks kept."""
    import numpy as np
    import pyarrow as pa

    offsets = part["offset"].to_numpy()
    lengths = part["length"].to_numpy()
    first = int(offsets[0])
    size = int(offsets[-1] + lengths[-1]) - first
    f.seek(first)
    # Into memory from Arrow's pool, which reuses the blocks already let go of: a new bytes
    # object of this size is fresh memory, and touching it first costs as much as the read.
    data = pa.allocate_buffer(size)
    read = f.readinto(memoryview(data))
    # the lines are contiguous (checked when the index was read), each ending in "\n"
    bounds = np.append(offsets - first, size).astype(np.int64)
    if read != size or not (np.frombuffer(data, np.uint8)[bounds[1:] - 1] == 10).all():
        raise ResultsError(
            f"{f.name} changed while it was read; read it again (or delete "
            f"{index_path(Path(f.name)).name} if it was edited by hand)"
        )
    array = pa.LargeStringArray.from_buffers(len(offsets), pa.py_buffer(bounds), data)
    array.validate(full=True)
    return array


def _parse_components(column: Any) -> Any:
    """The index's JSON text of reward components as a list-of-struct column."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if len(column) == 0:
        return pa.array([], pa.list_(_component_type()))
    column = pc.fill_null(column, "[]")
    # Runs repeat a few texts (one component scored 0 or 1...): each distinct one is parsed
    # once and the parsed values are taken back to every row.
    encoded = pc.dictionary_encode(column)
    texts = encoded.dictionary if 2 * len(encoded.dictionary) <= len(column) else column
    wrapped = pc.binary_join_element_wise(pa.scalar('{"c":'), texts, pa.scalar("}"), "")
    lines = pa.LargeListArray.from_arrays(pa.array([0, len(wrapped)], pa.int64()), wrapped)
    text = pc.binary_join(lines, "\n")[0].as_buffer()
    parsed = pj.read_json(
        pa.BufferReader(text),
        parse_options=pj.ParseOptions(
            explicit_schema=pa.schema([("c", pa.list_(_component_type()))])
        ),
    )
    components = _filled_components(parsed["c"])
    return components if texts is column else pc.take(components, encoded.indices)
