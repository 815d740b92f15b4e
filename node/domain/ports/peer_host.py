"""The peer network port: the transport under ``node.services.peers.network`` (gossip, request/response, peers).

``p2p.host.P2PHost`` is the real one (py-libp2p: TCP, Noise, yamux, gossipsub), ``p2p.memory.MemoryHost`` its
in-memory twin: hosts that share one ``p2p.memory.MemoryNetwork`` connect, gossip and ask each other in one
process (what a simulation of many nodes runs on). ``tests/contract/test_peer_host.py`` runs one suite against
both. Failures are ``p2p.errors.P2PError``s: ``P2PTimeout`` past a deadline, ``P2PBadInput`` for the caller's own
mistake (a malformed address, this host's own); a peer without a handler for a protocol fails the request with
"the peer does not speak that protocol". Callbacks and handlers run on the event loop that started the host.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypedDict

#: ``(origin, forwarder, data)``: ``forwarder`` is the peer whose connection delivered the message.
RelayedGossipHandler = Callable[[str, str, bytes], "Awaitable[None] | None"]
RequestHandler = Callable[[str, bytes], Awaitable[bytes]]
PeerCallback = Callable[[str], "Awaitable[None] | None"]


class PeerEntry(TypedDict):
    """A known peer as the host lists it."""

    peer_id: str
    addrs: list[str]
    connected: bool
    last_seen: float | None  # unix time, None: never connected
    source: str  # dialed, inbound, bootstrap, mdns, remembered


class PeerHost(Protocol):
    peer_id: str  # 12D3KooW…

    @property
    def inbound_refused(self) -> int:
        """Inbound gossip frames refused (malformed or oversized)."""

    @property
    def running(self) -> bool: ...

    async def start(self) -> None:
        """Listen; once only (a second start is a ``P2PError``)."""

    async def stop(self) -> None:
        """Close every connection; idempotent."""

    async def accepting(self) -> str | None:
        """None while a new inbound connection would be accepted, else why not."""

    def addrs(self) -> list[str]:
        """Full multiaddrs (with ``/p2p/<id>``) other hosts can dial; empty before start."""

    def peers(self) -> list[PeerEntry]:
        """Known peers by id: ``peer_id``, ``addrs``, ``connected``, ``last_seen``, ``source``."""

    def connected_peers(self) -> list[str]:
        """Sorted."""

    def on_peer_connected(self, callback: PeerCallback) -> None:
        """``callback(peer_id)`` at every new connection, on either side."""

    async def connect(self, addr: str, timeout: float | None = None) -> str:
        """Dial ``…/p2p/<peer id>``: the peer id."""

    async def forget(self, peer_id: str, *, disconnect: bool = True) -> None: ...

    def subscribe_relayed(self, topic: str, handler: RelayedGossipHandler) -> None:
        """Each message on ``topic`` from another host, once, in arrival order."""

    async def publish(self, topic: str, data: bytes) -> None:
        """Gossip ``data`` to the hosts subscribed to ``topic``, relayed by subscribed hosts; never to itself."""

    def set_handler(self, protocol: str, handler: RequestHandler) -> None: ...

    def reuse_streams(self, *protocols: str) -> None:
        """Requests on ``protocols`` are idempotent: one stream per peer may carry them in turn."""

    async def request(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> bytes: ...
    async def send_direct(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> None: ...

    async def ask_all(
        self, protocol: str, data: bytes, timeout: float, peers: Iterable[str] | None = None
    ) -> dict[str, bytes | Exception]:
        """Every connected peer (or ``peers``) at once, by the deadline: each answer, or the error it failed with
        (``P2PTimeout`` for no answer in time)."""
