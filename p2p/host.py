"""The libp2p host of a Cairn node, behind a small asyncio facade.

:class:`P2PHost` runs a py-libp2p host (TCP, Noise, yamux, identify, ping, gossipsub, Cairn's
request/response protocols, optional mDNS) in a dedicated trio thread (:mod:`p2p.bridge`)
and exposes it to the asyncio node as plain coroutines and callbacks. Callbacks (gossip
handlers, request handlers, peer hooks) run on the asyncio loop that called :meth:`start`.

This package never imports the node: it deals in bytes, peer-id strings and callbacks.
See ``docs/p2p.md``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast

import multiaddr
import trio

from p2p.addrs import reachability_order
from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p import new_host  # noqa: E402
from libp2p.abc import INotifee  # noqa: E402
from libp2p.crypto.ed25519 import create_new_key_pair  # noqa: E402
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair  # noqa: E402
from libp2p.custom_types import TProtocol  # noqa: E402
from libp2p.discovery.events.peerDiscovery import peerDiscovery  # noqa: E402
from libp2p.host.ping import ID as PING_PROTOCOL_ID  # noqa: E402
from libp2p.io.utils import read_exactly  # noqa: E402
from libp2p.network.config import ConnectionConfig  # noqa: E402
from libp2p.peer.id import ID  # noqa: E402
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr  # noqa: E402
from libp2p.peer.peerstore import PeerStoreError  # noqa: E402
from libp2p.pubsub.gossipsub import PROTOCOL_ID as GOSSIPSUB_V10  # noqa: E402
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11 as GOSSIPSUB_V11  # noqa: E402
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V12 as GOSSIPSUB_V12  # noqa: E402
from libp2p.pubsub.gossipsub import GossipSub  # noqa: E402
from libp2p.pubsub.pubsub import Pubsub  # noqa: E402
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID  # noqa: E402
from libp2p.security.noise.transport import Transport as NoiseTransport  # noqa: E402
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID  # noqa: E402
from libp2p.stream_muxer.yamux.yamux import Yamux  # noqa: E402
from libp2p.tools.anyio_service import background_trio_service  # noqa: E402
from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited  # noqa: E402

from node.errors import one_line  # noqa: E402
from p2p.bridge import TrioThread  # noqa: E402
from p2p.errors import P2PBadInput, P2PError, P2PTimeout  # noqa: E402
from p2p.guard import (  # noqa: E402
    FrameBudget,
    HostLimits,
    MeteredStream,
    StreamGuard,
    install,
    read_request_frame,
)
from p2p.peers import PeerEntry, PeerTable, strip_p2p  # noqa: E402

__all__ = ["MAX_FRAME_BYTES", "MAX_PUBLISH_BYTES", "HostLimits", "P2PBadInput", "P2PError", "P2PHost", "P2PTimeout"]

log = logging.getLogger("cairn.p2p")

T = TypeVar("T")

DEFAULT_LISTEN = ("/ip4/127.0.0.1/tcp/0",)
#: Largest payload :meth:`P2PHost.publish` accepts. py-libp2p's gossipsub silently drops RPCs
#: over 1 MiB (signature, key, topic and framing ride along): announce CIDs, never data.
MAX_PUBLISH_BYTES = 1_000_000
#: Largest request or response frame of the request/response protocols.
MAX_FRAME_BYTES = 4 * 1024 * 1024
# A kept request stream (``reuse_streams``) idle longer than this is closed, not reused: under the answering
# side's idle limit (its ``handler_timeout``, 30 s by default), after which it closes the stream itself.
KEPT_IDLE = 20.0
#: Largest inbound gossipsub RPC frame: a longer length prefix resets the stream before its body is read.
MAX_INBOUND_RPC_BYTES = 1024 * 1024 + 64 * 1024
# libp2p keeps this many connection slots for its own dials: the swarm's inbound slots are its connection cap less
# this (py-libp2p's ConnectionConfig: max_connections - min_connections).
OUTBOUND_RESERVE = 50
#: What a libp2p host sends first on a new connection (multistream-select's header): the accept probe's answer.
GREETING = b"\x13/multistream/1.0.0\n"
# /healthz measures acceptance at most this often (seconds; one probe is a loopback connection), and waits this
# long for the greeting.
PROBE_TTL = 2.0
PROBE_TIMEOUT = 2.0

GossipHandler = Callable[[str, bytes], "Awaitable[None] | None"]
#: ``(origin, forwarder, data)``: ``forwarder`` is the peer whose connection the message came on.
RelayedGossipHandler = Callable[[str, str, bytes], "Awaitable[None] | None"]
#: Messages whose forwarder is remembered between pubsub's validation and their delivery (trio side).
FORWARDERS_MAX = 4096
RequestHandler = Callable[[str, bytes], Awaitable[bytes]]
PeerCallback = Callable[[str], "Awaitable[None] | None"]


class P2PHost:
    """An asyncio facade over a py-libp2p host running in its own trio thread. Single use:
    start once, stop once (a restarted node builds a new one)."""

    # Trio side, set by _build: pubsub message id -> the peer it came from, until delivered.
    _forwarders: dict[bytes, str]

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
        #: ``12D3KooW…``: the same id the node derives from its key (``node.identity``).
        self.peer_id: str = self._id.to_base58()
        self._listen = list(listen) or list(DEFAULT_LISTEN)
        self._listen_ma = [_parse_listen_addr(a) for a in self._listen]
        self._announce = [strip_p2p(a) for a in announce]  # what others are told to dial, when not the listen addrs
        self._bootstrap: list[PeerInfo] = [_parse_peer_addr(a) for a in bootstrap]
        self._mdns = mdns
        self._heartbeat = max(0.1, float(heartbeat_interval))
        self._max_rate = max_messages_per_topic_per_second
        self._dial_timeout = dial_timeout
        self._handler_timeout = handler_timeout
        self._redial_interval = redial_interval
        self.limits = limits or HostLimits()
        self.streams = StreamGuard(self.limits)  # trio side: inbound stream budgets, refusals counted
        self.frames = FrameBudget(self.limits)  # trio side: request frames being received
        self._bridge = TrioThread(f"cairn-p2p-{self.peer_id[-6:]}")
        self._table = self._load_table(peerstore_path, forget_after)

        # asyncio side
        self._topics: dict[str, list[RelayedGossipHandler]] = {}
        self._topic_queues: dict[str, asyncio.Queue[tuple[str, str, bytes]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handlers: dict[str, RequestHandler] = {}
        self._reusable: set[str] = set()  # request protocols whose streams are kept per peer (trio side reads it)
        self._kept: dict[tuple[str, str], _Kept] = {}  # (peer id, protocol) -> an idle stream kept open (trio side)
        self._on_connected: list[PeerCallback] = []
        self._addrs: list[str] = []
        self._stopped = False
        #: Inbound gossip RPC frames refused (malformed, cut short or oversized): each resets that peer's stream.
        self.inbound_refused = 0

        # trio side (set in the thread)
        self._host: Any = None
        self._pubsub: Pubsub | None = None
        self._gossipsub: GossipSub | None = None
        self._subscribed: set[str] = set()
        self._discovery_handler: Callable[[PeerInfo], None] | None = None
        self._probe = _AcceptProbe()

    def _load_table(self, peerstore_path: Path | str | None, forget_after: float) -> PeerTable:
        table = PeerTable(self.peer_id, Path(peerstore_path) if peerstore_path is not None else None, forget_after)
        table.load()
        for info in self._bootstrap:
            table.remember(info.peer_id.to_base58(), [str(a) for a in info.addrs], "bootstrap")
        return table

    # ================================================================ lifecycle

    async def start(self) -> None:
        """Start the host in its thread; return once it listens (:class:`P2PError` if it
        cannot). Remembered and bootstrap peers are then dialed in the background."""
        if self._bridge.started or self._stopped:
            raise P2PError("a P2PHost can be started only once")
        _check_ports_free(self._listen)
        for topic in self._topics:
            self._ensure_topic_worker(topic)
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
        for task in list(self._tasks):
            task.cancel()
        await self._bridge.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def running(self) -> bool:
        return self._bridge.running

    async def _service(self) -> None:
        """The trio side: build, run, and tear down the libp2p host."""
        host, pubsub, gossipsub = self._build()
        try:
            async with host.run(listen_addrs=self._listen_ma):
                async with background_trio_service(pubsub), background_trio_service(gossipsub):
                    await pubsub.wait_until_ready()
                    await self._serve(host)
        finally:
            if self._discovery_handler is not None:
                peerDiscovery.unregister_peer_discovered_handler(self._discovery_handler)
            pubsub.seen_messages.stop()  # a cleanup thread libp2p starts and never stops
            self._table.all_disconnected()
            self._table.save()

    def _build(self) -> tuple[Any, Pubsub, GossipSub]:
        """The libp2p host, pubsub and gossipsub with Cairn's settings and handlers (not yet running)."""
        host = new_host(
            key_pair=self._key_pair,
            # Noise + yamux only: the default also offers TLS, secio and plaintext.
            sec_opt={
                NOISE_PROTOCOL_ID: NoiseTransport(self._key_pair, noise_privkey=create_x25519_key_pair().private_key)
            },
            muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
            listen_addrs=self._listen_ma,
            enable_mDNS=self._mdns,
            connection_config=self._connection_config(),
        )
        install(host.get_network(), self.streams)  # p2p/guard.py: slots given back, windows and budgets enforced
        gossipsub = GossipSub(
            protocols=[GOSSIPSUB_V12, GOSSIPSUB_V11, GOSSIPSUB_V10],
            degree=6,
            degree_low=4,
            degree_high=12,
            heartbeat_initial_delay=min(0.1, self._heartbeat),
            # libp2p types it int but sleeps that many seconds, float or not; its default is 120 s.
            heartbeat_interval=self._heartbeat,  # type: ignore[arg-type]  # float seconds work (see above)
            max_messages_per_topic_per_second=self._max_rate,
            # "Adaptive" gossip rewrites the heartbeat to 30-60 s once a mesh has fewer than
            # `degree` peers (any network under 7 nodes), 30 s after start.
            adaptive_gossip_enabled=False,
        )
        pubsub = Pubsub(host, gossipsub, strict_signing=True, max_inbound_rpc_size=MAX_INBOUND_RPC_BYTES)
        for gossip_protocol in gossipsub.protocols:  # Pubsub registered its own handler: replace it by the guarded one
            host.set_stream_handler(gossip_protocol, self._guarded_pubsub_handler(pubsub))
        self._host, self._pubsub, self._gossipsub = host, pubsub, gossipsub
        self._forwarders = {}
        host.get_network().register_notifee(_Notifee(self))
        for protocol in self._handlers:
            host.set_stream_handler(TProtocol(protocol), self._stream_handler(protocol))
        return host, pubsub, gossipsub

    def _connection_config(self) -> ConnectionConfig:
        inbound = max(1, self.limits.inbound_connections)
        return ConnectionConfig(
            # One connection per peer. Also removes a 250 ms wait from every dial: the swarm
            # otherwise waits out its happy-eyeballs delay hoping for a second connection.
            max_connections_per_peer=1,
            dial_timeout=self._dial_timeout,
            max_connections=inbound + OUTBOUND_RESERVE,
            min_connections=OUTBOUND_RESERVE,
            low_watermark=OUTBOUND_RESERVE,
            high_watermark=inbound + OUTBOUND_RESERVE,
        )

    def _guarded_pubsub_handler(self, pubsub: Pubsub) -> Callable[[Any], Awaitable[None]]:
        """py-libp2p's pubsub reader lets a protobuf DecodeError (a malformed RPC frame, such as one cut short)
        escape into the swarm's nursery, which stops the whole host (NOTES.md). Here such a frame
        ends that peer's pubsub stream only: it is reset, the peer dropped from pubsub and counted."""

        async def handle(stream: Any) -> None:
            # Each RPC frame reserved against the frame budget before its body is read (p2p/guard.py).
            metered = MeteredStream(stream, _stream_peer(stream), self.frames, MAX_INBOUND_RPC_BYTES)
            try:
                await pubsub.stream_handler(cast(Any, metered))  # duck-typed: the stream, its reads metered
            except trio.Cancelled:
                raise
            except Exception as e:  # noqa: BLE001  any error from one peer's frames must not stop the host
                self.inbound_refused += 1
                peer = _stream_peer(stream)
                log.warning("malformed gossip RPC from %s refused: %s", peer, one_line(e))
                await _reset_stream(stream)
                try:
                    pubsub._handle_dead_peer(stream.muxed_conn.peer_id)
                except Exception as e2:  # noqa: BLE001  already gone: nothing to clean up
                    log.debug("pubsub peer cleanup: %s", one_line(e2))
            finally:
                metered.release()

        return handle

    async def _serve(self, host: Any) -> None:
        """Listening and ready: subscribe, dial, maintain, until stop() is asked; then close connections."""
        # Dialing is ours (remembered, bootstrap, mDNS, explicit): no auto-connector
        # re-dialing every peer the peerstore ever heard of.
        await host.get_network().auto_connector.stop()
        addrs = _dialable(host.get_addrs())
        if not addrs:
            raise P2PError(f"cannot listen on {', '.join(self._listen)}")
        self._probe.target = _probe_target(addrs)
        addrs = self._announce or reachability_order(addrs)
        self._addrs = [f"{a}/p2p/{self.peer_id}" for a in addrs]
        async with trio.open_nursery() as nursery:
            for topic in list(self._topics):
                nursery.start_soon(self._trio_subscribe, topic)
            if self._mdns:
                self._start_mdns_dialer()
            nursery.start_soon(self._initial_dials)
            nursery.start_soon(self._maintenance)
            self._bridge.ready()
            await self._bridge.wait_stopping()
            await _close_connections(host)
            nursery.cancel_scope.cancel()

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
        self._on_connected.append(callback)

    async def connect(self, addr: str, timeout: float | None = None) -> str:
        """Dial a full multiaddr (``…/p2p/<peer id>``) and return the peer id. The address is
        remembered. Raises :class:`P2PBadInput` for a bad address, :class:`P2PError` (one line) for an
        unreachable peer, :class:`P2PTimeout` past ``timeout`` (default twice the dial timeout)."""
        info = _parse_peer_addr(addr)
        pid = info.peer_id.to_base58()
        if pid == self.peer_id:
            raise P2PBadInput("cannot connect to this node itself")
        timeout = timeout or self._dial_timeout * 2
        try:
            await self._bridge.run(self._dial, info, timeout)
        except trio.TooSlowError:
            raise P2PTimeout(f"cannot reach {pid} at {addr}: no answer within {timeout:g} s") from None
        except P2PError:
            raise
        except Exception as e:  # noqa: BLE001  libp2p raises many unrelated types: one P2PError at the boundary
            raise P2PError(f"cannot reach {pid} at {addr}: {_reason(e)}") from None
        self._table.remember(pid, [str(a) for a in info.addrs], "dialed")
        return pid

    async def disconnect(self, peer_id: str) -> None:
        pid = _parse_peer_id(peer_id)

        async def close() -> None:
            await self._host.disconnect(pid)

        await self._bridge.run(close)

    async def forget(self, peer_id: str, *, disconnect: bool = True) -> None:
        """Drop a peer from the peer table (``peers.json``): it is not re-dialled at the next start, nor listed
        or asked; and disconnect it unless ``disconnect`` is False (a peer that dialled us may stay: it can
        still gossip). For a peer that is not what we wanted (a plain Kubo node, say)."""
        self._table.forget(peer_id)
        self._table.save()
        if not disconnect:
            return
        try:
            await self.disconnect(peer_id)
        except Exception as e:  # noqa: BLE001  already gone: nothing left to close
            log.debug("disconnecting %s: %s", peer_id, one_line(e))

    async def ping(self, peer_id: str, timeout: float = 10.0) -> float:
        """Round trip to a peer over ``/ipfs/ping/1.0.0``, in milliseconds."""
        pid = _parse_peer_id(peer_id)

        async def do_ping() -> float:
            with trio.fail_after(timeout):
                stream = await self._host.new_stream(pid, [PING_PROTOCOL_ID])
                try:
                    payload = secrets.token_bytes(32)
                    t0 = time.perf_counter()
                    await stream.write(payload)
                    echoed = await read_exactly(stream, 32)
                    rtt = (time.perf_counter() - t0) * 1000.0
                finally:
                    await _close_stream(stream)
            if echoed != payload:
                raise P2PError(f"ping {peer_id}: the peer echoed other bytes")
            return rtt

        return await self._call(f"ping {peer_id}", timeout, do_ping)

    # ---------------------------------------------------------------- trio side

    async def _dial(self, info: PeerInfo, timeout: float) -> None:
        """Dial the given addresses, one at a time, until one connects.

        libp2p's swarm dials only the *first* TCP address its peerstore holds for a peer, so a peer
        remembered at an old port (its port 0 gave it a new one at restart) could never be reached at the
        new address `connect` was given: it kept dialling the old one. So the peerstore holds
        only the address being tried. A deliberate dial also tries again instead of reading the swarm's
        cached failure (a peer whose addresses all failed is refused for 60 s). Public Swarm and
        peerstore API in libp2p 0.8.1; tests in test_p2p_host fail if either changes."""
        network, store = self._host.get_network(), self._host.get_peerstore()
        failure: BaseException | None = None
        with trio.fail_after(timeout):
            for addr in info.addrs or []:
                network.unblock_peer(info.peer_id)
                if not network.get_connections(info.peer_id):
                    store.clear_addrs(info.peer_id)
                try:
                    await self._host.connect(PeerInfo(info.peer_id, [addr]))
                    return
                except trio.Cancelled:
                    raise
                except Exception as e:  # noqa: BLE001  try the next address; the last failure is reported
                    failure = e
        if failure is not None:
            raise failure
        raise P2PError(f"no address to dial {info.peer_id.to_base58()}")

    async def _dial_quietly(self, info: PeerInfo, why: str) -> None:
        try:
            await self._dial(info, self._dial_timeout * 2)
        except trio.Cancelled:
            raise
        except Exception as e:  # noqa: BLE001 - background dials only log
            log.debug("dial %s (%s) failed: %s", info.peer_id, why, _reason(e))

    async def _initial_dials(self) -> None:
        async with trio.open_nursery() as n:
            for pid, addrs, source in self._table.dial_targets():
                try:
                    info = PeerInfo(ID.from_base58(pid), [multiaddr.Multiaddr(a) for a in addrs])
                except Exception as e:  # noqa: BLE001  ID/multiaddr parsing raise several types
                    log.debug("not dialing %s (%s): bad entry: %s", pid, source, one_line(e))
                    continue
                n.start_soon(self._dial_quietly, info, source)

    async def _maintenance(self) -> None:
        """Save the peer table when it changed; re-dial bootstrap peers that dropped."""
        last_redial = trio.current_time()
        while True:
            await trio.sleep(1.0)
            self._learn_addrs()
            if self._table.dirty:
                self._table.save()
            if self._bootstrap and trio.current_time() - last_redial >= self._redial_interval:
                last_redial = trio.current_time()
                async with trio.open_nursery() as n:
                    for info in self._bootstrap:
                        if not self._table.is_connected(info.peer_id.to_base58()):
                            n.start_soon(self._dial_quietly, info, "bootstrap")

    def _learn_addrs(self) -> None:
        """Fold the listen addresses identify put in libp2p's peerstore into our table."""
        store = self._host.get_peerstore()
        for pid in self._table.connected():
            try:
                self._table.learn(pid, [str(a) for a in store.addrs(ID.from_base58(pid))])
            except PeerStoreError:  # identify has not told us its addresses yet
                continue

    def _on_conn(self, conn: Any, up: bool) -> None:
        """Notifee (trio): a connection opened or closed."""
        try:
            pid_obj = conn.muxed_conn.peer_id
            inbound = not conn.muxed_conn.is_initiator
        except Exception:  # noqa: BLE001
            return
        pid = pid_obj.to_base58()
        live = bool(self._host.get_network().get_connections(pid_obj))
        if not live:  # its kept streams went with the connection
            for key in [k for k in self._kept if k[0] == pid]:
                del self._kept[key]
        flipped = self._table.set_connected(
            pid,
            live,
            source="inbound" if inbound else "dialed",
            inbound_from=_remote_addr(conn) if (up and inbound) else None,
        )
        # Every new connection counts as a (re)connection, not only a flip of the table: a peer that restarts
        # at once dials us before we saw its old connection close, so the table never flips and the peer
        # was never caught up (test_network_catchup). Duplicates (simultaneous dials) are harmless.
        if (flipped and live) or up:
            for cb in self._on_connected:
                self._bridge.to_loop(self._spawn_callback, cb, pid)

    def _start_mdns_dialer(self) -> None:
        """libp2p's mDNS only fills the peerstore; dial what it finds (zeroconf's thread calls
        us: hop into trio). The handler list is process-wide, so ignore ourselves."""

        def discovered(info: PeerInfo) -> None:
            if info.peer_id == self._id:
                return
            pid = info.peer_id.to_base58()
            self._table.remember(pid, [str(a) for a in info.addrs], "mdns")
            if not self._table.is_connected(pid):
                self._bridge.run_soon(self._dial_quietly, info, "mdns")

        self._discovery_handler = discovered
        peerDiscovery.register_peer_discovered_handler(discovered)

    # ---------------------------------------------------------------- asyncio side

    def _spawn_callback(self, fn: Callable[..., Any], *args: Any) -> None:
        """On the loop: call a node callback; keep a reference to the task of an async one."""
        try:
            result = fn(*args)
        except Exception:
            log.exception("p2p callback %r failed", fn)
            return
        if inspect.isawaitable(result):
            self._keep(asyncio.ensure_future(result))

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("p2p callback failed: %s", one_line(task.exception()))

    async def _call(self, what: str, timeout: float, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` in trio; map its failures to one-line P2PError / P2PTimeout."""
        try:
            return await self._bridge.run(fn)
        except trio.TooSlowError:
            raise P2PTimeout(f"{what}: no answer within {timeout:g} s") from None
        except P2PError:
            raise
        except Exception as e:  # noqa: BLE001  libp2p raises many unrelated types: one P2PError at the boundary
            raise P2PError(f"{what}: {_reason(e)}") from None

    async def accepting(self) -> str | None:
        """None if the host accepts a new inbound connection now, else why not (one line). Measured, not assumed:
        a TCP connection to one of our own listen addresses must get the libp2p greeting (multistream-select's
        header) within PROBE_TIMEOUT s; a host out of inbound slots closes it at once, a stuck thread says nothing.
        One probe at a time, its answer kept PROBE_TTL s (``/healthz`` may be polled often)."""
        if not self.running:
            return "the p2p host is not running"
        return await self._probe.run()

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
        first = topic not in self._topics
        self._topics.setdefault(topic, []).append(handler)
        if first and self.running:
            self._ensure_topic_worker(topic)
            self._bridge.run_soon(self._trio_subscribe, topic)

    async def publish(self, topic: str, data: bytes) -> None:
        """Gossip ``data`` (at most :data:`MAX_PUBLISH_BYTES`) on ``topic``, signed with the
        node key. Returns once gossipsub took it; delivery is best effort, and peers that
        join later never see it."""
        data = bytes(data)
        if len(data) > MAX_PUBLISH_BYTES:
            raise P2PError(f"gossip message of {len(data)} bytes is over {MAX_PUBLISH_BYTES}: announce CIDs, not data")

        async def pub() -> None:
            await self._pubsub.publish(topic, data)  # type: ignore[union-attr]  # set by _build before any publish

        await self._bridge.run(pub)

    def topic_peers(self, topic: str) -> list[str]:
        """Peers whose subscription to ``topic`` reached us."""
        pubsub = self._pubsub
        if pubsub is None:
            return []
        for _ in range(3):  # the trio thread may change the set while we copy it
            try:
                return sorted(p.to_base58() for p in list(pubsub.peer_topics.get(topic, ())))
            except RuntimeError:
                continue
        return []

    async def wait_for_topic_peers(self, topic: str, count: int = 1, timeout: float = 10.0) -> list[str]:
        """Wait until at least ``count`` peers subscribed to ``topic`` (else P2PTimeout)."""
        deadline = time.monotonic() + timeout
        while True:
            peers = self.topic_peers(topic)
            if len(peers) >= count:
                return peers
            if time.monotonic() >= deadline:
                raise P2PTimeout(f"{len(peers)} of {count} peers on {topic} after {timeout:g} s")
            await asyncio.sleep(0.02)

    def _ensure_topic_worker(self, topic: str) -> None:
        if topic in self._topic_queues:
            return
        queue: asyncio.Queue[tuple[str, str, bytes]] = asyncio.Queue()
        self._topic_queues[topic] = queue
        loop = self._bridge.loop or asyncio.get_running_loop()
        self._keep(loop.create_task(self._topic_worker(topic, queue)))

    async def _topic_worker(self, topic: str, queue: asyncio.Queue[tuple[str, str, bytes]]) -> None:
        while True:
            origin, forwarder, data = await queue.get()
            for handler in list(self._topics.get(topic, ())):
                try:
                    result = handler(origin, forwarder, data)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("gossip handler for %s failed", topic)

    def _enqueue(self, topic: str, origin: str, forwarder: str, data: bytes) -> None:
        queue = self._topic_queues.get(topic)
        if queue is not None:
            queue.put_nowait((origin, forwarder, data))

    async def _trio_subscribe(self, topic: str) -> None:
        if topic in self._subscribed or self._pubsub is None:
            return
        self._subscribed.add(topic)
        pubsub = self._pubsub
        # Pubsub knows which connection a message came on only while it validates it, and delivers the message
        # without it: a validator notes it by message id, the delivery below takes it back.
        pubsub.set_topic_validator(topic, self._note_forwarder, False)
        subscription = await pubsub.subscribe(topic)
        while True:
            msg = await subscription.get()
            forwarder = self._forwarders.pop(pubsub.get_message_id(msg), None)
            try:
                origin = ID(msg.from_id).to_base58()
            except Exception as e:  # noqa: BLE001  a malformed origin (strict signing makes it rare): drop
                log.debug("gossip on %s with an unreadable origin dropped: %s", topic, one_line(e))
                continue
            if origin == self.peer_id or forwarder is None:
                # Our own publications come back to us. No forwarder: validation was skipped, because pubsub
                # validated this very message (origin and seqno) within minutes: it was delivered then.
                continue
            self._table.touch(forwarder)
            self._bridge.to_loop(self._enqueue, topic, origin, forwarder, bytes(msg.data))

    def _note_forwarder(self, forwarder: ID, msg: Any) -> bool:
        """Pubsub's validator (trio): remember whose connection ``msg`` came on; it judges nothing (the node does)."""
        if len(self._forwarders) >= FORWARDERS_MAX:  # validated but never delivered (a full subscription queue)
            for old in list(self._forwarders)[: FORWARDERS_MAX // 2]:  # insertion order: the oldest first
                del self._forwarders[old]
        if self._pubsub is not None:
            self._forwarders[self._pubsub.get_message_id(msg)] = forwarder.to_base58()
        return True

    # ================================================================ request / response

    def set_handler(self, protocol: str, handler: RequestHandler) -> None:
        """Answer requests on ``protocol``: ``await handler(peer_id, request) -> response``
        runs on the asyncio loop; ``peer_id`` is the Noise-authenticated remote. An exception
        (or taking over ``handler_timeout``) resets the stream: the asker gets an error.
        Before or after :meth:`start`."""
        new = protocol not in self._handlers
        self._handlers[protocol] = handler
        if new and self.running:

            async def register() -> None:
                self._host.set_stream_handler(TProtocol(protocol), self._stream_handler(protocol))

            self._bridge.run_soon(register)

    def reuse_streams(self, *protocols: str) -> None:
        """Keep one stream per peer open for requests on ``protocols`` and send the next request on it: a new
        stream costs a multistream-select negotiation each time (4-7 ms, ../shared/NOTES.md), a kept one a
        round trip. The answering side reads requests on a stream in turn (``_stream_handler``). One request
        at a time on a kept stream (a concurrent one opens its own); a kept stream that fails is dropped and
        the request sent again once on a new stream, so these protocols' requests must be idempotent."""
        self._reusable.update(protocols)

    async def request(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> bytes:
        """Send one request frame on a new stream (or a kept one: ``reuse_streams``) and return the response frame.
        :class:`P2PTimeout` past ``timeout`` seconds, :class:`P2PError` on any failure."""
        pid = _parse_peer_id(peer_id)
        data = bytes(data)
        if len(data) > MAX_FRAME_BYTES:
            raise P2PError(f"request of {len(data)} bytes is over {MAX_FRAME_BYTES}")
        return await self._call(
            f"{protocol} to {peer_id}", timeout, lambda: self._trio_request(pid, protocol, data, timeout)
        )

    async def send_direct(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> None:
        """A request whose answer is ignored (the receiving handler may return ``b""``)."""
        await self.request(peer_id, protocol, data, timeout)

    async def ask_all(
        self, protocol: str, data: bytes, timeout: float, peers: Iterable[str] | None = None
    ) -> dict[str, bytes | Exception]:
        """Ask every connected peer (or ``peers``) at once. Returns by the deadline, with each
        peer's answer or the exception it failed with (:class:`P2PTimeout` if it had not
        answered in time)."""
        data = bytes(data)
        asked = peers if peers is not None else self.connected_peers()
        targets = [t for t in dict.fromkeys(asked) if t != self.peer_id]
        results: dict[str, bytes | Exception] = {}
        ids: dict[str, ID] = {}
        for t in targets:
            try:
                ids[t] = _parse_peer_id(t)
            except P2PError as e:
                results[t] = e
        if not ids:
            return results

        async def one(t: str) -> None:
            try:
                results[t] = await self._trio_request(ids[t], protocol, data, timeout + 1.0)
            except trio.Cancelled:
                raise
            except Exception as e:  # noqa: BLE001 - reported per peer
                results[t] = P2PError(f"{protocol} to {t}: {_reason(e)}")

        async def fan_out() -> dict[str, bytes | Exception]:
            with trio.move_on_after(timeout):
                async with trio.open_nursery() as n:
                    for t in ids:
                        n.start_soon(one, t)
            for t in ids:
                results.setdefault(t, P2PTimeout(f"{protocol} to {t}: no answer within {timeout:g} s"))
            return dict(results)

        return await self._bridge.run(fan_out)

    async def _trio_request(self, pid: ID, protocol: str, data: bytes, timeout: float) -> bytes:
        with trio.fail_after(timeout):
            key = (pid.to_base58(), protocol)
            if protocol in self._reusable:
                response = await self._on_kept(key, data)
                if response is not None:
                    return response
            stream = await self._host.new_stream(pid, [TProtocol(protocol)])
            try:
                await stream.write(encode_varint_prefixed(data))
                response = await _read_frame(stream)
            except BaseException:
                await _reset_stream(stream)
                raise
            if protocol in self._reusable and key not in self._kept:
                self._kept[key] = _Kept(stream, trio.current_time())
            else:
                await _close_stream(stream)
            return response

    async def _on_kept(self, key: tuple[str, str], data: bytes) -> bytes | None:
        """The answer to ``data`` on the kept stream of ``key``; None when there is none idle, or it failed (then
        it is dropped: after a failure or a cancel, a late answer on it could be taken for the next one's)."""
        kept = self._kept.get(key)
        if kept is None or kept.busy:
            return None
        if trio.current_time() - kept.used > KEPT_IDLE:
            self._drop_kept(key, kept)
            await _close_stream(kept.stream)
            return None
        kept.busy = True
        try:
            await kept.stream.write(encode_varint_prefixed(data))
            response = await _read_frame(kept.stream)
        except Exception as e:  # noqa: BLE001 - closed by the peer (idle, restart), reset, connection gone
            log.debug("kept %s stream to %s failed, a new one is opened: %s", key[1], key[0], one_line(e))
            self._drop_kept(key, kept)
            await _reset_stream(kept.stream)
            return None
        except BaseException:
            self._drop_kept(key, kept)
            await _reset_stream(kept.stream)
            raise
        kept.busy = False
        kept.used = trio.current_time()
        return response

    def _drop_kept(self, key: tuple[str, str], kept: _Kept) -> None:
        if self._kept.get(key) is kept:
            del self._kept[key]

    def _stream_handler(self, protocol: str) -> Callable[[Any], Awaitable[None]]:
        async def handle(stream: Any) -> None:
            pid = stream.muxed_conn.peer_id.to_base58()
            try:
                while True:  # one request per stream from us; more are answered in turn
                    # Its length reserved against the frame budget before its body is read (p2p/guard.py).
                    request = await read_request_frame(stream, pid, self.frames, MAX_FRAME_BYTES, self._handler_timeout)
                    if request is None:  # EOF (the asker is done), reset, idle
                        break
                    handler = self._handlers.get(protocol)
                    if handler is None:
                        raise P2PError(f"no handler for {protocol}")
                    self._table.touch(pid)
                    with trio.fail_after(self._handler_timeout):
                        response = await self._bridge.call_asyncio(handler, pid, request)
                    if not isinstance(response, (bytes, bytearray, memoryview)):
                        raise P2PError(f"the {protocol} handler returned {type(response).__name__}, not bytes")
                    await stream.write(encode_varint_prefixed(bytes(response)))
                await _close_stream(stream)
            except trio.Cancelled:
                await _reset_stream(stream)
                raise
            except Exception as e:  # noqa: BLE001 - the asker sees a reset stream
                log.debug("%s request from %s failed: %s", protocol, pid, one_line(e))
                await _reset_stream(stream)

        return handle


# ==================================================================== helpers


class _Kept:
    """A request stream kept open to one peer for one protocol (trio side); ``busy`` while a request is on it."""

    def __init__(self, stream: Any, used: float) -> None:
        self.stream = stream
        self.used = used
        self.busy = False


class _Notifee(INotifee):
    """libp2p network notifee: connections up and down (called in trio)."""

    def __init__(self, host: P2PHost) -> None:
        self._host = host

    async def connected(self, network: Any, conn: Any) -> None:
        self._host._on_conn(conn, True)

    async def disconnected(self, network: Any, conn: Any) -> None:
        self._host._on_conn(conn, False)

    async def opened_stream(self, network: Any, stream: Any) -> None:
        pass

    async def closed_stream(self, network: Any, stream: Any) -> None:
        pass

    async def listen(self, network: Any, multiaddr: Any) -> None:
        pass

    async def listen_close(self, network: Any, multiaddr: Any) -> None:
        pass


async def _close_connections(host: Any) -> None:
    """Close every connection at once so peers see us leave now.

    Cancelling libp2p's tasks alone leaves the sockets open until garbage collection (peers
    keep a dead connection), and ``Swarm.close`` closes them one at a time, each followed by
    two 0.1 s sleeps (yamux, swarm cleanup): wait for the sockets only.
    """
    conns = [c for cs in list(host.get_network().connections.values()) for c in cs]
    if not conns:
        return

    async def close(conn: Any) -> None:
        try:
            await conn.muxed_conn.close()
        except Exception as e:  # noqa: BLE001  already closed or broken: nothing left to close
            log.debug("closing a connection: %s", one_line(e))

    async with trio.open_nursery() as n:
        for conn in conns:
            n.start_soon(close, conn)
        with trio.move_on_after(1.0):
            for conn in conns:
                closed = getattr(conn.muxed_conn, "event_closed", None)
                if closed is not None:
                    await closed.wait()
        n.cancel_scope.cancel()


async def _close_stream(stream: Any) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.close()
        except Exception as e:  # noqa: BLE001  the peer reset or closed it first: nothing left to close
            log.debug("closing a stream: %s", one_line(e))


async def _read_frame(stream: Any) -> bytes:
    """One uvarint-length-prefixed frame of at most MAX_FRAME_BYTES. Not msgio's VarIntLengthMsgReadWriter: its
    read_exactly gives up after 101 partial reads, so a frame over ~800 kB (yamux hands data over in pieces)
    failed as "the peer closed the stream"; this reads until the frame is whole or the stream ends."""
    return await read_varint_prefixed_bytes_limited(stream, MAX_FRAME_BYTES)


def _stream_peer(stream: Any) -> str:
    try:
        return str(stream.muxed_conn.peer_id.to_base58())
    except Exception:  # noqa: BLE001  a half-closed stream may have lost its connection: name it unknown
        return "?"


async def _reset_stream(stream: Any) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.reset()
        except Exception as e:  # noqa: BLE001  already reset or closed: nothing left to reset
            log.debug("resetting a stream: %s", one_line(e))


class _AcceptProbe:
    """The accept probe's target (a listen address of ours), its last answer and the probe under way (asyncio)."""

    def __init__(self) -> None:
        self.target: tuple[str, int] | None = None
        self._last: tuple[float, str | None] | None = None  # (monotonic time, why it cannot accept, or None)
        self._running: asyncio.Task[str | None] | None = None

    async def run(self) -> str | None:
        if self.target is None:
            return "the p2p host is not listening yet"
        if self._last is not None and time.monotonic() - self._last[0] < PROBE_TTL:
            return self._last[1]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(_probe(*self.target))
        reason = await asyncio.shield(self._running)
        before = self._last[1] if self._last is not None else None
        self._last = (time.monotonic(), reason)
        if reason is not None and before is None:  # logged when it changes, not at every /healthz
            log.warning("p2p host does not accept connections: %s", reason)
        elif reason is None and before is not None:
            log.info("p2p host accepts connections again")
        return reason


def _probe_target(addrs: list[str]) -> tuple[str, int] | None:
    """Where the accept probe dials: a loopback listen address if there is one, else the first one."""
    targets = []
    for a in addrs:
        parts = a.split("/")
        if len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[3] == "tcp":
            targets.append((parts[2], int(parts[4])))
    loopback = [t for t in targets if t[0] in ("127.0.0.1", "::1")]
    return (loopback or targets)[0] if targets else None


async def _probe(host: str, port: int) -> str | None:
    """One accept probe (see P2PHost.accepting): None, or why the host does not accept."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT)
    except (OSError, TimeoutError) as e:
        return f"cannot connect to its own listen address {host}:{port}: {one_line(e) or type(e).__name__}"
    try:
        greeting = await asyncio.wait_for(reader.readexactly(len(GREETING)), PROBE_TIMEOUT)
    except asyncio.IncompleteReadError:
        return "it closes new connections at once (no inbound connection slot free)"
    except (OSError, TimeoutError):
        return f"a new connection got no libp2p greeting within {PROBE_TIMEOUT:g} s"
    finally:
        writer.close()
    return None if greeting == GREETING else "a new connection got no libp2p greeting"


def _parse_listen_addr(addr: str) -> multiaddr.Multiaddr:
    try:
        return multiaddr.Multiaddr(addr)
    except Exception as e:  # noqa: BLE001 - multiaddr raises several types
        raise P2PBadInput(f"bad listen multiaddr {addr!r}: {one_line(e)}") from None


def _parse_peer_addr(addr: str) -> PeerInfo:
    try:
        ma = multiaddr.Multiaddr(addr)
    except Exception as e:  # noqa: BLE001
        raise P2PBadInput(f"bad multiaddr {addr!r}: {one_line(e)}") from None
    try:
        return info_from_p2p_addr(ma)
    except Exception:  # noqa: BLE001
        raise P2PBadInput(f"multiaddr {addr!r} must end with /p2p/<peer id>") from None


def _parse_peer_id(peer_id: str) -> ID:
    try:
        return ID.from_base58(peer_id)
    except Exception:  # noqa: BLE001
        raise P2PBadInput(f"bad peer id {peer_id!r}") from None


def _check_ports_free(listen: Iterable[str]) -> None:
    """Refuse fixed TCP ports already in use.

    libp2p binds with SO_REUSEPORT, so a second node on the same port would *share* it (the
    kernel splitting incoming connections between the two) instead of failing.
    """
    for addr in listen:
        parts = addr.split("/")
        if len(parts) < 5 or parts[1] not in ("ip4", "ip6") or parts[3] != "tcp" or parts[4] in ("", "0"):
            continue
        family = socket.AF_INET if parts[1] == "ip4" else socket.AF_INET6
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # SO_REUSEADDR: TIME_WAIT leftovers of our previous run are fine; a listener is not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((parts[2], int(parts[4])))
            except OSError as e:
                raise P2PError(f"cannot listen on {addr}: {e.strerror or e}") from None


def _dialable(addrs: Iterable[Any]) -> list[str]:
    """Listen addresses as others can dial them: wildcards expanded to interface addresses."""
    from libp2p.utils.address_validation import expand_wildcard_address

    out: list[str] = []
    for a in addrs:
        text = strip_p2p(str(a))
        parts = text.split("/")
        if len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[2] in ("0.0.0.0", "::"):
            loopback = "127.0.0.1" if parts[1] == "ip4" else "::1"
            try:
                expanded = [strip_p2p(str(x)) for x in expand_wildcard_address(multiaddr.Multiaddr(text))]
            except Exception:  # noqa: BLE001
                expanded = []
            candidates = [x for x in expanded if x != text] + ["/".join(parts[:2] + [loopback] + parts[3:])]
        else:
            candidates = [text]
        out.extend(c for c in candidates if c not in out)
    return out


def _remote_addr(conn: Any) -> str | None:
    try:
        ip, port = conn.muxed_conn.get_remote_address()
    except Exception:  # noqa: BLE001
        return None
    return f"/{'ip6' if ':' in str(ip) else 'ip4'}/{ip}/tcp/{port}"


_REASONS: list[tuple[tuple[str, ...], str]] = [
    (("Peer ID mismatch", "peer id mismatch"), "the peer at that address has another peer id"),
    (("negative cache",), "peer recently unreachable; try again in a minute"),
    (("protocols not supported", "protocol not supported"), "the peer does not speak that protocol"),
    (("No valid connections", "No known addresses"), "not connected and no known address"),
    (
        ("failed to negotiate the secure protocol", "upgrade security"),
        "security handshake failed (not a libp2p peer with Noise?)",
    ),
    (
        (
            "all attempts to connect",
            "Connection refused",
            "Connect call failed",
            "OpenConnectionError",
            "fail to open connection",
        ),
        "connection refused",
    ),
    (("StreamReset", "stream reset", "StreamEOF", "IncompleteReadError", "StreamClosed"), "the peer closed the stream"),
]


def _reason(e: BaseException) -> str:
    """A one-line reason out of libp2p's nested dial and stream errors."""
    msgs: list[str] = []
    seen: set[int] = set()

    def walk(x: BaseException | None, depth: int) -> None:
        if x is None or id(x) in seen or depth > 8:
            return
        seen.add(id(x))
        msgs.append(one_line(x))
        for sub in list(getattr(x, "exceptions", None) or ()) + list(getattr(x, "errors", None) or ()):
            if isinstance(sub, BaseException):
                walk(sub, depth + 1)
        walk(x.__cause__, depth + 1)
        walk(x.__context__, depth + 1)

    walk(e, 0)
    text = " | ".join(msgs)
    for needles, reason in _REASONS:
        if any(n in text for n in needles):
            return reason
    return (msgs[-1] if msgs else type(e).__name__)[:200]
