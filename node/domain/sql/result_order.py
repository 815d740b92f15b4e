"""The canonical row order of a result without a top-level ORDER BY (DESIGN.md: "results are written in canonical
order ... else all columns"; docs/queries.md "Order").

Rows are sorted column by column, first column first, ascending, nulls last:

- a column Arrow can sort (numbers, strings, binary, dates, times, decimals, booleans) by its value; a FLOAT/DOUBLE
  column then also by its IEEE-754 bits, so ``-0.0`` (bits ``0x8000…``, read as a signed integer: negative) comes
  before ``0.0``, and NaNs with different payloads keep a fixed order;
- any other column (lists, structs, maps, …) by the bytes of ``encode(value)`` below, compared as unsigned bytes
  (numbers inside are encoded so that byte order is numeric order, ``-0.0`` before ``0.0``; strings, lists and
  structs are length-prefixed, so a shorter one comes first).

Each key is injective (two values with equal keys are the same bytes), so the order is total: two peers that hold
the same multiset of rows write them in the same order, whatever the input's layout.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def canonical_order(table: pa.Table) -> pa.Table:
    """``table``'s rows in the canonical order (see the module's docstring)."""
    indices = canonical_indices(table)
    return table if indices is None else table.take(indices)


def canonical_indices(table: pa.Table) -> pa.Array | None:
    """The row indices that put ``table`` in the canonical order (None: fewer than 2 rows). Taking them a slice at a
    time, not the whole table at once, never holds a second copy of a large result."""
    if table.num_rows < 2:
        return None
    keys: list[pa.Array] = []
    for column in table.columns:
        keys.extend(sort_keys(column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)))
    names = [f"k{i}" for i in range(len(keys))]
    return pc.sort_indices(pa.table(keys, names=names), sort_keys=[(n, "ascending", "at_end") for n in names])


def sort_keys(array: pa.Array) -> list[pa.Array]:
    """The key arrays that order one column (see the module's docstring)."""
    t = array.type
    if pa.types.is_floating(t):
        return [array, float_bits(array)]
    if pa.types.is_dictionary(t):
        return sort_keys(array.dictionary_decode())
    if _sortable(t):
        return [array]
    return [pa.array([None if v is None else encode(v) for v in array.to_pylist()], pa.binary())]


def _sortable(t: pa.DataType) -> bool:
    if pa.types.is_interval(t):  # Arrow cannot sort month_day_nano intervals: they go by their encoding
        return False
    return (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)
        or pa.types.is_temporal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_null(t)
    )


def float_bits(array: pa.Array) -> pa.Array:
    """A float column's IEEE-754 bits as signed integers (null where the value is null)."""
    width = {16: np.int16, 32: np.int32}.get(array.type.bit_width, np.int64)
    values = array.fill_null(0).to_numpy(zero_copy_only=False).view(width).astype(np.int64)
    return pa.array(values, pa.int64(), mask=array.is_null().to_numpy(zero_copy_only=False))


def encode(value: Any) -> bytes:
    """A canonical, injective byte encoding of one cell of a column of a given type (the value as Arrow's
    ``to_pylist`` returns it): a tag byte, then the payload; lengths and counts are 8-byte big-endian."""
    if value is None:
        return b"\x00"
    if isinstance(value, bool):
        return b"\x01" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):  # offset binary: byte order is numeric order (Spark's integers fit 64 bits)
        return b"\x02" + (value + (1 << 127)).to_bytes(16, "big")
    if isinstance(value, float):  # the exact bits, flipped so that byte order is numeric order, -0.0 < 0.0
        bits = struct.unpack(">Q", struct.pack(">d", value))[0]
        return b"\x03" + (bits ^ ((1 << 64) - 1) if bits >> 63 else bits | (1 << 63)).to_bytes(8, "big")
    if isinstance(value, str):
        raw = value.encode()
        return b"\x04" + _length(len(raw)) + raw
    if isinstance(value, (bytes, bytearray)):
        return b"\x05" + _length(len(value)) + bytes(value)
    if isinstance(value, decimal.Decimal):
        text = str(value).encode()  # a column's decimals share one scale: the text is exact
        return b"\x06" + _length(len(text)) + text
    if isinstance(value, datetime.datetime):
        text = value.isoformat().encode()  # microseconds, and the zone when the type has one
        return b"\x07" + _length(len(text)) + text
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta)):
        text = str(value).encode()
        return b"\x08" + _length(len(text)) + text
    if isinstance(value, dict):  # a struct: its fields in order
        return b"\x09" + _length(len(value)) + b"".join(encode(str(k)) + encode(v) for k, v in value.items())
    if isinstance(value, list):  # a list, or a map as its (key, value) entries in stored order
        return b"\x0a" + _length(len(value)) + b"".join(encode(v) for v in value)
    if isinstance(value, tuple):  # a map entry
        return b"\x0b" + _length(len(value)) + b"".join(encode(v) for v in value)
    raise TypeError(f"no canonical encoding for a {type(value).__name__}")


def _length(n: int) -> bytes:
    return n.to_bytes(8, "big")
