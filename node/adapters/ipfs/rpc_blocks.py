"""Kubo's block calls: single blocks put, got, checked and removed, what the repo holds under a root, its GC."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import aiohttp
from multiformats import CID

from node.adapters.ipfs.car import check_block
from node.adapters.ipfs.rpc_transport import KuboTransport, multipart
from node.domain.model.cid import cid_for, parse_cid, same_cid
from node.domain.ports.block_store import BlockStat
from node.support.errors import KuboCIDMismatch, KuboNotFound, KuboRPCError


class BlockCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport

    async def put(self, data: bytes, codec: str = "raw", pin: bool = False, *, timeout: float | None = None) -> CID:
        """Store one block under a CIDv1 ``codec`` + BLAKE3-256; Kubo's CID must equal ours."""
        expected = cid_for(bytes(data), codec)
        params = [("cid-codec", codec), ("mhtype", "blake3"), ("mhlen", 32), ("pin", pin)]
        obj = await self._rpc.json_object("block/put", params, body=multipart(bytes(data)), timeout=timeout)
        got = parse_cid(obj["Key"])
        if not same_cid(got, expected):
            raise KuboCIDMismatch(expected, got)
        return expected

    async def put_many(self, blocks: Sequence[bytes], codec: str = "raw", *, timeout: float | None = None) -> list[CID]:
        """Store several blocks of one ``codec`` in one call (one part each); every CID Kubo gives must be ours."""
        if not blocks:
            return []
        expected = [cid_for(bytes(d), codec) for d in blocks]
        writer = aiohttp.MultipartWriter("form-data")
        for d in blocks:
            part = writer.append(bytes(d), {"Content-Type": "application/octet-stream"})
            part.set_content_disposition("form-data", name="file", filename="data")
        params = [("cid-codec", codec), ("mhtype", "blake3"), ("mhlen", 32)]
        objs = await self._rpc.json_lines("block/put", params, body=writer, timeout=timeout)
        got = [parse_cid(o["Key"]) for o in objs if isinstance(o, dict) and "Key" in o]
        if len(got) != len(expected):
            raise KuboRPCError("block/put", f"stored {len(got)} of {len(expected)} blocks")
        keys = {bytes(c) for c in got}
        for want in expected:
            if bytes(want) not in keys:
                raise KuboCIDMismatch(want, None)
        return expected

    async def get(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> bytes:
        """The block's bytes, checked against the CID's multihash."""
        c = parse_cid(cid)
        params = [("arg", c), ("offline", offline or None)]
        async with self._rpc.post("block/get", params, timeout=timeout) as resp:
            data = await resp.read()
        check_block(c, data)
        return data

    async def stat(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> BlockStat:
        params = [("arg", parse_cid(cid)), ("offline", offline or None)]
        obj = await self._rpc.json_object("block/stat", params, timeout=timeout)
        return BlockStat(cid=parse_cid(obj["Key"]), size=int(obj["Size"]))

    async def rm(self, cids: Sequence[CID], *, timeout: float | None = None) -> list[CID]:
        """Remove blocks from the repo: the CIDs removed. Kubo keeps a pinned block (directly, recursively or under
        a pin) and one it lacks, and says so per block: those are not errors here."""
        if not cids:
            return []
        lines = await self._rpc.json_lines("block/rm", [("arg", c) for c in cids], timeout=timeout)
        return [parse_cid(o["Hash"]) for o in lines if o.get("Hash") and not o.get("Error")]

    async def refs(self, cid: CID | str, *, timeout: float | None = None) -> list[CID]:
        """Every CID under ``cid`` (its whole DAG, each once) that the repo holds: offline, the walk never fetches
        and stops at a block the repo lacks."""
        params = [("arg", parse_cid(cid)), ("recursive", True), ("unique", True), ("offline", True)]
        lines = await self._rpc.json_lines("refs", params, timeout=timeout)
        return [parse_cid(o["Ref"]) for o in lines if o.get("Ref")]

    async def forget(self, roots: Iterable[CID], *, timeout: float | None = None) -> list[CID]:
        """Remove the DAGs under ``roots`` from the repo (what a refused fetch brought in: never served or pinned
        later), except the blocks a pin holds: the CIDs removed."""
        cids: dict[bytes, CID] = {}
        for root in roots:
            for c in [root, *await self.refs(root, timeout=timeout)]:
                cids.setdefault(bytes(c), c)
        return await self.rm(list(cids.values()), timeout=timeout)

    async def repo_size(self, *, timeout: float | None = None) -> int:
        """Bytes Kubo's repo holds (pinned blocks and cached ones: ``repo/stat --size-only``)."""
        obj = await self._rpc.json_object("repo/stat", [("size-only", True)], timeout=timeout)
        return int(obj.get("RepoSize", 0))

    async def gc(self, *, timeout: float | None = None) -> list[CID]:
        """Remove unpinned blocks (``repo/gc``); returns the CIDs removed."""
        limit = timeout if timeout is not None else self._rpc.stream_timeout
        try:
            lines = await self._rpc.json_lines("repo/gc", timeout=limit)
        except KuboNotFound as e:
            # "could not retrieve links for …": a pinned DAG lacks a block, and Kubo aborts the whole GC.
            raise KuboRPCError("repo/gc", e.kubo_message, e.code, e.http_status) from e
        errors = [o["Error"] for o in lines if o.get("Error")]
        if errors:
            raise KuboRPCError("repo/gc", errors[0])
        return [parse_cid(o["Key"]["/"]) for o in lines if o.get("Key")]
