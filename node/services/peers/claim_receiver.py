"""Peers' announcements as they arrive (gossip, catch-up, lookup answers): the IO around ``ClaimIntake``.

``ClaimIntake`` (node/services/peers/claim_intake.py) decides; this reads the clock, checks announcements off the event
loop, records what is taken with the resolver, keeps refusals and signers' watermarks in the index, applies the
storage quotas and logs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from config import PeerSettings
from node.domain.model import decode
from node.domain.ports.repositories import ClaimRepository
from node.services.peers.claim_intake import Carried, ClaimIntake, Take, check, check_all
from node.services.peers.outbound_choices import near
from node.services.resolve import Resolver
from node.support.errors import EncodingError

log = logging.getLogger("cairn.network")

CHECK_BATCH = 100  # catch-up items decoded and checked per thread hop


class ClaimReceiver:
    def __init__(
        self,
        settings: PeerSettings,
        intake: ClaimIntake,
        resolver: Resolver,
        claims: ClaimRepository,
        connected: Callable[[], list[str]],
        clock: Callable[[], float],
    ) -> None:
        """``connected``: the peers connected now; ``clock``: seconds of a monotonic clock."""
        self.settings, self.intake, self.resolver, self.claims = settings, intake, resolver, claims
        self.connected, self.clock = connected, clock

    async def on_gossip(self, origin: str, forwarder: str, data: bytes) -> None:
        """One gossiped announcement, from ``forwarder`` (the connection it came on; ``origin``: the peer the
        message names as its first sender, minted at will): the peer's limits before any decoding, then the
        checks, then its signer's."""
        now = self.clock()
        if self.intake.gossip_arrived(forwarder, now):
            self._take(self.intake.checked(forwarder, data, check(data), now, bulk=False, origin=origin))
        self._flush()

    async def on_catchup(self, peer: str, request: bytes) -> bytes:
        """``/cairn/catchup/1.0.0``: a connecting peer's announcements; the answer is always empty."""
        if not self.intake.catchup_arrived(peer, len(request), self.clock()):
            self._flush()
            return b""
        try:
            items = await asyncio.to_thread(decode, request)  # up to 2 MiB of DAG-CBOR: off the event loop
        except EncodingError as e:
            self.intake.refuse(peer, "malformed", f"unreadable catch-up: {e.message}", True, self.clock())
            self._flush()
            return b""
        blobs = self.intake.catchup_items(peer, items, self.clock())
        self._flush()
        for start in range(0, len(blobs), CHECK_BATCH):
            batch = blobs[start : start + CHECK_BATCH]
            # Decoding and signature checks are CPU (~1 ms each, more under load): off the event loop, in batches.
            checked = await asyncio.to_thread(check_all, batch)
            for data, result in zip(batch, checked):
                self._take(self.intake.catchup_item(peer, data, result, self.clock()))
                self._flush()
        return b""

    def lookup_answer(self, peer: str, answer: bytes, carrying: bool) -> list[Carried]:
        """The announcements of one peer's lookup answer that the resolver may check (``ClaimIntake``)."""
        kept = self.intake.lookup_answer(peer, answer, carrying, self.clock())
        self._flush()
        if kept is None:
            return []
        self._prune(peer)
        return kept

    def claim_refused(self, peer: str, reason: str) -> None:
        """A claim from ``peer`` failed a check when used (node/services/resolve/claim_checks.py: blocks, receipt,
        data): its
        signer is scored down by the resolver, and the peer that brought it gets a strike (``ClaimIntake``)."""
        if self.intake.claim_refused(peer, reason, self.clock()):
            log.warning("peer ignored", extra={"peer": peer, "seconds": self.intake.admission.limits.ignore_for})

    def _take(self, take: Take | None) -> None:
        if take is None:
            return
        an = take.announcement
        if take.mark is not None:
            self.claims.set_signer_mark(an.signer, take.mark, self.settings.max_signer_marks)
        if self.resolver.record_claim(take.peer, an, take.data):
            self.intake.recorded()
            # Gossip names its publisher, the signer's node: connected, its lookup answer carries the blocks.
            self.resolver.reach_ahead(an, near=near(take.origin, self.connected() if take.origin is not None else ()))
            self._prune(take.peer)

    def _prune(self, peer: str) -> None:
        s = self.settings
        self.intake.pruned += self.claims.prune_claims(peer, s.max_claims_per_peer, s.max_claims)

    def _flush(self) -> None:
        """Log the refusals decided; a bad message's (a strike) is kept in the index too."""
        for r in self.intake.drain():
            level = logging.WARNING if r.loud else logging.DEBUG
            log.log(level, "announcement refused", extra={"peer": r.peer, "reason": r.reason, "count": r.count})
            if r.strike:
                self.claims.log_refusal(r.peer, r.reason)
            if r.ignored_now:
                log.warning("peer ignored", extra={"peer": r.peer, "seconds": self.intake.admission.limits.ignore_for})
