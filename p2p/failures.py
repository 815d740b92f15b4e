"""libp2p's failures as one line: the reason read out of its nested dial and stream errors, and the boundary where
a call run in the trio thread has its failures mapped to :class:`P2PError` / :class:`P2PTimeout`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from node.support.errors import one_line
from p2p.bridge import TrioThread
from p2p.errors import P2PError, P2PTimeout

T = TypeVar("T")

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


def reason(e: BaseException) -> str:
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
    for needles, why in _REASONS:
        if any(n in text for n in needles):
            return why
    return (msgs[-1] if msgs else type(e).__name__)[:200]


async def call(bridge: TrioThread, what: str, timeout: float, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` in trio; map its failures to one-line P2PError / P2PTimeout."""
    try:
        return await bridge.run(fn)
    except trio.TooSlowError:
        raise P2PTimeout(f"{what}: no answer within {timeout:g} s") from None
    except P2PError:
        raise
    except Exception as e:  # noqa: BLE001  libp2p raises many unrelated types: one P2PError at the boundary
        raise P2PError(f"{what}: {reason(e)}") from None
