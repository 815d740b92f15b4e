"""Cairn's request/response protocols over libp2p streams: one uvarint-prefixed request frame, one response
frame. The handlers answering them (each request read in trio against the frame budget, the node's handler run on
the asyncio loop) and the requests sent, on a new stream or on one kept open per peer (``reuse_streams``).

:class:`KeptStreams` decides which kept stream a request may take, which is too old to use and which go with a
peer; it does no IO, so unit tests drive it with a clock of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import trio

from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p.custom_types import TProtocol  # noqa: E402
from libp2p.peer.id import ID  # noqa: E402
from libp2p.utils.varint import encode_varint_prefixed  # noqa: E402

from node.support.errors import one_line  # noqa: E402
from p2p import failures  # noqa: E402
from p2p.bridge import TrioThread  # noqa: E402
from p2p.callbacks import RequestHandler  # noqa: E402
from p2p.errors import P2PError, P2PTimeout  # noqa: E402
from p2p.guard import FrameBudget, read_request_frame  # noqa: E402
from p2p.multiaddrs import parse_peer_id  # noqa: E402
from p2p.peers import PeerTable  # noqa: E402
from p2p.streams import MAX_FRAME_BYTES, close_stream, read_frame, reset_stream  # noqa: E402

log = logging.getLogger("cairn.p2p")

S = TypeVar("S")
Key = tuple[str, str]  # (peer id, protocol)

# A kept request stream (``reuse_streams``) idle longer than this is closed, not reused: under the answering
# side's idle limit (its ``handler_timeout``, 30 s by default), after which it closes the stream itself.
KEPT_IDLE = 20.0


@dataclass
class Kept(Generic[S]):
    """A request stream kept open to one peer for one protocol; ``busy`` while a request is on it."""

    stream: S
    used: float
    busy: bool = False


class KeptStreams(Generic[S]):
    """The request streams kept open for the next request, at most one per (peer id, protocol). IO-free: the
    caller passes the clock and closes or resets the streams it is handed back."""

    def __init__(self, idle: float = KEPT_IDLE) -> None:
        self._idle = idle
        self._kept: dict[Key, Kept[S]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def stale(self, key: Key, now: float) -> S | None:
        """The idle stream kept for ``key`` if it went unused for longer than the idle limit: dropped, for the
        caller to close (the answering side may have closed it already)."""
        kept = self._kept.get(key)
        if kept is None or kept.busy or now - kept.used <= self._idle:
            return None
        del self._kept[key]
        return kept.stream

    def borrow(self, key: Key) -> Kept[S] | None:
        """The idle stream kept for ``key``, now busy; None when there is none, or it carries another request (a
        concurrent request opens its own)."""
        kept = self._kept.get(key)
        if kept is None or kept.busy:
            return None
        kept.busy = True
        return kept

    def give_back(self, kept: Kept[S], now: float) -> None:
        """Its request answered: ``kept`` may carry the next one."""
        kept.busy = False
        kept.used = now

    def drop(self, key: Key, kept: Kept[S]) -> None:
        """``kept`` failed or was cancelled: never reused (a late answer on it could be taken for the next one's)."""
        if self._kept.get(key) is kept:
            del self._kept[key]

    def keep(self, key: Key, stream: S, now: float) -> bool:
        """Keep ``stream`` for ``key`` unless one is kept already; False: the caller closes it."""
        if key in self._kept:
            return False
        self._kept[key] = Kept(stream, now)
        return True

    def drop_peer(self, peer_id: str) -> None:
        """The peer's last connection closed: its kept streams went with it."""
        for key in [k for k in self._kept if k[0] == peer_id]:
            del self._kept[key]


class Requests:
    """The request/response side of the host: handlers by protocol, requests sent, kept streams (trio side)."""

    def __init__(
        self, bridge: TrioThread, table: PeerTable, frames: FrameBudget, self_id: str, handler_timeout: float
    ) -> None:
        self._bridge = bridge
        self._table = table
        self._frames = frames
        self._self_id = self_id
        self._handler_timeout = handler_timeout
        self._handlers: dict[str, RequestHandler] = {}
        self._reusable: set[str] = set()  # request protocols whose streams are kept per peer (trio side reads it)
        self.kept: KeptStreams[Any] = KeptStreams()  # trio side
        self._host: Any = None  # trio side, set by attach

    def attach(self, host: Any) -> None:
        """Trio side, while the libp2p host is built: answer the protocols that have a handler."""
        self._host = host
        for protocol in self._handlers:
            host.set_stream_handler(TProtocol(protocol), self._stream_handler(protocol))

    def set_handler(self, protocol: str, handler: RequestHandler) -> None:
        new = protocol not in self._handlers
        self._handlers[protocol] = handler
        if new and self._bridge.running:

            async def register() -> None:
                self._host.set_stream_handler(TProtocol(protocol), self._stream_handler(protocol))

            self._bridge.run_soon(register)

    def reuse_streams(self, protocols: Iterable[str]) -> None:
        self._reusable.update(protocols)

    async def request(self, peer_id: str, protocol: str, data: bytes, timeout: float) -> bytes:
        pid = parse_peer_id(peer_id)
        data = bytes(data)
        if len(data) > MAX_FRAME_BYTES:
            raise P2PError(f"request of {len(data)} bytes is over {MAX_FRAME_BYTES}")
        return await failures.call(
            self._bridge, f"{protocol} to {peer_id}", timeout, lambda: self._trio_request(pid, protocol, data, timeout)
        )

    async def ask_all(
        self, protocol: str, data: bytes, timeout: float, asked: Iterable[str]
    ) -> dict[str, bytes | Exception]:
        data = bytes(data)
        targets = [t for t in dict.fromkeys(asked) if t != self._self_id]
        results: dict[str, bytes | Exception] = {}
        ids: dict[str, ID] = {}
        for t in targets:
            try:
                ids[t] = parse_peer_id(t)
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
                results[t] = P2PError(f"{protocol} to {t}: {failures.reason(e)}")

        async def fan_out() -> dict[str, bytes | Exception]:
            with trio.move_on_after(timeout):
                async with trio.open_nursery() as n:
                    for t in ids:
                        n.start_soon(one, t)
            for t in ids:
                results.setdefault(t, P2PTimeout(f"{protocol} to {t}: no answer within {timeout:g} s"))
            return dict(results)

        return await self._bridge.run(fan_out)

    # ---------------------------------------------------------------- trio side

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
                response = await read_frame(stream)
            except BaseException:
                await reset_stream(stream)
                raise
            if not (protocol in self._reusable and self.kept.keep(key, stream, trio.current_time())):
                await close_stream(stream)
            return response

    async def _on_kept(self, key: Key, data: bytes) -> bytes | None:
        """The answer to ``data`` on the kept stream of ``key``; None when there is none idle, or it failed (then
        it is dropped: after a failure or a cancel, a late answer on it could be taken for the next one's)."""
        stale = self.kept.stale(key, trio.current_time())
        if stale is not None:
            await close_stream(stale)
            return None
        kept = self.kept.borrow(key)
        if kept is None:
            return None
        try:
            await kept.stream.write(encode_varint_prefixed(data))
            response = await read_frame(kept.stream)
        except Exception as e:  # noqa: BLE001 - closed by the peer (idle, restart), reset, connection gone
            log.debug("kept %s stream to %s failed, a new one is opened: %s", key[1], key[0], one_line(e))
            self.kept.drop(key, kept)
            await reset_stream(kept.stream)
            return None
        except BaseException:
            self.kept.drop(key, kept)
            await reset_stream(kept.stream)
            raise
        self.kept.give_back(kept, trio.current_time())
        return response

    def _stream_handler(self, protocol: str) -> Callable[[Any], Awaitable[None]]:
        async def handle(stream: Any) -> None:
            pid = stream.muxed_conn.peer_id.to_base58()
            try:
                while True:  # one request per stream from us; more are answered in turn
                    # Its length reserved against the frame budget before its body is read (p2p/guard.py).
                    request = await read_request_frame(
                        stream, pid, self._frames, MAX_FRAME_BYTES, self._handler_timeout
                    )
                    if request is None:  # EOF (the asker is done), reset, idle
                        break
                    await stream.write(encode_varint_prefixed(await self._answer(protocol, pid, request)))
                await close_stream(stream)
            except trio.Cancelled:
                await reset_stream(stream)
                raise
            except Exception as e:  # noqa: BLE001 - the asker sees a reset stream
                log.debug("%s request from %s failed: %s", protocol, pid, one_line(e))
                await reset_stream(stream)

        return handle

    async def _answer(self, protocol: str, pid: str, request: bytes) -> bytes:
        """The node's handler's answer to one request (run on the asyncio loop, within the handler timeout)."""
        handler = self._handlers.get(protocol)
        if handler is None:
            raise P2PError(f"no handler for {protocol}")
        self._table.touch(pid)
        with trio.fail_after(self._handler_timeout):
            response = await self._bridge.call_asyncio(handler, pid, request)
        if not isinstance(response, (bytes, bytearray, memoryview)):
            raise P2PError(f"the {protocol} handler returned {type(response).__name__}, not bytes")
        return bytes(response)
