"""Who the host is connected to, and how it gets there: dials (explicit, remembered, bootstrap, mDNS), the
bootstrap peers dialled again when they drop, libp2p's connection events folded into the peer table (and the
node told of each new connection), ping.

The decisions are IO-free: :class:`Redial` says when the bootstrap peers are due again, and
``PeerTable.connection_changed`` what a connection event means.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import multiaddr
import trio

from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p.abc import INotifee  # noqa: E402
from libp2p.discovery.events.peerDiscovery import peerDiscovery  # noqa: E402
from libp2p.host.ping import ID as PING_PROTOCOL_ID  # noqa: E402
from libp2p.io.utils import read_exactly  # noqa: E402
from libp2p.peer.id import ID  # noqa: E402
from libp2p.peer.peerinfo import PeerInfo  # noqa: E402
from libp2p.peer.peerstore import PeerStoreError  # noqa: E402

from node.support.errors import one_line  # noqa: E402
from p2p import failures  # noqa: E402
from p2p.bridge import TrioThread  # noqa: E402
from p2p.callbacks import LoopTasks, PeerCallback  # noqa: E402
from p2p.errors import P2PBadInput, P2PError, P2PTimeout  # noqa: E402
from p2p.multiaddrs import parse_peer_addr, parse_peer_id, remote_addr  # noqa: E402
from p2p.peers import PeerTable  # noqa: E402
from p2p.requests import KeptStreams  # noqa: E402
from p2p.streams import close_stream  # noqa: E402

log = logging.getLogger("cairn.p2p")


class Redial:
    """When the bootstrap peers that dropped are dialled again: every ``interval`` seconds. IO-free: the caller
    passes the clock."""

    def __init__(self, interval: float, now: float) -> None:
        self._interval = interval
        self._last = now

    def due(self, now: float) -> bool:
        """True once ``interval`` has passed since the last time it was due (or the start): the clock restarts."""
        if now - self._last < self._interval:
            return False
        self._last = now
        return True


class Connections:
    """The host's dials and connection events (trio side), and the node's connect/ping calls (asyncio side)."""

    def __init__(
        self,
        bridge: TrioThread,
        table: PeerTable,
        own_id: ID,
        bootstrap: list[PeerInfo],
        tasks: LoopTasks,
        kept: KeptStreams[Any],
        *,
        dial_timeout: float,
        redial_interval: float,
    ) -> None:
        self._bridge = bridge
        self._table = table
        self._id = own_id
        self._peer_id = own_id.to_base58()
        self._bootstrap = bootstrap
        self._tasks = tasks
        self._kept = kept
        self._dial_timeout = dial_timeout
        self._redial_interval = redial_interval
        self._on_connected: list[PeerCallback] = []
        # trio side
        self._host: Any = None
        self._discovery_handler: Callable[[PeerInfo], None] | None = None

    def attach(self, host: Any) -> None:
        """Trio side, while the libp2p host is built: hear its connections open and close."""
        self._host = host
        host.get_network().register_notifee(_Notifee(self))

    def on_peer_connected(self, callback: PeerCallback) -> None:
        self._on_connected.append(callback)

    # ---------------------------------------------------------------- asyncio side

    async def connect(self, addr: str, timeout: float | None) -> str:
        info = parse_peer_addr(addr)
        pid = info.peer_id.to_base58()
        if pid == self._peer_id:
            raise P2PBadInput("cannot connect to this node itself")
        timeout = timeout or self._dial_timeout * 2
        try:
            await self._bridge.run(self.dial, info, timeout)
        except trio.TooSlowError:
            raise P2PTimeout(f"cannot reach {pid} at {addr}: no answer within {timeout:g} s") from None
        except P2PError:
            raise
        except Exception as e:  # noqa: BLE001  libp2p raises many unrelated types: one P2PError at the boundary
            raise P2PError(f"cannot reach {pid} at {addr}: {failures.reason(e)}") from None
        self._table.remember(pid, [str(a) for a in info.addrs], "dialed")
        return pid

    async def disconnect(self, peer_id: str) -> None:
        pid = parse_peer_id(peer_id)

        async def close() -> None:
            await self._host.disconnect(pid)

        await self._bridge.run(close)

    async def forget(self, peer_id: str, *, disconnect: bool) -> None:
        self._table.forget(peer_id)
        self._table.save()
        if not disconnect:
            return
        try:
            await self.disconnect(peer_id)
        except Exception as e:  # noqa: BLE001  already gone: nothing left to close
            log.debug("disconnecting %s: %s", peer_id, one_line(e))

    async def ping(self, peer_id: str, timeout: float) -> float:
        pid = parse_peer_id(peer_id)

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
                    await close_stream(stream)
            if echoed != payload:
                raise P2PError(f"ping {peer_id}: the peer echoed other bytes")
            return rtt

        return await failures.call(self._bridge, f"ping {peer_id}", timeout, do_ping)

    # ---------------------------------------------------------------- trio side

    async def dial(self, info: PeerInfo, timeout: float) -> None:
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
            await self.dial(info, self._dial_timeout * 2)
        except trio.Cancelled:
            raise
        except Exception as e:  # noqa: BLE001 - background dials only log
            log.debug("dial %s (%s) failed: %s", info.peer_id, why, failures.reason(e))

    async def initial_dials(self) -> None:
        async with trio.open_nursery() as n:
            for pid, addrs, source in self._table.dial_targets():
                try:
                    info = PeerInfo(ID.from_base58(pid), [multiaddr.Multiaddr(a) for a in addrs])
                except Exception as e:  # noqa: BLE001  ID/multiaddr parsing raise several types
                    log.debug("not dialing %s (%s): bad entry: %s", pid, source, one_line(e))
                    continue
                n.start_soon(self._dial_quietly, info, source)

    async def maintenance(self) -> None:
        """Save the peer table when it changed; re-dial bootstrap peers that dropped."""
        redial = Redial(self._redial_interval, trio.current_time())
        while True:
            await trio.sleep(1.0)
            self._learn_addrs()
            if self._table.dirty:
                self._table.save()
            if self._bootstrap and redial.due(trio.current_time()):
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

    def on_conn(self, conn: Any, up: bool) -> None:
        """Notifee (trio): a connection opened or closed."""
        try:
            pid_obj = conn.muxed_conn.peer_id
            inbound = not conn.muxed_conn.is_initiator
        except Exception:  # noqa: BLE001
            return
        pid = pid_obj.to_base58()
        live = bool(self._host.get_network().get_connections(pid_obj))
        if not live:  # its kept streams went with the connection
            self._kept.drop_peer(pid)
        remote = remote_addr(conn) if (up and inbound) else None
        if self._table.connection_changed(pid, up=up, live=live, inbound=inbound, remote=remote):
            for cb in self._on_connected:
                self._bridge.to_loop(self._tasks.spawn_callback, cb, pid)

    def start_mdns_dialer(self) -> None:
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

    def stop_mdns_dialer(self) -> None:
        if self._discovery_handler is not None:
            peerDiscovery.unregister_peer_discovered_handler(self._discovery_handler)


class _Notifee(INotifee):
    """libp2p network notifee: connections up and down (called in trio)."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections

    async def connected(self, network: Any, conn: Any) -> None:
        self._connections.on_conn(conn, True)

    async def disconnected(self, network: Any, conn: Any) -> None:
        self._connections.on_conn(conn, False)

    async def opened_stream(self, network: Any, stream: Any) -> None:
        pass

    async def closed_stream(self, network: Any, stream: Any) -> None:
        pass

    async def listen(self, network: Any, multiaddr: Any) -> None:
        pass

    async def listen_close(self, network: Any, multiaddr: Any) -> None:
        pass
