"""Parquet: row group by row group, normalised schema, spooled when not seekable.

Part of :mod:`node.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import contextlib
import functools
import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from node.datasets.readers.convert import (
    _cast_failure,
    _event_time_message,
    _event_time_supported,
    _output_schema,
    _to_event_time,
    _value_at,
)
from node.datasets.readers.options import EVENT_TIME_TYPE, ReadOptions, _check_names, _snip
from node.datasets.readers.source import _Opened
from node.errors import InvalidInput, one_line

#: Rows per batch read from Parquet.
PARQUET_BATCH_ROWS = 64 * 1024
_SPOOL_PIECE = 1 << 20


class _ParquetFormat:
    def __init__(self, opened: _Opened, options: ReadOptions) -> None:
        self.name = opened.name
        self._options = options
        self._spool = None
        self.spooled = opened.path is None and opened.seekable_file is None
        if opened.path is not None:
            target: Any = opened.path
        elif opened.seekable_file is not None:
            target = opened.seekable_file
        else:
            self._spool = tempfile.TemporaryFile(prefix="cairn-parquet-")  # noqa: SIM115 - closed in close()
            while True:
                piece = opened.source.read(_SPOOL_PIECE)
                if not piece:
                    break
                self._spool.write(piece)
            if self._spool.tell() == 0:
                self._spool.close()
                raise InvalidInput(f"{self.name}: the input is empty")
            self._spool.seek(0)
            target = self._spool
        try:
            self._file = pq.ParquetFile(target, buffer_size=1 << 20, pre_buffer=False)
        except (pa.ArrowException, OSError) as e:
            if self._spool is not None:
                self._spool.close()
            if opened.total_size == 0:
                raise InvalidInput(f"{self.name}: the input is empty") from None
            raise InvalidInput(f"{self.name}: not a readable Parquet file ({one_line(str(e))})") from None
        self.num_rows = self._file.metadata.num_rows
        raw = self._file.schema_arrow
        names = raw.names
        if not names:
            raise InvalidInput(f"{self.name}: the Parquet file has no columns")
        _check_names(names, f"{self.name}: ")
        overrides = options.override_types()
        for col in overrides:
            if col not in names:
                raise InvalidInput(f"{self.name}: --type {col}=…: no column {col!r} (columns: {', '.join(names)})")
        ev = options.event_time
        if ev is not None and ev not in names:
            raise InvalidInput(f"{self.name}: event time column {ev!r} not found (columns: {', '.join(names)})")
        self._overrides = overrides
        self._event_index = names.index(ev) if ev is not None else None
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
        self.schema = _output_schema(fields)
        self.rows_done = 0

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
