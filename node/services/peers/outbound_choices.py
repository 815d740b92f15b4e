"""What the node sends to its peers and whom it asks, decided without IO (docs/p2p.md, docs/peers.md).

Pure functions and one small cache over an explicit clock: the network (node/services/peers/network.py) does the
sending,
these say what. None of them touches a clock, socket or file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from node.adapters.index import ExecutionRow
from node.domain.model import decode
from node.services.resolve.claim_checks import MAX_PROVIDERS, provider_ok
from node.services.resolve.resolver import VERIFIED_LABELS
from node.support.errors import EncodingError
from p2p.addrs import reachability_order
from p2p.errors import P2PError

PROVIDERS_TTL = 30.0  # seconds our Kubo's addresses are reused: one `id` RPC per catch-up burst, not one per row


def announceable(row: ExecutionRow) -> bool:
    """Only what was computed here (or recomputed here and agreed) goes out under our signature: signing a
    peer's unchecked answer would launder it into a trusted one for whoever trusts us (docs/peers.md)."""
    return row.trust in VERIFIED_LABELS


def catch_up_rows(rows: Iterable[ExecutionRow]) -> list[ExecutionRow]:
    """The results a connecting peer is sent (gossip never replays old messages): ours only. Empty: the peer is
    probed with an empty lookup instead, to find out whether it is a Cairn node at all."""
    return [r for r in rows if announceable(r)]


def announcement_key(row: ExecutionRow, providers: list[str]) -> str:
    """What our signed an_0 for ``row`` depends on: the same key, the same bytes (signed once, sent many times)."""
    key = "\n".join([row.invocation, row.execution, row.receipt, row.logical_hash, str(row.rows), *providers])
    return key + f"\n{row.profile}"


def provider_addrs(kubo_id: str, addresses: Iterable[str]) -> list[str]:
    """Our Kubo's addresses as announced: each naming its peer id, most reachable first, at most as many as peers
    accept (node/services/resolve/claim_checks.py refuses announcements naming more)."""
    addrs = reachability_order([a if "/p2p/" in a else f"{a}/p2p/{kubo_id}" for a in addresses])
    return addrs[:MAX_PROVIDERS]


@dataclass
class ProvidersCache:
    """Our Kubo's addresses, reused for ``ttl`` seconds of the clock the caller passes."""

    ttl: float = PROVIDERS_TTL
    kept: tuple[float, list[str]] | None = None

    def fresh(self, now: float) -> list[str] | None:
        if self.kept is not None and now - self.kept[0] < self.ttl:
            return self.kept[1]
        return None

    def keep(self, now: float, addrs: list[str]) -> None:
        self.kept = (now, addrs)


def not_cairn(e: P2PError) -> bool:
    """The peer answered, but not in Cairn's protocols (p2p words it so: docs/p2p.md)."""
    return "does not speak that protocol" in str(e)


def sort_answers(answers: Mapping[str, bytes | Exception]) -> tuple[dict[str, bytes], list[str]]:
    """One lookup round's answers: those that came, and the peers that do not speak the protocol asked (to be
    asked the older one). A peer that failed otherwise (timeout, reset) is neither: a lookup is best effort."""
    got: dict[str, bytes] = {}
    old: list[str] = []
    for peer, answer in answers.items():
        if not isinstance(answer, Exception):
            got[peer] = answer
        elif isinstance(answer, P2PError) and not_cairn(answer):
            old.append(peer)
    return got, old


def have_addrs(answer: bytes | Exception) -> list[str]:
    """A ``/cairn/have`` answer's Kubo addresses worth dialling (none: the peer does not hold the block, failed,
    or sent something else)."""
    try:
        items = decode(answer) if isinstance(answer, bytes) else []
    except EncodingError:
        return []
    return [a for a in items if provider_ok(a)][:MAX_PROVIDERS] if isinstance(items, list) else []


def near(origin: str | None, connected: Iterable[str]) -> bool:
    """Whether a gossiped claim's publisher (the signer's node) is connected: then its lookup answer carries the
    claim's blocks. A catch-up's item (``origin`` None) names no publisher."""
    return origin is not None and origin in connected
