"""Slices: the Parquet parts a dataset's data lives in, written so that the same rows always
give the same bytes (and so the same CID on every peer: Qri's "hash collisions are
discovery").

A slice's bytes are a function of three things only: the column names, the rows (as the
logical hash sees them: canonical types and values, see ``node.services.datasets.logical_hash``),
and :data:`SLICE_WRITER_VERSION` together with the pyarrow version, which is pinned exactly
in ``pyproject.toml``. Neither Arrow chunking, nor ``string`` vs ``large_string``, nor
dictionary vs plain arrays, nor nullability flags, nor schema metadata change them.

Before writing, :func:`write_parquet_slice` brings the table to one canonical form:

- **One chunk per column** (``combine_chunks``): parquet-cpp cuts pages and decides
  dictionary fallback while it consumes each chunk, so differently chunked input could give
  different pages.
- **Canonical physical types**: dictionary and run-end encoded arrays decoded; ``large_string``
  / ``string_view`` → ``string``, ``large_binary`` / ``binary_view`` → ``binary``,
  ``large_list`` → ``list`` (64-bit offsets are kept only when a column's data does not fit
  32-bit offsets; a function of the data, so still deterministic); ``decimal32/64`` →
  ``decimal128``, ``decimal256`` of precision ≤ 38 → ``decimal128``. The embedded Arrow
  schema (``ARROW:schema``) would otherwise record the encoding.
- **Every field nullable, no metadata** (schema and field metadata dropped; list items named
  ``item``, map entries ``entries``/``key``/``value``): Cairn structures carry names and
  types only (``st_0``); a ``pandas`` metadata blob, for one, holds library versions.

Writer options (:data:`WRITER_OPTIONS`), each fixed rather than left to a default that a
pyarrow release may move:

- ``version="2.6"``: the current Parquet logical types (nanosecond timestamps, unsigned
  integers, …) so types round-trip.
- ``data_page_version="1.0"``: the page format every reader (Spark, DuckDB, older Hive
  readers) handles.
- ``compression="zstd"``, ``compression_level=1``: better ratio than snappy at similar
  speed; level 1 keeps ingest fast. zstd's output is a deterministic function of input,
  level and library version (bundled with the pinned pyarrow).
- ``use_dictionary=True``, ``dictionary_pagesize_limit=1 MiB``: dictionary pages for
  repetitive columns; the fallback to plain encoding when the dictionary outgrows the limit
  is a deterministic function of the data once the limit and the chunking are fixed.
- ``row_group_size=1 Mi rows``, ``data_page_size=1 MiB``, ``write_batch_size=1024``,
  ``max_rows_per_page=20 000``: page and row group boundaries fixed in rows and bytes.
- ``write_statistics=True``: min/max/null counts let readers skip row groups; they are
  computed from the data.
- ``write_page_index=False``, ``write_page_checksum=False``, ``use_byte_stream_split=False``,
  ``column_encoding=None``, ``use_content_defined_chunking=False``, no bloom filters, no
  sorting columns, no encryption: nothing beyond the above is written.
- ``coerce_timestamps=None``, ``allow_truncated_timestamps=False``,
  ``use_deprecated_int96_timestamps=False``, ``write_time_adjusted_to_utc=False``: timestamps
  are stored as they are, never silently truncated.
- ``store_decimal_as_integer=False``: decimals as fixed-length byte arrays, one layout
  whatever the precision.
- ``use_compliant_nested_type=True``: the standard ``list``/``element`` nesting.
- ``store_schema=True``: the Arrow schema rides along (as ``ARROW:schema``) so timestamp time
  zones, durations and other Arrow types read back exactly.

Parquet has no created-at timestamp; the footer's ``created_by`` is
``parquet-cpp-arrow version <pyarrow version>``, fixed by the pin. A change to any of this
is a new :data:`SLICE_WRITER_VERSION`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from node.support.errors import CairnError, InvalidInput, NotFound

__all__ = [
    "PYARROW_VERSION",
    "SLICE_WRITER_VERSION",
    "WRITER_OPTIONS",
    "canonical_slice_schema",
    "iter_slices",
    "read_slice",
    "read_slice_head",
    "slice_bytes",
    "take_canonical",
    "write_parquet_slice",
]

#: Names the option set below and the canonicalization before it. Bump on any change.
SLICE_WRITER_VERSION = "cairn-slice/1"
#: The pyarrow the bytes were produced with (pinned exactly in pyproject.toml).
PYARROW_VERSION = pa.__version__

ROW_GROUP_ROWS = 1 << 20

WRITER_OPTIONS: dict[str, Any] = {
    "version": "2.6",
    "data_page_version": "1.0",
    "compression": "zstd",
    "compression_level": 1,
    "use_dictionary": True,
    "dictionary_pagesize_limit": 1 << 20,
    "write_statistics": True,
    "data_page_size": 1 << 20,
    "write_batch_size": 1024,
    "max_rows_per_page": 20_000,
    "use_byte_stream_split": False,
    "column_encoding": None,
    "use_compliant_nested_type": True,
    "store_schema": True,
    "write_page_index": False,
    "write_page_checksum": False,
    "coerce_timestamps": None,
    "allow_truncated_timestamps": False,
    "use_deprecated_int96_timestamps": False,
    "write_time_adjusted_to_utc": False,
    "store_decimal_as_integer": False,
    "sorting_columns": None,
    "use_content_defined_chunking": False,
}

_INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------- canonical form


def _canonical_type(type_: pa.DataType, large: bool) -> pa.DataType:
    """The physical type a slice stores ``type_`` as (``large``: keep 64-bit offsets)."""
    t = pa.types
    if t.is_dictionary(type_) or t.is_run_end_encoded(type_):
        return _canonical_type(type_.value_type, large)
    if t.is_string(type_) or t.is_large_string(type_) or t.is_string_view(type_):
        return pa.large_string() if large else pa.string()
    if t.is_binary(type_) or t.is_large_binary(type_) or t.is_binary_view(type_):
        return pa.large_binary() if large else pa.binary()
    if t.is_decimal(type_):
        p, s = type_.precision, type_.scale
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    if t.is_map(type_):
        return pa.map_(
            pa.field("key", _canonical_type(type_.key_type, large), nullable=False),
            pa.field("value", _canonical_type(type_.item_type, large)),
        )
    if t.is_list(type_) or t.is_large_list(type_):
        item = pa.field("item", _canonical_type(type_.value_type, large))
        return pa.large_list(item) if large else pa.list_(item)
    if t.is_fixed_size_list(type_):
        return pa.list_(pa.field("item", _canonical_type(type_.value_type, large)), type_.list_size)
    if t.is_struct(type_):
        return pa.struct([pa.field(f.name, _canonical_type(f.type, large)) for f in type_])
    if t.is_list_view(type_) or t.is_large_list_view(type_):
        raise InvalidInput(f"slices: unsupported Arrow type {type_}")
    return type_


def canonical_slice_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a slice of ``schema`` is written with (32-bit offsets)."""
    return pa.schema([pa.field(f.name, _canonical_type(f.type, False)) for f in schema])


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _canonical_column(column: pa.ChunkedArray) -> pa.Array:
    small = _canonical_type(column.type, large=False)
    try:
        return _one_chunk(column if column.type == small else pc.cast(column, small))
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        # 32-bit offsets overflow (over 2 GiB of values, or of list elements, in one column):
        # keep 64-bit ones. Deterministic: a function of the data.
        large = _canonical_type(column.type, large=True)
        return _one_chunk(column if column.type == large else pc.cast(column, large))


def _canonical_table(table: pa.Table) -> pa.Table:
    columns = [_canonical_column(table.column(i)) for i in range(table.num_columns)]
    schema = pa.schema([pa.field(f.name, c.type) for f, c in zip(table.schema, columns, strict=True)])
    return pa.Table.from_arrays(columns, schema=schema)


def take_canonical(holder: list[pa.Table]) -> pa.Table:
    """The canonical form (one chunk per column, canonical types) of the one table in ``holder``, taken out of it.

    The same table :func:`write_parquet_slice` writes (writing it again changes nothing), made so that the input is
    held about once, not twice: each column's chunks are released as soon as its one-chunk copy exists (an
    ingest's memory bounded by one slice). ``holder`` is the only reference the caller keeps.
    """
    table = holder.pop()
    fields = list(table.schema)
    pending = table.columns[::-1]  # taken from the end: the first column first, each out of the list once taken
    del table
    columns = []
    while pending:
        column = pending.pop()
        columns.append(_canonical_column(column))
        del column
    schema = pa.schema([pa.field(f.name, c.type) for f, c in zip(fields, columns, strict=True)])
    return pa.Table.from_arrays(columns, schema=schema)


# --------------------------------------------------------------------------- write / read


def write_parquet_slice(table: pa.Table, sink: str | os.PathLike | BinaryIO | pa.NativeFile) -> None:
    """Write ``table`` as one slice: canonical form, fixed writer options (module docstring).

    ``sink`` is a path, a writable binary file object or a pyarrow output stream.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise InvalidInput(f"write_parquet_slice needs a pyarrow Table, got {type(table).__name__}")
    if isinstance(sink, os.PathLike):
        sink = os.fspath(sink)
    try:
        pq.write_table(
            _canonical_table(table),
            sink,
            row_group_size=ROW_GROUP_ROWS,
            **WRITER_OPTIONS,
        )
    except pa.ArrowNotImplementedError as e:
        raise InvalidInput(f"slices: cannot write this table as Parquet: {e}") from None
    except pa.ArrowException as e:
        raise CairnError(f"slices: writing Parquet failed: {e}") from None


def slice_bytes(table: pa.Table) -> bytes:
    """The bytes :func:`write_parquet_slice` writes for ``table``."""
    out = pa.BufferOutputStream()
    write_parquet_slice(table, out)
    return out.getvalue().to_pybytes()


def read_slice(path_or_buffer: str | os.PathLike | bytes | bytearray | memoryview | pa.Buffer | BinaryIO) -> pa.Table:
    """Read a slice (a path, its bytes, a pyarrow Buffer or a readable binary file object)."""
    source: Any = path_or_buffer
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = pa.BufferReader(pa.py_buffer(source))
    elif isinstance(source, pa.Buffer):
        source = pa.BufferReader(source)
    elif isinstance(source, os.PathLike):
        source = os.fspath(source)
    try:
        # Not pq.read_table: its dataset layer imports pyarrow.dataset and pandas, 1.5 s of a node's first read
        # (a derived answer's first cached slice) and ~50 MB of memory; one file needs neither.
        with pq.ParquetFile(source) as f:
            return f.read()
    except FileNotFoundError:
        raise NotFound(f"no slice at {source}") from None  # a path (str) here: buffers are never "not found"
    except (pa.ArrowInvalid, OSError) as e:
        raise InvalidInput(f"not a readable Parquet slice: {e}") from None


def slice_schema(path: str | os.PathLike) -> pa.Schema:
    """A slice file's Arrow schema, from its footer alone (``read_slice(path).schema``, no row read)."""
    try:
        with pq.ParquetFile(os.fspath(path)) as f:
            return f.schema_arrow
    except FileNotFoundError:
        raise NotFound(f"no slice at {path}") from None
    except (pa.ArrowInvalid, OSError) as e:
        raise InvalidInput(f"not a readable Parquet slice: {e}") from None


def read_slice_head(path: str | os.PathLike, rows: int) -> pa.Table:
    """The first ``rows`` rows of a slice file (all of them if it has fewer), the same
    as ``read_slice(path).slice(0, rows)``: only the pages those rows are in are decoded (an answer's 100 rows
    of a 95 MB slice: 30 ms, not the whole slice)."""
    try:
        f = pq.ParquetFile(os.fspath(path))
        schema = f.schema_arrow
        batches, got = [], 0
        if rows > 0:
            for batch in f.iter_batches(batch_size=rows):
                batches.append(batch)
                got += batch.num_rows
                if got >= rows:
                    break
        return pa.Table.from_batches(batches, schema=schema).slice(0, max(rows, 0))
    except FileNotFoundError:
        raise NotFound(f"no slice at {path}") from None
    except (pa.ArrowInvalid, OSError) as e:
        raise InvalidInput(f"not a readable Parquet slice: {e}") from None


# --------------------------------------------------------------------------- slicing


def iter_slices(batches: Iterable[pa.RecordBatch], schema: pa.Schema, rows_per_slice: int) -> Iterator[pa.Table]:
    """Re-cut a stream of batches into Tables of exactly ``rows_per_slice`` rows (the last
    one shorter; none at all for an empty stream).

    Zero-copy: a slice's columns are pieces of the input batches. Memory held here is at
    most one slice's worth of rows plus the input batch being cut (a batch larger than a
    slice is cut into several slices as it comes, never gathered whole twice).
    Batches must have ``schema`` (names and types; metadata may differ).
    """
    if not isinstance(rows_per_slice, int) or isinstance(rows_per_slice, bool) or rows_per_slice < 1:
        raise InvalidInput(f"rows_per_slice must be a positive integer, got {rows_per_slice!r}")
    if not isinstance(schema, pa.Schema):
        raise InvalidInput("iter_slices needs a pyarrow Schema")
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in batches:
        if isinstance(batch, pa.Table):
            raise InvalidInput("iter_slices takes RecordBatches (use Table.to_batches())")
        if not batch.schema.equals(schema, check_metadata=False):
            raise InvalidInput(
                f"iter_slices: a batch has schema {batch.schema.to_string(show_schema_metadata=False)!r},"
                f" expected {schema.to_string(show_schema_metadata=False)!r}"
            )
        if batch.schema.metadata != schema.metadata:
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
        start, n = 0, batch.num_rows
        while start < n:
            take = min(rows_per_slice - pending_rows, n - start)
            pending.append(batch.slice(start, take))
            pending_rows += take
            start += take
            if pending_rows == rows_per_slice:
                # (emptied before the yield: a suspended generator must not keep the slice's batches alive
                # after its consumer has dropped them)
                yield _drain(pending, schema)
                pending_rows = 0
    if pending_rows:
        yield _drain(pending, schema)


def _drain(pending: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """The batches as one Table; the list is emptied in place."""
    table = pa.Table.from_batches(pending, schema=schema)
    pending.clear()
    return table
