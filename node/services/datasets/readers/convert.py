"""Conversions shared by the text formats: storable types, event time, cast failures, _TextFormat.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from node.services.datasets.readers.chunking import _Chunker, _first_failure
from node.services.datasets.readers.options import EVENT_TIME_TYPE, _snip
from node.services.datasets.slices import canonical_slice_schema
from node.support.errors import InvalidInput, one_line

_ZONED_RE = r"[T ]\d{2}(?::?\d{2}(?::?\d{2}(?:[.,]\d+)?)?)?\s*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"


def _storable_type(type_: pa.DataType) -> pa.DataType:
    """``type_`` as Parquet stores it, so that a slice reads back with the type it was
    written with: Parquet has no seconds unit (``timestamp[s]`` → ``timestamp[ms]``,
    ``time32[s]`` → ``time32[ms]``, lossless) and no 64-bit date (``date64`` → ``date32``).
    Nested types are mapped inside."""
    t = pa.types
    if t.is_timestamp(type_) and type_.unit == "s":
        return pa.timestamp("ms", tz=type_.tz)
    if t.is_time32(type_) and type_.unit == "s":
        return pa.time32("ms")
    if t.is_date64(type_):
        return pa.date32()
    if t.is_struct(type_):
        return pa.struct([f.with_type(_storable_type(f.type)) for f in type_])
    if t.is_list(type_) or t.is_large_list(type_):
        item = type_.value_field.with_type(_storable_type(type_.value_type))
        return pa.large_list(item) if t.is_large_list(type_) else pa.list_(item)
    if t.is_fixed_size_list(type_):
        return pa.list_(type_.value_field.with_type(_storable_type(type_.value_type)), type_.list_size)
    if t.is_map(type_):
        return pa.map_(
            type_.key_field.with_type(_storable_type(type_.key_type)),
            type_.item_field.with_type(_storable_type(type_.item_type)),
        )
    if t.is_dictionary(type_):
        return _storable_type(type_.value_type)
    return type_


MAX_TYPE_DEPTH = 64  # nested lists/structs/maps per column; 5,000 levels of JSON arrays was a RecursionError


def _type_depth(type_: pa.DataType) -> int:
    """How deeply ``type_`` nests (1 for a flat type), walked without recursion: the input decides the depth."""
    depth, level = 0, [type_]
    while level and depth <= MAX_TYPE_DEPTH:
        depth += 1
        level = [type_.field(i).type for type_ in level for i in range(type_.num_fields)]
    return depth


def _output_schema(fields: list[pa.Field]) -> pa.Schema:
    """The normalised schema handed out: storable types, canonical slice form."""
    for f in fields:
        if _type_depth(f.type) > MAX_TYPE_DEPTH:
            raise InvalidInput(f"column {_snip(f.name)} nests more than {MAX_TYPE_DEPTH} levels deep: refused")
    return canonical_slice_schema(pa.schema([pa.field(f.name, _storable_type(f.type)) for f in fields]))


def _event_time_supported(type_: pa.DataType) -> bool:
    t = pa.types
    return (
        t.is_timestamp(type_) or t.is_date(type_) or t.is_string(type_) or t.is_large_string(type_) or t.is_null(type_)
    )


def _nullify(arr: pa.Array, spellings: tuple[str, ...]) -> pa.Array:
    """A string array with the null spellings made nulls."""
    return pc.if_else(pc.is_in(arr, value_set=pa.array(spellings, pa.string())), pa.scalar(None, pa.string()), arr)


def _to_event_time(arr: pa.Array, null_values: tuple[str, ...] = ()) -> pa.Array:
    """``arr`` as ``timestamp[us, UTC]`` (raises pa.ArrowException on a bad value)."""
    t = arr.type
    if t == EVENT_TIME_TYPE:
        return arr
    if pa.types.is_null(t):
        return pa.nulls(len(arr), EVENT_TIME_TYPE)
    if pa.types.is_timestamp(t):
        if t.tz is None:
            arr = arr.cast(pa.timestamp(t.unit, tz="UTC"))
        return arr.cast(EVENT_TIME_TYPE)
    if pa.types.is_date(t):
        return arr.cast(pa.timestamp("us")).cast(EVENT_TIME_TYPE)
    if pa.types.is_large_string(t):
        arr = arr.cast(pa.string())
    if null_values:
        arr = _nullify(arr, null_values)
    try:
        return arr.cast(EVENT_TIME_TYPE)
    except pa.ArrowInvalid:
        pass
    try:
        return arr.cast(pa.timestamp("us")).cast(EVENT_TIME_TYPE)
    except pa.ArrowInvalid:
        pass
    zoned = pc.match_substring_regex(arr, _ZONED_RE)
    null = pa.scalar(None, pa.string())
    a = pc.if_else(zoned, arr, null).cast(EVENT_TIME_TYPE)
    b = pc.if_else(zoned, null, arr).cast(pa.timestamp("us")).cast(EVENT_TIME_TYPE)
    return pc.if_else(zoned, a, b)


def _cast_failure(arr: pa.Array, convert: Callable[[pa.Array], pa.Array]) -> tuple[int | None, str]:
    """Index and message of the first value of ``arr`` that ``convert`` refuses."""
    messages: list[str] = []

    def fails(lo: int, hi: int) -> bool:
        try:
            convert(arr.slice(lo, hi - lo))
            return False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            messages.append(str(e))
            return True

    index = _first_failure(len(arr), fails)
    return index, (messages[-1] if messages else "")


def _value_at(arr: pa.Array, i: int) -> Any:
    try:
        return arr[i].as_py()
    except Exception:  # noqa: BLE001 - only for a message
        return str(arr[i])


def _event_time_message(where: str, col: str, value: Any) -> str:
    return (
        f"{where}, column {col!r}: value {_snip(value)} is not a valid event time (expected an ISO 8601"
        " timestamp such as 2024-01-31T12:00:00Z; values without an offset are read as UTC)"
    )


class _TextFormat:
    """Shared by CSV and JSON Lines: chunks → batches with fixed types."""

    name: str
    schema: pa.Schema
    chunker: _Chunker  # cuts the decoded input into chunks of whole rows
    _event_index: int | None  # the event time column's position, if there is one
    _null_spellings: tuple[str, ...]  # text read as null in columns read as text

    def first_batches(self) -> list[pa.RecordBatch]:
        raise NotImplementedError

    def parse(self, data: bytes, first_line: int) -> list[pa.RecordBatch]:
        raise NotImplementedError

    def _finish(
        self, table: pa.Table, data: bytes, first_line: int, row_lines: Callable[[bytes, int, int], int]
    ) -> list[pa.RecordBatch]:
        """Post-conversions (event time, casts) and the normalised schema."""
        out = []
        row0 = 0
        for batch in table.to_batches():
            columns = []
            for i, f in enumerate(self.schema):
                arr = batch.column(i)
                if i == self._event_index:
                    try:
                        arr = _to_event_time(arr, self._null_spellings)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                        idx, _ = _cast_failure(arr, lambda a: _to_event_time(a, self._null_spellings))
                        idx = idx or 0
                        line = row_lines(data, first_line, row0 + idx)
                        raise InvalidInput(
                            _event_time_message(f"{self.name}: line {line}", f.name, _value_at(arr, idx))
                        ) from None
                elif arr.type != f.type:
                    if self._null_spellings and pa.types.is_string(arr.type):
                        arr = _nullify(arr, self._null_spellings)  # a column read as text
                    try:
                        arr = arr.cast(f.type)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                        idx, msg = _cast_failure(arr, functools.partial(pa.Array.cast, target_type=f.type))
                        line = row_lines(data, first_line, row0 + (idx or 0))
                        value = _value_at(arr, idx) if idx is not None else None
                        raise InvalidInput(
                            f"{self.name}: line {line}, column {f.name!r}: value {_snip(value)} cannot be"
                            f" converted to {f.type}: {one_line(msg or str(e))}"
                        ) from None
                columns.append(arr)
            out.append(pa.RecordBatch.from_arrays(columns, schema=self.schema))
            row0 += batch.num_rows
        return out
