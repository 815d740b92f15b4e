"""The block store port: what services ask of IPFS (blocks, DAGs, pins, UnixFS files, CARs, routing, keys and IPNS).

``node.adapters.ipfs.KuboClient`` is the real one (Kubo's RPC API),
``node.adapters.ipfs.memory_blocks.MemoryBlockStore`` its in-memory twin;
``tests/contract/test_block_store.py`` runs one suite against both (the real one on a real Kubo). Every CID is
CIDv1 with BLAKE3-256 unless a method says otherwise, and a CID the store returns equals the one the node computes
for the same bytes. Failures are ``node.support.errors.KuboError``s: ``KuboNotFound`` for what is not there (offline),
``KuboTimeout`` for what did not come in time, ``KuboRPCError`` for a refused call, ``KuboTruncated`` for a
stream cut short, ``KuboCIDMismatch`` for bytes that are not what their CID says.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from multiformats import CID

T = TypeVar("T")

# What ``add`` and ``dag_import`` read: bytes, a file path, or an async iterator of chunks.
Source = bytes | bytearray | memoryview | str | os.PathLike[str] | AsyncIterable[bytes]


@dataclass(frozen=True)
class AddResult:
    cid: CID
    size: int  # what Kubo reports: bytes of the whole UnixFS DAG (leaves plus nodes)
    name: str
    file_size: int  # bytes we uploaded


@dataclass(frozen=True)
class BlockStat:
    cid: CID
    size: int


@dataclass(frozen=True)
class PeerInfo:
    id: str
    addrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeIdentity:
    id: str
    public_key: str
    addresses: tuple[str, ...]  # full multiaddrs, with /p2p/<id>
    agent_version: str
    protocols: tuple[str, ...]


@dataclass(frozen=True)
class KuboVersion:
    version: str  # "0.42.0"
    commit: str
    repo: str
    system: str
    golang: str


@dataclass(frozen=True)
class KeyInfo:
    name: str
    id: str  # the IPNS name (base36 k51…)


@dataclass(frozen=True)
class NamePublished:
    name: str
    value: str  # the path it points to, /ipfs/<cid>


class BlockStore(Protocol):
    """``timeout``: seconds for this call (None: the store's default). ``offline``: answer from what is held here,
    never fetching (a block not held is ``KuboNotFound`` at once)."""

    def write_behind(self, write: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``write`` (calls of this store) in the background; every later call waits for it first, so the
        node reads its own writes, while the write's own calls do not."""

    async def close(self) -> None: ...

    # -- the store itself
    async def id(self, peer: str | None = None, *, timeout: float | None = None) -> NodeIdentity: ...
    async def version(self, *, timeout: float | None = None) -> KuboVersion: ...

    async def repo_size(self, *, timeout: float | None = None) -> int:
        """Bytes held (pinned blocks and cached ones)."""

    # -- blocks
    async def block_put(
        self, data: bytes, codec: str = "raw", pin: bool = False, *, timeout: float | None = None
    ) -> CID: ...

    async def block_put_many(
        self, blocks: Sequence[bytes], codec: str = "raw", *, timeout: float | None = None
    ) -> list[CID]: ...

    async def block_get(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> bytes:
        """The block's bytes, checked against the CID."""

    async def block_stat(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> BlockStat: ...

    async def block_rm(self, cids: Sequence[CID], *, timeout: float | None = None) -> list[CID]:
        """Remove blocks: the CIDs removed (a pinned block, or one not held, is kept quietly)."""

    async def refs(self, cid: CID | str, *, timeout: float | None = None) -> list[CID]:
        """Every CID under ``cid`` that is held here, each once, without fetching."""

    async def forget(self, roots: Iterable[CID], *, timeout: float | None = None) -> list[CID]:
        """Remove the DAGs under ``roots``, except blocks a pin holds: the CIDs removed."""

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
        """Decode ``data`` and store it as ``store_codec`` (``pin``: recursively, at once)."""

    async def dag_get(
        self, cid: CID | str, output_codec: str = "dag-json", *, timeout: float | None = None, offline: bool = False
    ) -> bytes:
        """The node re-encoded as ``output_codec``."""

    def dag_export(
        self, cid: CID | str, *, timeout: float | None = None, offline: bool = False, verify: bool = True
    ) -> AsyncIterator[bytes]:
        """A CARv1 of the DAG under ``cid`` (depth first, links in order, each block once), streamed; cut short:
        ``KuboTruncated`` at its end (with ``verify``)."""

    async def dag_import(self, source: Source, *, pin_roots: bool = True, timeout: float | None = None) -> list[CID]:
        """Store a CAR's blocks (pinning its roots): the roots its header names."""

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
        """One file as UnixFS: CIDv1, BLAKE3, raw leaves, fixed 1 MiB chunks, balanced layout."""

    def cat(
        self,
        cid: CID | str,
        offset: int | None = None,
        length: int | None = None,
        *,
        timeout: float | None = None,
        offline: bool = False,
        on_length: Callable[[int], None] | None = None,
    ) -> AsyncIterator[bytes]:
        """A file's bytes, streamed; ``on_length`` is told how many will come before the first."""

    # -- pins
    async def pin_add(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        """Pin ``cid`` (recursively: the whole DAG, fetched if need be); a direct pin of a CID pinned recursively
        is done already."""

    async def pin_rm(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        """``KuboNotFound`` for a CID not pinned (or pinned only under another)."""

    async def pin_ls(
        self, cid: CID | str | None = None, *, type: str = "all", timeout: float | None = None
    ) -> dict[CID, str]:
        """Pinned CIDs -> "recursive" | "direct" | "indirect"; a CID asked for and not pinned gives {}."""

    # -- routing and the swarm
    async def routing_provide(self, cid: CID | str, recursive: bool = False, *, timeout: float | None = None) -> int:
        """Tell the network this store provides ``cid``: how many CIDs were queued (0 if unknown)."""

    async def routing_findprovs(self, cid: CID | str, num: int = 20, *, timeout: float | None = None) -> list[PeerInfo]:
        """Up to ``num`` providers found within ``timeout``."""

    async def swarm_connect(self, addr: str, *, timeout: float | None = None) -> None: ...
    async def swarm_peers(self, *, timeout: float | None = None) -> list[PeerInfo]: ...

    # -- keys and IPNS
    async def key_import(self, name: str, pem: bytes, *, timeout: float | None = None) -> str:
        """Import a PKCS#8 PEM ed25519 key under ``name``: its IPNS name (k51…)."""

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
    ) -> NamePublished: ...
