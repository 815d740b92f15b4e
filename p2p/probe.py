"""Whether the host accepts a new inbound connection now, measured (``P2PHost.accepting``, ``/healthz``): a TCP
connection to one of its own listen addresses must get the libp2p greeting in time. A host out of inbound slots
closes it at once; a stuck trio thread says nothing."""

from __future__ import annotations

import asyncio
import logging
import time

from node.support.errors import one_line

log = logging.getLogger("cairn.p2p")

#: What a libp2p host sends first on a new connection (multistream-select's header): the accept probe's answer.
GREETING = b"\x13/multistream/1.0.0\n"
# /healthz measures acceptance at most this often (seconds; one probe is a loopback connection), and waits this
# long for the greeting.
PROBE_TTL = 2.0
PROBE_TIMEOUT = 2.0


class AcceptProbe:
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
            self._running = asyncio.ensure_future(probe(*self.target))
        reason = await asyncio.shield(self._running)
        before = self._last[1] if self._last is not None else None
        self._last = (time.monotonic(), reason)
        if reason is not None and before is None:  # logged when it changes, not at every /healthz
            log.warning("p2p host does not accept connections: %s", reason)
        elif reason is None and before is not None:
            log.info("p2p host accepts connections again")
        return reason


def probe_target(addrs: list[str]) -> tuple[str, int] | None:
    """Where the accept probe dials: a loopback listen address if there is one, else the first one."""
    targets = []
    for a in addrs:
        parts = a.split("/")
        if len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[3] == "tcp":
            targets.append((parts[2], int(parts[4])))
    loopback = [t for t in targets if t[0] in ("127.0.0.1", "::1")]
    return (loopback or targets)[0] if targets else None


async def probe(host: str, port: int) -> str | None:
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
