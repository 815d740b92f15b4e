"""Streams and connections on the trio side: one request or response frame read, a stream closed or reset within
a bound whatever the peer does, the peer a stream comes from, every connection closed at once."""

from __future__ import annotations

import logging
from typing import Any

import trio

from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p.utils.varint import read_varint_prefixed_bytes_limited  # noqa: E402

from node.support.errors import one_line  # noqa: E402

log = logging.getLogger("cairn.p2p")

#: Largest request or response frame of the request/response protocols.
MAX_FRAME_BYTES = 4 * 1024 * 1024


async def read_frame(stream: Any) -> bytes:
    """One uvarint-length-prefixed frame of at most MAX_FRAME_BYTES. Not msgio's VarIntLengthMsgReadWriter: its
    read_exactly gives up after 101 partial reads, so a frame over ~800 kB (yamux hands data over in pieces)
    failed as "the peer closed the stream"; this reads until the frame is whole or the stream ends."""
    return await read_varint_prefixed_bytes_limited(stream, MAX_FRAME_BYTES)


async def close_stream(stream: Any) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.close()
        except Exception as e:  # noqa: BLE001  the peer reset or closed it first: nothing left to close
            log.debug("closing a stream: %s", one_line(e))


async def reset_stream(stream: Any) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.reset()
        except Exception as e:  # noqa: BLE001  already reset or closed: nothing left to reset
            log.debug("resetting a stream: %s", one_line(e))


def stream_peer(stream: Any) -> str:
    try:
        return str(stream.muxed_conn.peer_id.to_base58())
    except Exception:  # noqa: BLE001  a half-closed stream may have lost its connection: name it unknown
        return "?"


async def close_connections(host: Any) -> None:
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
