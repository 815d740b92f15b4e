"""What this node knows of peers' claims (an_0): each one recorded on arrival and compared with our own answer (a
divergence is recorded, never cached), judged when used (accepted, or refused with its reason: the signer scored
down, the peer that brought it struck), and a trusted signer's reached ahead of need."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from node.adapters.identity import Identity
from node.adapters.index import ClaimRow, Divergence, ExecutionRow, Index
from node.adapters.ipfs import KuboClient
from node.domain.model import CID, Announcement, Receipt, cid_str, parse_cid
from node.services.resolve.carry import FetchAhead
from node.services.resolve.claim_checks import connect_providers
from node.services.resolve.owed import Owed
from node.services.resolve.peer_link import PeerLink
from node.support import wall_clock as clock
from node.support.errors import InvalidCID

log = logging.getLogger("cairn.resolve")
ROUTE_TTL = 60.0  # seconds a provider's Kubo, once dialled ahead of need, is not dialled again for another claim
MAX_ROUTES = 1024


@dataclass(frozen=True)
class Claim:
    peer: str
    announcement: Announcement
    carried: Mapping[bytes, bytes] = field(default_factory=dict, compare=False)  # blocks its lookup answer brought

    @property
    def signer(self) -> str:
        return self.announcement.signer


class ClaimBook:
    def __init__(
        self,
        kubo: KuboClient,
        index: Index,
        identity: Identity,
        ahead: FetchAhead,
        owed: Owed,
        link: PeerLink,
        community: str | None = None,
    ) -> None:
        self.kubo, self.index, self.identity, self.ahead = kubo, index, identity, ahead
        self.owed, self.link, self.community = owed, link, community
        self._routes: dict[str, float] = {}  # provider peer id → when our Kubo last dialled it ahead of need
        self.divergences = 0  # peers' answers that disagreed with ours, recorded since start

    def record(self, peer: str, an: Announcement, data: bytes) -> bool:
        """Keep a checked claim (pending) unless known; True when it is new."""
        self._check_divergence(peer, an)
        return self.index.peer_claims.add_claim(
            ClaimRow(
                cid_str(an.invocation),
                an.signer,
                cid_str(an.execution),
                cid_str(an.receipt),
                an.logical_hash,
                an.rows,
                peer,
                data,
                clock.now(),
                "pending",
                "",
                an.shape,
            )
        )

    def trusted(self, signer: str) -> bool:
        return any(key == signer for key, _ in self.index.trust.trusted(self.community))

    def refuse(self, claim: Claim, reason: str, score: bool = True) -> None:
        """Refuse a claim with its reason; ``score`` False for policy refusals, which say nothing of its truth."""
        an = claim.announcement
        log.warning("claim refused", extra={"peer": claim.peer, "signer": claim.signer, "reason": reason})
        self.record(claim.peer, an, an.block().data)
        self.index.set_claim_status(
            cid_str(an.invocation), an.signer, cid_str(an.execution), "refused", reason, score=score
        )
        if score:
            self.link.refused(claim.peer, reason)

    def outvoted(self, claim: Claim, reason: str) -> None:
        """Refuse a claim a quorum voted down: its signer is scored down, not the peer that relayed it (gossip
        relays every claim)."""
        an = claim.announcement
        log.warning("claim outvoted", extra={"signer": claim.signer, "invocation": cid_str(an.invocation)})
        self.record(claim.peer, an, an.block().data)
        self.index.set_claim_status(cid_str(an.invocation), an.signer, cid_str(an.execution), "refused", reason)

    def accept(self, claim: Claim) -> None:
        an = claim.announcement
        self.index.set_claim_status(cid_str(an.invocation), an.signer, cid_str(an.execution), "accepted")

    def judge(self, claim: tuple[CID, Receipt], agreed: bool, ours: ExecutionRow) -> None:
        """Score a receipt's signer by what recomputing it here found: accepted, or refused (as ``refuse`` does
        for a claim, the peer that brought it struck) and the divergence recorded. Our own receipts are not
        scored."""
        receipt = claim[1]
        if receipt.signer == self.identity.node_key:
            return
        iv, ex = cid_str(receipt.invocation), cid_str(receipt.execution)
        if agreed:
            self.index.set_claim_status(iv, receipt.signer, ex, "accepted")
            return
        reason = "recomputed here: the logical hash differs"
        log.warning("receipt refused by recomputing", extra={"signer": receipt.signer, "execution": ex})
        self.index.set_claim_status(iv, receipt.signer, ex, "refused", reason)
        peers = [c.peer for c in self.index.peer_claims.claims(iv) if c.signer == receipt.signer and c.execution == ex]
        for peer in peers:
            self.link.refused(peer, reason)
        theirs = cid_str(receipt.profile) if receipt.profile else None
        d = Divergence(
            iv,
            ours.execution,
            ours.profile,
            ours.logical_hash,
            ours.rows,
            receipt.signer,
            peers[0] if peers else "",
            ex,
            cid_str(claim[0]),
            theirs,
            receipt.logical_hash,
            receipt.rows,
            clock.now(),
        )
        if self.index.results.add_divergence(d):
            self.divergences += 1

    def _check_divergence(self, peer: str, an: Announcement) -> None:
        """A claim for an invocation we hold whose answer differs from ours is recorded, never cached.

        DESIGN.md "Engine profile": two receipts for one invocation under different profiles that disagree
        are a divergence to surface. Our row stays the answer (first writer wins in the index); the
        divergence names both executions and both profiles (the claim's from its announcement's engine).
        """
        ours = self.index.results.execution(cid_str(an.invocation))
        if ours is None or (ours.logical_hash == an.logical_hash and ours.rows == an.rows):
            return
        theirs = an.engine.get("profile")
        try:  # the claimant's word only: kept if it is a CID, never fetched here
            theirs = cid_str(parse_cid(theirs)) if theirs else None
        except InvalidCID:
            theirs = None
        d = Divergence(
            ours.invocation,
            ours.execution,
            ours.profile,
            ours.logical_hash,
            ours.rows,
            an.signer,
            peer,
            cid_str(an.execution),
            cid_str(an.receipt),
            theirs,
            an.logical_hash,
            an.rows,
            clock.now(),
        )
        if self.index.results.add_divergence(d):
            self.divergences += 1
            log.warning(
                "divergence: a peer's answer differs from ours",
                extra={
                    "invocation": d.invocation,
                    "signer": d.signer,
                    "our_profile": d.profile,
                    "their_profile": theirs,
                    "same_profile": theirs == ours.profile,
                },
            )

    def reach_ahead(self, an: Announcement, near: bool = False) -> None:
        """A trusted signer's new claim: fetch its small blocks now, in the background (``FetchAhead``: which
        connects our Kubo to its providers first), so that the first answer taken from a peer we never fetched
        from waits neither for that connection (about 0.5 s here) nor for bitswap round trips (about 0.1 s from a
        node 6 hops away, docs/scaling.md). Only if we are likely to use it (we asked queries of its shape lately,
        ``FetchAhead.likely``): every node fetching every claim at once cost more than it saved at N = 12. When no
        fetch starts (not likely, off, or too many at once), only connect: once per provider per ``ROUTE_TTL``.
        Never for untrusted signers, so a flood cannot make our Kubo dial for it. ``near``: the signer's node is a
        connected peer, whose lookup answer carries the blocks: only connect."""
        now = time.monotonic()
        peers = {p.rsplit("/p2p/", 1)[-1] for p in an.providers}
        fresh = all(now - self._routes.get(p, -ROUTE_TTL) < ROUTE_TTL for p in peers)
        if not peers or (fresh and not self.ahead.wanted(an, near)) or not self.trusted(an.signer):
            return
        if len(self._routes) >= MAX_ROUTES:
            self._routes = {p: t for p, t in self._routes.items() if now - t < ROUTE_TTL}
        self._routes.update(dict.fromkeys(peers, now))
        if not self.ahead.start(an, near):
            self.reach_later(an.providers)

    def reach_later(self, providers: Sequence[str]) -> None:
        """Connect our Kubo to a claim's providers after answering: an answer from carried blocks never did, and
        what comes next (lineage, verify, a pipeline's next step) fetches the peer's other blocks by CID."""
        self.owed.keep_task(asyncio.ensure_future(connect_providers(self.kubo, tuple(providers))))
