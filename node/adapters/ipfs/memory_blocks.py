"""The block store's in-memory twin (``node.domain.ports.block_store.BlockStore``), for tests and simulations.

``MemoryBlockStore`` keeps blocks in a dict keyed by multihash (as Kubo's blockstore is) and makes every CID exactly
as Kubo does for the node's options: blocks and DAGs hashed with BLAKE3, UnixFS files with raw leaves, 1 MiB chunks
and the balanced layout (``node.adapters.ipfs.unixfs``), CARs depth first (``node.adapters.ipfs.dag_walk``). Its pins,
``refs``,
``block rm``, ``cat`` ranges and errors follow Kubo 0.42 (``tests/contract/test_block_store.py`` runs one suite
against both). Several stores may share one ``MemorySwarm``: they connect (``swarm_connect``), find each other's
provided CIDs (``routing_provide``, ``routing_findprovs``) and fetch what a connected store or a provider holds (as
bitswap would). A provided CID is found at once by every store of the swarm (``routing_findprovs``: the stores
that provided it, none other; Kubo's DHT answers once its queries converge, which no test can wait for reliably).

Where Kubo waits, the twin does not: what Kubo would look for on the network until its timeout (a block nobody
in reach holds; a pin of an incomplete DAG) fails at once with the error Kubo gives when the timeout fires
(``KuboTimeout``, or for ``dag import``'s pins a ``KuboRPCError``). IPNS names are published into the swarm but
never resolved (Kubo's test profile, with no DHT, resolves none either). Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import dag_cbor
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from dag_cbor.decoding import DAGCBORDecodingError
from multiformats import CID, multibase, multihash

from node.adapters.ipfs.behind import WritesBehind
from node.adapters.ipfs.car import CarHeaderReader, CarVerifier
from node.adapters.ipfs.dag_walk import car_header, car_section, unixfs_node, unixfs_size, walk
from node.adapters.ipfs.sources import chunks_of, read_all
from node.adapters.ipfs.unixfs import file_dag
from node.domain.model import dagjson
from node.domain.model.cid import CODECS, cid_for, cid_str, parse_cid
from node.domain.ports.block_store import (
    AddResult,
    BlockStat,
    BlockStore,
    KuboVersion,
    NamePublished,
    NodeIdentity,
    PeerInfo,
    Source,
)
from node.support.errors import KuboCIDMismatch, KuboNotFound, KuboRPCError, KuboTimeout, KuboTruncated

T = TypeVar("T")
VERSION = "memory"  # what ``version()`` says: no Kubo release


def _peer_id(proto_key: bytes) -> str:
    return str(multibase.encode(multihash.wrap(proto_key, "identity"), "base58btc"))[1:]


def _proto_key(key: Ed25519PrivateKey) -> bytes:
    """The libp2p protobuf form of ``key``'s public half (KeyType Ed25519 = 1)."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return b"\x08\x01\x12\x20" + raw


def ipns_name(key: Ed25519PrivateKey) -> str:
    """The IPNS name Kubo gives ``key`` (k51…: a base36 CIDv1 of the libp2p-key)."""
    return str(CID("base36", 1, "libp2p-key", multihash.wrap(_proto_key(key), "identity")).encode())


class PinSet:
    """A store's pins: recursive roots and direct pins by multihash; the rest follows from the blocks held."""

    def __init__(self, held: Callable[[CID], bytes | None]) -> None:
        self._held = held
        self.recursive: dict[bytes, CID] = {}
        self.direct: dict[bytes, CID] = {}

    def pin(self, cid: CID, recursive: bool) -> None:
        mh = bytes(cid.digest)
        if recursive:
            self.recursive[mh] = cid
            self.direct.pop(mh, None)  # a recursive pin replaces a direct one
        elif mh not in self.recursive:
            self.direct[mh] = cid

    def unpin(self, cid: CID, recursive: bool) -> None:
        mh = bytes(cid.digest)
        if mh in self.recursive:
            if not recursive:
                raise KuboRPCError("pin/rm", f"{cid_str(cid)} is pinned recursively")
            del self.recursive[mh]
        elif mh in self.direct:
            del self.direct[mh]
        else:
            raise KuboNotFound("pin/rm", "not pinned or pinned indirectly")

    def held_by_pins(self) -> set[bytes]:
        """Multihashes a pin holds: direct pins, and every block held under a recursive one."""
        held = set(self.direct)
        for root in self.recursive.values():
            held |= {bytes(c.digest) for c, d in walk(root, self._held) if d is not None}
        return held

    def indirect(self) -> dict[bytes, CID]:
        """Blocks under recursive pins (their roots excluded); an incomplete pinned DAG cannot be listed."""
        found: dict[bytes, CID] = {}
        for root in self.recursive.values():
            for c, data in list(walk(root, self._held))[1:]:
                if data is None:
                    why = f"cannot list indirect pins, a pinned DAG is incomplete: could not find {cid_str(c)}"
                    raise KuboRPCError("pin/ls", why)
                found.setdefault(bytes(c.digest), c)
        return found


class MemorySwarm:
    """The network twin block stores share: who is in it, who provides what, the IPNS records published."""

    def __init__(self) -> None:
        self.stores: dict[str, MemoryBlockStore] = {}
        self.providers: dict[bytes, set[str]] = {}  # multihash -> peer ids that provided it
        self.names: dict[str, str] = {}  # IPNS name -> path
        self._ports = itertools.count(4001)

    def join(self, store: MemoryBlockStore) -> str:
        """Add ``store``: its swarm address."""
        self.stores[store.peer_id] = store
        return f"/ip4/127.0.0.1/tcp/{next(self._ports)}"


class MemoryBlockStore:
    def __init__(self, swarm: MemorySwarm | None = None, *, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.swarm = swarm if swarm is not None else MemorySwarm()
        self._key = Ed25519PrivateKey.generate()
        self.peer_id = _peer_id(_proto_key(self._key))
        self.address = self.swarm.join(self)
        self._blocks: dict[bytes, bytes] = {}  # multihash -> bytes
        self._pins = PinSet(self._held)
        self._keys: dict[str, str] = {"self": ipns_name(self._key)}
        self._connected: set[str] = set()
        self._writes = WritesBehind()

    # -- plumbing

    def write_behind(self, write: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        return self._writes.start(write)

    async def close(self) -> None:
        await self._writes.settle()

    def _held(self, cid: CID) -> bytes | None:
        return self._blocks.get(bytes(cid.digest))

    def _put(self, cid: CID, data: bytes) -> None:
        self._blocks.setdefault(bytes(cid.digest), bytes(data))

    def _get(self, path: str, cid: CID, timeout: float | None, offline: bool) -> bytes:
        """The block, fetched from the swarm (connected stores, then providers) unless ``offline``."""
        data = self._held(cid)
        if data is not None:
            return data
        if offline:
            raise KuboNotFound(path, f"block was not found locally (offline): ipld: could not find {cid_str(cid)}")
        mh = bytes(cid.digest)
        for peer in [*sorted(self._connected), *sorted(self.swarm.providers.get(mh, ()))]:
            store = self.swarm.stores.get(peer)
            if store is not None and (found := store._held(cid)) is not None:
                self._put(cid, found)
                return found
        raise KuboTimeout(path, timeout if timeout is not None else self.timeout, "context deadline exceeded")

    def _fetch_dag(self, path: str, root: CID, timeout: float | None) -> None:
        """Every block under ``root`` held here, fetched if need be."""
        for _ in walk(root, lambda c: self._get(path, c, timeout, offline=False)):
            pass

    # -- the store itself

    async def id(self, peer: str | None = None, *, timeout: float | None = None) -> NodeIdentity:
        await self._writes.settle()
        store = self if peer is None else self.swarm.stores.get(peer)
        if store is None:
            raise KuboRPCError("id", f"failed to find peer {peer}")
        proto = _proto_key(store._key)
        addrs = (f"{store.address}/p2p/{store.peer_id}",)
        return NodeIdentity(store.peer_id, base64.b64encode(proto).decode(), addrs, "cairn/memory-block-store", ())

    async def version(self, *, timeout: float | None = None) -> KuboVersion:
        await self._writes.settle()
        return KuboVersion(VERSION, "", "", "", "")

    async def repo_size(self, *, timeout: float | None = None) -> int:
        await self._writes.settle()
        return sum(len(d) for d in self._blocks.values())

    # -- blocks

    async def block_put(
        self, data: bytes, codec: str = "raw", pin: bool = False, *, timeout: float | None = None
    ) -> CID:
        await self._writes.settle()
        cid = cid_for(bytes(data), codec)
        self._put(cid, data)
        if pin:
            self._pins.pin(cid, recursive=True)
        return cid

    async def block_put_many(
        self, blocks: Sequence[bytes], codec: str = "raw", *, timeout: float | None = None
    ) -> list[CID]:
        return [await self.block_put(d, codec) for d in blocks]

    async def block_get(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> bytes:
        await self._writes.settle()
        return self._get("block/get", parse_cid(cid), timeout, offline)

    async def block_stat(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> BlockStat:
        await self._writes.settle()
        c = parse_cid(cid)
        return BlockStat(c, len(self._get("block/stat", c, timeout, offline)))

    async def block_rm(self, cids: Sequence[CID], *, timeout: float | None = None) -> list[CID]:
        await self._writes.settle()
        pinned = self._pins.held_by_pins()
        gone = []
        for c in cids:
            mh = bytes(c.digest)
            if mh in self._blocks and mh not in pinned:
                del self._blocks[mh]
                gone.append(c)
        return gone

    async def refs(self, cid: CID | str, *, timeout: float | None = None) -> list[CID]:
        await self._writes.settle()
        root = parse_cid(cid)
        self._get("refs", root, timeout, offline=True)
        return [c for c, d in walk(root, self._held) if d is not None][1:]

    async def forget(self, roots: Iterable[CID], *, timeout: float | None = None) -> list[CID]:
        cids: dict[bytes, CID] = {}
        for root in roots:
            for c in [root, *await self.refs(root, timeout=timeout)]:
                cids.setdefault(bytes(c), c)
        return await self.block_rm(list(cids.values()), timeout=timeout)

    # -- DAGs and CARs

    async def dag_put(
        self,
        data: bytes,
        input_codec: str = "dag-cbor",
        store_codec: str = "dag-cbor",
        hash: str = "blake3",
        pin: bool = True,
        *,
        timeout: float | None = None,
    ) -> CID:
        await self._writes.settle()
        if input_codec == store_codec and store_codec in CODECS:
            expected = cid_for(bytes(data), store_codec, hash)
            try:
                if store_codec in ("dag-cbor", "cbor"):
                    dag_cbor.decode(bytes(data))
            except DAGCBORDecodingError:  # Kubo re-encodes what is not canonical, under another CID
                raise KuboCIDMismatch(expected, "a re-encoded block") from None
            stored = bytes(data)
        elif input_codec == "dag-json" and store_codec == "dag-cbor":
            stored = dag_cbor.encode(dagjson.loads(bytes(data)))
        else:
            raise KuboRPCError("dag/put", f"the in-memory store cannot put {input_codec} as {store_codec}")
        cid = cid_for(stored, store_codec, hash)
        self._put(cid, stored)
        if pin:
            self._pins.pin(cid, recursive=True)
        return cid

    async def dag_get(
        self, cid: CID | str, output_codec: str = "dag-json", *, timeout: float | None = None, offline: bool = False
    ) -> bytes:
        await self._writes.settle()
        c = parse_cid(cid)
        data = self._get("dag/get", c, timeout, offline)
        value: Any = data if c.codec.name == "raw" else dag_cbor.decode(data)
        if c.codec.name not in ("raw", "dag-cbor", "cbor") or output_codec not in ("dag-json", "dag-cbor"):
            raise KuboRPCError("dag/get", f"the in-memory store cannot give {c.codec.name} as {output_codec}")
        return dagjson.dumps(value).encode() if output_codec == "dag-json" else dag_cbor.encode(value)

    async def dag_export(
        self, cid: CID | str, *, timeout: float | None = None, offline: bool = False, verify: bool = True
    ) -> AsyncIterator[bytes]:
        await self._writes.settle()
        root = parse_cid(cid)
        self._get("dag/export", root, timeout, offline)
        checker = CarVerifier(root) if verify else None
        for chunk in self._car_sections(root, timeout, offline):
            if checker is not None:
                checker.feed(chunk)
            yield chunk
        if checker is not None:
            checker.finish()

    def _car_sections(self, root: CID, timeout: float | None, offline: bool) -> Iterable[bytes]:
        """The CAR's header and blocks; a block that cannot be had ends it there (Kubo's stream is cut short)."""
        yield car_header([root])
        for c, data in walk(root, self._held):
            if data is None:
                try:
                    data = self._get("dag/export", c, timeout, offline)
                except (KuboNotFound, KuboTimeout):
                    return
            yield car_section(c, data)

    async def dag_import(self, source: Source, *, pin_roots: bool = True, timeout: float | None = None) -> list[CID]:
        await self._writes.settle()
        header, blocks = CarHeaderReader(), CarVerifier(on_block=self._put)
        async for chunk in chunks_of(source):
            header.feed(chunk)
            blocks.feed(chunk)
        if header.roots is None:
            raise KuboTruncated("dag/import: the CAR ended before its header")
        for root in header.roots if pin_roots else ():
            try:
                await self.pin_add(root, timeout=timeout)
            except KuboTimeout:
                raise KuboRPCError("dag/import", f"pinning root {root} failed: context deadline exceeded") from None
        return list(header.roots)

    # -- UnixFS files

    async def add(
        self,
        source: Source,
        *,
        filename: str | None = None,
        pin: bool = True,
        only_hash: bool = False,
        timeout: float | None = None,
    ) -> AddResult:
        await self._writes.settle()
        name = filename or (Path(source).name if isinstance(source, (str, os.PathLike)) else "data")
        data = await read_all(source)
        root, size, blocks = file_dag(data)
        if not only_hash:
            for c, block in blocks:
                self._put(c, block)
            if pin:
                self._pins.pin(root, recursive=True)
        return AddResult(cid=root, size=size, name=name, file_size=len(data))

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
        await self._writes.settle()
        root = parse_cid(cid)
        data = self._get("cat", root, timeout, offline)
        size = unixfs_size(root, data)
        if size is None:
            raise KuboRPCError("cat", "unknown node type")
        start = min(max(offset or 0, 0), size)
        count = size - start if length is None else min(max(length, 0), size - start)
        if on_length is not None:
            on_length(count)
        pos = 0
        for piece in self._file_pieces(root, timeout, offline):
            take = piece[max(start - pos, 0) : max(start + count - pos, 0)]
            pos += len(piece)
            if take:
                yield take
            if pos >= start + count:
                return

    def _file_pieces(self, root: CID, timeout: float | None, offline: bool) -> Iterable[bytes]:
        stack = [root]
        while stack:
            c = stack.pop()
            try:
                data = self._get("cat", c, timeout, offline)
            except (KuboNotFound, KuboTimeout) as e:
                raise KuboTruncated(f"Kubo cat of {cid_str(root)} ended early: {e.message}") from None
            node = unixfs_node(c, data)
            if node is not None:
                yield node[0]
                stack.extend(reversed(node[1]))

    # -- pins

    async def pin_add(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        await self._writes.settle()
        c = parse_cid(cid)
        if recursive:
            self._fetch_dag("pin/add", c, timeout)
        elif bytes(c.digest) not in self._pins.recursive:
            self._get("pin/add", c, timeout, offline=False)
        self._pins.pin(c, recursive)
        return [c]

    async def pin_rm(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        await self._writes.settle()
        c = parse_cid(cid)
        self._pins.unpin(c, recursive)
        return [c]

    async def pin_ls(
        self, cid: CID | str | None = None, *, type: str = "all", timeout: float | None = None
    ) -> dict[CID, str]:
        await self._writes.settle()
        kinds: list[tuple[str, Callable[[], dict[bytes, CID]]]] = [
            ("recursive", lambda: self._pins.recursive),
            ("direct", lambda: self._pins.direct),
            ("indirect", self._pins.indirect),
        ]
        wanted = None if cid is None else parse_cid(cid)
        listed: dict[CID, str] = {}
        for kind, pins in kinds:
            if type not in (kind, "all"):
                continue
            if wanted is not None and bytes(wanted.digest) in pins():
                return {wanted: kind}
            for c in pins().values() if wanted is None else ():
                listed.setdefault(c, kind)
        return listed

    # -- routing and the swarm

    async def routing_provide(self, cid: CID | str, recursive: bool = False, *, timeout: float | None = None) -> int:
        await self._writes.settle()
        c = parse_cid(cid)
        if not self._connected:
            raise KuboRPCError("provide/once", "cannot provide: no connected peers")
        if self._held(c) is None:
            raise KuboNotFound("provide/once", f"block {cid_str(c)} not found locally, cannot provide")
        provided = [x for x, d in walk(c, self._held) if d is not None] if recursive else [c]
        for x in provided:
            self.swarm.providers.setdefault(bytes(x.digest), set()).add(self.peer_id)
        return len(provided)

    async def routing_findprovs(self, cid: CID | str, num: int = 20, *, timeout: float | None = None) -> list[PeerInfo]:
        await self._writes.settle()
        found = sorted(self.swarm.providers.get(bytes(parse_cid(cid).digest), ()))
        return [PeerInfo(p, (self.swarm.stores[p].address,)) for p in found[: max(num, 0)] if p in self.swarm.stores]

    async def swarm_connect(self, addr: str, *, timeout: float | None = None) -> None:
        await self._writes.settle()
        peer = addr.rsplit("/p2p/", 1)[-1] if "/p2p/" in addr else ""
        store = self.swarm.stores.get(peer)
        if store is None or not addr.startswith(store.address):
            raise KuboRPCError("swarm/connect", f"connect {peer or addr} failure: failed to dial: all dials failed")
        if store is self:
            raise KuboRPCError("swarm/connect", f"connect {peer} failure: dial to self attempted")
        self._connected.add(peer)
        store._connected.add(self.peer_id)

    async def swarm_peers(self, *, timeout: float | None = None) -> list[PeerInfo]:
        await self._writes.settle()
        return [PeerInfo(p, (self.swarm.stores[p].address,)) for p in sorted(self._connected)]

    # -- keys and IPNS

    async def key_import(self, name: str, pem: bytes, *, timeout: float | None = None) -> str:
        await self._writes.settle()
        if name in self._keys:
            raise KuboRPCError("key/import", f"key with name '{name}' already exists")
        key = serialization.load_pem_private_key(bytes(pem), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise KuboRPCError("key/import", "the in-memory store imports ed25519 keys only")
        self._keys[name] = ipns_name(key)
        return self._keys[name]

    async def name_publish(
        self,
        target: CID | str,
        key: str = "self",
        lifetime: str | float = "48h",
        *,
        ttl: str | float | None = None,
        allow_offline: bool = True,
        resolve: bool = True,
        timeout: float | None = None,
    ) -> NamePublished:
        await self._writes.settle()
        if key not in self._keys:
            raise KuboNotFound("name/publish", "no key by the given name was found")
        path = (
            target
            if isinstance(target, str) and target.startswith(("/ipfs/", "/ipns/"))
            else f"/ipfs/{cid_str(target, keep_v0=True)}"
        )
        self.swarm.names[self._keys[key]] = path
        return NamePublished(self._keys[key], path)


def _conforms(store: MemoryBlockStore) -> BlockStore:
    """Checked by mypy: the twin is a BlockStore (``KuboClient``'s check: node/adapters/ipfs/kubo_client.py)."""
    return store
