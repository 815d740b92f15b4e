"""The libp2p host of a Cairn node, behind a small asyncio facade.

:class:`P2PHost` runs a py-libp2p host (TCP, Noise, yamux, identify, ping, gossipsub, Cairn's
request/response protocols, optional mDNS) in a dedicated trio thread (:mod:`p2p.bridge`)
and exposes it to the asyncio node as plain coroutines and callbacks. Callbacks (gossip
handlers, request handlers, peer hooks) run on the asyncio loop that called :meth:`start`.

The facade owns the lifecycle (build, serve, stop) and hands each job to its module: the libp2p host itself
(:mod:`p2p.stack`), gossip (:mod:`p2p.gossip`), request/response (:mod:`p2p.requests`), dials and connection
events (:mod:`p2p.connections`), the peer table (:mod:`p2p.peers`), the accept probe (:mod:`p2p.probe`).

This package never imports the node: it deals in bytes, peer-id strings and callbacks.
See ``docs/p2p.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import trio

from p2p.addrs import reachability_order
from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p.crypto.ed25519 import create_new_key_pair  # noqa: E402
from libp2p.peer.id import ID  # noqa: E402
from libp2p.peer.peerinfo import PeerInfo  # noqa: E402
from libp2p.tools.anyio_service import background_trio_service  # noqa: E402

from p2p.bridge import TrioThread  # noqa: E402
from p2p.callbacks import GossipHandler, LoopTasks, PeerCallback, RelayedGossipHandler, RequestHandler  # noqa: E402
from p2p.connections import Connections  # noqa: E402
from p2p.errors import P2PBadInput, P2PError, P2PTimeout  # noqa: E402
from p2p.gossip import MAX_PUBLISH_BYTES, Gossip, new_pubsub  # noqa: E402
from p2p.guard import FrameBudget, HostLimits, StreamGuard  # noqa: E402
from p2p.multiaddrs import check_ports_free, dialable, parse_listen_addr, parse_peer_addr  # noqa: E402
from p2p.peers import PeerEntry, PeerTable, strip_p2p  # noqa: E402
from p2p.probe import AcceptProbe, probe_target  # noqa: E402
from p2p.requests import Requests  # noqa: E402
from p2p.stack import build_host  # noqa: E402
from p2p.streams import MAX_FRAME_BYTES, close_connections  # noqa: E402

__all__ = ["MAX_FRAME_BYTES", "MAX_PUBLISH_BYTES", "HostLimits", "P2PBadInput", "P2PError", "P2PHost", "P2PTimeout"]

log = logging.getLogger("cairn.p2p")

DEFAULT_LISTEN = ("/ip4/127.0.0.1/tcp/0",)


class P2PHost:
    """An asyncio facade over a py-libp2p host running in its own trio thread. Single use:
    start once, stop once (a restarted node builds a new one)."""

    def __init__(
        self,
        seed: bytes,
        listen: Iterable[str] = DEFAULT_LISTEN,
        *,
        peerstore_path: Path | str | None = None,
        bootstrap: Iterable[str] = (),
        mdns: bool = False,
        heartbeat_interval: float = 1.0,
        max_messages_per_topic_per_second: float = 100.0,
        dial_timeout: float = 5.0,
        handler_timeout: float = 30.0,
        redial_interval: float = 30.0,
        forget_after: float = 30 * 86400.0,
        announce: Iterable[str] = (),
        limits: HostLimits | None = None,
    ) -> None:
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
            raise P2PError("the host identity must be a 32-byte ed25519 private seed")
        self._key_pair = create_new_key_pair(bytes(seed))
        self._id = ID.from_pubkey(self._key_pair.public_key)
        #: ``12D3KooW…``: the same id the node derives from its key (``node.adapters.identity``).
        self.peer_id: str = self._id.to_base58()
        self._listen = list(listen) or list(DEFAULT_LISTEN)
        self._listen_ma = [parse_listen_addr(a) for a in self._listen]
        self._announce = [strip_p2p(a) for a in announce]  # what others are told to dial, when not the listen addrs
        bootstrap_peers: list[PeerInfo] = [parse_peer_addr(a) for a in bootstrap]
        self._mdns = mdns
        self._heartbeat = max(0.1, float(heartbeat_interval))
        self._max_rate = max_messages_per_topic_per_second
        self._dial_timeout = dial_timeout
        self.limits = limits or HostLimits()
        self.streams = StreamGuard(self.limits)  # trio side: inbound stream budgets, refusals counted
        self.frames = FrameBudget(self.limits)  # trio side: request frames being received
        self._bridge = TrioThread(f"cairn-p2p-{self.peer_id[-6:]}")
        self._table = _load_table(self.peer_id, peerstore_path, forget_after, bootstrap_peers)
        self._tasks = LoopTasks()  # asyncio side
        self._gossip = Gossip(self._bridge, self._table, self.frames, self.peer_id, self._tasks)
        self._requests = Requests(self._bridge, self._table, self.frames, self.peer_id, handler_timeout)
        self._kept = self._requests.kept  # (peer id, protocol) -> an idle request stream kept open (trio side)
        self._connections = Connections(
            self._bridge,
            self._table,
            self._id,
            bootstrap_peers,
            self._tasks,
            self._kept,
            dial_timeout=dial_timeout,
            redial_interval=redial_interval,
        )
        self._addrs: list[str] = []
        self._stopped = False
        self._host: Any = None  # trio side: the libp2p host, set in the thread
        self._probe = AcceptProbe()

    @property
    def inbound_refused(self) -> int:
        """Inbound gossip RPC frames refused (malformed, cut short or oversized): each resets that peer's stream."""
        return self._gossip.refused

    # ================================================================ lifecycle

    async def start(self) -> None:
        """Start the host in its thread; return once it listens (:class:`P2PError` if it
        cannot). Remembered and bootstrap peers are then dialed in the background."""
        if self._bridge.started or self._stopped:
            raise P2PError("a P2PHost can be started only once")
        check_ports_free(self._listen)
        self._gossip.start_workers()
        try:
            await self._bridge.start(self._service)
        except BaseException:
            await self.stop()
            raise
        log.info("p2p host %s listening on %s", self.peer_id, ", ".join(self._addrs))

    async def stop(self) -> None:
        """Close connections, stop the thread and join it. Idempotent, fast (~10 ms), safe in a
        ``finally`` during cancellation or after SIGINT."""
        if self._stopped:
            return
        self._stopped = True
        self._tasks.cancel()
        await self._bridge.stop()
        await self._tasks.wait()

    @property
    def running(self) -> bool:
        return self._bridge.running

    async def _service(self) -> None:
        """The trio side: build, run, and tear down the libp2p host."""
        host = build_host(
            self._key_pair,
            self._listen_ma,
            mdns=self._mdns,
            dial_timeout=self._dial_timeout,
            limits=self.limits,
            streams=self.streams,
        )
        pubsub, gossipsub = new_pubsub(host, self._heartbeat, self._max_rate)
        self._gossip.attach(host, pubsub, gossipsub)
        self._host = host
        self._connections.attach(host)
        self._requests.attach(host)
        try:
            async with host.run(listen_addrs=self._listen_ma):
                async with background_trio_service(pubsub), background_trio_service(gossipsub):
                    await pubsub.wait_until_ready()
                    await self._serve(host)
        finally:
            self._connections.stop_mdns_dialer()
            pubsub.seen_messages.stop()  # a cleanup thread libp2p starts and never stops
            self._table.all_disconnected()
            self._table.save()

    async def _serve(self, host: Any) -> None:
        """Listening and ready: subscribe, dial, maintain, until stop() is asked; then close connections."""
        # Dialing is ours (remembered, bootstrap, mDNS, explicit): no auto-connector
        # re-dialing every peer the peerstore ever heard of.
        await host.get_network().auto_connector.stop()
        addrs = dialable(host.get_addrs())
        if not addrs:
            raise P2PError(f"cannot listen on {', '.join(self._listen)}")
        self._probe.target = probe_target(addrs)
        addrs = self._announce or reachability_order(addrs)
        self._addrs = [f"{a}/p2p/{self.peer_id}" for a in addrs]
        async with trio.open_nursery() as nursery:
            for topic in self._gossip.topics():
                nursery.start_soon(self._gossip.trio_subscribe, topic)
            if self._mdns:
                self._connections.start_mdns_dialer()
            nursery.start_soon(self._connections.initial_dials)
            nursery.start_soon(self._connections.maintenance)
            self._bridge.ready()
            await self._bridge.wait_stopping()
            await close_connections(host)
            nursery.cancel_scope.cancel()

    async def accepting(self) -> str | None:
        """None if the host accepts a new inbound connection now, else why not (one line). Measured, not assumed:
        a TCP connection to one of our own listen addresses must get the libp2p greeting (multistream-select's
        header) within PROBE_TIMEOUT s; a host out of inbound slots closes it at once, a stuck thread says nothing.
        One probe at a time, its answer kept PROBE_TTL s (``/healthz`` may be polled often)."""
        if not self.running:
            return "the p2p host is not running"
        return await self._probe.run()

    # ================================================================ peers

    def addrs(self) -> list[str]:
        """Full multiaddrs (with ``/p2p/<id>``) other peers can dial; empty before start."""
        return list(self._addrs)

    def peers(self) -> list[PeerEntry]:
        """Known peers: ``peer_id``, ``addrs``, ``connected``, ``last_seen`` (unix time or
        None), ``source`` (dialed, inbound, bootstrap, mdns, remembered)."""
        return self._table.snapshot()

    def connected_peers(self) -> list[str]:
        return self._table.connected()

    def on_peer_connected(self, callback: PeerCallback) -> None:
        """Call ``callback(peer_id)`` on the asyncio loop when a new connection to a peer opens
        (from none, or beside an old one that has not closed yet: the peer restarted). Gossipsub
        does not replay old messages: use this to send a new peer what it missed (:meth:`send_direct`)."""
        self._connections.on_peer_connected(callback)

    async def connect(self, addr: str, timeout: float | None = None) -> str:
        """Dial a full multiaddr (``…/p2p/<peer id>``) and return the peer id. The address is
        remembered. Raises :class:`P2PBadInput` for a bad address, :class:`P2PError` (one line) for an
        unreachable peer, :class:`P2PTimeout` past ``timeout`` (default twice the dial timeout)."""
        return await self._connections.connect(addr, timeout)

    async def disconnect(self, peer_id: str) -> None:
        await self._connections.disconnect(peer_id)

    async def forget(self, peer_id: str, *, disconnect: bool = True) -> None:
        """Drop a peer from the peer table (``peers.json``): it is not re-dialled at the next start, nor listed
        or asked; and disconnect it unless ``disconnect`` is False (a peer that dialled us may stay: it can
        still gossip). For a peer that is not what we wanted (a plain Kubo node, say)."""
        await self._connections.forget(peer_id, disconnect=disconnect)

    async def ping(self, peer_id: str, timeout: float = 10.0) -> float:
        """Round trip to a peer over ``/ipfs/ping/1.0.0``, in milliseconds."""
        return await self._connections.ping(peer_id, timeout)

    # ================================================================ gossip

    def subscribe(self, topic: str, handler: GossipHandler) -> None:
        """Call ``handler(origin_peer_id, data)`` on the asyncio loop for each message on ``topic`` from another
        peer. ``origin_peer_id`` is the message's origin, whose signature gossipsub checked (strict signing): any
        sender can mint one per message, so it is no key for limits (:meth:`subscribe_relayed`). Messages of a
        topic are handled one at a time, in arrival order. Before or after :meth:`start`."""
        self.subscribe_relayed(topic, lambda origin, _forwarder, data: handler(origin, data))

    def subscribe_relayed(self, topic: str, handler: RelayedGossipHandler) -> None:
        """As :meth:`subscribe`, calling ``handler(origin, forwarder, data)``: ``forwarder`` is the peer whose
        connection (Noise-authenticated) delivered the message to us, the origin itself or a relay: what a
        sender must pay a connection for, so what limits per sender are keyed on."""
        self._gossip.subscribe_relayed(topic, handler)

    async def publish(self, topic: str, data: bytes) -> None:
        """Gossip ``data`` (at most :data:`MAX_PUBLISH_BYTES`) on ``topic``, signed with the
        node key. Returns once gossipsub took it; delivery is best effort, and peers that
        join later never see it."""
        await self._gossip.publish(topic, data)

    def topic_peers(self, topic: str) -> list[str]:
        """Peers whose subscription to ``topic`` reached us."""
        return self._gossip.topic_peers(topic)

    async def wait_for_topic_peers(self, topic: str, count: int = 1, timeout: float = 10.0) -> list[str]:
        """Wait until at least ``count`` peers subscribed to ``topic`` (else P2PTimeout)."""
        return await self._gossip.wait_for_topic_peers(topic, count, timeout)

    # ================================================================ request / response

    def set_handler(self, protocol: str, handler: RequestHandler) -> None:
        """Answer requests on ``protocol``: ``await handler(peer_id, request) -> response``
        runs on the asyncio loop; ``peer_id`` is the Noise-authenticated remote. An exception
        (or taking over ``handler_timeout``) resets the stream: the asker gets an error.
        Before or after :meth:`start`."""
        self._requests.set_handler(protocol, handler)

    def reuse_streams(self, *protocols: str) -> None:
        """Keep one stream per peer open for requests on ``protocols`` and send the next request on it: a new
        stream costs a multistream-select negotiation each time (4-7 ms, ../shared/NOTES.md), a kept one a
        round trip. The answering side reads requests on a stream in turn (``p2p.requests``). One request
        at a time on a kept stream (a concurrent one opens its own); a kept stream that fails is dropped and
        the request sent again once on a new stream, so these protocols' requests must be idempotent."""
        self._requests.reuse_streams(protocols)

    async def request(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> bytes:
        """Send one request frame on a new stream (or a kept one: ``reuse_streams``) and return the response frame.
        :class:`P2PTimeout` past ``timeout`` seconds, :class:`P2PError` on any failure."""
        return await self._requests.request(peer_id, protocol, data, timeout)

    async def send_direct(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> None:
        """A request whose answer is ignored (the receiving handler may return ``b""``)."""
        await self.request(peer_id, protocol, data, timeout)

    async def ask_all(
        self, protocol: str, data: bytes, timeout: float, peers: Iterable[str] | None = None
    ) -> dict[str, bytes | Exception]:
        """Ask every connected peer (or ``peers``) at once. Returns by the deadline, with each
        peer's answer or the exception it failed with (:class:`P2PTimeout` if it had not
        answered in time)."""
        asked = peers if peers is not None else self.connected_peers()
        return await self._requests.ask_all(protocol, data, timeout, asked)


def _load_table(
    self_id: str, peerstore_path: Path | str | None, forget_after: float, bootstrap: list[PeerInfo]
) -> PeerTable:
    table = PeerTable(self_id, Path(peerstore_path) if peerstore_path is not None else None, forget_after)
    table.load()
    for info in bootstrap:
        table.remember(info.peer_id.to_base58(), [str(a) for a in info.addrs], "bootstrap")
    return table
