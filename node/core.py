"""The one core API of a Cairn node. The CLI and the HTTP server only parse, call it, and render."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from multiformats import CID

from config import Settings
from node import __version__
from node.home import Home
from node.identity import Identity
from node.ipfs import KuboClient, KuboError, ManagedKubo, api_url_from_address, find_kubo_binary
from node.errors import InvalidInput
from node.model import Block, decode, decode_object, encode, holium_data, verify_block
from node.model.cid import cid_for

log = logging.getLogger("cairn.node")

_HOLIUM_IMPORTERS = {
    "json": holium_data.import_json,
    "csv": holium_data.import_csv,
    "cbor": holium_data.import_cbor,
    "bin": holium_data.import_bin,
}


class Node:
    """A running Cairn node: its identity, its Kubo (managed or external), and the operations on them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = Home(settings.home)
        self.identity: Identity | None = None
        self.kubo: KuboClient | None = None
        self.managed: ManagedKubo | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self.kubo_state = "down"
        self.started_at: float | None = None
        self.api_url: str | None = None  # set by the HTTP face once it listens

    # -- life cycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.home.init():
            log.info("initialised node home", extra={"home": str(self.home.path)})
        self.identity = self.home.identity()
        ipfs = self.settings.ipfs
        if ipfs.api:
            url = api_url_from_address(ipfs.api)
            self.kubo = KuboClient(url, timeout=ipfs.timeout)
            try:
                await self.kubo.version()  # fail now, clearly, if the external Kubo is unreachable
            except BaseException:
                await self.kubo.close()
                raise
            self.kubo_state = "up"
        else:
            self.managed = ManagedKubo(
                self.home.kubo_repo,
                find_kubo_binary(ipfs.binary or None),
                api_port=ipfs.api_port,
                gateway_port=ipfs.gateway_port,
                swarm_port=ipfs.swarm_port,
                bootstrap=list(ipfs.bootstrap),
                log_path=self.home.logs / "kubo.log",
            )
            url = await self.managed.start()
            self.kubo = KuboClient(url, timeout=ipfs.timeout)
            self.kubo_state = "up"
            self._supervisor = asyncio.create_task(self.managed.supervise(self._on_kubo_change))
        self.started_at = time.time()
        log.info("node started", extra={"peer_id": self.identity.peer_id, "kubo": url})

    def _on_kubo_change(self, state: str) -> None:
        self.kubo_state = state
        if state == "up" and self.managed is not None and self.kubo is not None:
            self.kubo.api_url = self.managed.api_url  # a restarted Kubo may listen on a new port
        log.warning("managed kubo is %s", state, extra={"kubo_state": state})

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            try:
                await self._supervisor
            except asyncio.CancelledError:
                pass
            self._supervisor = None
        if self.kubo is not None:
            await self.kubo.close()
        if self.managed is not None:
            await self.managed.stop()
        self.kubo_state = "down"
        log.info("node stopped")

    async def __aenter__(self) -> "Node":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- state ------------------------------------------------------------------------------

    def _kubo(self) -> KuboClient:
        if self.kubo is None:
            raise KuboError("the node has not started its Kubo")
        return self.kubo

    async def health(self) -> dict[str, Any]:
        kubo: dict[str, Any] = {"state": self.kubo_state, "managed": self.managed is not None}
        if self.managed is not None:
            kubo["restarts"] = self.managed.restarts
        if self.kubo_state == "up":
            try:
                await self._kubo().version(timeout=2.0)
            except KuboError as e:
                kubo["state"] = "down"
                kubo["error"] = e.message
        return {"ok": kubo["state"] == "up", "kubo": kubo}

    async def info(self) -> dict[str, Any]:
        assert self.identity is not None
        kubo: dict[str, Any] = {
            "managed": self.managed is not None,
            "state": self.kubo_state,
            "api": self.kubo.api_url if self.kubo else None,
        }
        if self.managed is not None:
            kubo["restarts"] = self.managed.restarts
            kubo["pid"] = self.managed.pid
        try:
            version = await self._kubo().version(timeout=5.0)
            ident = await self._kubo().id(timeout=5.0)
            kubo.update(version=version.version, peer_id=ident.id, swarm=list(ident.addresses))
        except KuboError as e:
            kubo["state"] = "down"
            kubo["error"] = e.message
        return {
            "version": __version__,
            "home": str(self.home.path),
            "api": self.api_url,
            "peer_id": self.identity.peer_id,
            "node_key": self.identity.node_key,
            # The libp2p host arrives with issue 5; until then the node listens on no p2p address.
            "p2p_addrs": [],
            "kubo": kubo,
            "uptime_s": round(time.time() - self.started_at, 3) if self.started_at else 0.0,
        }

    # -- objects ----------------------------------------------------------------------------

    async def put_block(self, block: Block, *, pin: bool = False) -> CID:
        codec = block.cid.codec.name
        return await self._kubo().block_put(block.data, codec=codec, pin=pin)

    async def dag_put(self, obj: Any, *, pin: bool = True) -> CID:
        """Validate an IPLD value (Holium/Cairn kinds by their ``typedVersion``), store it as one
        DAG-CBOR block and pin it. The CID is computed here first; Kubo must agree (DESIGN.md)."""
        decode_object(obj)
        data = encode(obj)
        block = Block(cid_for(data, "dag-cbor"), data)
        await self.put_block(block, pin=pin)
        return block.cid

    async def dag_get(self, cid: CID) -> Any:
        data = await self._kubo().block_get(cid)
        verify_block(cid, data)
        return decode(data, cid.codec.code) if cid.codec.name in ("dag-cbor", "cbor") else data

    async def holium_import(self, data: bytes, fmt: str) -> tuple[CID, int]:
        """Import JSON/CSV/CBOR as a Holium data tree; store every block, pin the root recursively."""
        importer = _HOLIUM_IMPORTERS.get(fmt)
        if importer is None:
            raise InvalidInput(f"unknown data format {fmt!r}: use {', '.join(_HOLIUM_IMPORTERS)}")
        root, blocks = importer(data)
        for block in blocks:  # children come before parents, so a crash never leaves a dangling parent
            await self.put_block(block)
        await self._kubo().pin_add(root, recursive=True)
        return root, len(blocks)

