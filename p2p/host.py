"""The libp2p host of a Cairn node, behind a small asyncio facade.

py-libp2p is written for trio; the node is asyncio. :class:`P2PHost` runs the whole libp2p host
(swarm, identify, ping, gossipsub, Cairn's request/response protocols, optional mDNS) inside
**one dedicated thread running** ``trio.run``. The asyncio side talks to it through two
primitives only (see ``docs/p2p.md``):

- asyncio → trio: ``TrioToken.run_sync_soon`` starts a task in a nursery kept open for the
  host's lifetime; its outcome comes back with ``loop.call_soon_threadsafe``. Cancelling the
  awaiting asyncio task cancels the trio task.
- trio → asyncio: node callbacks (gossip handlers, request handlers, peer hooks) run on the
  asyncio loop that called :meth:`P2PHost.start`, scheduled with
  ``asyncio.run_coroutine_threadsafe`` / ``call_soon_threadsafe``.

Stopping sets a trio event, waits for the thread to say it is done (no executor thread is
used) and joins it. The thread is a daemon and an ``atexit`` hook stops a host that was never
stopped, so a forgotten host cannot keep the interpreter alive.

This module never imports the node: it deals in bytes, peer-id strings and callbacks.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import json
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import multiaddr
import trio

import libp2p  # noqa: F401  (configures libp2p's logging on import: tamed below)
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.discovery.events.peerDiscovery import peerDiscovery
from libp2p.host.ping import ID as PING_PROTOCOL_ID
from libp2p.io.msgio import VarIntLengthMsgReadWriter
from libp2p.io.utils import read_exactly
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID as GOSSIPSUB_V10
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11 as GOSSIPSUB_V11
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V12 as GOSSIPSUB_V12
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service

log = logging.getLogger("cairn.p2p")

T = TypeVar("T")

DEFAULT_LISTEN = ("/ip4/127.0.0.1/tcp/0",)
#: Largest payload :meth:`P2PHost.publish` accepts. py-libp2p's gossipsub silently drops RPCs
#: over 1 MiB (signature, key, topic and framing ride along): announce CIDs, never data.
MAX_PUBLISH_BYTES = 1_000_000
#: Largest request or response frame of the request/response protocols.
MAX_FRAME_BYTES = 4 * 1024 * 1024

GossipHandler = Callable[[str, bytes], "Awaitable[None] | None"]
RequestHandler = Callable[[str, bytes], Awaitable[bytes]]
PeerCallback = Callable[[str], "Awaitable[None] | None"]


class P2PError(Exception):
    """A p2p operation failed; the message is one line meant for the user."""


class P2PTimeout(P2PError, TimeoutError):
    """A peer did not answer before the deadline."""


# --------------------------------------------------------------------------------------------
# logging


class _OneLineForwarder(logging.Handler):
    """Re-emit libp2p records as single lines on the ``cairn.p2p.libp2p`` logger.

    libp2p logs multi-line ERRORs with tracebacks when a peer dies; a dead peer is routine for
    a p2p node. Records are cut to their first line, the exception is reduced to
    ``Type: message``, ERROR becomes WARNING, and a line repeated within a minute is dropped.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._recent: dict[str, float] = {}
        self._target = logging.getLogger("cairn.p2p.libp2p")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = " | ".join(
                line.strip() for line in record.getMessage().strip().splitlines() if line.strip()
            )
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                text += f" ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            text = f"{record.name}: {text}"[:400]
            now = time.monotonic()
            if now - self._recent.get(text, -1e9) < 60.0:
                return
            if len(self._recent) > 500:
                self._recent.clear()
            self._recent[text] = now
            # libp2p's warnings are routine p2p weather (dials failing, peers leaving): DEBUG.
            # Its errors become one-line warnings.
            level = logging.WARNING if record.levelno >= logging.ERROR else logging.DEBUG
            if not self._target.isEnabledFor(level):
                return
            out = logging.LogRecord(
                self._target.name, level, record.pathname, record.lineno, text, None, None,
                record.funcName,
            )
            out.created, out.msecs, out.thread, out.threadName = (
                record.created, record.msecs, record.thread, record.threadName,
            )
            self._target.handle(out)
        except Exception:  # pragma: no cover - logging must never raise
            pass


_tamed = False


def tame_libp2p_logging() -> None:
    """Route libp2p's logging through ``cairn.p2p.libp2p``: warnings and up, one line each.

    Idempotent. Does nothing when ``LIBP2P_DEBUG`` is set (then libp2p's own configuration,
    done at import, is what the user asked for).
    """
    global _tamed
    if _tamed or os.environ.get("LIBP2P_DEBUG"):
        return
    _tamed = True
    root = logging.getLogger("libp2p")
    root.handlers[:] = [_OneLineForwarder()]
    root.setLevel(logging.WARNING)
    root.propagate = False
    # The auto-connector sets itself to INFO and reports every few seconds.
    logging.getLogger("libp2p.network.auto_connector").setLevel(logging.WARNING)


# --------------------------------------------------------------------------------------------
# helpers


def _check_seed(seed: bytes) -> None:
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
        raise P2PError("the host identity must be a 32-byte ed25519 private seed")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _check_ports_free(listen: Iterable[str]) -> None:
    """Refuse fixed TCP ports already in use.

    libp2p binds with SO_REUSEPORT, so a second node on the same port would *share* it (the
    kernel splitting incoming connections between the two) instead of failing.
    """
    import socket

    for addr in listen:
        parts = addr.split("/")
        if len(parts) < 5 or parts[1] not in ("ip4", "ip6") or parts[3] != "tcp" or parts[4] in ("", "0"):
            continue
        family = socket.AF_INET if parts[1] == "ip4" else socket.AF_INET6
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # SO_REUSEADDR: TIME_WAIT leftovers of a previous run are fine; a listener is not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((parts[2], int(parts[4])))
            except OSError as e:
                raise P2PError(f"cannot listen on {addr}: {e.strerror or e}") from None


def _parse_peer_addr(addr: str) -> PeerInfo:
    try:
        ma = multiaddr.Multiaddr(addr)
    except Exception as e:
        raise P2PError(f"bad multiaddr {addr!r}: {_one_line(e)}") from None
    try:
        return info_from_p2p_addr(ma)
    except Exception:
        raise P2PError(f"multiaddr {addr!r} must end with /p2p/<peer id>") from None


def _parse_peer_id(peer_id: str) -> ID:
    try:
        return ID.from_base58(peer_id)
    except Exception:
        raise P2PError(f"bad peer id {peer_id!r}") from None


def _is_stoppable(x: Any) -> bool:
    return x is not None and callable(getattr(x, "stop", None))


# All live hosts, so that a host nobody stopped is stopped at interpreter exit.
_live_hosts: "weakref.WeakSet[P2PHost]" = weakref.WeakSet()


@atexit.register
def _stop_forgotten_hosts() -> None:
    for host in list(_live_hosts):
        host._stop_from_any_thread(timeout=3.0)


# --------------------------------------------------------------------------------------------
# the facade


class P2PHost:
    """An asyncio facade over a py-libp2p host running in its own trio thread.

    One instance is started once and stopped once. Callbacks run on the asyncio loop that
    called :meth:`start`.
    """

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
        tame_logging: bool = True,
    ) -> None:
        _check_seed(bytes(seed))
        if tame_logging:
            tame_libp2p_logging()
        self._seed = bytes(seed)
        self._key_pair = create_new_key_pair(self._seed)
        self._id = ID.from_pubkey(self._key_pair.public_key)
        self.peer_id: str = self._id.to_base58()
        self._listen = list(listen) or list(DEFAULT_LISTEN)
        self._listen_ma: list[multiaddr.Multiaddr] = []
        for a in self._listen:
            try:
                self._listen_ma.append(multiaddr.Multiaddr(a))
            except Exception as e:
                raise P2PError(f"bad listen multiaddr {a!r}: {_one_line(e)}") from None
        self._bootstrap: list[PeerInfo] = [_parse_peer_addr(a) for a in bootstrap]
        self._peerstore_path = Path(peerstore_path) if peerstore_path is not None else None
        self._mdns = mdns
        self._heartbeat = max(0.1, float(heartbeat_interval))
        self._heartbeat_initial = min(0.1, heartbeat_interval)
        self._max_rate = max_messages_per_topic_per_second
        self._dial_timeout = dial_timeout
        self._handler_timeout = handler_timeout
        self._redial_interval = redial_interval
        self._forget_after = forget_after

        # asyncio side
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._thread_done: asyncio.Future[None] | None = None
        self._topics: dict[str, list[GossipHandler]] = {}
        self._topic_queues: dict[str, asyncio.Queue[tuple[str, bytes]]] = {}
        self._asyncio_tasks: set[asyncio.Task[Any]] = set()
        self._req_handlers: dict[str, RequestHandler] = {}
        self._on_connected: list[PeerCallback] = []
        self._on_disconnected: list[PeerCallback] = []

        # shared, guarded by _lock
        self._lock = threading.Lock()
        self._peers: dict[str, dict[str, Any]] = {}
        self._dirty = False
        self._addrs: list[str] = []

        # trio side (set inside the thread)
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop_event: trio.Event | None = None
        self._stop_requested = threading.Event()
        self._root_scope: trio.CancelScope | None = None
        self._host: Any = None
        self._pubsub: Pubsub | None = None
        self._gossipsub: GossipSub | None = None
        self._trio_subscribed: set[str] = set()
        self._discovery_handler: Callable[[PeerInfo], None] | None = None

        self._load_peerstore()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the host in its thread; return once it listens (raise :class:`P2PError` if
        it cannot). Remembered and bootstrap peers are dialed in the background."""
        if self._started:
            raise P2PError("a P2PHost can be started only once")
        _check_ports_free(self._listen)
        self._started = True
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = self._loop.create_future()
        self._thread_done = self._loop.create_future()
        self._thread = threading.Thread(
            target=self._thread_main, args=(ready,), name=f"cairn-p2p-{self.peer_id[-6:]}",
            daemon=True,
        )
        _live_hosts.add(self)
        self._thread.start()
        try:
            await ready
        except BaseException:
            await self.stop()
            raise
        log.info("p2p host %s listening on %s", self.peer_id, ", ".join(self._addrs))

    async def stop(self) -> None:
        """Stop the host: close connections, stop the thread and join it. Idempotent, fast
        (tens of milliseconds), and safe to call from a ``finally`` during cancellation."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        for task in list(self._asyncio_tasks):
            task.cancel()
        self._signal_stop()
        try:
            if self._thread_done is not None and self._thread is not None and self._thread.is_alive():
                try:
                    await asyncio.wait_for(asyncio.shield(self._thread_done), 5.0)
                except asyncio.TimeoutError:
                    log.warning("p2p host thread did not stop within 5 s")
        finally:
            if self._thread is not None:
                self._thread.join(timeout=1.0)
            _live_hosts.discard(self)
        if self._asyncio_tasks:
            await asyncio.gather(*self._asyncio_tasks, return_exceptions=True)

    def _signal_stop(self) -> None:
        self._stop_requested.set()
        token, event = self._token, self._stop_event
        if token is None or event is None:
            return
        try:
            token.run_sync_soon(event.set)
        except trio.RunFinishedError:
            pass

    def _stop_from_any_thread(self, timeout: float) -> None:
        self._stopped = True
        self._signal_stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._started and not self._stopped and self._nursery is not None

    # ---------------------------------------------------------------- the trio thread

    def _thread_main(self, ready: asyncio.Future[None]) -> None:
        failure: BaseException | None = None
        try:
            trio.run(self._trio_main, ready)
        except BaseException as e:  # noqa: BLE001 - reported to the asyncio side
            failure = e
        finally:
            self._nursery = None
            now = time.time()
            with self._lock:
                for p in self._peers.values():
                    if p["connected"]:
                        p["connected"], p["last_seen"] = False, now
            self._save_peerstore()
            if failure is not None and not ready.done():
                self._to_loop(self._resolve, ready, False, self._start_error(failure))
            elif failure is not None:
                log.warning("p2p host stopped on error: %s", _one_line(failure))
            if self._thread_done is not None:
                self._to_loop(self._resolve, self._thread_done, True, None)

    def _start_error(self, e: BaseException) -> P2PError:
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        if isinstance(e, P2PError):
            return e
        return P2PError(f"cannot start the p2p host on {', '.join(self._listen)}: {_one_line(e)}")

    async def _trio_main(self, ready: asyncio.Future[None]) -> None:
        self._stop_event = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        if self._stop_requested.is_set():  # stop() came before the token existed
            self._stop_event.set()
        with trio.CancelScope() as root:
            self._root_scope = root
            host = new_host(
                key_pair=self._key_pair,
                # Noise + yamux only: the default also offers TLS, secio and plaintext.
                sec_opt={
                    NOISE_PROTOCOL_ID: NoiseTransport(
                        self._key_pair, noise_privkey=create_x25519_key_pair().private_key
                    )
                },
                muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
                listen_addrs=self._listen_ma,
                enable_mDNS=self._mdns,
                # One connection per peer: also removes the 250 ms happy-eyeballs wait on
                # every dial (the swarm waits for a second connection otherwise).
                connection_config=ConnectionConfig(
                    max_connections_per_peer=1, dial_timeout=self._dial_timeout
                ),
            )
            self._host = host
            gossipsub = GossipSub(
                protocols=[GOSSIPSUB_V12, GOSSIPSUB_V11, GOSSIPSUB_V10],
                degree=6,
                degree_low=4,
                degree_high=12,
                heartbeat_initial_delay=self._heartbeat_initial,
                heartbeat_interval=self._heartbeat,
                max_messages_per_topic_per_second=self._max_rate,
                # "Adaptive" gossip rewrites the heartbeat to 30-60 s once the mesh has fewer
                # than `degree` peers (any network of under 7 nodes), 30 s after start.
                adaptive_gossip_enabled=False,
            )
            pubsub = Pubsub(host, gossipsub, strict_signing=True)
            self._pubsub, self._gossipsub = pubsub, gossipsub
            host.get_network().register_notifee(_Notifee(self))
            for protocol in self._req_handlers:
                host.set_stream_handler(TProtocol(protocol), self._make_stream_handler(protocol))
            try:
                async with host.run(listen_addrs=self._listen_ma):
                    async with background_trio_service(pubsub):
                        async with background_trio_service(gossipsub):
                            await pubsub.wait_until_ready()
                            # Dialing policy is ours (remembered, bootstrap, mDNS, explicit).
                            auto = getattr(host.get_network(), "auto_connector", None)
                            if auto is not None:
                                await auto.stop()
                            async with trio.open_nursery() as nursery:
                                self._nursery = nursery
                                addrs = _dialable(host.get_addrs())
                                if not addrs:
                                    raise P2PError(f"cannot listen on {', '.join(self._listen)}")
                                with self._lock:
                                    self._addrs = [f"{a}/p2p/{self.peer_id}" for a in addrs]
                                for topic in list(self._topics):
                                    nursery.start_soon(self._trio_subscribe, topic)
                                if self._mdns:
                                    self._start_mdns_dialer()
                                nursery.start_soon(self._initial_dials)
                                nursery.start_soon(self._maintenance)
                                self._to_loop(self._resolve, ready, True, None)
                                await self._stop_event.wait()
                                # Give libp2p a bounded time to close cleanly.
                                root.deadline = trio.current_time() + 2.0
                                await self._close_connections(host)
                                nursery.cancel_scope.cancel()
            finally:
                self._nursery = None
                if self._discovery_handler is not None:
                    peerDiscovery.unregister_peer_discovered_handler(self._discovery_handler)
                seen = getattr(pubsub, "seen_messages", None)
                if _is_stoppable(seen):
                    seen.stop()  # its cleanup thread is never stopped by libp2p
        if not self._stop_event.is_set():
            raise P2PError("the p2p host stopped unexpectedly")

    @staticmethod
    async def _close_connections(host: Any) -> None:
        """Close every muxed connection at once, so peers see us leave now.

        Cancelling libp2p's tasks alone leaves the sockets open until garbage collection
        (peers would keep a dead connection), and ``Swarm.close`` closes connections one by
        one with a 0.1 s sleep each.
        """
        conns = [c for cs in list(host.get_network().connections.values()) for c in cs]
        if not conns:
            return

        async def close(conn: Any) -> None:
            try:
                await conn.muxed_conn.close()
            except Exception:
                pass

        async with trio.open_nursery() as n:
            for conn in conns:
                n.start_soon(close, conn)
            # Yamux sends GO_AWAY and closes the socket, then sleeps 0.1 s (twice, with the
            # swarm's cleanup): wait for the sockets only.
            with trio.move_on_after(1.0):
                for conn in conns:
                    closed = getattr(conn.muxed_conn, "event_closed", None)
                    if closed is not None:
                        await closed.wait()
            n.cancel_scope.cancel()

    # ---------------------------------------------------------------- bridge primitives

    def _run_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start a fire-and-forget task in the host's nursery, from any thread."""

        def spawn() -> None:
            if self._nursery is not None:
                self._nursery.start_soon(fn, *args)

        try:
            if self._token is not None:
                self._token.run_sync_soon(spawn)
        except trio.RunFinishedError:
            pass

    def _to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule ``fn(*args)`` on the asyncio loop from any thread (no-op once it closed)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass

    @staticmethod
    def _resolve(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    async def _in_trio(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(*args)`` in the host's trio thread and return its result here.

        Exceptions come back as raised; a stopping host gives :class:`P2PError`; cancelling
        the calling asyncio task cancels the trio task.
        """
        token, nursery = self._token, self._nursery
        if not self.running or token is None or nursery is None:
            raise P2PError("the p2p host is not running")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        scope_box: list[trio.CancelScope] = []
        cancelled_early = False

        async def runner() -> None:
            with trio.CancelScope() as scope:
                scope_box.append(scope)
                if cancelled_early:
                    scope.cancel()
                try:
                    result = await fn(*args)
                except trio.Cancelled:
                    self._to_loop(self._resolve, fut, False, P2PError("the p2p host stopped"))
                    raise
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    self._to_loop(self._resolve, fut, False, e)
                    return
                self._to_loop(self._resolve, fut, True, result)
            if scope.cancelled_caught:
                self._to_loop(self._resolve, fut, False, P2PError("cancelled"))

        def spawn() -> None:
            n = self._nursery
            if n is None:
                self._to_loop(self._resolve, fut, False, P2PError("the p2p host stopped"))
                return
            n.start_soon(runner)

        try:
            token.run_sync_soon(spawn)
        except trio.RunFinishedError:
            raise P2PError("the p2p host is not running") from None
        try:
            return await fut
        except asyncio.CancelledError:
            cancelled_early = True
            if scope_box:
                try:
                    token.run_sync_soon(scope_box[0].cancel)
                except trio.RunFinishedError:
                    pass
            raise

    async def _call_asyncio(self, fn: Callable[..., Any], *args: Any) -> Any:
        """From trio: run ``fn(*args)`` (sync or async) on the asyncio loop, await its result."""
        loop, token = self._loop, self._token
        if loop is None or loop.is_closed() or token is None:
            raise P2PError("the asyncio loop is gone")

        async def call() -> Any:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        done = trio.Event()

        def wake(_: Any) -> None:
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        coro = call()
        try:
            cf = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:
            coro.close()
            raise P2PError("the asyncio loop is gone") from None
        cf.add_done_callback(wake)
        try:
            await done.wait()
        except trio.Cancelled:
            cf.cancel()
            raise
        return cf.result()

    def _spawn_in_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """On the asyncio loop: call a node callback; keep a reference to an async one."""
        try:
            result = fn(*args)
        except Exception:
            log.exception("p2p callback %r failed", fn)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._asyncio_tasks.add(task)
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._asyncio_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.warning("p2p callback failed: %s", _one_line(exc) if exc else "?")

    # ---------------------------------------------------------------- addresses and peers

    def addrs(self) -> list[str]:
        """Full multiaddrs (with ``/p2p/<id>``) other peers can dial."""
        with self._lock:
            return list(self._addrs)

    def peers(self) -> list[dict[str, Any]]:
        """Known peers (connected now, remembered, or bootstrap): ``peer_id``, ``addrs``,
        ``connected``, ``last_seen`` (unix time or None), ``source``."""
        with self._lock:
            self._refresh_addrs_locked()
            return [
                {
                    "peer_id": pid,
                    "addrs": list(p["addrs"]),
                    "connected": p["connected"],
                    "last_seen": p["last_seen"],
                    "source": p["source"],
                }
                for pid, p in sorted(self._peers.items())
            ]

    def connected_peers(self) -> list[str]:
        with self._lock:
            return sorted(pid for pid, p in self._peers.items() if p["connected"])

    def _peer_entry(self, pid: str, source: str) -> dict[str, Any]:
        p = self._peers.get(pid)
        if p is None:
            p = self._peers[pid] = {
                "addrs": [], "connected": False, "last_seen": None, "source": source,
            }
        return p

    def _remember(self, pid: str, addrs: Iterable[str], source: str) -> None:
        if pid == self.peer_id:
            return
        with self._lock:
            p = self._peer_entry(pid, source)
            for a in map(_strip_p2p, addrs):
                if a not in p["addrs"]:
                    p["addrs"].insert(0, a)
            del p["addrs"][8:]
            self._dirty = True

    def _load_peerstore(self) -> None:
        if self._peerstore_path is None:
            for info in self._bootstrap:
                self._remember(info.peer_id.to_base58(), [str(a) for a in info.addrs], "bootstrap")
            return
        try:
            raw = json.loads(self._peerstore_path.read_text())
            entries = raw.get("peers", {}) if isinstance(raw, dict) else {}
        except FileNotFoundError:
            entries = {}
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable peerstore %s: %s", self._peerstore_path, _one_line(e))
            entries = {}
        now = time.time()
        for pid, e in entries.items():
            try:
                ID.from_base58(pid)
                addrs = [str(multiaddr.Multiaddr(a)) for a in e.get("addrs", [])]
            except Exception:
                continue
            last = e.get("last_seen")
            if not addrs or (isinstance(last, (int, float)) and now - last > self._forget_after):
                continue
            with self._lock:
                p = self._peer_entry(pid, e.get("source", "remembered"))
                p["addrs"] = addrs[:8]
                p["last_seen"] = last if isinstance(last, (int, float)) else None
        for info in self._bootstrap:
            self._remember(info.peer_id.to_base58(), [str(a) for a in info.addrs], "bootstrap")
        self._dirty = False

    def _save_peerstore(self) -> None:
        if self._peerstore_path is None:
            return
        with self._lock:
            self._refresh_addrs_locked()
            data = {
                "version": 1,
                "peers": {
                    pid: {"addrs": p["addrs"], "last_seen": p["last_seen"], "source": p["source"]}
                    for pid, p in sorted(self._peers.items())
                    if p["addrs"]
                },
            }
            self._dirty = False
        try:
            self._peerstore_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._peerstore_path.with_name(self._peerstore_path.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, self._peerstore_path)
        except OSError as e:
            log.warning("cannot save peerstore %s: %s", self._peerstore_path, _one_line(e))

    def _refresh_addrs_locked(self) -> None:
        """Fold the listen addresses identify taught libp2p's peerstore into ours."""
        host = self._host
        if host is None:
            return
        ps = host.get_peerstore()
        for pid, p in self._peers.items():
            if not p["connected"]:
                continue
            try:
                learned = [str(a) for a in ps.addrs(ID.from_base58(pid))]
            except Exception:
                continue
            for a in map(_strip_p2p, learned):
                if "/p2p-circuit" in a or a in p["addrs"] or a in p.get("ephemeral", ()):
                    continue
                p["addrs"].append(a)
            del p["addrs"][8:]

    # ---------------------------------------------------------------- connection events

    def _on_conn(self, conn: Any, up: bool) -> None:
        """Called in trio by the notifee."""
        try:
            pid_obj = conn.muxed_conn.peer_id
        except Exception:
            return
        pid = pid_obj.to_base58()
        if pid == self.peer_id:
            return
        live = bool(self._host.get_network().get_connections(pid_obj)) if self._host else False
        fire: list[PeerCallback] = []
        with self._lock:
            p = self._peer_entry(pid, "inbound" if _is_inbound(conn) else "dialed")
            was = p["connected"]
            p["connected"] = live
            p["last_seen"] = time.time()
            if up:
                remote = _remote_addr(conn)
                if remote and _is_inbound(conn):
                    p.setdefault("ephemeral", set()).add(remote)
            self._dirty = True
            if live and not was:
                fire = list(self._on_connected)
            elif was and not live:
                fire = list(self._on_disconnected)
        for cb in fire:
            self._to_loop(self._spawn_in_loop, cb, pid)

    async def _dial(self, info: PeerInfo, timeout: float | None = None) -> None:
        host = self._host
        network = host.get_network()
        cache = getattr(network, "_negative_peer_cache", None)
        if cache is not None:  # an explicit dial should try again, not read a cached failure
            try:
                cache.evict(str(info.peer_id))
            except Exception:
                pass
        with trio.fail_after(timeout or (self._dial_timeout * 2)):
            await host.connect(info)

    async def _dial_quietly(self, info: PeerInfo, why: str) -> bool:
        try:
            await self._dial(info)
            return True
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, trio.Cancelled):
                raise
            log.debug("dial %s (%s) failed: %s", info.peer_id, why, _one_line(e))
            return False

    async def _initial_dials(self) -> None:
        with self._lock:
            targets = [
                (pid, list(p["addrs"]), p["source"])
                for pid, p in self._peers.items()
                if p["addrs"] and not p["connected"]
            ]
        async with trio.open_nursery() as n:
            for pid, addrs, source in targets:
                try:
                    info = PeerInfo(ID.from_base58(pid), [multiaddr.Multiaddr(a) for a in addrs])
                except Exception:
                    continue
                n.start_soon(self._dial_quietly, info, source)

    async def _maintenance(self) -> None:
        """Flush the peerstore when it changed; re-dial bootstrap peers that dropped."""
        last_redial = trio.current_time()
        while True:
            await trio.sleep(1.0)
            if self._dirty:
                self._save_peerstore()
            if self._bootstrap and trio.current_time() - last_redial >= self._redial_interval:
                last_redial = trio.current_time()
                for info in self._bootstrap:
                    with self._lock:
                        p = self._peers.get(info.peer_id.to_base58())
                        connected = bool(p and p["connected"])
                    if not connected:
                        self._nursery.start_soon(self._dial_quietly, info, "bootstrap")

    def _start_mdns_dialer(self) -> None:
        token = self._token

        def discovered(info: PeerInfo) -> None:  # runs on zeroconf's thread
            if info.peer_id == self._id:
                return

            def go() -> None:
                if self._nursery is None:
                    return
                pid = info.peer_id.to_base58()
                self._remember(pid, [str(a) for a in info.addrs], "mdns")
                with self._lock:
                    if self._peers[pid]["connected"]:
                        return
                self._nursery.start_soon(self._dial_quietly, info, "mdns")

            try:
                token.run_sync_soon(go)
            except trio.RunFinishedError:
                pass

        self._discovery_handler = discovered
        peerDiscovery.register_peer_discovered_handler(discovered)

    def on_peer_connected(self, callback: PeerCallback) -> None:
        """Call ``callback(peer_id)`` on the asyncio loop whenever a peer goes from no
        connection to one (use it to send catch-up announcements: gossip does not replay)."""
        self._on_connected.append(callback)

    def on_peer_disconnected(self, callback: PeerCallback) -> None:
        """Call ``callback(peer_id)`` when the last connection to a peer closes."""
        self._on_disconnected.append(callback)

    # ---------------------------------------------------------------- connect / ping

    async def connect(self, addr: str, timeout: float | None = None) -> str:
        """Dial a full multiaddr (``…/p2p/<peer id>``); return the peer id. Raises
        :class:`P2PError` with a one-line reason when the address is bad or the peer is
        unreachable."""
        info = _parse_peer_addr(addr)
        pid = info.peer_id.to_base58()
        if pid == self.peer_id:
            raise P2PError("cannot connect to this node itself")
        timeout = timeout or self._dial_timeout * 2
        try:
            await self._in_trio(self._dial, info, timeout)
        except (trio.TooSlowError, TimeoutError):
            raise P2PTimeout(f"cannot reach {pid} at {addr}: no answer within {timeout:g} s") from None
        except P2PError:
            raise
        except Exception as e:
            raise P2PError(f"cannot reach {pid} at {addr}: {_dial_reason(e)}") from None
        self._remember(pid, [str(a) for a in info.addrs], "dialed")
        return pid

    async def disconnect(self, peer_id: str) -> None:
        pid = _parse_peer_id(peer_id)

        async def close() -> None:
            await self._host.disconnect(pid)

        await self._in_trio(close)

    async def ping(self, peer_id: str, timeout: float = 10.0) -> float:
        """Round-trip time to a connected (or dialable) peer over ``/ipfs/ping/1.0.0``, in ms."""
        pid = _parse_peer_id(peer_id)

        async def do_ping() -> float:
            with trio.fail_after(timeout):
                stream = await self._host.new_stream(pid, [PING_PROTOCOL_ID])
                try:
                    payload = secrets.token_bytes(32)
                    t0 = time.perf_counter()
                    await stream.write(payload)
                    back = await read_exactly(stream, 32)
                    rtt = (time.perf_counter() - t0) * 1000.0
                finally:
                    with trio.CancelScope(shield=True):
                        try:
                            await stream.close()
                        except Exception:
                            pass
                if back != payload:
                    raise P2PError(f"ping {peer_id}: wrong payload echoed")
                return rtt

        return await self._guard(f"ping {peer_id}", timeout, do_ping)

    async def _guard(self, what: str, timeout: float, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await self._in_trio(fn)
        except (trio.TooSlowError, TimeoutError):
            raise P2PTimeout(f"{what}: no answer within {timeout:g} s") from None
        except P2PError:
            raise
        except Exception as e:
            raise P2PError(f"{what}: {_dial_reason(e)}") from None

    # ---------------------------------------------------------------- gossip

    def subscribe(self, topic: str, handler: GossipHandler) -> None:
        """Call ``handler(sender_peer_id, data)`` on the asyncio loop for every message on
        ``topic`` from another peer. ``sender_peer_id`` is the message's origin, whose
        signature gossipsub verified (strict signing). Messages of one topic are handled one
        at a time, in arrival order. May be called before or after :meth:`start`."""
        first = topic not in self._topics
        self._topics.setdefault(topic, []).append(handler)
        if first and self.running:
            self._ensure_topic_worker(topic)
            self._run_soon(self._trio_subscribe, topic)

    def _ensure_topic_worker(self, topic: str) -> None:
        if topic in self._topic_queues or self._loop is None:
            return
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self._topic_queues[topic] = queue
        task = self._loop.create_task(self._topic_worker(topic, queue))
        self._asyncio_tasks.add(task)
        task.add_done_callback(self._asyncio_tasks.discard)

    async def _topic_worker(self, topic: str, queue: asyncio.Queue[tuple[str, bytes]]) -> None:
        while True:
            sender, data = await queue.get()
            for handler in list(self._topics.get(topic, ())):
                try:
                    result = handler(sender, data)
                    if inspect.isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("gossip handler for %s failed", topic)

    async def _trio_subscribe(self, topic: str) -> None:
        if topic in self._trio_subscribed or self._pubsub is None:
            return
        self._trio_subscribed.add(topic)
        self._to_loop(self._ensure_topic_worker, topic)
        sub = await self._pubsub.subscribe(topic)
        while True:
            msg = await sub.get()
            try:
                sender = ID(msg.from_id).to_base58()
            except Exception:
                continue
            if sender == self.peer_id:
                continue  # our own publication, delivered back by libp2p
            with self._lock:
                p = self._peers.get(sender)
                if p is not None:
                    p["last_seen"] = time.time()
            self._to_loop(self._enqueue, topic, sender, bytes(msg.data))

    def _enqueue(self, topic: str, sender: str, data: bytes) -> None:
        queue = self._topic_queues.get(topic)
        if queue is not None:
            queue.put_nowait((sender, data))

    async def publish(self, topic: str, data: bytes) -> None:
        """Gossip ``data`` (at most :data:`MAX_PUBLISH_BYTES`) on ``topic``, signed by this
        node's key. Returns once handed to gossipsub; delivery is best effort."""
        data = bytes(data)
        if len(data) > MAX_PUBLISH_BYTES:
            raise P2PError(
                f"gossip message of {len(data)} bytes is over {MAX_PUBLISH_BYTES}: announce CIDs, not data"
            )

        async def pub() -> None:
            await self._pubsub.publish(topic, data)  # type: ignore[union-attr]

        await self._in_trio(pub)

    def topic_peers(self, topic: str) -> list[str]:
        """Peers known to be subscribed to ``topic`` (as their subscriptions reached us)."""
        ps = self._pubsub
        if ps is None:
            return []
        try:
            return sorted(p.to_base58() for p in list(ps.peer_topics.get(topic, ())))
        except RuntimeError:  # changed size while iterating in the other thread
            return sorted(p.to_base58() for p in list(ps.peer_topics.get(topic, ())))

    async def wait_for_topic_peers(self, topic: str, count: int = 1, timeout: float = 10.0) -> list[str]:
        """Wait until at least ``count`` peers are subscribed to ``topic`` (else P2PTimeout)."""
        deadline = time.monotonic() + timeout
        while True:
            peers = self.topic_peers(topic)
            if len(peers) >= count:
                return peers
            if time.monotonic() >= deadline:
                raise P2PTimeout(f"{len(peers)} of {count} peers on {topic} after {timeout:g} s")
            await asyncio.sleep(0.02)

    # ---------------------------------------------------------------- request / response

    def set_handler(self, protocol: str, handler: RequestHandler) -> None:
        """Answer requests on ``protocol``: ``await handler(peer_id, request) -> response``
        runs on the asyncio loop. An exception (or taking longer than ``handler_timeout``)
        resets the stream: the asker sees an error. May be called before or after start."""
        new = protocol not in self._req_handlers
        self._req_handlers[protocol] = handler
        if new and self.running:
            stream_handler = self._make_stream_handler(protocol)
            try:
                self._token.run_sync_soon(  # type: ignore[union-attr]
                    self._host.set_stream_handler, TProtocol(protocol), stream_handler
                )
            except trio.RunFinishedError:
                pass

    def _make_stream_handler(self, protocol: str) -> Callable[[Any], Awaitable[None]]:
        async def handle(stream: Any) -> None:
            pid = stream.muxed_conn.peer_id.to_base58()
            rw = VarIntLengthMsgReadWriter(stream, MAX_FRAME_BYTES)
            try:
                while True:
                    try:
                        with trio.fail_after(self._handler_timeout):
                            request = await rw.read_msg()
                    except Exception:
                        break  # EOF (the asker is done), reset, or idle stream
                    handler = self._req_handlers.get(protocol)
                    if handler is None:
                        raise P2PError(f"no handler for {protocol}")
                    with self._lock:
                        p = self._peers.get(pid)
                        if p is not None:
                            p["last_seen"] = time.time()
                    with trio.fail_after(self._handler_timeout):
                        response = await self._call_asyncio(handler, pid, request)
                    if not isinstance(response, (bytes, bytearray, memoryview)):
                        raise P2PError(f"handler for {protocol} returned {type(response).__name__}, not bytes")
                    await rw.write_msg(bytes(response))
                with trio.CancelScope(shield=True):
                    await stream.close()
            except BaseException as e:
                if not isinstance(e, trio.Cancelled):
                    log.debug("%s request from %s failed: %s", protocol, pid, _one_line(e))
                with trio.CancelScope(shield=True):
                    try:
                        await stream.reset()
                    except Exception:
                        pass
                if isinstance(e, trio.Cancelled):
                    raise

        return handle

    async def _trio_request(self, pid: ID, protocol: str, data: bytes, timeout: float) -> bytes:
        with trio.fail_after(timeout):
            stream = await self._host.new_stream(pid, [TProtocol(protocol)])
            try:
                rw = VarIntLengthMsgReadWriter(stream, MAX_FRAME_BYTES)
                await rw.write_msg(data)
                response = await rw.read_msg()
            except BaseException:
                with trio.CancelScope(shield=True):
                    try:
                        await stream.reset()
                    except Exception:
                        pass
                raise
            with trio.CancelScope(shield=True):
                try:
                    await stream.close()
                except Exception:
                    pass
            return response

    async def request(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> bytes:
        """Send one request frame on a new stream and return the response frame. Raises
        :class:`P2PTimeout` past ``timeout`` seconds, :class:`P2PError` on any failure."""
        pid = _parse_peer_id(peer_id)
        data = bytes(data)
        if len(data) > MAX_FRAME_BYTES:
            raise P2PError(f"request of {len(data)} bytes is over {MAX_FRAME_BYTES}")
        return await self._guard(
            f"{protocol} to {peer_id}", timeout,
            lambda: self._trio_request(pid, protocol, data, timeout),
        )

    async def send_direct(self, peer_id: str, protocol: str, data: bytes, timeout: float = 10.0) -> None:
        """A request whose answer is ignored (the receiving handler may return ``b""``)."""
        await self.request(peer_id, protocol, data, timeout)

    async def ask_all(
        self, protocol: str, data: bytes, timeout: float, peers: Iterable[str] | None = None
    ) -> dict[str, bytes | Exception]:
        """Ask every connected peer (or ``peers``) at once; return by the deadline with each
        peer's answer, or the exception it failed with (:class:`P2PTimeout` if it had not
        answered in time)."""
        data = bytes(data)
        targets = list(peers) if peers is not None else self.connected_peers()
        targets = [t for t in dict.fromkeys(targets) if t != self.peer_id]
        if not targets:
            return {}
        results: dict[str, bytes | Exception] = {}
        ids: dict[str, ID] = {}
        for t in targets:
            try:
                ids[t] = _parse_peer_id(t)
            except P2PError as e:
                results[t] = e

        async def one(t: str) -> None:
            try:
                results[t] = await self._trio_request(ids[t], protocol, data, timeout + 1.0)
            except trio.Cancelled:
                raise
            except Exception as e:  # noqa: BLE001
                results[t] = P2PError(f"{protocol} to {t}: {_dial_reason(e)}")

        async def fan_out() -> dict[str, bytes | Exception]:
            with trio.move_on_after(timeout):
                async with trio.open_nursery() as n:
                    for t in ids:
                        n.start_soon(one, t)
            for t in ids:
                results.setdefault(t, P2PTimeout(f"{protocol} to {t}: no answer within {timeout:g} s"))
            return dict(results)

        return await self._in_trio(fan_out)


# --------------------------------------------------------------------------------------------


class _Notifee:
    """libp2p network notifee: connection up/down → :meth:`P2PHost._on_conn` (in trio)."""

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

    async def listen(self, network: Any, ma: Any) -> None:
        pass

    async def listen_close(self, network: Any, ma: Any) -> None:
        pass


def _dialable(addrs: Iterable[Any]) -> list[str]:
    """Listen addresses as others can dial them: wildcards expanded to interface addresses."""
    from libp2p.utils.address_validation import expand_wildcard_address

    out: list[str] = []
    for a in addrs:
        text = _strip_p2p(str(a))
        parts = text.split("/")
        if len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[2] in ("0.0.0.0", "::"):
            loopback = "127.0.0.1" if parts[1] == "ip4" else "::1"
            try:
                expanded = [_strip_p2p(str(x)) for x in expand_wildcard_address(multiaddr.Multiaddr(text))]
            except Exception:
                expanded = []
            candidates = [x for x in expanded if x != text] + ["/".join(parts[:2] + [loopback] + parts[3:])]
        else:
            candidates = [text]
        out.extend(c for c in candidates if c not in out)
    return out


def _strip_p2p(addr: str) -> str:
    """``/ip4/…/tcp/…/p2p/<id>`` → ``/ip4/…/tcp/…`` (the peer id is the table's key)."""
    i = addr.find("/p2p/")
    return addr[:i] if i > 0 else addr


def _remote_addr(conn: Any) -> str | None:
    try:
        ip, port = conn.muxed_conn.get_remote_address()
    except Exception:
        return None
    family = "ip6" if ":" in str(ip) else "ip4"
    return f"/{family}/{ip}/tcp/{port}"


def _is_inbound(conn: Any) -> bool:
    try:
        return not conn.muxed_conn.is_initiator
    except Exception:
        return False


def _dial_reason(e: BaseException) -> str:
    """A one-line reason from libp2p's nested dial/stream errors."""
    msgs: list[str] = []
    seen: set[int] = set()

    def walk(x: BaseException | None, depth: int) -> None:
        if x is None or id(x) in seen or depth > 8:
            return
        seen.add(id(x))
        msgs.append(_one_line(x))
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


_REASONS: list[tuple[tuple[str, ...], str]] = [
    (("Peer ID mismatch", "peer id mismatch"), "the peer at that address has another peer id"),
    (("negative cache",), "peer recently unreachable; try again in a minute"),
    (("protocols not supported", "protocol not supported"), "the peer does not speak that protocol"),
    (("No valid connections", "No known addresses"), "not connected and no known address"),
    (("failed to negotiate the secure protocol", "upgrade security"),
     "security handshake failed (not a libp2p peer with Noise?)"),
    (("all attempts to connect", "Connection refused", "Connect call failed", "OpenConnectionError",
      "fail to open connection"), "connection refused"),
    (("StreamReset", "stream reset", "StreamEOF", "IncompleteReadError"), "the peer closed the stream"),
]
