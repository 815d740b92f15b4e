"""The p2p host's in-memory twin (``node.domain.ports.peer_host.PeerHost``): many hosts in one process, no sockets.

Hosts that share a ``MemoryNetwork`` dial each other by the addresses they list (``/ip4/127.0.0.1/tcp/<n>/p2p/<id>``,
made up: nothing listens), ask each other over request/response protocols and gossip. As ``P2PHost`` does: the peer
id is libp2p's for the host's ed25519 seed; a new connection calls ``on_peer_connected`` on both sides; a request
runs the other host's handler with the asker's peer id, and fails as libp2p's does (no handler: "the peer does not
speak that protocol"; a handler that raises: the stream is reset; past the timeout: ``P2PTimeout``); frames and
gossip messages have the same size caps; a topic's messages reach each subscribed host once, in order, relayed by
subscribed hosts (``forwarder``: the host that passed it on), never back to their origin. The peer table is
``p2p.peers.PeerTable``, kept in memory. What the twin leaves out: gossipsub's mesh and scoring (every subscribed
neighbour relays), stream reuse (every request is answered alike), transport limits and budgets
(``inbound_refused`` stays 0), mDNS and bootstrap dials. ``tests/contract/test_peer_host.py`` runs one suite
against the twin and two real hosts.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.domain.ports.peer_host import PeerEntry
from node.support.errors import one_line
from p2p.errors import P2PBadInput, P2PError, P2PTimeout
from p2p.peers import PeerTable

log = logging.getLogger("cairn.p2p.memory")

MAX_PUBLISH_BYTES = 1_000_000  # p2p.host.MAX_PUBLISH_BYTES
MAX_FRAME_BYTES = 4 * 1024 * 1024  # p2p.host.MAX_FRAME_BYTES
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
# The callbacks' shapes, as p2p.host has them (importing it would load libp2p).
RelayedGossipHandler = Callable[[str, str, bytes], "Awaitable[None] | None"]
RequestHandler = Callable[[str, bytes], Awaitable[bytes]]
PeerCallback = Callable[[str], "Awaitable[None] | None"]


def _base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = _B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def peer_id_of(seed: bytes) -> str:
    """libp2p's peer id of an ed25519 seed: the identity multihash of the protobuf public key, base58btc."""
    public = Ed25519PrivateKey.from_private_bytes(bytes(seed)).public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    proto = b"\x08\x01\x12\x20" + raw
    return _base58(bytes([0x00, len(proto)]) + proto)


class MemoryNetwork:
    """What twin hosts share: who listens where, and the gossip messages seen (so each is delivered once)."""

    def __init__(self) -> None:
        self.hosts: dict[str, MemoryHost] = {}
        self._ports = itertools.count(4001)
        self._messages = itertools.count(1)

    def listen(self, host: MemoryHost) -> str:
        self.hosts[host.peer_id] = host
        return f"/ip4/127.0.0.1/tcp/{next(self._ports)}/p2p/{host.peer_id}"

    def message_id(self) -> int:
        return next(self._messages)


class MemoryHost:
    def __init__(self, network: MemoryNetwork, seed: bytes) -> None:
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
            raise P2PError("the host identity must be a 32-byte ed25519 private seed")
        self.network = network
        self.peer_id = peer_id_of(bytes(seed))
        self.inbound_refused = 0
        self._table = PeerTable(self.peer_id, None)
        self._addrs: list[str] = []
        self._started = self._stopped = False
        self._topics: dict[str, list[RelayedGossipHandler]] = {}
        self._queues: dict[str, asyncio.Queue[tuple[int, str, str, bytes]]] = {}
        self._seen: set[int] = set()
        self._handlers: dict[str, RequestHandler] = {}
        self._on_connected: list[PeerCallback] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle

    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    async def start(self) -> None:
        if self._started or self._stopped:
            raise P2PError("a P2PHost can be started only once")
        self._started = True
        self._addrs = [self.network.listen(self)]
        for topic in self._topics:
            self._worker(topic)

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.network.hosts.get(self.peer_id) is self:
            del self.network.hosts[self.peer_id]
        for peer in self._table.connected():
            self._drop(peer)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def accepting(self) -> str | None:
        return None if self.running else "the p2p host is not running"

    # -- peers

    def addrs(self) -> list[str]:
        return list(self._addrs)

    def peers(self) -> list[PeerEntry]:
        return self._table.snapshot()

    def connected_peers(self) -> list[str]:
        return self._table.connected()

    def on_peer_connected(self, callback: PeerCallback) -> None:
        self._on_connected.append(callback)

    async def connect(self, addr: str, timeout: float | None = None) -> str:
        if "/p2p/" not in addr or not addr.startswith("/"):
            raise P2PBadInput(f"not a peer address (…/p2p/<peer id>): {addr!r}")
        pid = addr.rsplit("/p2p/", 1)[1]
        if pid == self.peer_id:
            raise P2PBadInput("cannot connect to this node itself")
        other = self.network.hosts.get(pid)
        if other is None or not other.running or addr not in other._addrs:
            raise P2PError(f"cannot reach {pid} at {addr}: connection refused")
        self._table.remember(pid, [addr.rsplit("/p2p/", 1)[0]], "dialed")
        self._link(other, inbound=False)
        other._link(self, inbound=True)
        return pid

    def _link(self, other: MemoryHost, inbound: bool) -> None:
        self._table.set_connected(other.peer_id, True, source="inbound" if inbound else "dialed")
        for callback in self._on_connected:
            self._spawn(callback, other.peer_id)

    def _drop(self, peer: str) -> None:
        self._table.set_connected(peer, False, source="dialed")
        other = self.network.hosts.get(peer)
        if other is not None and other._table.is_connected(self.peer_id):
            other._table.set_connected(self.peer_id, False, source="dialed")

    async def disconnect(self, peer_id: str) -> None:
        self._drop(peer_id)

    async def forget(self, peer_id: str, *, disconnect: bool = True) -> None:
        self._table.forget(peer_id)
        if disconnect:
            self._drop(peer_id)

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            result = fn(*args)
        except Exception:
            log.exception("p2p callback %r failed", fn)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- gossip

    def subscribe_relayed(self, topic: str, handler: RelayedGossipHandler) -> None:
        self._topics.setdefault(topic, []).append(handler)
        if self.running:
            self._worker(topic)

    def subscribe(self, topic: str, handler: Callable[[str, bytes], Awaitable[None] | None]) -> None:
        self.subscribe_relayed(topic, lambda origin, _forwarder, data: handler(origin, data))

    def topic_peers(self, topic: str) -> list[str]:
        return sorted(p for p in self.connected_peers() if topic in self._peer_topics(p))

    def _peer_topics(self, peer: str) -> dict[str, list[RelayedGossipHandler]]:
        other = self.network.hosts.get(peer)
        return other._topics if other is not None and other.running else {}

    async def publish(self, topic: str, data: bytes) -> None:
        data = bytes(data)
        if len(data) > MAX_PUBLISH_BYTES:
            raise P2PError(f"gossip message of {len(data)} bytes is over {MAX_PUBLISH_BYTES}: announce CIDs, not data")
        self._relay(self.network.message_id(), topic, self.peer_id, data)

    def _relay(self, message: int, topic: str, origin: str, data: bytes) -> None:
        """Pass a message to every subscribed neighbour that has not seen it (they relay it on in turn)."""
        self._seen.add(message)
        for peer in self.connected_peers():
            other = self.network.hosts.get(peer)
            if other is None or topic not in other._topics or message in other._seen or peer == origin:
                continue
            other._seen.add(message)
            other._queues[topic].put_nowait((message, origin, self.peer_id, data))

    def _worker(self, topic: str) -> None:
        if topic in self._queues:
            return
        queue: asyncio.Queue[tuple[int, str, str, bytes]] = asyncio.Queue()
        self._queues[topic] = queue

        async def deliver() -> None:
            while True:
                message, origin, forwarder, data = await queue.get()
                self._table.touch(forwarder)
                self._relay(message, topic, origin, data)
                for handler in list(self._topics.get(topic, ())):
                    try:
                        result = handler(origin, forwarder, data)
                        if inspect.isawaitable(result):
                            await result
                    except Exception:
                        log.exception("gossip handler for %s failed", topic)

        task = asyncio.ensure_future(deliver())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- request / response

    def set_handler(self, protocol: str, handler: RequestHandler) -> None:
        self._handlers[protocol] = handler

    def reuse_streams(self, *protocols: str) -> None:
        """Nothing to keep: a request to a twin costs no stream."""

    async def request(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> bytes:
        data = bytes(data)
        if len(data) > MAX_FRAME_BYTES:
            raise P2PError(f"request of {len(data)} bytes is over {MAX_FRAME_BYTES}")
        what = f"{protocol} to {peer_id}"
        other = self.network.hosts.get(peer_id)
        if other is None or not other.running or not self._table.is_connected(peer_id):
            raise P2PError(f"{what}: the peer is not connected")
        handler = other._handlers.get(protocol)
        if handler is None:
            raise P2PError(f"{what}: the peer does not speak that protocol")
        try:
            async with asyncio.timeout(timeout):
                response = await handler(self.peer_id, data)
        except TimeoutError:
            raise P2PTimeout(f"{what}: no answer within {timeout:g} s") from None
        except Exception as e:  # noqa: BLE001  the asker of a real host sees a reset stream, no more
            log.debug("%s request from %s failed: %s", protocol, self.peer_id, one_line(e))
            raise P2PError(f"{what}: the stream was reset") from None
        if not isinstance(response, (bytes, bytearray, memoryview)):
            raise P2PError(f"{what}: the stream was reset")
        other._table.touch(self.peer_id)
        return bytes(response)

    async def send_direct(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> None:
        await self.request(peer_id, protocol, data, timeout)

    async def ask_all(
        self, protocol: str, data: bytes, timeout: float, peers: Iterable[str] | None = None
    ) -> dict[str, bytes | Exception]:
        asked = peers if peers is not None else self.connected_peers()
        targets = [t for t in dict.fromkeys(asked) if t != self.peer_id]
        results: dict[str, bytes | Exception] = {}

        async def one(t: str) -> None:
            try:
                results[t] = await self.request(t, protocol, data, timeout + 1.0)
            except P2PError as e:
                results[t] = e

        tasks = [asyncio.ensure_future(one(t)) for t in targets]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for t in targets:
            results.setdefault(t, P2PTimeout(f"{protocol} to {t}: no answer within {timeout:g} s"))
        return results
