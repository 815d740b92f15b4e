"""Kubo's DAG calls: IPLD nodes put and got re-encoded, whole DAGs exported and imported as CARs."""

from __future__ import annotations

from collections.abc import AsyncIterator

from multiformats import CID

from node.adapters.ipfs.car import CarHeaderReader, CarVerifier
from node.adapters.ipfs.rpc_transport import KuboTransport, multipart
from node.adapters.ipfs.sources import chunks_of
from node.domain.model.cid import CODECS, cid_for, parse_cid, same_cid
from node.domain.ports.block_store import Source
from node.support.errors import KuboCIDMismatch, KuboRPCError, KuboTruncated


class DagCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport

    async def put(
        self,
        data: bytes,
        input_codec: str = "dag-cbor",
        store_codec: str = "dag-cbor",
        hash: str = "blake3",
        pin: bool = True,
        *,
        timeout: float | None = None,
    ) -> CID:
        """Kubo decodes ``data`` and stores it re-encoded as ``store_codec``; the CID is checked.

        Careful with ``pin``: Kubo 0.42 pins the root recursively at once even when blocks it links
        to are absent, and such an incomplete pin makes ``repo gc`` abort and ``pin ls <cid>`` wait
        on the network. Put children first, or pin the root (``pin_add``) once the DAG is whole.
        """
        params = [("input-codec", input_codec), ("store-codec", store_codec), ("hash", hash), ("pin", pin)]
        obj = await self._rpc.json_object("dag/put", params, body=multipart(bytes(data)), timeout=timeout)
        got = parse_cid(obj["Cid"]["/"])
        if got.hashfun.name != hash or got.codec.name != store_codec:
            raise KuboCIDMismatch(f"a {store_codec} CID hashed with {hash}", got)
        if input_codec == store_codec and store_codec in CODECS:
            # Same codec in and out: Kubo must store our bytes as they are. A different CID means
            # they were not in canonical form and Kubo re-encoded them.
            expected = cid_for(bytes(data), store_codec, hash)
            if not same_cid(got, expected):
                raise KuboCIDMismatch(expected, got)
        return got

    async def get(
        self, cid: CID | str, output_codec: str = "dag-json", *, timeout: float | None = None, offline: bool = False
    ) -> bytes:
        """The node re-encoded as ``output_codec`` (not hash-checked: use block_get for verified bytes)."""
        params = [("arg", parse_cid(cid)), ("output-codec", output_codec), ("offline", offline or None)]
        async with self._rpc.post("dag/get", params, timeout=timeout) as resp:
            return await resp.read()

    async def export(
        self, cid: CID | str, *, timeout: float | None = None, offline: bool = False, verify: bool = True
    ) -> AsyncIterator[bytes]:
        """CARv1 of the DAG under ``cid``, streamed; with ``verify`` every block is hash-checked and a
        cut-short stream raises KuboTruncated at its end (after the chunks already yielded)."""
        root = parse_cid(cid)
        checker = CarVerifier(root) if verify else None
        async with self._rpc.post(
            "dag/export", [("arg", root), ("offline", offline or None)], timeout=timeout, stream=True
        ) as resp:
            async for chunk in resp.content.iter_any():
                if checker is not None:
                    checker.feed(chunk)
                yield chunk
        if checker is not None:
            checker.finish()

    async def import_car(self, source: Source, *, pin_roots: bool = True, timeout: float | None = None) -> list[CID]:
        """Import a CAR (bytes, a file path, or an async iterator of chunks); returns the roots its
        header names (Kubo lists roots only when it pins them, so we read the header on the way up)."""
        header = CarHeaderReader()

        async def watched(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
            async for chunk in chunks:
                header.feed(chunk)
                yield chunk

        body = multipart(watched(chunks_of(source)), "car")
        lines = await self._rpc.json_lines(
            "dag/import", [("pin-roots", pin_roots)], body=body, timeout=timeout, stream=True
        )
        for obj in lines:
            root = obj.get("Root") or {}
            if root.get("PinErrorMsg"):
                raise KuboRPCError("dag/import", f"pinning root {root['Cid']['/']} failed: {root['PinErrorMsg']}")
        if header.roots is None:
            raise KuboTruncated("dag/import: the CAR ended before its header")
        return list(header.roots)
