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


def _jsonl_write(sink: object, table: pa.Table) -> None:
    assert isinstance(sink, _Sink)
    for row in table.to_pylist():
        sink.write(json.dumps(row, default=str, ensure_ascii=False).encode() + b"\n")


WRITERS = {
    "csv": Writer("csv", "text/csv", lambda sink, schema: pacsv.CSVWriter(sink, schema),
                  lambda w, t: w.write_table(t), lambda w: w.close()),  # type: ignore[attr-defined]
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
