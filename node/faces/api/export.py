"""Writing rows (a dataset version's, an execution's) as CSV, JSON Lines or Parquet, streamed chunk by chunk."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from node.support import values
from node.support.errors import InvalidInput

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer  # exists only for type checkers: io.RawIOBase.write's own type


class _Sink(io.RawIOBase):
    """A write-only file that collects what pyarrow writes, to hand it on in chunks."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: ReadableBuffer, /) -> int:
        view = memoryview(b)
        self.buf += view
        return view.nbytes

    def take(self) -> bytes:
        out, self.buf = bytes(self.buf), bytearray()
        return out


class TableWriter(Protocol):
    def write(self, table: pa.Table) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Writer:
    name: str
    content_type: str
    open: Callable[[_Sink, pa.Schema, list[str]], TableWriter]


class _TextWriter:
    """CSV or JSON Lines through node.support.values: the same rendering as JSON answers (docs/queries.md)."""

    def __init__(self, sink: _Sink, names: list[str], csv: bool) -> None:
        self.sink, self.names, self.csv = sink, names, csv
        if csv:
            sink.write(values.csv_header(names))

    def write(self, table: pa.Table) -> None:
        if self.csv:
            self.sink.write(values.csv_rows(table))
        else:
            self.sink.write(values.jsonl_rows(table, self.names))

    def close(self) -> None:
        """Text needs no footer."""


class _ParquetWriter:
    def __init__(self, sink: _Sink, schema: pa.Schema, names: list[str]) -> None:
        renamed = pa.schema([f.with_name(n) for f, n in zip(schema, names)], metadata=schema.metadata)
        self._w = pq.ParquetWriter(sink, renamed, compression="zstd")

    def write(self, table: pa.Table) -> None:
        self._w.write_table(table.rename_columns(self._w.schema.names))

    def close(self) -> None:
        self._w.close()


WRITERS = {
    "csv": Writer("csv", "text/csv; charset=utf-8", lambda sink, schema, names: _TextWriter(sink, names, True)),
    "parquet": Writer("parquet", "application/vnd.apache.parquet", _ParquetWriter),
    "jsonl": Writer("jsonl", "application/x-ndjson", lambda sink, schema, names: _TextWriter(sink, names, False)),
}

BATCH_ROWS = 65536  # text is rendered and sent this many rows at a time: memory stays flat for any result


def writer_for(fmt: str) -> Writer:
    try:
        return WRITERS[fmt]
    except KeyError:
        raise InvalidInput(f"unknown format {fmt!r}: use {', '.join(WRITERS)}") from None


async def each(tables: list[pa.Table]) -> AsyncIterator[pa.Table]:
    for t in tables:
        yield t


async def stream(
    tables: AsyncIterator[pa.Table], writer: Writer, limit: int | None = None, names: list[str] | None = None
) -> AsyncIterator[bytes]:
    """The rows of ``tables`` (at most ``limit``) in ``writer``'s format, under column ``names`` (default:
    the tables' own), a chunk per batch of rows. An empty result still gets its header / Parquet footer."""
    sink = _Sink()
    handle: TableWriter | None = None
    left = limit
    async for table in tables:
        if left is not None:
            table = table.slice(0, left)
            left -= table.num_rows
        if handle is None:
            handle = writer.open(sink, table.schema, _names(table.schema, names))
        for start in range(0, table.num_rows, BATCH_ROWS):
            handle.write(table.slice(start, BATCH_ROWS))
            if sink.buf:
                yield sink.take()
        if left == 0:
            break
    if handle is not None:
        handle.close()
    tail = sink.take()
    if tail:
        yield tail


def _names(schema: pa.Schema, names: list[str] | None) -> list[str]:
    if names is None:
        return list(schema.names)
    if len(names) != len(schema):
        raise InvalidInput(f"names: expected {len(schema)} column names, got {len(names)}")
    return list(names)
