r"""The canonical JSON text of Arrow rows, built a column at a time.

``Task.content_hash`` is the sha256 of ``canonical_json`` of the row as ``Task`` dumps it
(defaults and measured fields left out). For the rows of a parquet table that text can be built
with Arrow compute, a column at a time, instead of making every row a Python object: each value
is formatted as ``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
formats it, and the pieces are joined per row. Only the hashing stays a Python call per row.

The text is exact, not approximate, for the types handled here:

- strings: quoted, with ``\``, ``"`` and the control characters escaped as ``json.dumps`` does
  (``\n``, ``\t``, ``\r``, ``\b``, ``\f``, else ``\u00XX`` in lowercase hex);
- integers: Arrow's decimal text, which is Python's;
- floats: ``float.__repr__`` of each value (what ``json.dumps`` writes), called per value;
- booleans, nulls, structs (keys sorted as Python sorts them, and escaped by ``json.dumps``
  itself) and lists.

Any other type (dictionary, map, binary, temporal, decimal, half floats...) is refused
(``supported``), and the caller validates those rows with ``Task`` instead. Nulls follow how a
parquet row becomes a ``Task`` (``_rows._stripped``): a null at the top level or inside
``reset``, ``metadata`` or ``oracle_actions`` means the key is absent; inside ``answer`` it is a
JSON ``null``.

An object whose first key is in every row is one concatenation of literal text and its values'
columns, nested objects included: a taskset whose rows share their keys costs one pass over its
text. Keys that some rows lack are joined with their comma, or an empty string, per row.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskhub._schema import MEASURED_FIELDS

if TYPE_CHECKING:
    import numpy
    import pyarrow

#: Columns whose nested nulls are dropped when a parquet row becomes a ``Task``.
STRIPPED = frozenset({"reset", "metadata", "oracle_actions"})
#: Columns whose value ``{}`` is their default, which the hashed text leaves out.
_EMPTY_OBJECT_DEFAULTS = frozenset({"reset", "metadata"})
# Control characters json.dumps writes with a short escape; the others become \u00XX.
_SHORT_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def supported(kind: pyarrow.DataType) -> bool:
    """Whether values of type ``kind`` (at any depth) get their exact canonical text here."""
    import pyarrow as pa

    types = pa.types
    if types.is_struct(kind):
        names = [kind.field(i).name for i in range(kind.num_fields)]
        return len(set(names)) == len(names) and all(
            supported(kind.field(i).type) for i in range(kind.num_fields)
        )
    if types.is_list(kind) or types.is_large_list(kind):
        return supported(kind.value_type)
    return bool(
        types.is_string(kind)
        or types.is_large_string(kind)
        or types.is_integer(kind)
        or types.is_boolean(kind)
        or types.is_float32(kind)
        or types.is_float64(kind)
        or types.is_null(kind)
    )


def row_texts(table: pyarrow.Table) -> pyarrow.Array:
    """The canonical JSON text of every row of ``table``, as ``Task.content_hash`` covers it.

    Args:
        table: Rows that validate as ``Task`` (the caller checks them, and that every column's
            type is ``supported``).

    Returns:
        A ``large_string`` array: row ``i`` is the text whose sha256 is row ``i``'s hash.
    """
    import pyarrow.compute as pc

    members = []
    for name in sorted(table.column_names):
        if name in MEASURED_FIELDS:
            continue
        column = table[name].combine_chunks()
        pieces = _pieces(column, strip=name in STRIPPED)
        if name in _EMPTY_OBJECT_DEFAULTS and _maybe_empty(column):
            # {} is the default, left out: this column's text is compared to it
            text = _masked(_concat(pieces, len(column)), column)
            text = pc.if_else(pc.equal(text, _scalar("{}")), _scalar(None), text)
            members.append(_Member(name, text, [text], optional=True))
        else:
            members.append(_Member(name, column, pieces, optional=column.null_count > 0))
    return _concat(_object(members, table.num_rows), table.num_rows)


def sha256_each(texts: pyarrow.Array) -> bytes:
    """The sha256 digests (32 bytes each, in order) of the values of a ``large_string`` array."""
    import numpy as np

    _, offsets_buffer, data_buffer = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)
    bounds = offsets[texts.offset : texts.offset + len(texts) + 1].tolist()
    data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
    sha256 = hashlib.sha256
    return b"".join(
        [sha256(data[a:b]).digest() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    )


@dataclass
class _Member:
    """One key of an object: its name, its values, their text, whether some rows lack it."""

    name: str
    values: pyarrow.Array
    pieces: list[Any]
    """Literal text (``str``) and columns of text: concatenated per row, the value's JSON
    text, wherever the value is not null."""
    optional: bool


def text_array(values: Sequence[str | None]) -> pyarrow.Array:
    """A ``large_string`` array of ``values``, made from its buffers.

    ``pa.array`` and ``pa.scalar`` (and the compute functions given a Python value) import
    pandas, to look for pandas objects among the values: on a cold start that import costs
    more than building every row's text.
    """
    import numpy as np
    import pyarrow as pa

    encoded = [b"" if value is None else value.encode() for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    missing = np.fromiter((value is None for value in values), dtype=bool, count=len(values))
    validity = None
    if missing.any():
        validity = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(
        pa.large_string(), len(encoded), buffers, null_count=int(missing.sum())
    )


def int64_array(values: Any) -> pyarrow.Array:
    """An ``int64`` array of ``values`` (a sequence or numpy array), without ``pa.array``."""
    import numpy as np
    import pyarrow as pa

    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def _numpy_ints(array: pyarrow.Array) -> numpy.ndarray[Any, Any]:
    """The values of an integer array without nulls, read from its buffer.

    ``to_numpy`` would import pandas (see ``text_array``).
    """
    import numpy as np

    width = np.dtype(f"int{array.type.bit_width}")
    return np.frombuffer(array.buffers()[1], dtype=width)[array.offset : array.offset + len(array)]


@functools.cache
def _scalar(value: str | None) -> pyarrow.Scalar:
    """A ``large_string`` scalar: the compute functions want one string type throughout."""
    return text_array([value])[0]


def _key(name: str) -> str:
    return json.dumps(name, ensure_ascii=False) + ":"


def _pieces(array: pyarrow.Array, *, strip: bool) -> list[Any]:
    """Literal text and columns of text whose concatenation is each value's JSON text.

    The text is meaningful only where the value is not null (``_masked`` nulls the rest).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    types = pa.types
    kind = array.type
    if types.is_string(kind) or types.is_large_string(kind):
        return ['"', _escaped(array), '"']
    if types.is_integer(kind):
        return [pc.cast(array, pa.large_string())]
    if types.is_boolean(kind):
        return [pc.if_else(array, _scalar("true"), _scalar("false"))]
    if types.is_float32(kind) or types.is_float64(kind):
        # json.dumps writes a float as float.__repr__ does: the one exact way to that text
        return [text_array([None if v is None else float.__repr__(v) for v in array.to_pylist()])]
    if types.is_null(kind):
        return ["null"]
    if types.is_struct(kind):
        # flatten() gives each field with the struct's own nulls and offset applied
        fields = dict(zip((f.name for f in kind), array.flatten(), strict=True))
        members = []
        for name in sorted(fields):
            child = fields[name]
            if strip and types.is_null(child.type):
                continue  # never set: the key is absent from every row
            pieces = _pieces(child, strip=strip)
            if not strip and child.null_count:  # a JSON null (answer), not an absent key
                text = _masked(_concat(pieces, len(child)), child)
                pieces = [pc.fill_null(text, _scalar("null"))]
            optional = strip and _nulls_within(child, array)
            members.append(_Member(name, child, pieces, optional))
        return _object(members, len(array))
    if types.is_list(kind) or types.is_large_list(kind):
        return [_array_text(array, strip=strip)]
    raise TypeError(f"no canonical JSON text for Arrow type {kind}")


def _object(members: list[_Member], length: int) -> list[Any]:
    """The pieces of a JSON object per row, with the keys ``members`` in that order."""
    import pyarrow.compute as pc

    if not members:
        return ["{}"]
    if not members[0].optional:
        # every row has the first key: the commas are fixed text wherever a key is there
        pieces: list[Any] = ["{"]
        for index, member in enumerate(members):
            lead = ("," if index else "") + _key(member.name)
            if member.optional:
                pieces.append(_optional(lead, member, length))
            else:
                pieces += [lead, *member.pieces]
        return [*pieces, "}"]
    # some rows may lack every key: each key comes with its comma, or as "", and the first
    # comma becomes the brace (the separator-with-skip form of binary_join_element_wise
    # drops the rows where every input is null, in pyarrow 26)
    parts = [
        _optional("," + _key(m.name), m, length) if m.optional else ["," + _key(m.name), *m.pieces]
        for m in members
    ]
    flat = [p for part in parts for p in (part if isinstance(part, list) else [part])]
    body = pc.binary_replace_slice(_concat(flat, length), start=0, stop=1, replacement="{")
    return [body, "}"]


def _optional(lead: str, member: _Member, length: int) -> pyarrow.Array:
    """``lead`` and the member's value per row, or "" where the row lacks that key."""
    import pyarrow.compute as pc

    text = _masked(_concat([lead, *member.pieces], length), member.values)
    return pc.fill_null(text, _scalar(""))


def _nulls_within(child: pyarrow.Array, parent: pyarrow.Array) -> bool:
    """Whether ``child`` is null in a row where its struct ``parent`` is not."""
    import pyarrow.compute as pc

    if not child.null_count:
        return False
    if not parent.null_count:
        return True
    return bool(pc.any(pc.and_(child.is_null(), parent.is_valid())).as_py())


def _maybe_empty(column: pyarrow.Array) -> bool:
    """Whether a struct column's text may be ``{}`` in some row (no key is in every row)."""
    import pyarrow as pa

    if not pa.types.is_struct(column.type):
        return False
    return all(
        pa.types.is_null(child.type) or _nulls_within(child, column) for child in column.flatten()
    )


def _array_text(array: pyarrow.Array, *, strip: bool) -> pyarrow.Array:
    """Each list's JSON text, null where the list is."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    # the items of the lists that are not null, in order (a sliced array's too)
    items = pc.list_flatten(array)
    texts = pc.fill_null(
        _masked(_concat(_pieces(items, strip=strip), len(items)), items), _scalar("null")
    )
    # each list's length, a null list's 0: the items counted by the list they are in
    parents = _numpy_ints(pc.list_parent_indices(array))
    offsets = np.zeros(len(array) + 1, dtype=np.int64)
    np.cumsum(np.bincount(parents, minlength=len(array)), out=offsets[1:])
    lists = pa.LargeListArray.from_arrays(int64_array(offsets), texts)
    joined = pc.binary_join(lists, _scalar(","))
    return _masked(_concat(["[", joined, "]"], len(array)), array)


def _escaped(strings: pyarrow.Array) -> pyarrow.Array:
    """Strings escaped for a JSON string literal as ``json.dumps(ensure_ascii=False)`` does."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = strings.cast(pa.large_string())
    data = strings.buffers()[2]
    if data is None:
        return strings
    # one look at the bytes (of the whole buffer: a slice's neighbours can only add work)
    # decides whether anything needs an escape; most columns need none
    view = np.frombuffer(data, dtype=np.uint8)
    if not len(view) or (
        view.min() >= 0x20 and not (view == 0x22).any() and not (view == 0x5C).any()
    ):
        return strings
    # the backslash first, so that the backslashes of the escapes added are not doubled
    strings = pc.replace_substring(strings, "\\", "\\\\")
    strings = pc.replace_substring(strings, '"', '\\"')
    if _any_match(strings, r"[\x00-\x1f]"):
        for char, escape in _SHORT_ESCAPES.items():
            strings = pc.replace_substring(strings, char, escape)
        if _any_match(strings, r"[\x00-\x1f]"):
            for code in range(0x20):
                if chr(code) not in _SHORT_ESCAPES:
                    strings = pc.replace_substring(strings, chr(code), f"\\u{code:04x}")
    return strings


def _any_match(strings: pyarrow.Array, pattern: str) -> bool:
    import pyarrow.compute as pc

    return bool(pc.any(pc.match_substring_regex(strings, pattern)).as_py())


def _concat(pieces: list[Any], length: int) -> pyarrow.Array:
    """Concatenate the pieces per row (null wherever a column piece is null)."""
    import pyarrow.compute as pc

    merged: list[Any] = []
    for piece in pieces:  # adjacent literal text is one piece
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    columns = [p for p in merged if not isinstance(p, str)]
    if not columns:
        return text_array(["".join(merged)] * length)
    if len(merged) == 1:
        return columns[0]
    args = [_scalar(p) if isinstance(p, str) else p for p in merged]
    return pc.binary_join_element_wise(*args, _scalar(""))


def _masked(text: pyarrow.Array, array: pyarrow.Array) -> pyarrow.Array:
    """``text``, null where ``array`` is null."""
    import pyarrow.compute as pc

    if not array.null_count:
        return text
    return pc.if_else(array.is_valid(), text, _scalar(None))
