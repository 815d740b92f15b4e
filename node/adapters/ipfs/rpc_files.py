"""Kubo's UnixFS file calls: one file added (streamed up, never held whole) and read back (streamed down)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import blake3
from multiformats import CID

from node.adapters.ipfs.rpc_transport import KuboTransport, multipart
from node.adapters.ipfs.sources import chunks_of
from node.domain.model.cid import blake3_cid, parse_cid, same_cid
from node.domain.ports.block_store import AddResult, Source
from node.support.errors import KuboCIDMismatch, KuboRPCError, KuboTruncated

CHUNK_SIZE = 1 << 20  # UnixFS leaves: fixed 1 MiB chunks (DESIGN.md, bulk data)


class FileCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport

    async def add(
        self,
        source: Source,
        *,
        filename: str | None = None,
        pin: bool = True,
        only_hash: bool = False,
        timeout: float | None = None,
    ) -> AddResult:
        """Add one file as UnixFS: CIDv1, BLAKE3, raw leaves, fixed 1 MiB chunks. Streamed, never held whole."""
        name = filename or (Path(source).name if isinstance(source, (str, os.PathLike)) else "data")
        meter = _Meter()
        params = [
            ("cid-version", 1),
            ("hash", "blake3"),
            ("raw-leaves", True),
            ("chunker", f"size-{CHUNK_SIZE}"),
            ("pin", pin),
            ("only-hash", only_hash),
            ("progress", False),
        ]
        body = multipart(meter.wrap(chunks_of(source)), name)
        lines = await self._rpc.json_lines("add", params, body=body, timeout=timeout, stream=True)
        entries = [o for o in lines if "Hash" in o]
        if not entries:
            raise KuboRPCError("add", f"no result in Kubo's answer {lines!r:.200}")
        entry = entries[-1]
        got = parse_cid(entry["Hash"])
        if got.version != 1 or got.hashfun.name != "blake3":
            raise KuboCIDMismatch("a CIDv1 hashed with blake3", got)
        if meter.size <= CHUNK_SIZE:
            # One chunk: the root is the raw leaf itself, which we can compute here.
            expected = blake3_cid(meter.digest(), "raw")
            if not same_cid(got, expected):
                raise KuboCIDMismatch(expected, got)
        return AddResult(cid=got, size=int(entry.get("Size") or 0), name=entry.get("Name", name), file_size=meter.size)

    async def cat(
        self,
        cid: CID | str,
        offset: int | None = None,
        length: int | None = None,
        *,
        timeout: float | None = None,
        offline: bool = False,
        on_length: Callable[[int], None] | None = None,
    ) -> AsyncIterator[bytes]:
        """The file's bytes, streamed; raises KuboTruncated if fewer than Kubo announced arrive. ``on_length`` is
        told how many bytes Kubo announced (its ``X-Content-Length``) before the first byte is yielded."""
        params = [("arg", parse_cid(cid)), ("offset", offset), ("length", length), ("offline", offline or None)]
        async with self._rpc.post("cat", params, timeout=timeout, stream=True) as resp:
            announced = resp.headers.get("X-Content-Length")
            if on_length is not None and announced is not None:
                on_length(int(announced))
            received = 0
            async for chunk in resp.content.iter_any():
                received += len(chunk)
                yield chunk
        if announced is not None and received != int(announced):
            raise KuboTruncated(
                f"Kubo cat of {cid} ended after {received} of {announced} bytes "
                "(its timeout fired or a block could not be fetched)"
            )


class _Meter:
    """Counts the bytes going up and hashes the first chunk's worth (enough to check a one-leaf file)."""

    def __init__(self) -> None:
        self.size = 0
        self._hasher = blake3.blake3()

    async def wrap(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            if self.size <= CHUNK_SIZE:
                self._hasher.update(chunk)
            self.size += len(chunk)
            yield chunk

    def digest(self) -> bytes:
        return self._hasher.digest()
