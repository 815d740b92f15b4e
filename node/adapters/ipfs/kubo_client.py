"""Async client of Kubo's RPC API (aiohttp): the block store port's real adapter.

``KuboClient`` composes the transport (``rpc_transport.py``: the session, Kubo's errors, timeouts, the facts about
Kubo's API the client relies on) and the groups of calls by what they do: ``blocks`` (``rpc_blocks.py``), ``dags``
(``rpc_dags.py``), ``files`` (``rpc_files.py``: UnixFS add and cat), ``pins`` (``rpc_pins.py``), ``swarm`` and
``routing`` (``rpc_network.py``), ``keys`` and ``names`` (``rpc_ipns.py``). Its own methods are the ``BlockStore``
port's (each hands the call to its group), so services see one store; calls outside the port (``keys.gen``,
``names.resolve``, ``blocks.gc``, ``transport.rpc`` …) are made on the groups.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from multiformats import CID

from node.adapters.ipfs.rpc_blocks import BlockCalls
from node.adapters.ipfs.rpc_dags import DagCalls
from node.adapters.ipfs.rpc_files import FileCalls
from node.adapters.ipfs.rpc_ipns import KeyCalls, NameCalls
from node.adapters.ipfs.rpc_network import RoutingCalls, SwarmCalls
from node.adapters.ipfs.rpc_pins import PinCalls
from node.adapters.ipfs.rpc_transport import DEFAULT_API, KuboTransport
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

T = TypeVar("T")


class KuboClient:
    """One aiohttp session per client (``transport``); every method is one RPC call (or a stream of one)."""

    def __init__(
        self,
        api_url: str = DEFAULT_API,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 600.0,
        connect_timeout: float = 5.0,
        auth: str | None = None,
    ) -> None:
        """``timeout``: default for calls answered in one piece; ``stream_timeout``: for add / cat / dag export /
        dag import. ``auth``: the Kubo ``API.Authorizations`` secret to send on every call (see ``auth_header``)."""
        self.transport = KuboTransport(
            api_url, timeout=timeout, stream_timeout=stream_timeout, connect_timeout=connect_timeout, auth=auth
        )
        self.blocks = BlockCalls(self.transport)
        self.dags = DagCalls(self.transport)
        self.files = FileCalls(self.transport)
        self.pins = PinCalls(self.transport)
        self.swarm = SwarmCalls(self.transport)
        self.routing = RoutingCalls(self.transport)
        self.keys = KeyCalls(self.transport)
        self.names = NameCalls(self.transport)
        self.calls = self.transport.calls  # RPC calls by path (metrics: cairn_kubo_calls_total)
        self.errors = self.transport.errors  # …of which failed (cairn_kubo_errors_total)

    def write_behind(self, write: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``write`` (calls of this client) in the background: every call made on this client after this
        one waits for it first, so that this node reads its own writes; the write's own calls do not wait.
        Its failure is the caller's to handle (the task's result)."""
        return self.transport.write_behind(write)

    @property
    def api_url(self) -> str:
        return self.transport.api_url

    @api_url.setter
    def api_url(self, value: str) -> None:
        # A managed Kubo may come back on another port (or socket): the transport's session follows.
        self.transport.api_url = value

    async def __aenter__(self) -> KuboClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.transport.close()

    # --- node ----------------------------------------------------------------------------

    async def id(self, peer: str | None = None, *, timeout: float | None = None) -> NodeIdentity:
        obj = await self.transport.json_object("id", [("arg", peer)], timeout=timeout)
        return NodeIdentity(
            id=obj["ID"],
            public_key=obj.get("PublicKey") or "",
            addresses=tuple(obj.get("Addresses") or ()),
            agent_version=obj.get("AgentVersion") or "",
            protocols=tuple(obj.get("Protocols") or ()),
        )

    async def version(self, *, timeout: float | None = None) -> KuboVersion:
        obj = await self.transport.json_object("version", timeout=timeout)
        return KuboVersion(
            version=obj.get("Version", ""),
            commit=obj.get("Commit", ""),
            repo=obj.get("Repo", ""),
            system=obj.get("System", ""),
            golang=obj.get("Golang", ""),
        )

    async def repo_size(self, *, timeout: float | None = None) -> int:
        return await self.blocks.repo_size(timeout=timeout)

    # --- blocks --------------------------------------------------------------------------

    async def block_put(
        self, data: bytes, codec: str = "raw", pin: bool = False, *, timeout: float | None = None
    ) -> CID:
        return await self.blocks.put(data, codec, pin, timeout=timeout)

    async def block_put_many(
        self, blocks: Sequence[bytes], codec: str = "raw", *, timeout: float | None = None
    ) -> list[CID]:
        return await self.blocks.put_many(blocks, codec, timeout=timeout)

    async def block_get(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> bytes:
        return await self.blocks.get(cid, timeout=timeout, offline=offline)

    async def block_stat(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> BlockStat:
        return await self.blocks.stat(cid, timeout=timeout, offline=offline)

    async def block_rm(self, cids: Sequence[CID], *, timeout: float | None = None) -> list[CID]:
        return await self.blocks.rm(cids, timeout=timeout)

    async def refs(self, cid: CID | str, *, timeout: float | None = None) -> list[CID]:
        return await self.blocks.refs(cid, timeout=timeout)

    async def forget(self, roots: Iterable[CID], *, timeout: float | None = None) -> list[CID]:
        return await self.blocks.forget(roots, timeout=timeout)

    # --- DAG -----------------------------------------------------------------------------

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
        return await self.dags.put(data, input_codec, store_codec, hash, pin, timeout=timeout)

    async def dag_get(
        self, cid: CID | str, output_codec: str = "dag-json", *, timeout: float | None = None, offline: bool = False
    ) -> bytes:
        return await self.dags.get(cid, output_codec, timeout=timeout, offline=offline)

    def dag_export(
        self, cid: CID | str, *, timeout: float | None = None, offline: bool = False, verify: bool = True
    ) -> AsyncIterator[bytes]:
        return self.dags.export(cid, timeout=timeout, offline=offline, verify=verify)

    async def dag_import(self, source: Source, *, pin_roots: bool = True, timeout: float | None = None) -> list[CID]:
        return await self.dags.import_car(source, pin_roots=pin_roots, timeout=timeout)

    # --- files (UnixFS) ------------------------------------------------------------------

    async def add(
        self,
        source: Source,
        *,
        filename: str | None = None,
        pin: bool = True,
        only_hash: bool = False,
        timeout: float | None = None,
    ) -> AddResult:
        return await self.files.add(source, filename=filename, pin=pin, only_hash=only_hash, timeout=timeout)

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
        return self.files.cat(cid, offset, length, timeout=timeout, offline=offline, on_length=on_length)

    # --- pins ----------------------------------------------------------------------------

    async def pin_add(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        return await self.pins.add(cid, recursive, timeout=timeout)

    async def pin_rm(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        return await self.pins.rm(cid, recursive, timeout=timeout)

    async def pin_ls(
        self, cid: CID | str | None = None, *, type: str = "all", timeout: float | None = None
    ) -> dict[CID, str]:
        return await self.pins.ls(cid, type=type, timeout=timeout)

    # --- routing and swarm ---------------------------------------------------------------

    async def routing_provide(self, cid: CID | str, recursive: bool = False, *, timeout: float | None = None) -> int:
        return await self.routing.provide(cid, recursive, timeout=timeout)

    async def routing_findprovs(self, cid: CID | str, num: int = 20, *, timeout: float | None = None) -> list[PeerInfo]:
        return await self.routing.findprovs(cid, num, timeout=timeout)

    async def swarm_connect(self, addr: str, *, timeout: float | None = None) -> None:
        await self.swarm.connect(addr, timeout=timeout)

    async def swarm_peers(self, *, timeout: float | None = None) -> list[PeerInfo]:
        return await self.swarm.peers(timeout=timeout)

    # --- keys and IPNS -------------------------------------------------------------------

    async def key_import(self, name: str, pem: bytes, *, timeout: float | None = None) -> str:
        return await self.keys.import_pem(name, pem, timeout=timeout)

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
        return await self.names.publish(
            target, key, lifetime, ttl=ttl, allow_offline=allow_offline, resolve=resolve, timeout=timeout
        )


def _conforms(client: KuboClient) -> BlockStore:
    """Checked by mypy: the client is a BlockStore (the in-memory twin's check: node/adapters/ipfs/memory_blocks.py)."""
    return client
