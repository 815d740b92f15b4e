"""The opened Input (schema now, batches streamed, chunks parsed on a few threads) and open_input.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, Self

import pyarrow as pa

from node.services.datasets.readers.convert import _TextFormat
from node.services.datasets.readers.csv_format import _CsvFormat
from node.services.datasets.readers.input_limits import NO_LIMITS, InputLimits
from node.services.datasets.readers.jsonl_format import _JsonFormat
from node.services.datasets.readers.options import ReadOptions
from node.services.datasets.readers.parquet_format import _ParquetFormat
from node.services.datasets.readers.source import _open_source
from node.support.errors import InvalidInput

_WORKERS = max(1, min(4, os.cpu_count() or 1))
_EOF = object()


class Input:
    """An opened input: ``schema`` now, ``batches`` (an iterator, single use) as they are read.

    ``bytes_read``: bytes taken from the source so far (compressed bytes for compressed
    input; for Parquet read from a file, an estimate proportional to the rows read), for a
    progress bar. ``rows_read``: rows handed out so far. Close it (or use ``with``); it also
    closes itself when ``batches`` is exhausted or fails.
    """

    def __init__(
        self,
        *,
        name: str,
        format: str,
        compression: str,
        schema: pa.Schema,
        bytes_read: Callable[[], int],
        closers: list[Callable[[], None]],
        text: _TextFormat | None = None,
        parquet: _ParquetFormat | None = None,
        total_size: int | None = None,
        limits: InputLimits = NO_LIMITS,
    ) -> None:
        self.name = name
        self.format = format
        self.compression = compression
        self.schema = schema
        self.rows_read = 0
        self._bytes_read = bytes_read
        self._closers = closers
        self._text = text
        self._parquet = parquet
        self._total_size = total_size
        self._limits = limits
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self.batches: Iterator[pa.RecordBatch] = self._generate()

    @property
    def bytes_read(self) -> int:
        if self._parquet is not None and self._total_size is not None:
            total_rows = self._parquet.num_rows
            if self._closed or total_rows == 0:
                return self._total_size
            return self._total_size * min(self.rows_read, total_rows) // total_rows
        try:
            return int(self._bytes_read())
        except (OSError, ValueError, pa.ArrowException):
            return 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._parquet is not None:
            self._parquet.close()
        # Record the final position before the files go away.
        final = self.bytes_read
        self._bytes_read = lambda: final
        self._closed = True
        for close in self._closers:
            with contextlib.suppress(Exception):
                close()

    def _emit(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        self.rows_read += batch.num_rows
        self._limits.check_rows(self.rows_read, self.name)
        self._limits.check_stop(self.name)
        return batch

    def _generate(self) -> Iterator[pa.RecordBatch]:
        try:
            if self._parquet is not None:
                yield from self._parquet_batches(self._parquet)
            elif self._text is not None:  # open_input gives an Input one of the two
                yield from self._text_batches(self._text)
        finally:
            self.close()

    def _parquet_batches(self, parquet: _ParquetFormat) -> Iterator[pa.RecordBatch]:
        for batch in parquet.batches():
            if self._closed:
                return
            yield self._emit(batch)

    def _text_batches(self, text: _TextFormat) -> Iterator[pa.RecordBatch]:
        for batch in text.first_batches():
            yield self._emit(batch)
        chunker = text.chunker
        if _WORKERS == 1:
            while not self._closed and (item := chunker.next()) is not None:
                for batch in text.parse(*item):
                    yield self._emit(batch)
            return
        self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="cairn-read")
        pending: deque[Future[list[pa.RecordBatch]]] = deque()
        stop: Any = None
        while not self._closed:
            while stop is None and len(pending) <= _WORKERS:
                try:
                    item = chunker.next()
                except InvalidInput as e:
                    stop = e  # raised after the chunks before it, in order
                    break
                if item is None:
                    stop = _EOF
                    break
                pending.append(self._pool.submit(text.parse, *item))
            if not pending:
                break
            for batch in pending.popleft().result():
                yield self._emit(batch)
        if isinstance(stop, InvalidInput):
            raise stop


def open_input(
    source: str | Path | BinaryIO, options: ReadOptions | None = None, limits: InputLimits = NO_LIMITS
) -> Input:
    """Open ``source`` (a path, or a readable binary stream such as ``sys.stdin.buffer``).

    Reads the first chunk (to know the schema) and returns; the rest is read as
    ``Input.batches`` is iterated. Raises :class:`InvalidInput` for anything wrong with the
    input or the options, with a one-line message; ``TooLarge`` beyond one of ``limits``' caps, and
    ``IngestCancelled`` once its ``stop`` is set (node.services.datasets.readers.input_limits).
    """
    options = options or ReadOptions()
    if not isinstance(options, ReadOptions):
        raise InvalidInput("open_input needs ReadOptions")
    opened = _open_source(source, options, limits)
    fmt = opened.format
    try:
        if fmt is None:
            raise InvalidInput(f"{opened.name}: the input is empty")
        if fmt in ("jsonl", "parquet") and (
            options.delimiter is not None or not options.header or options.column_names is not None
        ):
            raise InvalidInput(f"{opened.name}: delimiter, header and column_names apply to CSV/TSV only, not {fmt}")
        if fmt == "parquet" and options.encoding is not None:
            raise InvalidInput(f"{opened.name}: encoding applies to CSV/TSV and JSON Lines only, not parquet")
        if fmt == "parquet":
            pf = _ParquetFormat(opened, options)
            return Input(
                name=opened.name,
                format=fmt,
                compression=opened.codec,
                schema=pf.schema,
                bytes_read=opened.bytes_read,
                closers=opened.closers,
                parquet=pf,
                total_size=opened.total_size if pf.spooled is False else None,
                limits=limits,
            )
        text: _TextFormat = _JsonFormat(opened, options) if fmt == "jsonl" else _CsvFormat(opened, options, fmt)
        return Input(
            name=opened.name,
            format=fmt,
            compression=opened.codec,
            schema=text.schema,
            bytes_read=opened.bytes_read,
            closers=opened.closers,
            text=text,
            limits=limits,
        )
    except BaseException:
        for close in opened.closers:
            with contextlib.suppress(Exception):
                close()
        raise
