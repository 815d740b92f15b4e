"""Progress bars for long CLI work (rich), on stderr so stdout stays clean for pipes."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn


class _Reading:
    """A file whose reads advance a progress bar; urllib streams it in blocks."""

    def __init__(self, f: BinaryIO, advance: Callable[[int], None]) -> None:
        self._f, self._advance = f, advance

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._advance(len(data))
        return data

    def __iter__(self) -> Iterator[bytes]:  # for chunked uploads of unknown length (stdin)
        while chunk := self.read(1 << 20):
            yield chunk


@contextlib.contextmanager
def upload_progress(
    f: BinaryIO, total: int | None, quiet: bool = False
) -> Iterator[tuple[object, Callable[[int, int], None]]]:
    """The body to send and a callback for the node's ingest progress (bytes of input read, rows)."""
    if quiet or not sys.stderr.isatty():
        yield (f if total is not None else iter(lambda: f.read(1 << 20), b"")), (lambda b, r: None)
        return
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TextColumn("{task.fields[rows]}"),
    ]
    with Progress(*columns, transient=True) as bar:
        upload = bar.add_task("upload", total=total, rows="")
        ingest = bar.add_task("ingest", total=total, rows="", start=False)

        def on_progress(nbytes: int, rows: int) -> None:
            if not bar.tasks[ingest].started:
                bar.start_task(ingest)
            bar.update(ingest, completed=nbytes, rows=f"{rows:,} rows")

        yield _Reading(f, lambda n: bar.advance(upload, n)), on_progress
