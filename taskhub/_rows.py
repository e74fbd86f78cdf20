"""Taskset rows at scale: checked in bulk, kept as stored, made ``Task``s when used.

A million rows as ``Task`` objects are gigabytes and a minute of validation. ``TaskRows`` keeps
a split's rows as they are stored (the bytes of a JSON Lines file, or a parquet table) and
builds a ``Task`` when one is read; what loading must prove, that every row *would* validate,
is checked in bulk:

- JSON Lines: msgspec decodes the file a chunk of lines at a time against a row type as strict
  as ``Task`` on the fields it types (unknown fields, ``task_id`` length, ``max_steps >= 1``,
  objects where ``Task`` wants objects, valid UTF-8 JSON with no NaN or Infinity); a chunk it
  refuses, a number too large for a float, a row nested too deep or a line break that
  ``str.splitlines`` sees and msgspec does not sends the whole split through ``Task``
  validation, which names every error's split, row and field;
- parquet: the table's column names and types, and its numbers (finite, in range), checked
  with Arrow compute; anything unusual takes the same ``Task`` path.

Each row's content hash (what a result's ``task_hash`` records, see ``Task.content_hash``) is
computed once, at load, and kept as 32 bytes: the taskset's fingerprint is made of them, and
``content_hash(i)`` gives them back. The hashed text is built without a ``Task``:

- JSON Lines: msgspec writes the decoded row back with sorted keys and defaults left out, which
  is ``canonical_json``'s text for every value but floats below 1e-4 or from 1e16 up (msgspec
  writes their exponent otherwise); the decoders note such a float, and the rows of a chunk
  that holds one are written by ``canonical_json`` itself;
- parquet: the text is built a column at a time (``taskhub._canonical``).
"""

from __future__ import annotations

import binascii
import gc
import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, overload

import msgspec

from taskhub._errors import SchemaError
from taskhub._limits import MAX_JSON_DEPTH, loads_bounded
from taskhub._schema import MEASURED_FIELDS, Task, canonical_json

if TYPE_CHECKING:
    import numpy
    import pyarrow

#: Rows made ``Task``s at once when rows are iterated.
_BATCH = 1024
#: Bytes of a JSON Lines file decoded at once (bounds the rows held as Python objects: about
#: 20k rows of 200 bytes, 20 MB of objects).
_CHUNK_BYTES = 1 << 22
#: Parquet rows whose canonical text is built at once (bounds that text's memory).
_TEXT_BATCH = 1 << 16
#: Bytes of a digest (sha256).
_DIGEST = 32
# Line breaks that ``str.splitlines`` (the slow path's reader) splits at and "\n" is not: a
# file holding one is numbered differently there (a "\r" before "\n" is part of that break).
_SPLITLINES_ASCII = (b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
_SPLITLINES_UTF8 = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")
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
_DROPPABLE = frozenset(MEASURED_FIELDS | _DEFAULTS.keys())


class _Row(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """A JSON Lines row as ``Task`` takes it in the usual form, with no measured field.

    Written back by msgspec with sorted keys and defaults left out, it is the row's canonical
    text, what its content hash covers (floats aside, see the module's docstring). A row with
    a measured field, or ``rewards`` given as one string, is refused: its chunk is decoded
    again as ``_MeasuredRow``.
    """

    task_id: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    reset: dict[str, Any] = msgspec.field(default_factory=dict)
    prompt: str | None = None
    answer: Any = None
    rewards: list[str] | None = None
    max_steps: Annotated[int, msgspec.Meta(ge=1)] | None = None
    oracle_actions: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class _MeasuredRow(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """A JSON Lines row in any form ``_Row`` refuses and ``Task`` takes without JSON text."""

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


_ENCODE = msgspec.json.Encoder(order="sorted")
#: Fields of a row that ``_shaped_row`` may type by their keys.
_SHAPED = ("reset", "metadata")
# What msgspec refuses in a field's JSON name (such keys stay dict keys).
_UNNAMEABLE = re.compile(r'[\x00-\x1f"\\]')


def _shaped_row(first: _Row) -> type[msgspec.Struct] | None:
    """A row type like ``_Row`` whose ``reset`` and ``metadata`` have the keys of ``first``'s.

    Most tasksets give every row the same keys. Decoded into structs rather than dicts, such
    rows take a third less time to decode and write back (the keys are not made and sorted
    per row), and the text written is the same: struct fields are written sorted by their
    JSON names too. The keys are required and no other is taken, so a row of another shape
    is refused, and its chunk decoded as ``_Row``.
    """
    shapes = {name: sorted(getattr(first, name)) for name in _SHAPED if getattr(first, name)}
    if not shapes or any(_UNNAMEABLE.search(key) for keys in shapes.values() for key in keys):
        return None
    fields: list[Any] = []
    for field in msgspec.structs.fields(_Row):
        keys = shapes.get(field.name)
        if keys is not None:
            # attribute names in the keys' sorted order; the JSON names are the keys
            names = [f"k{index:05d}" for index in range(len(keys))]
            shape = msgspec.defstruct(
                f"_{field.name.capitalize()}",
                [(name, Any) for name in names],
                rename=dict(zip(names, keys, strict=True)),
                forbid_unknown_fields=True,
                gc=False,
            )
            fields.append((field.name, shape))
        elif field.required:
            fields.append((field.name, field.type))
        elif field.default_factory is not msgspec.NODEFAULT:
            default = msgspec.field(default_factory=field.default_factory)
            fields.append((field.name, field.type, default))
        else:
            fields.append((field.name, field.type, field.default))
    return msgspec.defstruct(
        "_ShapedRow",
        fields,
        kw_only=True,
        forbid_unknown_fields=True,
        omit_defaults=True,
        gc=False,
    )


class _Floats:
    """The float hook of the decoders: notes a float msgspec writes otherwise than json.dumps.

    msgspec and ``json.dumps`` write the same text for 0 and for every float from 1e-4 to
    1e16 (``tests/taskhub/test_taskset_rows.py`` checks it); outside that range msgspec
    writes the exponent otherwise (``1e16`` for ``1e+16``, ``0.00001`` for ``1e-05``).
    """

    def __init__(self) -> None:
        self.unusual = False

    def __call__(self, text: str) -> float:
        value = float(text)
        if not math.isfinite(value):  # json.loads reads 1e400 as inf, which Task refuses
            raise ValueError(f"{text} is not a finite number")
        if value and not 1e-4 <= abs(value) < 1e16:
            self.unusual = True
        return value


def row_text(row: dict[str, Any]) -> bytes:
    """The text ``Task.content_hash`` hashes, for a row that validates as it is stored.

    Args:
        row: The row, as JSON decodes it (it is changed).
    """
    for key in row.keys() & _DROPPABLE:
        if key in MEASURED_FIELDS or row[key] == _DEFAULTS[key]:
            del row[key]
    rewards = row.get("rewards")
    if isinstance(rewards, str):
        row["rewards"] = [rewards]
    return canonical_json(row).encode()


def _measured_text(row: _MeasuredRow) -> bytes:
    """The canonical text of a row with measured fields (left out of the hash)."""
    rewards = [row.rewards] if isinstance(row.rewards, str) else row.rewards
    return _ENCODE.encode(
        msgspec.structs.replace(row, pass_rate=None, difficulty=None, profile=None, rewards=rewards)
    )


class _Decoder:
    """Decodes chunks of JSON Lines into rows, each with the text its content hash covers.

    A chunk is decoded as ``_ShapedRow`` (once the first row has given the shape, and until
    a row of another shape is met), else as ``_Row``, else as ``_MeasuredRow``.
    """

    def __init__(self) -> None:
        self.floats = _Floats()
        self.plain = msgspec.json.Decoder(_Row, float_hook=self.floats)
        self.measured = msgspec.json.Decoder(_MeasuredRow, float_hook=self.floats)
        self.shaped: msgspec.json.Decoder[Any] | None = None
        self.first = True

    def decode(self, chunk: memoryview) -> tuple[list[Any], Iterator[bytes]] | None:
        """The rows of ``chunk`` and their canonical texts; None when one is refused."""
        self.floats.unusual = False
        rows: list[Any] | None = None
        texts: Iterator[bytes] | None = None
        if self.shaped is not None:
            try:
                rows = self.shaped.decode_lines(chunk)
            except msgspec.ValidationError:
                self.shaped = None  # rows of other shapes: the rest is decoded as _Row
            except msgspec.DecodeError:
                return None
        if rows is None:
            self.floats.unusual = False  # what the refused decoding noted does not count
            try:
                plain = self.plain.decode_lines(chunk)
            except msgspec.ValidationError:  # a measured field, rewards as one string, or an error
                try:
                    measured = self.measured.decode_lines(chunk)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    return None
                rows, texts = measured, map(_measured_text, measured)
            except msgspec.DecodeError:
                return None
            else:
                rows = plain
                if self.first and plain:
                    shaped = _shaped_row(plain[0])
                    if shaped is not None:
                        self.shaped = msgspec.json.Decoder(shaped, float_hook=self.floats)
        self.first = False
        if self.floats.unusual:  # canonical_json writes these rows' floats
            texts = (row_text(msgspec.to_builtins(row)) for row in rows)
        elif texts is None:  # msgspec writes the canonical text itself
            texts = map(_ENCODE.encode, rows)
        return rows, texts


@contextmanager
def _paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of acyclic objects are made.

    Decoded rows hold no cycles, but every allocation counts towards a collection, and each
    collection walks every live object: decoding 1M rows took 70% longer with it running.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
        digests: bytes,
        positions: Sequence[int] | None = None,
        rewards: dict[int, tuple[str, ...]] | None = None,
    ) -> None:
        """Rows ``positions`` (all by default) of ``source``, with their sha256 digests.

        ``rewards``: the reward specs of the rows that name any, by position.
        """
        self.split = split
        self._source = source
        self._ids = task_ids
        self._digests = digests
        self._positions = positions
        self._rewards = rewards or {}

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
            return TaskRows(
                self.split, self._source, self._ids, self._digests, positions, self._rewards
            )
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

    def row_rewards(self) -> Iterator[tuple[int, str, tuple[str, ...]]]:
        """``(index, task_id, rewards)`` of each row that names reward specs, in order.

        Read when the split was loaded: no ``Task`` is built.
        """
        if not self._rewards:
            return
        if self._positions is None:
            for position, specs in sorted(self._rewards.items()):
                yield position, self._ids[position], specs
            return
        for index, position in enumerate(self._positions):
            named = self._rewards.get(position)
            if named:
                yield index, self._ids[position], named

    def content_hash(self, index: int) -> str:
        """``Task.content_hash`` of row ``index``, computed when the split was loaded."""
        start = self._position(index) * _DIGEST
        return self._digests[start : start + _DIGEST].hex()

    def content_hashes(self) -> list[str]:
        """Every row's content hash, in order."""
        return [text.decode() for block in self.hash_lines() for text in block.split()]

    def hash_lines(self) -> Iterator[bytes]:
        """Every row's content hash and a newline, in order, a block of rows at a time.

        They are what the taskset's fingerprint hashes; 1M rows are 65 MB of text, made here
        from the digests without a string per row.
        """
        import numpy as np

        digests = np.frombuffer(self._digests, dtype=np.uint8).reshape(-1, _DIGEST)
        if self._positions is not None:
            digests = digests[np.asarray(self._positions, dtype=np.int64)]
        for start in range(0, len(digests), _TEXT_BATCH):
            block = digests[start : start + _TEXT_BATCH]
            lines = np.empty((len(block), 2 * _DIGEST + 1), dtype=np.uint8)
            hexed = binascii.hexlify(block.tobytes())
            lines[:, :-1] = np.frombuffer(hexed, dtype=np.uint8).reshape(-1, 2 * _DIGEST)
            lines[:, -1] = ord("\n")
            yield lines.tobytes()


def task_ids(tasks: Sequence[Task]) -> list[str]:
    """The task ids of ``tasks``, in order (``TaskRows`` give them without a ``Task`` built)."""
    return tasks.task_ids if isinstance(tasks, TaskRows) else [task.task_id for task in tasks]


def row_rewards(tasks: Sequence[Task]) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """``(index, task_id, rewards)`` of each task that names reward specs, in order.

    ``TaskRows`` give them without a ``Task`` built; other sequences are read task by task.
    """
    if isinstance(tasks, TaskRows):
        yield from tasks.row_rewards()
        return
    for index, task in enumerate(tasks):
        if task.rewards:
            yield index, task.task_id, tuple(task.rewards)


def _specs(rewards: list[str] | str) -> tuple[str, ...]:
    """A row's ``rewards``: a list, or one spec as a string."""
    return (rewards,) if isinstance(rewards, str) else tuple(rewards)


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

    def __init__(self, unit: str) -> None:
        self.names: list[str] = []
        self.firsts: list[int] = []
        self.numbers: list[Any] = []
        self.unit = unit

    def add(self, name: str, numbers: Any) -> None:
        self.firsts.append(sum(len(n) for n in self.numbers))
        self.names.append(name)
        self.numbers.append(numbers)

    def file(self, position: int) -> tuple[int, int]:
        """The file of row ``position`` and the row's index in it."""
        import bisect

        file = bisect.bisect_right(self.firsts, position) - 1
        return file, position - self.firsts[file]

    def __getitem__(self, position: int) -> str:
        file, index = self.file(position)
        return f"({self.names[file]} {self.unit} {int(self.numbers[file][index])})"


class _Lines(_Source):
    """Rows as the JSON text of their lines, in the bytes of their files as read."""

    def __init__(self, files: list[_LinesFile], where: _Where) -> None:
        self.files = files
        self.where = where

    def tasks(self, positions: list[int], split: str) -> list[Task]:
        tasks = []
        for position in positions:
            file, index = self.where.file(position)
            lines = self.files[file]
            start, end = int(lines.starts[index]), int(lines.ends[index])
            tasks.append(_task(json.loads(lines.data[start:end]), split, self.where[position]))
        return tasks


@dataclass(frozen=True)
class _LinesFile:
    """A JSON Lines file checked in bulk: its bytes and where each row's line is in them."""

    data: bytes
    starts: numpy.ndarray[Any, Any]
    ends: numpy.ndarray[Any, Any]
    numbers: numpy.ndarray[Any, Any]
    """Each row's line number (from 1; blank lines hold no row)."""
    task_ids: list[str]
    digests: bytes
    rewards: dict[int, tuple[str, ...]]
    """The reward specs of the rows that name any, by row."""


def jsonl_rows(split: str, paths: Sequence[Path]) -> TaskRows | None:
    """The rows of JSON Lines files, checked in bulk; None when ``Task`` must check them."""
    files = []
    where = _Where("line")
    with _paused_gc():
        for path in paths:
            lines = _jsonl_file(path.read_bytes())
            if lines is None:
                return None
            files.append(lines)
            where.add(path.name, lines.numbers)
    ids = files[0].task_ids if len(files) == 1 else [i for f in files for i in f.task_ids]
    digests = b"".join(lines.digests for lines in files)
    rewards: dict[int, tuple[str, ...]] = {}
    before = 0
    for lines in files:
        rewards.update((before + row, specs) for row, specs in lines.rewards.items())
        before += len(lines.task_ids)
    return TaskRows(split, _Lines(files, where), ids, digests, rewards=rewards)


def _jsonl_file(data: bytes) -> _LinesFile | None:
    """Check and hash the rows of one JSON Lines file; None when ``Task`` must check them."""
    import numpy as np

    if any(data.find(b) >= 0 for b in _SPLITLINES_ASCII):
        return None
    if data.find(b"\r") >= 0 and data.count(b"\r") != data.count(b"\r\n"):
        return None
    if not data.isascii() and any(data.find(b) >= 0 for b in _SPLITLINES_UTF8):
        return None
    sha256 = hashlib.sha256
    decoder = _Decoder()
    view = np.frombuffer(data, dtype=np.uint8)
    buffer = memoryview(data)
    starts, ends, numbers, digests = [], [], [], []
    ids: list[str] = []
    rewards: dict[int, tuple[str, ...]] = {}
    lines_before = 0
    start = 0
    while start < len(data):
        # a chunk of whole lines, decoded straight from the file's bytes, so that the rows'
        # objects are never all held at once
        stop = data.find(b"\n", start + _CHUNK_BYTES)
        stop = len(data) if stop < 0 else stop + 1
        breaks = np.flatnonzero(view[start:stop] == ord("\n")) + start
        line_starts = np.concatenate(([start], breaks + 1))
        line_ends = np.concatenate((breaks, [stop]))
        if line_starts[-1] == stop:  # nothing after the last "\n"
            line_starts, line_ends = line_starts[:-1], line_ends[:-1]
        kept = _nonblank(data, view, line_starts, line_ends)
        chunk_starts, chunk_ends = line_starts[kept], line_ends[kept]
        if _too_deep(data, view, chunk_starts, chunk_ends):
            return None
        decoded = decoder.decode(buffer[start:stop])
        if decoded is None or len(decoded[0]) != len(chunk_starts):  # or two rows on a line
            return None
        rows, texts = decoded
        for index, row in enumerate(rows):
            if row.rewards:
                rewards[len(ids) + index] = _specs(row.rewards)
        ids.extend([row.task_id for row in rows])
        digests.append(b"".join([sha256(text).digest() for text in texts]))
        starts.append(chunk_starts)
        ends.append(chunk_ends)
        numbers.append(lines_before + 1 + np.flatnonzero(kept))
        lines_before += len(line_starts)
        start = stop
    empty = np.zeros(0, dtype=np.int64)
    return _LinesFile(
        data,
        np.concatenate(starts) if starts else empty,
        np.concatenate(ends) if ends else empty,
        np.concatenate(numbers) if numbers else empty,
        ids,
        b"".join(digests),
        rewards,
    )


def _nonblank(
    data: bytes,
    view: numpy.ndarray[Any, Any],
    starts: numpy.ndarray[Any, Any],
    ends: numpy.ndarray[Any, Any],
) -> numpy.ndarray[Any, Any]:
    """Which lines hold a row: a line that starts with "{" does; the others are looked at."""
    import numpy as np

    kept: numpy.ndarray[Any, Any] = view[starts] == ord("{")
    for index in np.flatnonzero(~kept).tolist():
        # blank to both readers: JSON's whitespace, which str.strip strips too (any other
        # whitespace makes it a row here, which msgspec refuses: Task's path decides)
        kept[index] = bool(data[starts[index] : ends[index]].strip(b" \t\r"))
    return kept


def _too_deep(
    data: bytes,
    view: numpy.ndarray[Any, Any],
    starts: numpy.ndarray[Any, Any],
    ends: numpy.ndarray[Any, Any],
) -> bool:
    """Whether a row nests deeper than ``MAX_JSON_DEPTH`` (the slow path refuses those)."""
    import numpy as np

    # nesting deeper than MAX_JSON_DEPTH takes that many brackets opened and closed: shorter
    # lines cannot, and only the few lines that open that many are parsed to measure them
    if not len(starts) or int((ends - starts).max()) <= 2 * MAX_JSON_DEPTH:
        return False
    first, last = int(starts[0]), int(ends[-1])
    chunk = view[first:last]
    opened = np.flatnonzero((chunk == ord("{")) | (chunk == ord("["))) + first
    rows = np.searchsorted(starts, opened, side="right") - 1
    counts = np.bincount(rows[rows >= 0], minlength=len(starts))
    for index in np.flatnonzero(counts > MAX_JSON_DEPTH).tolist():
        try:
            loads_bounded(data[starts[index] : ends[index]], constants=True)
        except (ValueError, RecursionError):
            return True
    return False


class _Table(_Source):
    def __init__(self, table: pyarrow.Table, where: _Where) -> None:
        self.table = table
        self.where = where
        self.nulls = _null_columns(table)

    def tasks(self, positions: list[int], split: str) -> list[Task]:
        from taskhub._canonical import int64_array

        rows = self.table.take(int64_array(positions)).to_pylist()
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


def read_parquet(path: Path) -> pyarrow.Table:
    """Read one parquet file whole, as both the bulk and the row-by-row paths read it.

    ``ParquetFile.read`` rather than ``pq.read_table``: the latter goes through
    ``pyarrow.dataset``, whose import costs a third of a second the first time.
    """
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as file:
        return file.read()


def parquet_rows(split: str, paths: Sequence[Path]) -> TaskRows | None:
    """The rows of parquet files, checked in bulk; None when ``Task`` must check them."""
    import numpy as np
    import pyarrow as pa

    from taskhub._canonical import row_texts, sha256_each, supported

    tables = []
    where = _Where("row")
    for path in paths:
        try:
            table = read_parquet(path)
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
        table.validate(full=True)  # UTF-8 text, which the slow path's to_pylist decodes
    except pa.ArrowInvalid:
        return None
    if not all(supported(field.type) for field in table.schema):
        return None
    ids = table["task_id"].to_pylist()
    digests = [
        sha256_each(row_texts(table.slice(start, _TEXT_BATCH)))
        for start in range(0, table.num_rows, _TEXT_BATCH)
    ]
    rewards: dict[int, tuple[str, ...]] = {}
    if "rewards" in table.column_names:
        for index, specs in enumerate(table["rewards"].to_pylist()):
            if specs:
                rewards[index] = _specs(specs)
    return TaskRows(split, _Table(table, where), ids, b"".join(digests), rewards=rewards)


def _columns_fit(table: pyarrow.Table) -> bool:
    """Whether every row of ``table`` validates as a ``Task``, judged from its columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    types = pa.types
    names = set(table.column_names)
    if (
        not names <= set(Task.model_fields)
        or "task_id" not in names
        or len(names) != table.num_columns
    ):
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
