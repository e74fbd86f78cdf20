"""Taskset rows at scale: checked in bulk, kept as Arrow data, made ``Task``s when used.

A million rows as ``Task`` objects are gigabytes and a minute of validation. ``TaskRows`` keeps
a split's rows as they are stored (the JSON Lines text of each row, or a parquet table) and
builds a ``Task`` when one is read; what loading must prove, that every row *would* validate,
is checked in bulk:

- JSON Lines: msgspec decodes every line against a row type as strict as ``Task`` on the
  fields it types (unknown fields, ``task_id`` length, ``max_steps >= 1``, objects where
  ``Task`` wants objects, valid JSON with no NaN or Infinity), skipping the content of nested
  values; a line it refuses, or one holding a number too large for a float, sends the whole
  split through ``Task`` validation, which names every error's split, row and field;
- parquet: the table's column names and types, and its numbers (finite, in range), checked
  with Arrow compute; anything unusual takes the same ``Task`` path.

Each row's content hash (what a result's ``task_hash`` records, see ``Task.content_hash``) is
computed once, at load, from the row as stored, and kept: the taskset's fingerprint is made of
them, and ``content_hash(i)`` gives them back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, overload

import msgspec

from taskhub._errors import SchemaError
from taskhub._limits import MAX_JSON_DEPTH, loads_bounded
from taskhub._schema import MEASURED_FIELDS, Task, canonical_json

if TYPE_CHECKING:
    import pyarrow

#: Rows made ``Task``s at once when rows are iterated.
_BATCH = 1024
# A number msgspec keeps as text but ``json.loads`` would read as an infinite float.
_HUGE = re.compile(r"\d[eE]\+?\d{3}")
# msgspec writes floats below 1e-4 and from 1e16 up differently from ``json.dumps``; such a
# float is written with an exponent, with four zeros after the point, or with 17 digits
# before it: rows whose text holds any of these are hashed with ``canonical_json`` itself.
_FLOATS = r"\d[eE]|0\.0000|\d{17}\."
# Defaults a row's content hash leaves out (``Task.content_hash``: ``exclude_defaults``).
_DEFAULTS: dict[str, Any] = {
    "reset": {},
    "prompt": None,
    "answer": None,
    "rewards": None,
    "max_steps": None,
    "oracle_actions": None,
    "metadata": {},
}


class _JsonlRow(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A JSON Lines row as ``Task`` takes it in the usual form (JSON text aside).

    Written back by msgspec with sorted keys and defaults left out, it is the row's canonical
    text, what its content hash covers (when no measured field is set).
    """

    task_id: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    reset: dict[str, Any] = msgspec.field(default_factory=dict)
    prompt: str | None = None
    answer: Any = None
    rewards: list[str] | str | None = None
    max_steps: Annotated[int, msgspec.Meta(ge=1)] | None = None
    oracle_actions: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    pass_rate: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    difficulty: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    profile: dict[str, Any] | None = None


_DECODE_ROWS = msgspec.json.Decoder(_JsonlRow)
_ENCODE = msgspec.json.Encoder(order="sorted")


_DROPPABLE = frozenset(MEASURED_FIELDS | _DEFAULTS.keys())


def content_hash(row: dict[str, Any], *, plain: bool = False) -> str:
    """``Task.content_hash`` of a row that validates, computed from the row as stored.

    Args:
        row: The row, as JSON decodes it (it is changed).
        plain: The row holds no float that msgspec writes otherwise than ``json.dumps``
            (checked on its text, see ``_FLOATS``), so msgspec writes its canonical text.
    """
    for key in row.keys() & _DROPPABLE:
        if key in MEASURED_FIELDS or row[key] == _DEFAULTS[key]:
            del row[key]
    rewards = row.get("rewards")
    if isinstance(rewards, str):
        row["rewards"] = [rewards]
    text = _ENCODE.encode(row) if plain else canonical_json(row).encode()
    return hashlib.sha256(text).hexdigest()


def _row_hash(row: _JsonlRow, plain: bool) -> str:
    if (
        plain
        and row.pass_rate is None
        and row.difficulty is None
        and row.profile is None
        and not isinstance(row.rewards, str)
    ):  # the usual row: msgspec writes its canonical text itself
        return hashlib.sha256(_ENCODE.encode(row)).hexdigest()
    return content_hash(msgspec.structs.asdict(row), plain=False)


class TaskRows(Sequence[Task]):
    """The validated rows of one split, made ``Task`` objects when read.

    Indexing and iteration give ``Task`` objects (new ones at each read); slicing gives
    ``TaskRows``. ``task_ids`` and ``content_hash`` need no ``Task`` at all.
    """

    def __init__(
        self,
        split: str,
        source: _Source,
        task_ids: list[str],
        hashes: list[str],
        positions: Sequence[int] | None = None,
    ) -> None:
        """Rows ``positions`` (all by default) of ``source``."""
        self.split = split
        self._source = source
        self._ids = task_ids
        self._hashes = hashes
        self._positions = positions

    def __len__(self) -> int:
        """The number of rows."""
        return len(self._ids) if self._positions is None else len(self._positions)

    def _position(self, index: int) -> int:
        return index if self._positions is None else self._positions[index]

    @overload
    def __getitem__(self, index: int) -> Task: ...

    @overload
    def __getitem__(self, index: slice) -> TaskRows: ...

    def __getitem__(self, index: int | slice) -> Task | TaskRows:
        """Row ``index`` as a ``Task``, or the rows of a slice."""
        if isinstance(index, slice):
            picked = range(len(self))[index]
            positions = [self._position(i) for i in picked]
            return TaskRows(self.split, self._source, self._ids, self._hashes, positions)
        if not -len(self) <= index < len(self):
            raise IndexError(f"split {self.split!r} has {len(self)} rows, not row {index}")
        position = self._position(index % len(self))
        return self._source.tasks([position], self.split)[0]

    def __iter__(self) -> Iterator[Task]:
        """Every row as a ``Task``, built a batch at a time."""
        for start in range(0, len(self), _BATCH):
            stop = min(len(self), start + _BATCH)
            yield from self._source.tasks(
                [self._position(i) for i in range(start, stop)], self.split
            )

    def __contains__(self, item: object) -> bool:
        """Whether ``item`` is one of the rows (found by its task id)."""
        if not isinstance(item, Task):
            return False
        return any(
            self._ids[self._position(i)] == item.task_id and self[i] == item
            for i in range(len(self))
        )

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same tasks in the same order."""
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """A short description (the rows are not all built to show them)."""
        return f"TaskRows(split={self.split!r}, rows={len(self)})"

    @property
    def task_ids(self) -> list[str]:
        """The rows' task ids, in order."""
        if self._positions is None:
            return self._ids
        return [self._ids[p] for p in self._positions]

    def content_hash(self, index: int) -> str:
        """``Task.content_hash`` of row ``index``, computed when the split was loaded."""
        return self._hashes[self._position(index)]

    def content_hashes(self) -> list[str]:
        """Every row's content hash, in order."""
        if self._positions is None:
            return self._hashes
        return [self._hashes[p] for p in self._positions]


class _Source:
    """Where rows are built from."""

    def tasks(self, positions: list[int], split: str) -> list[Task]:
        raise NotImplementedError


def _task(data: Any, split: str, where: str) -> Task:
    try:
        return Task.model_validate(data)
    except Exception as exc:  # checked at load: only a file changed since can get here
        raise SchemaError(f"{split} {where}: the row no longer validates: {exc}") from None


class _Where:
    """Where each row is stored: its file and line (or row) number, for messages."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.firsts: list[int] = []
        self.numbers: list[Any] = []
        self.unit = "line"

    def add(self, name: str, numbers: Any) -> None:
        self.firsts.append(sum(len(n) for n in self.numbers))
        self.names.append(name)
        self.numbers.append(numbers)

    def __getitem__(self, position: int) -> str:
        import bisect

        file = bisect.bisect_right(self.firsts, position) - 1
        number = int(self.numbers[file][position - self.firsts[file]])
        return f"({self.names[file]} {self.unit} {number})"


class _Lines(_Source):
    def __init__(self, lines: pyarrow.Array, where: _Where) -> None:
        self.lines = lines
        self.where = where

    def tasks(self, positions: list[int], split: str) -> list[Task]:
        import pyarrow as pa

        texts = self.lines.take(pa.array(positions, pa.int64())).to_pylist()
        return [
            _task(json.loads(text), split, self.where[p])
            for text, p in zip(texts, positions, strict=True)
        ]


#: Bytes of a JSON Lines file decoded at once (bounds the rows held as Python objects).
_CHUNK_BYTES = 1 << 24
# Line breaks other than "\n" that ``str.splitlines`` (the slow path's reader) also splits at.
_OTHER_BREAKS = "[\\x0b\\x0c\\x1c\\x1d\\x1e\\x85\\r\u2028\u2029]"


def jsonl_rows(split: str, paths: Sequence[Path]) -> TaskRows | None:
    """The rows of JSON Lines files, checked in bulk; None when ``Task`` must check them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    where = _Where()
    ids: list[str] = []
    hashes: list[str] = []
    for path in paths:
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            data += b"\n"
        view = np.frombuffer(data, dtype=np.uint8)
        ends = np.flatnonzero(view == 10)
        bounds = np.concatenate([[0], ends + 1]).astype(np.int64)
        lines = pa.LargeStringArray.from_buffers(
            len(ends), pa.py_buffer(bounds), pa.py_buffer(data)
        )
        try:
            lines.validate(full=True)  # UTF-8
        except pa.ArrowInvalid:
            return None
        lines = pc.utf8_trim_whitespace(lines)
        numbers = np.flatnonzero(pc.binary_length(lines).to_numpy(zero_copy_only=False) > 0)
        if len(numbers) < len(lines):  # blank lines
            lines = lines.take(pa.array(numbers))
        if (
            len(lines)
            and pc.any(pc.match_substring_regex(lines, f"{_HUGE.pattern}|{_OTHER_BREAKS}")).as_py()
        ):
            return None
        # a row can nest deeper than MAX_JSON_DEPTH only if it opens more objects and arrays
        # than that: those few rows are measured, and one too deep takes the Task path
        opened = pc.count_substring_regex(lines, r"[\[{]").to_numpy(zero_copy_only=False)
        for index in np.flatnonzero(opened > MAX_JSON_DEPTH).tolist():
            try:
                loads_bounded(lines[index].as_py(), constants=True)
            except (ValueError, RecursionError):
                return None
        plain = pc.invert(pc.match_substring_regex(lines, _FLOATS)).to_numpy(zero_copy_only=False)
        # decoded in chunks of whole lines straight from the file's bytes (blank lines are
        # skipped), so that the rows' objects are never all held at once
        buffer = memoryview(data)
        step = _BATCH * 16
        for first in range(0, len(numbers), step):
            last = min(len(numbers), first + step)
            chunk = buffer[bounds[numbers[first]] : bounds[numbers[last - 1] + 1]]
            try:
                rows = _DECODE_ROWS.decode_lines(chunk)
            except (msgspec.ValidationError, msgspec.DecodeError):
                return None
            if len(rows) != last - first:
                return None
            ids.extend([row.task_id for row in rows])
            hashes.extend(
                [
                    _row_hash(row, ok)
                    for row, ok in zip(rows, plain[first:last].tolist(), strict=True)
                ]
            )
        where.add(path.name, numbers + 1)
        parts.append(lines)
    lines = pa.concat_arrays(parts) if parts else pa.array([], pa.large_string())
    return TaskRows(split, _Lines(lines, where), ids, hashes)


class _Table(_Source):
    def __init__(self, table: pyarrow.Table, where: _Where) -> None:
        self.table = table
        self.where = where
        self.nulls = _null_columns(table)

    def tasks(self, positions: list[int], split: str) -> list[Task]:
        import pyarrow as pa

        rows = self.table.take(pa.array(positions, pa.int64())).to_pylist()
        return [
            _task(_stripped(row, self.nulls), split, self.where[p])
            for row, p in zip(rows, positions, strict=True)
        ]


def _null_columns(table: pyarrow.Table) -> _Nulls:
    """Which columns hold a null at their top level, and which below it (see ``_stripped``)."""
    top = frozenset(name for name in table.column_names if table[name].null_count)
    nested = frozenset(
        name
        for name in ("reset", "metadata", "oracle_actions")
        if name in table.column_names and any(_nulls_below(chunk) for chunk in table[name].chunks)
    )
    return _Nulls(top, nested)


def _nulls_below(array: pyarrow.Array) -> bool:
    """Whether a struct or list array holds a null anywhere below its own values."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_struct(kind):
        children = [array.field(i) for i in range(kind.num_fields)]
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        children = [array.flatten()]
    else:
        return False
    return any(child.null_count or _nulls_below(child) for child in children)


@dataclass(frozen=True)
class _Nulls:
    top: frozenset[str]
    nested: frozenset[str]


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _stripped(row: dict[str, Any], nulls: _Nulls) -> dict[str, Any]:
    """A parquet row as a JSON row: Arrow gives every row every key, null where it had none.

    Only the columns ``nulls`` names can hold one: a taskset whose rows share their keys is
    taken as it is.
    """
    if not nulls.top and not nulls.nested:
        return row
    return {k: _strip_nulls(v) if k in nulls.nested else v for k, v in row.items() if v is not None}


def parquet_rows(split: str, paths: Sequence[Path]) -> TaskRows | None:
    """The rows of parquet files, checked in bulk; None when ``Task`` must check them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    where = _Where()
    where.unit = "row"
    for path in paths:
        try:
            table = pq.read_table(path)
        except Exception:
            return None  # the slow path says what is wrong with the file
        if not _columns_fit(table):
            return None
        tables.append(table)
        where.add(path.name, np.arange(table.num_rows))
    if not tables:
        return None
    try:
        table = pa.concat_tables(tables, promote_options="default").combine_chunks()
    except pa.ArrowInvalid:
        return None
    ids = table["task_id"].to_pylist()
    hashes: list[str] = []
    # msgspec writes the canonical text unless a float is below 1e-4 or from 1e16 up
    plain = all(_plain_floats(table[name]) for name in table.column_names)
    source = _Table(table, where)
    for batch in table.to_batches(max_chunksize=_BATCH * 16):
        hashes.extend(
            [content_hash(_stripped(row, source.nulls), plain=plain) for row in batch.to_pylist()]
        )
    return TaskRows(split, source, ids, hashes)


def _columns_fit(table: pyarrow.Table) -> bool:
    """Whether every row of ``table`` validates as a ``Task``, judged from its columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    types = pa.types
    names = set(table.column_names)
    if not names <= set(Task.model_fields) or "task_id" not in names:
        return False
    ids = table["task_id"]
    if not types.is_string(ids.type) and not types.is_large_string(ids.type):
        return False
    lengths = pc.utf8_length(ids)
    if ids.null_count or pc.min(lengths).as_py() < 1 or pc.max(lengths).as_py() > 512:
        return False
    for name in names - {"task_id"}:
        column = table[name]
        kind = column.type
        if types.is_null(kind):
            continue
        if name in ("reset", "metadata", "profile"):
            ok = types.is_struct(kind)  # JSON text is left to the slow path
        elif name == "oracle_actions":
            ok = types.is_list(kind) and types.is_struct(kind.value_type)
        elif name == "prompt":
            ok = types.is_string(kind) or types.is_large_string(kind)
        elif name == "rewards":
            ok = types.is_list(kind) and types.is_string(kind.value_type)
            ok = ok and not pc.list_flatten(column).null_count
        elif name == "max_steps":
            ok = types.is_integer(kind) and (pc.min(column).as_py() or 1) >= 1
        elif name in ("pass_rate", "difficulty"):
            low, high = pc.min(column).as_py(), pc.max(column).as_py()
            ok = (types.is_floating(kind) or types.is_integer(kind)) and (
                low is None or (0 <= low and high <= 1)
            )
        else:  # answer: any JSON value
            ok = not types.is_binary(kind) and not types.is_temporal(kind)
        if not ok or not _finite(column):
            return False
    return True


def _plain_floats(column: Any) -> bool:
    """Whether no float inside ``column`` is written with an exponent by ``json.dumps``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    types = pa.types
    if isinstance(column, pa.ChunkedArray):
        return all(_plain_floats(chunk) for chunk in column.chunks)
    kind = column.type
    if types.is_floating(kind):
        size = pc.abs(column.drop_null())
        risky = pc.or_(
            pc.and_(pc.greater(size, 0), pc.less(size, 1e-4)), pc.greater_equal(size, 1e16)
        )
        return not pc.any(risky).as_py()
    if types.is_struct(kind):
        return all(_plain_floats(column.field(i)) for i in range(kind.num_fields))
    if types.is_list(kind) or types.is_large_list(kind):
        return _plain_floats(column.flatten())
    return True


def _finite(column: Any) -> bool:
    """Whether every float inside ``column`` (at any depth) is finite."""
    import pyarrow as pa
    import pyarrow.compute as pc

    types = pa.types
    if isinstance(column, pa.ChunkedArray):
        return all(_finite(chunk) for chunk in column.chunks)
    kind = column.type
    if types.is_floating(kind):
        values = column.drop_null()
        return bool(pc.all(pc.is_finite(values)).as_py() is not False)
    if types.is_struct(kind):
        return all(_finite(column.field(i)) for i in range(kind.num_fields))
    if types.is_list(kind) or types.is_large_list(kind):
        return _finite(column.flatten())
    if types.is_dictionary(kind) or types.is_map(kind) or types.is_union(kind):
        return False
    return True
