"""Answers from peers: the claims about a question (received by gossip, and those a lookup among connected peers
brings), filtered by the trust mode (a quorum counted, untrusted signers set aside, signers with a bad record not
used), then the first that passes every check (node/services/resolve/claim_checks.py) kept as the answer; in mode
``verify``
computed here too, and the claim judged by what we found."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any

from node.adapters.index import ExecutionRow, Index
from node.adapters.ipfs import KuboClient
from node.domain.model import CID, Announcement, cid_str
from node.services.datasets import Datasets
from node.services.resolve import quorum
from node.services.resolve.claim_book import Claim, ClaimBook
from node.services.resolve.claim_checks import Verified, asked, check_announcement, fetch_and_verify
from node.services.resolve.compute import Compute
from node.services.resolve.execution import ENGINE_HANDLE
from node.services.resolve.owed import Owed
from node.services.resolve.peer_link import LookupAnswers, PeerLink
from node.services.resolve.question import Event, Outcome, Question
from node.services.resolve.trust_modes import POLICY
from node.support.errors import ClaimRefused, RecordedFailure

log = logging.getLogger("cairn.resolve")


@dataclass(frozen=True)
class Found:
    """A claim that passed every check, what the checks found, and the quorum count (in a quorum mode)."""

    claim: Claim
    got: Verified
    tally: quorum.Tally | None = None

    def peer(self, mode: str) -> dict[str, Any]:
        """An answer's ``peer``: which peer, which signer, which mode, which receipt (and quorum, verifies)."""
        peer: dict[str, Any] = {
            "peer": self.claim.peer,
            "signer": self.claim.signer,
            "mode": mode,
            "receipt": cid_str(self.claim.announcement.receipt),
        }
        if self.got.receipt.verifies is not None:  # the signer recomputed another's receipt and agreed
            peer["verifies"] = cid_str(self.got.receipt.verifies)
        if self.tally is not None:
            t = self.tally
            peer["quorum"] = {"agree": t.counted, "signers": list(t.agree), "dissent": list(t.dissent)}
        return peer


class PeerAnswers:
    def __init__(
        self,
        datasets: Datasets,
        kubo: KuboClient,
        index: Index,
        book: ClaimBook,
        owed: Owed,
        link: PeerLink,
        compute: Compute,
        fetch_timeout: float = 60.0,
        resolve_timeout: float = 10.0,
    ) -> None:
        self.datasets, self.kubo, self.index, self.book, self.owed = datasets, kubo, index, book, owed
        self.link, self.compute = link, compute
        self.fetch_timeout = fetch_timeout
        self.resolve_timeout = resolve_timeout  # the whole network stage (peers.resolve_timeout)

    async def find(
        self, q: Question, hints: list[str], asked_already: asyncio.Future[LookupAnswers] | None = None
    ) -> Found | None:
        """The first claim that passes every check, all within ``resolve_timeout`` (DESIGN.md "Resolving a
        query": bounded deadline). Each output slice that arrives and checks out pushes the deadline on, so a
        large result that keeps flowing is fetched while a claim that stalls is given up; then we compute.
        ``hints``: what peers had that could not be used, and what to do, added to. ``asked_already``: the
        lookup's answers, when the caller asked already (a peer's candidate superset)."""
        asking = asked_already or self.ask(q.iv_block.cid, q.emit)  # first: peers work while we build the checks
        slices = [tuple(s.cid for s in v.slices) for v in q.versions]
        want = asked(q.iv_block, q.cq.statement, ENGINE_HANDLE, slices)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.resolve_timeout) as deadline:

                def progress() -> None:
                    with contextlib.suppress(RuntimeError):
                        deadline.reschedule(loop.time() + self.resolve_timeout)

                claims, tally = self._quorum(await self.claims(q.iv_block.cid, asking), q, hints)
                for claim in claims:
                    if not self._allowed(claim, q, hints):
                        continue
                    q.emit("fetching", {"peer": claim.peer, "signer": claim.signer})
                    try:
                        got = await fetch_and_verify(
                            self.kubo,
                            self.datasets,
                            claim.announcement,
                            want,
                            self.fetch_timeout,
                            progress,
                            claim.carried,
                        )
                        return Found(claim, got, tally)
                    except ClaimRefused as e:
                        self.book.refuse(claim, e.message)
        except TimeoutError:
            self._gave_up(q, hints)
        finally:
            if asking is not None:
                asking.cancel()  # done by now, unless a failure or the deadline left it running
        return None

    def _allowed(self, claim: Claim, q: Question, hints: list[str]) -> bool:
        """Mode ``community`` takes only trusted signers' claims; the others are refused by policy, and the asker
        told what to do about them."""
        if q.mode != "community" or self.book.trusted(claim.signer):
            return True
        self.book.refuse(claim, f"{POLICY}signer is not in a trusted community", score=False)
        if _untrusted(claim.signer) not in hints:
            hints.append(_untrusted(claim.signer))
            q.emit("untrusted-claim", {"peer": claim.peer, "signer": claim.signer})
        return False

    def _gave_up(self, q: Question, hints: list[str]) -> None:
        log.warning(
            "peers gave no usable answer within peers.resolve_timeout: computing",
            extra={"invocation": q.key, "timeout": self.resolve_timeout},
        )
        q.emit("peers-deadline", {"timeout": self.resolve_timeout})
        hints.append(
            f"a peer claims this answer, but its data did not arrive within peers.resolve_timeout "
            f"({self.resolve_timeout:g} s): computed here; is the peer's Kubo reachable from this one?"
        )

    def _quorum(self, claims: list[Claim], q: Question, hints: list[str]) -> tuple[list[Claim], quorum.Tally | None]:
        """In a quorum mode, the claims of the output K signers agree on (best first), none without a quorum; the
        outvoted are refused, counted against their signers (not the peers that relayed them: gossip relays every
        claim); and the count. Other modes: ``claims`` as they are."""
        mode = q.mode
        wanted = quorum.parse(mode)
        if wanted is None:
            return claims, None

        def output(c: Claim) -> quorum.Output:
            an = c.announcement
            return (an.logical_hash if an.failure is None else f"failure:{an.failure}", an.rows)

        communities: dict[str, set[str]] = {}
        for key, community in self.index.trust.trusted():
            communities.setdefault(key, set()).add(community)
        frozen = {k: frozenset(v) for k, v in communities.items()}
        t = quorum.tally(((c.signer, output(c)) for c in claims), wanted, frozen)
        q.emit("quorum", {"agree": t.counted, "k": wanted.k, "signers": list(t.agree), "dissent": list(t.dissent)})
        if t.output is None:
            if claims:
                what = "communities" if wanted.communities else "signers"
                hints.append(f"{mode}: {t.counted} {what} of {wanted.k} agree on one answer, {len(t.dissent)} differ")
            return [], t
        for c in claims:
            if c.signer in t.dissent:
                self.book.outvoted(c, f"outvoted under {mode}: {len(t.agree)} signers agree on another output")
        return [c for c in claims if c.signer in t.agree and output(c) == t.output], t

    def ask(self, invocation: CID, emit: Event) -> asyncio.Future[LookupAnswers] | None:
        """Start the lookup among connected peers (None without a running network)."""
        asking = self.link.ask(invocation)
        if asking is not None:
            emit("lookup", {})
        return asking

    async def claims(self, invocation: CID, asking: Awaitable[LookupAnswers] | None) -> list[Claim]:
        """Claims about an invocation: those already received (gossip), then the answers of the lookup among
        peers (``asking``, started by the caller); best record first."""
        found: dict[tuple[str, str], Claim] = {}
        rows = self.index.peer_claims.claims(cid_str(invocation))
        # A claim refused for what it is stays refused; one refused by policy (untrusted signer, bad score) is
        # looked at again: another mode, or a better score, may allow it.
        refused = {(r.signer, r.execution) for r in rows if r.status == "refused" and not r.reason.startswith(POLICY)}
        await self.book.ahead.settle([r.execution for r in rows])  # the lookup (``asking``) runs meanwhile
        for row in rows:
            if (row.signer, row.execution) not in refused:
                try:
                    an = check_announcement(row.announcement)
                    found[(row.signer, row.execution)] = Claim(row.peer, an, self.book.ahead.blocks(row.execution))
                except ClaimRefused:
                    continue
        if asking is not None:
            for peer, answers in (await asking).items():
                for data, carried in answers:
                    if (told := self._checked(peer, data)) is None:
                        continue
                    self.book.record(peer, told, data)
                    key = (told.signer, cid_str(told.execution))
                    if key not in refused and (key not in found or not found[key].carried):
                        found[key] = Claim(peer, told, carried)  # the same claim, now with its blocks
        return self._by_record(list(found.values()), invocation)

    def _checked(self, peer: str, data: bytes) -> Announcement | None:
        try:
            return check_announcement(data)
        except ClaimRefused as e:
            log.warning("refused a lookup answer", extra={"peer": peer, "reason": e.message})
            self.index.peer_claims.log_refusal(peer, e.message)
            return None

    def _by_record(self, found: list[Claim], invocation: CID) -> list[Claim]:
        """Prefer signers with a good record; never those refused more often than accepted (docs/peers.md)."""
        scores = {c.signer: self.index.trust.signer_score(c.signer) for c in found}
        usable = []
        for c in found:
            ok, bad = scores[c.signer]
            if bytes(c.announcement.invocation) != bytes(invocation):
                continue
            if bad > ok:
                why = f"{POLICY}signer refused {bad} times, accepted {ok}: its claims are not used"
                self.book.refuse(c, why, score=False)
                continue
            usable.append(c)
        return sorted(usable, key=lambda c: scores[c.signer][0] - 2 * scores[c.signer][1], reverse=True)

    async def take(self, found: Found, q: Question) -> Outcome:
        """The answer from a checked claim: kept as it is, or (mode ``verify``) computed here and compared."""
        peer = found.peer(q.mode)
        if q.mode != "verify":
            return await self.keep(found, q, peer)
        claim, got = found.claim, found.got
        await self.owed.put_blocks(got.carried)
        self._owe_pins(found, provide=False)  # kept as before: the claim checked is what we compare
        mine = await self._compute_judging(found, q)
        if mine.logical_hash != got.row.logical_hash or mine.rows != got.row.rows:
            self.book.refuse(claim, "recomputed here: the logical hash differs")
            return Outcome(mine, "computed", "computed")
        self.book.accept(claim)
        # Our own signed receipt for the same execution is the agreement receipt.
        return Outcome(mine, "peer", "recomputed-agreed", {**peer, "agreement": mine.receipt})

    async def _compute_judging(self, found: Found, q: Question) -> ExecutionRow:
        """Compute to verify a claim; a failure recorded here judges a claim first: the same error class agrees
        with a recorded failure, any other claim is refused."""
        try:
            return await self.compute.compute(q)
        except RecordedFailure as e:
            theirs = found.got.row.failure
            if theirs is not None and theirs.error_class == e.error_class:
                self.book.accept(found.claim)
            else:
                self.book.refuse(found.claim, f"recomputed here: it fails with {e.error_class}")
            raise

    async def keep(self, found: Found, q: Question, peer: dict[str, Any]) -> Outcome:
        """Record a checked peer answer to ``q`` and answer: the blocks it was checked from, its pins and provides
        are owed in the index first (one transaction), then put, pinned and provided in the background (docs/
        peers.md "Answer first"): a crash loses none, and this node's later Kubo calls wait for the put."""
        claim, got = found.claim, found.got
        label = "trusted-signer" if self.book.trusted(claim.signer) else "unverified"
        row = replace(got.row, query=cid_str(q.qy_block.cid), trust=label)
        # What we answer with is kept: the carried blocks used, and the question itself, so that the record is
        # whole here too. Owed durably before answering, put into Kubo right after (its fsyncs took 6-10 ms of
        # a 45 ms peer hit); reads of our Kubo wait for that put (KuboClient.write_behind).
        blocks = [*got.carried, *((b.cid, b.data) for b in (*q.objects, q.iv_block))]
        self._owe_pins(found, provide=True, blocks=blocks)
        self.index.results.add_execution(row)
        self.book.accept(claim)
        self.book.reach_later(claim.announcement.providers)
        stored = self.index.results.execution(row.invocation) or row
        return Outcome(stored, "peer", stored.trust, peer)

    def _owe_pins(self, found: Found, provide: bool, blocks: list[tuple[CID, bytes]] | None = None) -> None:
        """Queue what keeping a checked claim takes (before anything is answered with it): the ``blocks`` to put
        (put now, in the background), then pins; and drain it."""
        got, an = found.got, found.claim.announcement
        wanted = {bytes(got.receipt.execution), bytes(an.receipt)} if provide else set()
        self.owed.owe([(cid_str(c), rec, bytes(c) in wanted) for c, rec in got.pins], blocks or [])
        self.owed.drain_pins()


def _untrusted(key: str) -> str:
    """What to do about a claim the trust mode did not allow (the node used to recompute without saying why)."""
    return f"a peer has this answer, signed by {key}, not trusted: cairn trust add {key}, or --trust verify"
