"""Cairn's guards around py-libp2p 0.8.1's connections, streams and frames (``docs/p2p.md`` "Limits of the host").

py-libp2p 0.8.1, as pinned, left four holes a single hostile peer could use (measured against a node):

- the swarm takes an inbound-connection slot at accept and, after a successful upgrade, holds it until the swarm
  stops (its handler waits for the swarm's end, not the connection's): 250 connections over the node's lifetime
  and every later one was closed at accept;
- yamux buffers every DATA frame a peer sends, past the receive window it granted (it logs, then buffers);
- any number of streams may be opened on one connection (the swarm's only bound, 10,000 streams, is shared by all
  peers: one peer holding them starves the others);
- a request frame being received is buffered whole, whatever the number of such frames at once.

Why guards in Cairn's host rather than a patched copy of the dependency or another stack: the faults are in a few
places whose inputs Cairn can see (the accepted socket, the secured byte stream under yamux, the request streams
Cairn reads itself), so each guard wraps one of them without touching py-libp2p's files, keeps the pinned wheel as
published, and fails loudly (tests in ``tests/integration/test_p2p_guard.py``) if a new py-libp2p moves what it
relies on: ``Swarm._do_handle_inbound_connection``, ``Swarm.upgrader.muxer_multistream``, ``Yamux.streams`` and
``YamuxStream.recv_window``. Moving the transport to another stack (go-libp2p through Kubo's ``p2p`` streams)
would trade these for a daemon protocol Cairn does not own.

The guards (all in the host's trio thread, so plain counters need no lock):

- :func:`serve_inbound`: the inbound handler holds the slot while *its* connection lives, and a read that finds the
  connection closed says so at once (py-libp2p's ``read_exactly`` retried it 100 times: a short connection cost
  the trio thread about 10 ms, 6 ms without the retries, measured);
- :class:`GuardedYamux` (installed with :class:`GuardedMuxer`): a frame gate between the secured connection and
  yamux's reader sees every frame header before yamux buffers a byte. DATA past the window granted closes the
  connection (go-yamux does the same); DATA for a stream this side closed or reset is read and dropped; a stream
  beyond the per-connection or total inbound stream budget is reset at once; the receive window never grows past
  the protocol's initial 256 KiB (py-libp2p's auto-tuning doubles it toward 16 MiB on any read within four
  round-trip times, and the peer sets the round-trip time);
- :class:`FrameBudget` and :func:`read_request_frame`: a request frame's length is reserved against a per-peer
  and a total budget before its body is read, and the body must arrive within a deadline.
"""

from __future__ import annotations

import enum
import logging
import struct
import weakref
from dataclasses import dataclass
from typing import Any, cast

import trio
from libp2p.abc import ISecureConn
from libp2p.io.exceptions import IncompleteReadError
from libp2p.io.utils import read_exactly
from libp2p.network.connection.exceptions import RawConnError
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.stream_muxer.muxer_multistream import MuxerMultistream
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, Yamux
from libp2p.utils.varint import decode_uvarint

from node.support.errors import one_line
from p2p.errors import FrameRefused, P2PError

log = logging.getLogger("cairn.p2p")

_HEADER = struct.Struct("!BBHII")  # yamux: version, type, flags, stream id, length
_DATA, _WINDOW_UPDATE, _GO_AWAY = 0x0, 0x1, 0x3
_SYN, _RST = 0x1, 0x8
_GO_AWAY_PROTOCOL_ERROR = 0x1
_DISCARD_CHUNK = 64 * 1024


@dataclass(frozen=True)
class HostLimits:
    """The host's connection, stream and frame budgets (``peers.*`` settings; defaults as there)."""

    inbound_connections: int = 250
    streams_per_connection: int = 128
    streams_total: int = 1024
    frame_bytes_total: int = 64 * 1024 * 1024
    frame_bytes_per_peer: int = 8 * 1024 * 1024
    frame_timeout: float = 10.0


# ==================================================================== inbound connections


class _EofIsFinal(RawConnection):
    """An inbound raw connection whose empty read raises: py-libp2p's ``read_exactly`` retries an empty read 100
    times before it gives up, so every peer that hung up cost the trio thread 100 reads."""

    async def read(self, n: int | None = None) -> bytes:
        data: bytes = await super().read(n)
        if not data and n != 0:
            raise IncompleteReadError("the peer closed the connection", expected_bytes=n or 1, received_bytes=0)
        return data


def serve_inbound(swarm: Any) -> None:
    """Replace the swarm's inbound handler by :func:`_serve_inbound` (the same steps for TCP: upgrade, register),
    which returns when its connection closes, so the swarm's ``finally`` gives the inbound slot back."""

    async def handle(read_write_closer: Any, maddr: Any, failure_event: Any) -> None:
        await _serve_inbound(swarm, read_write_closer, maddr)

    if not hasattr(swarm, "_do_handle_inbound_connection"):  # a py-libp2p that moved it: refuse to run unguarded
        raise P2PError("this py-libp2p has no Swarm._do_handle_inbound_connection: the inbound guard cannot apply")
    swarm._do_handle_inbound_connection = handle


async def _serve_inbound(swarm: Any, read_write_closer: Any, maddr: Any) -> None:
    raw = _EofIsFinal(read_write_closer, False)
    try:
        muxed = await swarm.upgrade_inbound_raw_conn(raw, maddr)
    except Exception as e:  # noqa: BLE001  a failed handshake, a refusal, a timeout: this connection is over
        log.debug("inbound connection on %s not upgraded: %s", maddr, one_line(e))
        await _close_quietly(raw)
        return
    await muxed.event_closed.wait()  # the slot is this connection's while it lives, and only then


async def _close_quietly(conn: Any) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await conn.close()
        except Exception as e:  # noqa: BLE001  already closed by the peer: nothing left to close
            log.debug("closing an inbound connection: %s", one_line(e))


# ==================================================================== streams and frames under yamux


class StreamGuard:
    """The inbound stream budgets of one host, shared by all its connections; counts what it refused."""

    def __init__(self, limits: HostLimits) -> None:
        self.limits = limits
        self._muxes: weakref.WeakSet[GuardedYamux] = weakref.WeakSet()
        self.streams_refused = 0
        self.window_violations = 0

    def add(self, mux: GuardedYamux) -> None:
        self._muxes.add(mux)

    def admits(self, mux: GuardedYamux) -> bool:
        """Whether ``mux`` may accept one more inbound stream."""
        if mux.inbound_streams() >= self.limits.streams_per_connection:
            return False
        muxes = list(self._muxes)
        if sum(len(m.streams) for m in muxes) < self.limits.streams_total:  # a cheap upper bound first
            return True
        return sum(m.inbound_streams() for m in muxes) < self.limits.streams_total


class _Verdict(enum.Enum):
    PASS = "pass"  # hand the frame to yamux
    DROP = "drop"  # read its body and forget it
    REFUSE = "refuse"  # a new stream over budget: reset it, drop its body
    VIOLATION = "violation"  # past the receive window: close the connection


class GuardedYamux(Yamux):
    """py-libp2p's Yamux reading through a :class:`_FrameGate`, with inbound stream budgets and a receive window
    that does not grow."""

    def __init__(
        self,
        secured_conn: Any,
        peer_id: Any,
        is_initiator: bool | None = None,
        on_close: Any = None,
        *,
        guard: StreamGuard,
    ) -> None:
        gate = cast(ISecureConn, _FrameGate(secured_conn, self))  # duck-typed: reads judged, the rest delegated
        super().__init__(gate, peer_id, is_initiator=is_initiator, on_close=on_close)
        self.guard = guard
        guard.add(self)
        self._warned = False

    def inbound_streams(self) -> int:
        return sum(1 for s in list(self.streams.values()) if not s.is_initiator)

    async def open_stream(self) -> Any:
        stream = await super().open_stream()
        self._tame(stream)
        return stream

    def _tame(self, stream: Any) -> None:
        """No window growth past the initial 256 KiB for this stream (instance attributes: the stream class is
        created inside yamux's reader, by name)."""
        if vars(stream).get("_apply_autotune_epoch") is _no_growth:
            return
        stream.target_recv_window = DEFAULT_WINDOW_SIZE
        stream._apply_autotune_epoch = _no_growth

    def judge(self, typ: int, flags: int, sid: int, length: int) -> _Verdict:
        """What to do with a frame, from its header, before yamux reads its body."""
        if typ not in (_DATA, _WINDOW_UPDATE):
            return _Verdict.PASS
        stream = self.streams.get(sid)
        if stream is not None:
            self._tame(stream)
        if flags & _SYN and stream is None:
            if not self.guard.admits(self):
                return _Verdict.REFUSE
            return _Verdict.VIOLATION if typ == _DATA and length > DEFAULT_WINDOW_SIZE else _Verdict.PASS
        if typ != _DATA or length == 0 or stream is None:
            return _Verdict.PASS  # yamux reads and drops DATA for a stream it does not know
        if stream.closed or stream.recv_closed or stream.reset_received:
            return _Verdict.DROP  # nobody reads it any more: buffering it only held memory until the peer left
        return _Verdict.VIOLATION if length > stream.recv_window else _Verdict.PASS

    async def refuse(self, sid: int) -> None:
        self.guard.streams_refused += 1
        if not self._warned:
            self._warned = True
            log.warning(
                "peer %s opened more streams than its budget (%d per connection, %d in all): resetting the extra",
                self.peer_id,
                self.guard.limits.streams_per_connection,
                self.guard.limits.streams_total,
            )
        await self._write_frame(_HEADER.pack(0, _WINDOW_UPDATE, _RST, sid, 0))

    async def violated(self, sid: int, length: int) -> None:
        self.guard.window_violations += 1
        stream = self.streams.get(sid)
        window = stream.recv_window if stream is not None else DEFAULT_WINDOW_SIZE
        log.warning(
            "peer %s sent a %d-byte frame on stream %d past its %d-byte receive window: connection closed",
            self.peer_id,
            length,
            sid,
            window,
        )
        try:
            await self._write_frame(_HEADER.pack(0, _GO_AWAY, 0, 0, _GO_AWAY_PROTOCOL_ERROR))
        except Exception as e:  # noqa: BLE001  the connection is being dropped either way
            log.debug("GO_AWAY to %s: %s", self.peer_id, one_line(e))


def _no_growth(buffered: int) -> int:
    """Stands in for ``YamuxStream._apply_autotune_epoch``: never a larger window (the extra credit is 0)."""
    return 0


class _FrameGate:
    """The secured connection as yamux's reader sees it: every frame header is judged (:meth:`GuardedYamux.judge`)
    before yamux reads it, and a frame that is not passed on never reaches yamux's buffers. Writes, closing and
    addresses go straight to the secured connection."""

    def __init__(self, conn: Any, mux: GuardedYamux) -> None:
        self._conn = conn
        self._mux = mux
        self._head = b""  # the header of a passed frame, not yet read by yamux
        self._body = 0  # bytes of the passed frame's body yamux has yet to read

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def read(self, n: int | None = None) -> bytes:
        if not self._head and self._body == 0:
            await self._next_passed_frame()
        if self._head:
            take = len(self._head) if n is None or n < 0 else n
            out, self._head = self._head[:take], self._head[take:]
            return out
        want = self._body if n is None or n < 0 else min(n, self._body)
        data: bytes = await self._conn.read(want)
        self._body -= len(data)
        return data

    async def _next_passed_frame(self) -> None:
        """Read headers until one is passed; yamux reads headers only here, so any error closes the connection."""
        while True:
            header = await read_exactly(self._conn, _HEADER.size)
            _, typ, flags, sid, length = _HEADER.unpack(header)
            verdict = self._mux.judge(typ, flags, sid, length)
            body = length if typ == _DATA else 0
            if verdict is _Verdict.PASS:
                self._head, self._body = header, body
                return
            if verdict is _Verdict.VIOLATION:
                await self._mux.violated(sid, length)
                raise RawConnError(f"receive window exceeded on stream {sid}")
            if verdict is _Verdict.REFUSE:
                await self._mux.refuse(sid)
            await self._discard(body)

    async def _discard(self, n: int) -> None:
        while n > 0:
            chunk: bytes = await self._conn.read(min(n, _DISCARD_CHUNK))
            if not chunk:
                raise IncompleteReadError("the peer closed the connection", expected_bytes=n, received_bytes=0)
            n -= len(chunk)


class GuardedMuxer(MuxerMultistream):
    """The swarm's muxer negotiation, building a :class:`GuardedYamux`: py-libp2p's own ``new_conn`` builds its
    ``Yamux`` by name for ``/yamux/1.0.0``, whatever class ``muxer_opt`` gave."""

    def __init__(self, guard: StreamGuard, negotiate_timeout: int) -> None:
        from libp2p.custom_types import TProtocol
        from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID

        super().__init__({TProtocol(PROTOCOL_ID): GuardedYamux}, negotiate_timeout)
        self.guard = guard

    async def new_conn(self, conn: Any, peer_id: Any) -> Any:
        protocol, _ = await self._selector.select(conn, conn.is_initiator, self.negotiate_timeout)
        muxed = GuardedYamux(conn, peer_id, is_initiator=conn.is_initiator, on_close=_nothing, guard=self.guard)
        return self._annotate_connection(muxed, conn, protocol)


async def _nothing() -> None:
    """yamux's ``on_close``: the swarm learns of the close from the connection itself."""


def install(swarm: Any, guard: StreamGuard) -> None:
    """Put the guards on a swarm built by ``new_host`` (before it runs)."""
    upgrader = swarm.upgrader
    upgrader.muxer_multistream = GuardedMuxer(guard, upgrader.muxer_multistream.negotiate_timeout)
    serve_inbound(swarm)


# ==================================================================== request frames


class FrameBudget:
    """Bytes of request frames being received now, in all and per peer: a frame's whole length is reserved
    before its body is read, so partial frames never hold more than the budget.

    A small frame (at most the budget shared by the stream budget: 64 MiB / 1024 streams = 64 KiB by default) is
    not reserved: all streams at once cannot hold more than one budget of them, and lookups, the small requests
    honest peers send most, still get through while hostile peers hold the budget."""

    def __init__(self, limits: HostLimits) -> None:
        self.limits = limits
        self.small = limits.frame_bytes_total // max(1, limits.streams_total)
        self.used = 0
        self._by_peer: dict[str, int] = {}
        self.refused = 0

    def take(self, peer: str, n: int) -> bool:
        if n <= self.small:
            return True
        mine = self._by_peer.get(peer, 0)
        if mine + n > self.limits.frame_bytes_per_peer or self.used + n > self.limits.frame_bytes_total:
            self.refused += 1
            return False
        self._by_peer[peer] = mine + n
        self.used += n
        return True

    def give(self, peer: str, n: int) -> None:
        if n <= self.small:
            return
        left = self._by_peer.get(peer, 0) - n
        if left > 0:
            self._by_peer[peer] = left
        else:
            self._by_peer.pop(peer, None)
        self.used -= n


async def read_request_frame(
    stream: Any, peer: str, budget: FrameBudget, max_bytes: int, idle_timeout: float
) -> bytes | None:
    """The next uvarint-length-prefixed request frame on ``stream``; None when the asker is done (end of stream,
    reset, or idle past ``idle_timeout``). :class:`FrameRefused` for a frame over ``max_bytes`` or the budget;
    ``trio.TooSlowError`` when its body takes longer than the budget's ``frame_timeout``."""
    try:
        with trio.fail_after(idle_timeout):
            length = await _read_uvarint(stream)
    except Exception:  # noqa: BLE001  EOF, reset or idle: the asker is done
        return None
    if length > max_bytes:
        raise FrameRefused(f"a {length}-byte frame is over the {max_bytes}-byte limit")
    if not budget.take(peer, length):
        raise FrameRefused(f"a {length}-byte frame is over the budget for frames being received")
    try:
        with trio.fail_after(budget.limits.frame_timeout):
            return await _read_body(stream, length)
    finally:
        budget.give(peer, length)


async def _read_uvarint(stream: Any) -> int:
    prefix = b""
    for _ in range(10):
        byte: bytes = await stream.read(1)
        if not byte:
            raise IncompleteReadError("end of stream", expected_bytes=1, received_bytes=0)
        prefix += byte
        if not byte[0] & 0x80:
            return int(decode_uvarint(prefix))
    raise FrameRefused("a frame length over 10 bytes")


async def _read_body(stream: Any, length: int) -> bytes:
    body = bytearray()
    while len(body) < length:
        chunk: bytes = await stream.read(length - len(body))
        if not chunk:
            raise IncompleteReadError(
                "the stream ended inside a frame", expected_bytes=length, received_bytes=len(body)
            )
        body += chunk
    return bytes(body)


class MeteredStream:
    """A stream another reader (py-libp2p's pubsub) reads uvarint-prefixed frames from, with each frame reserved
    against the :class:`FrameBudget` as :func:`read_request_frame` does: the length is read here first, a frame
    that does not fit raises :class:`FrameRefused`, and a body slower than the budget's ``frame_timeout`` raises
    ``trio.TooSlowError``; the reader sees the same bytes. Everything but ``read`` is the stream's own.
    :meth:`release` gives back what a frame cut short still holds."""

    def __init__(self, stream: Any, peer: str, budget: FrameBudget, max_bytes: int) -> None:
        self._stream = stream
        self._peer = peer
        self._budget = budget
        self._max = max_bytes
        self._prefix = b""  # a frame's length prefix, not yet handed to the reader
        self._left = 0  # bytes of the current frame's body not yet read
        self._held = 0  # bytes reserved for the current frame
        self._deadline = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def read(self, n: int | None = None) -> bytes:
        if not self._prefix and self._left == 0:
            self.release()
            if not await self._next_frame():
                return b""  # end of stream: the reader says so in its own words
        if self._prefix:
            take = len(self._prefix) if n is None or n < 0 else n
            out, self._prefix = self._prefix[:take], self._prefix[take:]
            return out
        with trio.fail_at(self._deadline):
            data: bytes = await self._stream.read(self._left if n is None or n < 0 else min(n, self._left))
        self._left -= len(data)
        if self._left == 0:
            self.release()
        return data

    async def _next_frame(self) -> bool:
        prefix = b""
        while not prefix or prefix[-1] & 0x80:
            if len(prefix) == 10:
                raise FrameRefused("a frame length over 10 bytes")
            byte: bytes = await self._stream.read(1)
            if not byte:
                return False
            prefix += byte
        length = int(decode_uvarint(prefix))
        if length > self._max:
            raise FrameRefused(f"a {length}-byte frame is over the {self._max}-byte limit")
        if not self._budget.take(self._peer, length):
            raise FrameRefused(f"a {length}-byte frame is over the budget for frames being received")
        self._prefix, self._left, self._held = prefix, length, length
        self._deadline = trio.current_time() + self._budget.limits.frame_timeout
        return True

    def release(self) -> None:
        if self._held:
            self._budget.give(self._peer, self._held)
            self._held = 0
