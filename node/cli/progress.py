"""Progress bars for long CLI work (rich), on stderr so stdout stays clean for pipes."""

from __future__ import annotations

import contextlib
import sys
from typing import BinaryIO, Iterator

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn


class _Reading:
    """A file whose reads advance a progress bar; urllib streams it in blocks."""

    def __init__(self, f: BinaryIO, advance: "callable[[int], None]") -> None:  # type: ignore[valid-type]
        self._f, self._advance = f, advance

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._advance(len(data))
        return data

    def __iter__(self) -> Iterator[bytes]:  # for chunked uploads of unknown length (stdin)
        while chunk := self.read(1 << 20):
            yield chunk


@contextlib.contextmanager
def upload_progress(f: BinaryIO, total: int | None, quiet: bool = False) -> Iterator[object]:
    if quiet or not sys.stderr.isatty():
        yield f if total is not None else iter(lambda: f.read(1 << 20), b"")
        return
    columns = [TextColumn("uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TextColumn("then ingesting on the node…")]
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("upload", total=total)
        yield _Reading(f, lambda n: bar.advance(task, n))
