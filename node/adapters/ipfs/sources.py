"""What a block store reads from (``node.domain.ports.block_store.Source``): bytes, a file path, or an async iterator of
chunks, as one async iterator of bytes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterable, AsyncIterator
from typing import BinaryIO

from node.domain.ports.block_store import Source
from node.support.errors import InvalidInput

READ_SIZE = 1 << 20  # how much of a file is read at a time


def chunks_of(source: Source) -> AsyncIterator[bytes]:
    """bytes, a file path (read a chunk at a time off the loop) or an async iterator of bytes.

    A path is opened here, before any request starts, so a missing file fails early and plainly.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _from_bytes(memoryview(source))
    if isinstance(source, (str, os.PathLike)):
        try:
            f = open(source, "rb")  # noqa: SIM115 -- closed by _from_file
        except OSError as e:
            raise InvalidInput(f"cannot read {os.path.basename(os.fspath(source))}: {e.strerror}") from e
        return _from_file(f)
    if isinstance(source, AsyncIterable):
        return _from_async(source)
    raise InvalidInput(f"cannot upload a {type(source).__name__}: give bytes, a path or an async iterator of bytes")


async def _from_bytes(view: memoryview) -> AsyncIterator[bytes]:
    for i in range(0, len(view), READ_SIZE):
        yield bytes(view[i : i + READ_SIZE])


async def _from_file(f: BinaryIO) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(f.read, READ_SIZE):
            yield chunk
    finally:
        f.close()


async def _from_async(source: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    async for chunk in source:
        yield bytes(chunk)


async def read_all(source: Source) -> bytes:
    """The whole of ``source`` in memory."""
    return b"".join([c async for c in chunks_of(source)])
