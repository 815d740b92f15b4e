"""Rendering a version's rows as CSV, JSON Lines or Parquet, streamed chunk by chunk."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import AsyncIterator, Callable

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from node.errors import InvalidInput


class _Sink(io.RawIOBase):
    """A write-only file that collects what pyarrow writes, to hand it on in chunks."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.buf += b
        return len(b)

    def take(self) -> bytes:
        out, self.buf = bytes(self.buf), bytearray()
        return out


@dataclass(frozen=True)
class Writer:
    name: str
    content_type: str
    open: Callable[[_Sink, pa.Schema], object]
    write: Callable[[object, pa.Table], None]
    close: Callable[[object], None]


def _cell(value: object) -> object:
    """JSON for what json cannot write: binary as hex (as in CSV), the rest (dates, decimals…) as text."""
    return value.hex() if isinstance(value, bytes) else str(value)


def _jsonl_write(sink: object, table: pa.Table) -> None:
    assert isinstance(sink, _Sink)
    for row in table.to_pylist():
        sink.write(json.dumps(row, default=_cell, ensure_ascii=False).encode() + b"\n")


def _hex_binary(table: pa.Table) -> pa.Table:
    """Binary columns as hex text: CSV is text, and binary cells need not be UTF-8 (pyarrow's CSV
    writer fails on them). Binary columns are rare (only when asked for at ingest), so per-cell Python is fine."""
    for i, f in enumerate(table.schema):
        if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            cells = [None if v is None else v.hex() for v in table.column(i).to_pylist()]
            table = table.set_column(i, pa.field(f.name, pa.string()), pa.array(cells, pa.string()))
    return table


def _csv_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, pa.string()) if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
                      else f for f in schema])


WRITERS = {
    "csv": Writer("csv", "text/csv", lambda sink, schema: pacsv.CSVWriter(sink, _csv_schema(schema)),
                  lambda w, t: w.write_table(_hex_binary(t)), lambda w: w.close()),  # type: ignore[attr-defined]
    "parquet": Writer("parquet", "application/vnd.apache.parquet",
                      lambda sink, schema: pq.ParquetWriter(sink, schema, compression="zstd"),
                      lambda w, t: w.write_table(t), lambda w: w.close()),  # type: ignore[attr-defined]
    "jsonl": Writer("jsonl", "application/x-ndjson", lambda sink, schema: sink, _jsonl_write, lambda w: None),
}


def writer_for(fmt: str) -> Writer:
    try:
        return WRITERS[fmt]
    except KeyError:
        raise InvalidInput(f"unknown format {fmt!r}: use {', '.join(WRITERS)}") from None


async def each(tables: list[pa.Table]) -> AsyncIterator[pa.Table]:
    for t in tables:
        yield t


async def stream(tables: AsyncIterator[pa.Table], writer: Writer, limit: int | None = None) -> AsyncIterator[bytes]:
    """The rows of ``tables`` (at most ``limit``) in ``writer``'s format, a chunk per table."""
    sink = _Sink()
    handle: object | None = None
    left = limit
    async for table in tables:
        if left is not None:
            table = table.slice(0, left)
            left -= table.num_rows
        if handle is None:
            handle = writer.open(sink, table.schema)
        writer.write(handle, table)
        if sink.buf:
            yield sink.take()
        if left == 0:
            break
    if handle is not None:
        writer.close(handle)
    tail = sink.take()
    if tail:
        yield tail
