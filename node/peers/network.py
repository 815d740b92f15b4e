"""The node on the peer-to-peer network: announcements (gossipsub), lookups, catch-up, over the p2p host.

Protocols (docs/p2p.md):
- gossip topic ``/cairn/executions/1``: one signed ``an_0`` block per message;
- ``/cairn/lookup/1.0.0``: request = the binary invocation CID, answer = DAG-CBOR list of ``an_0`` blocks;
- ``/cairn/catchup/1.0.0``: sent to a peer when it connects: DAG-CBOR list of ``an_0`` blocks for results
  we already held, since gossip never replays old messages.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from config import PeerSettings
from node.errors import ClaimRefused, ConfigError, EncodingError, InvalidCID, KuboError
from node.identity import Identity
from node.index import ExecutionRow, Index
from node.ipfs import KuboClient
from node.model import CID, cid_str, decode, encode, parse_cid
from node.resolve import Resolver
from node.resolve.claims import MAX_PROVIDERS, check_announcement
from node.resolve.resolver import VERIFIED_LABELS
from p2p.host import P2PError, P2PHost

log = logging.getLogger("cairn.network")

TOPIC = "/cairn/executions/1"
LOOKUP = "/cairn/lookup/1.0.0"
CATCHUP = "/cairn/catchup/1.0.0"
CATCHUP_LIMIT = 1000


def _ours(row: ExecutionRow) -> bool:
    """Only what was computed here (or recomputed here and agreed) goes out under our signature: signing a
    peer's unchecked answer would launder it into a trusted one for whoever trusts us (docs/peers.md)."""
    return row.trust in VERIFIED_LABELS


class Network:
    def __init__(
        self,
        settings: PeerSettings,
        identity: Identity,
        resolver: Resolver,
        index: Index,
        kubo: KuboClient,
        peerstore: Any,
    ) -> None:
        self.settings, self.identity, self.resolver, self.index, self.kubo = settings, identity, resolver, index, kubo
        try:
            self.host = P2PHost(
                identity.seed,
                settings.listen,
                peerstore_path=peerstore,
                bootstrap=settings.bootstrap,
                mdns=settings.mdns,
            )
        except P2PError as e:  # a bad peers.listen / peers.bootstrap multiaddr: the node's own config
            raise ConfigError(f"p2p host: {e}") from None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.received = 0
        self.refused = 0

    async def start(self) -> None:
        self.host.subscribe(TOPIC, self._on_gossip)
        self.host.set_handler(LOOKUP, self._on_lookup)
        self.host.set_handler(CATCHUP, self._on_catchup)
        self.host.on_peer_connected(self._on_connected)
        try:
            await self.host.start()
        except P2PError as e:  # cannot listen where peers.listen says: the node's own config
            raise ConfigError(f"p2p host: {e}") from None
        self.resolver.lookup = self.lookup
        self.resolver.on_published = self.announce

    async def stop(self) -> None:
        self.resolver.lookup = None
        self.resolver.on_published = None
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.host.stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- outgoing ---------------------------------------------------------------------------------

    async def _providers(self) -> list[str]:
        """Where our Kubo can be reached: what other nodes `swarm connect` to before fetching by CID."""
        try:
            ident = await self.kubo.id(timeout=5.0)
        except KuboError as e:  # announce anyway: peers that already reach our Kubo still fetch
            log.info("announcing without providers: %s", e.message)
            return []
        addrs = [a if "/p2p/" in a else f"{a}/p2p/{ident.id}" for a in ident.addresses]
        return addrs[:MAX_PROVIDERS]  # peers refuse announcements naming more (node/resolve/claims.py)

    async def _announcement(self, row: ExecutionRow) -> bytes:
        return self.resolver.announcement(row, await self._providers()).block().data

    async def announce(self, row: ExecutionRow) -> None:
        try:
            await self.host.publish(TOPIC, await self._announcement(row))
        except P2PError as e:
            log.warning("announcement not sent", extra={"invocation": row.invocation, "error": str(e)})

    async def lookup(self, invocation: CID) -> dict[str, list[bytes]]:
        """Ask every connected peer at once; what arrived by the deadline."""
        if not self.host.connected_peers():
            return {}
        try:
            answers = await self.host.ask_all(LOOKUP, bytes(invocation), self.settings.lookup_timeout)
        except P2PError as e:  # a lookup is best effort: without answers the node computes (docs/peers.md)
            log.warning("lookup failed", extra={"invocation": cid_str(invocation), "error": str(e)})
            return {}
        out: dict[str, list[bytes]] = {}
        for peer, answer in answers.items():
            if isinstance(answer, Exception):
                continue
            try:
                items = decode(answer)
            except EncodingError as e:
                log.warning("unreadable lookup answer", extra={"peer": peer, "error": e.message})
                continue
            if isinstance(items, list):
                out[peer] = [bytes(i) for i in items if isinstance(i, bytes)]
        return out

    # -- incoming ---------------------------------------------------------------------------------

    def _record(self, peer: str, data: bytes) -> None:
        self.received += 1
        try:
            an = check_announcement(data)
        except ClaimRefused as e:
            self.refused += 1
            log.warning("announcement refused", extra={"peer": peer, "reason": e.message})
            self.index.log_refusal(peer, e.message)
            return
        self.resolver.record_claim(peer, an, data)

    async def _on_gossip(self, sender: str, data: bytes) -> None:
        self._record(sender, data)

    async def _on_lookup(self, peer: str, request: bytes) -> bytes:
        try:
            invocation = parse_cid(request)
        except InvalidCID as e:  # a malformed request gets an empty answer, as for an unknown invocation
            log.debug("unreadable lookup request", extra={"peer": peer, "error": e.message})
            return encode([])
        row = self.index.execution(cid_str(invocation))
        return encode([await self._announcement(row)] if row and _ours(row) else [])

    async def _on_catchup(self, peer: str, request: bytes) -> bytes:
        try:
            items = decode(request)
        except EncodingError as e:
            log.warning("unreadable catch-up", extra={"peer": peer, "error": e.message})
            return b""
        for data in items if isinstance(items, list) else []:
            if isinstance(data, bytes):
                self._record(peer, data)
        return b""

    def _on_connected(self, peer: str) -> None:
        self._spawn(self._catch_up(peer))

    async def _catch_up(self, peer: str) -> None:
        rows = [r for r in self.index.executions(limit=CATCHUP_LIMIT) if _ours(r)]
        if not rows:
            return
        items = [await self._announcement(r) for r in rows]
        try:
            await self.host.send_direct(peer, CATCHUP, encode(items), timeout=10.0)
        except P2PError as e:
            log.info("catch-up not delivered", extra={"peer": peer, "error": str(e)})
