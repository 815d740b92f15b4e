"""Parquet: row group by row group, normalised schema, spooled when not seekable.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from node.services.datasets.readers.convert import (
    _cast_failure,
    _event_time_message,
    _event_time_supported,
    _output_schema,
    _to_event_time,
    _value_at,
)
from node.services.datasets.readers.input_limits import InputLimits, field_count
from node.services.datasets.readers.options import EVENT_TIME_TYPE, ReadOptions, _check_names, _names_text, _snip
from node.services.datasets.readers.source import _Opened
from node.support.errors import InvalidInput, one_line

#: Rows per batch read from Parquet.
PARQUET_BATCH_ROWS = 64 * 1024
_SPOOL_PIECE = 1 << 20


class _ParquetFormat:
    def __init__(self, opened: _Opened, options: ReadOptions) -> None:
        self.name = opened.name
        self._options = options
        self._limits = opened.limits
        self._spool: Any = None
        self.spooled = opened.path is None and opened.seekable_file is None
        target: Any = opened.path if opened.path is not None else opened.seekable_file
        if target is None:
            target = self._spool = self._spooled(opened)
        # What the decoded data is measured against: the bytes received (compressed, for a .parquet.gz).
        self._base = opened.bytes_read() if opened.codec != "none" else _size_of(target)
        self._decoded = 0
        try:
            self._check_footer(target)
            self._file = pq.ParquetFile(target, buffer_size=1 << 20, pre_buffer=False)
        except (pa.ArrowException, OSError) as e:
            if self._spool is not None:
                self._spool.close()
            if opened.total_size == 0:
                raise InvalidInput(f"{self.name}: the input is empty") from None
            raise InvalidInput(f"{self.name}: not a readable Parquet file ({one_line(str(e))})") from None
        except BaseException:
            if self._spool is not None:
                self._spool.close()
            raise
        self.num_rows = self._file.metadata.num_rows
        raw = self._file.schema_arrow
        self._limits.check_columns(field_count(raw), self.name)
        self.schema = self._output(raw, options)
        self.rows_done = 0

    def _spooled(self, opened: _Opened) -> Any:
        """The decompressed (or non-seekable) input in a temporary file of the ingest's work directory, counted
        against the caps as it is written (opened.source is metered)."""
        spool = tempfile.TemporaryFile(prefix="cairn-parquet-", dir=self._limits.spool_dir)  # noqa: SIM115 - closed in close()
        try:
            while piece := opened.source.read(_SPOOL_PIECE):
                spool.write(piece)
            if spool.tell() == 0:
                raise InvalidInput(f"{self.name}: the input is empty")
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return spool

    def _check_footer(self, target: Any) -> None:
        """Refuse a footer declaring more schema elements than the column cap, before pyarrow decodes it (100,000
        columns: 2 GB of metadata and schema objects)."""
        if self._limits.max_columns is None:
            return
        if isinstance(target, str):
            with open(target, "rb") as f:
                elements = _schema_elements(f)
        else:
            elements = _schema_elements(target)
        if elements is not None:
            self._limits.check_columns(elements - 1, self.name, "columns and nested fields in its footer")

    def _output(self, raw: pa.Schema, options: ReadOptions) -> pa.Schema:
        """The normalised schema handed out (overrides, event time), with the columns those name checked."""
        names = raw.names
        if not names:
            raise InvalidInput(f"{self.name}: the Parquet file has no columns")
        _check_names(names, f"{self.name}: ")
        overrides = options.override_types()
        for col in overrides:
            if col not in raw.names:
                raise InvalidInput(f"{self.name}: --type {col}=…: no column {col!r} (columns: {_names_text(names)})")
        ev = options.event_time
        if ev is not None and raw.get_field_index(ev) < 0:
            raise InvalidInput(f"{self.name}: event time column {ev!r} not found (columns: {_names_text(names)})")
        self._overrides = overrides
        self._event_index = raw.get_field_index(ev) if ev is not None else None
        fields = []
        for f in raw:
            t = overrides.get(f.name, f.type)
            if f.name == ev:
                base = t.value_type if pa.types.is_dictionary(t) else t
                if not _event_time_supported(base):
                    raise InvalidInput(
                        f"{self.name}: event time column {f.name!r} has type {t}; it needs timestamps, dates"
                        " or ISO 8601 strings"
                    )
                t = EVENT_TIME_TYPE
            fields.append(pa.field(f.name, t))
        return _output_schema(fields)

    def batches(self) -> Iterator[pa.RecordBatch]:
        try:
            it = self._file.iter_batches(batch_size=PARQUET_BATCH_ROWS, use_threads=True)
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    return
                except (pa.ArrowException, OSError) as e:
                    raise InvalidInput(f"{self.name}: reading Parquet failed: {one_line(str(e))}") from None
                # Parquet's own pages are a decompressor too (a dictionary or RLE run of a huge value): counted.
                self._decoded += batch.get_total_buffer_size()
                self._limits.check_decoded(self._decoded, self._base, self.name, "decodes")
                yield self._convert(batch)
                self.rows_done += batch.num_rows
        finally:
            pass

    def _convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = []
        for i, f in enumerate(self.schema):
            arr = batch.column(i)
            if pa.types.is_dictionary(arr.type):
                arr = arr.cast(arr.type.value_type)
            src_override = self._overrides.get(f.name)
            try:
                if i == self._event_index:
                    if src_override is not None and arr.type != src_override:
                        arr = arr.cast(src_override)
                    arr = _to_event_time(arr)
                elif arr.type != f.type:
                    arr = arr.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                convert = (
                    functools.partial(_override_to_event_time, override=src_override)
                    if i == self._event_index
                    else functools.partial(pa.Array.cast, target_type=f.type)
                )
                idx, msg = _cast_failure(arr, convert)
                row = self.rows_done + (idx or 0) + 1
                value = _value_at(arr, idx) if idx is not None else None
                if i == self._event_index:
                    raise InvalidInput(_event_time_message(f"{self.name}: row {row}", f.name, value)) from None
                raise InvalidInput(
                    f"{self.name}: row {row}, column {f.name!r}: value {_snip(value)} cannot be converted to"
                    f" {f.type}: {one_line(msg or str(e))}"
                ) from None
            columns.append(arr)
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._file.close()
        if self._spool is not None:
            self._spool.close()


def _override_to_event_time(a: pa.Array, override: pa.DataType | None) -> pa.Array:
    """The event time column as _convert converts it: through its --type override first, if any."""
    if override is not None and a.type != override:
        a = a.cast(override)
    return _to_event_time(a)


def _size_of(target: Any) -> int:
    """The size of a Parquet file given as a path or a seekable file object (left where it was)."""
    if isinstance(target, str):
        return os.path.getsize(target)
    here = target.tell()
    size = int(target.seek(0, io.SEEK_END))
    target.seek(here)
    return size


_FOOTER_PEEK = 64  # bytes of the footer read to find the schema's length (version and the list header come first)


def _schema_elements(f: Any) -> int | None:
    """How many schema elements (the root, groups and leaf columns) a Parquet file's footer declares, read from the
    first bytes of its Thrift FileMetaData without decoding the rest; None when it cannot be read so (pyarrow then
    reads the footer and says what is wrong). ``f``: a seekable binary file, left at offset 0."""
    try:
        end = int(f.seek(0, io.SEEK_END))
        if end < 12:
            return None
        f.seek(end - 8)
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != b"PAR1" or length > end - 12:
            return None
        f.seek(end - 8 - length)
        head = f.read(min(length, _FOOTER_PEEK))
    finally:
        f.seek(0)
    return _thrift_list_size(bytes(head), 2)  # FileMetaData field 2: list<SchemaElement> schema


class _Thrift:
    """Just enough of Thrift's compact protocol to walk a struct's leading scalar fields."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos]  # IndexError past the end: the caller's None
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = value = 0
        while shift < 64:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise ValueError("varint too long")

    def skip(self, kind: int) -> bool:
        """Skip a scalar value of compact type ``kind``; False for a container or struct (not walked)."""
        if kind in (1, 2):  # booleans live in the field header
            return True
        if kind in (3, 4, 5, 6, 7, 8):
            self.pos += {3: 1, 7: 8}.get(kind, 0)
            if kind in (4, 5, 6):
                self.varint()
            elif kind == 8:
                self.pos += self.varint()
            return True
        return False


def _thrift_list_size(data: bytes, wanted: int) -> int | None:
    """The element count of the list field ``wanted`` of the compact-encoded struct at the start of ``data``,
    reached by skipping the scalar fields before it; None when another shape comes first."""
    t, last = _Thrift(data), 0
    try:
        while (header := t.byte()) != 0:  # 0: the struct's end
            delta, kind = header >> 4, header & 0x0F
            if delta:
                last += delta
            else:
                z = t.varint()
                last = (z >> 1) ^ -(z & 1)
            if last == wanted:
                if kind != 9:  # LIST
                    return None
                size = t.byte() >> 4
                return t.varint() if size == 15 else size
            if not t.skip(kind):
                return None
    except (IndexError, ValueError):
        return None
    return None


def check_parquet_file(path: str, limits: InputLimits, name: str) -> None:
    """A Parquet file read whole (a pulled slice) within ``limits``: its footer's columns counted before pyarrow
    decodes the footer, then the bytes its row groups declare they decode to (a lying footer is caught later by
    the logical hash, not by this)."""
    with open(path, "rb") as f:
        elements = _schema_elements(f)
    if elements is not None:
        limits.check_columns(elements - 1, name, "columns and nested fields in its footer")
    try:
        meta = pq.read_metadata(path)
    except (pa.ArrowException, OSError):
        return  # the read that follows says what is wrong
    declared = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    limits.check_decoded(declared, os.path.getsize(path), name, "declares it decodes")
