"""Answers derived from a peer's result whose announcement names this query's shape (docs/reuse.md "Answers from
supersets"): the newest such claims, proved all at once within one budget, then each proved one obtained as a peer
hit of its invocation (with all its checks under the trust mode) and restricted here. The answer carries the trust
its source was accepted with and says whose it is."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from node.adapters.identity import Identity
from node.adapters.index import ClaimRow, ExecutionRow, Index
from node.adapters.ipfs import KuboClient
from node.domain.model import CID, Invocation, Query, decode, decode_object
from node.domain.sql import CanonicalQuery
from node.domain.sql.rewrite import Rewrite, rewrite
from node.domain.sql.sandbox import Sandbox
from node.services.resolve import supersets
from node.services.resolve.claim_checks import check_announcement
from node.services.resolve.derived import DerivedAnswers
from node.services.resolve.peer_answers import PeerAnswers
from node.services.resolve.peer_link import LookupAnswers
from node.services.resolve.question import Outcome, Question
from node.services.resolve.trust_modes import POLICY, accepts
from node.support.errors import CairnError, ClaimRefused

log = logging.getLogger("cairn.resolve")


@dataclass(frozen=True)
class Candidate:
    """A peer's claim of the query's shape, proved to answer it: what obtaining its result needs."""

    claim: ClaimRow
    statement: supersets.Statement
    rw: Rewrite
    width: int  # its result's number of columns
    held: ExecutionRow | None  # its result, kept here already
    asking: asyncio.Future[LookupAnswers] | None  # the lookup of its invocation made while proving it


class PeerSupersets:
    def __init__(
        self,
        kubo: KuboClient,
        index: Index,
        identity: Identity,
        canonicalizer: Sandbox,
        peers: PeerAnswers,
        derived: DerivedAnswers,
    ) -> None:
        self.kubo, self.index, self.identity, self.canonicalizer = kubo, index, identity, canonicalizer
        self.peers, self.derived = peers, derived
        self._statements = supersets.statements()  # peer candidates' statements read (immutable, bounded)

    async def answer(self, q: Question, hints: list[str]) -> Outcome | None:
        """The answer derived from a proved peer candidate (``peer``, with ``derived``); ``None``: none was proved
        and obtained (then computed)."""
        ours = decode_object(decode(q.iv_block.data))
        if not isinstance(ours, Invocation):
            return None
        shape = supersets.public_shape(q.cq, ours)
        if shape is None:
            return None
        listed = supersets.peer_candidates(
            self.index.peer_claims.shape_claims(shape),
            self.identity.node_key,
            q.key,
            lambda c: c.status != "refused" or c.reason.startswith(POLICY),
        )
        for cand in await self.proved(listed, q, ours):
            t0 = time.perf_counter()
            source = await self._obtain(cand, q, hints)
            found = None if source is None else await self.derived.derive(source.row, cand.rw, cand.width, q.emit)
            if source is None or found is None:
                continue
            row = await self.derived.publish(q, source.row, cand.rw.rule, found, t0, trust=source.trust)
            log.info("derived from a peer's result", extra={"invocation": row.invocation, "from": cand.claim.execution})
            derived = {"execution": source.row.execution, "invocation": source.row.invocation, "rule": cand.rw.rule}
            return Outcome(row, "peer", row.trust, {**(source.peer or {}), "derived": derived})
        return None

    async def proved(self, listed: Sequence[ClaimRow], q: Question, ours: Invocation) -> list[Candidate]:
        """The candidates a rule proves can answer ``q``, in ``listed`` order: their statements read and proved at
        once, all within ``supersets.PEER_PROOF_BUDGET``; one still unread then is dropped (with its lookup), so a
        miss never waits on many slow peers one after another before it computes."""
        if not listed:
            return []
        tasks = [asyncio.ensure_future(self._prove_candidate(c, q, ours)) for c in listed]
        try:
            done, pending = await asyncio.wait(tasks, timeout=supersets.PEER_PROOF_BUDGET)
        finally:  # the miss itself cancelled (its client gone, the node stopping): no proof left running
            for task in tasks:
                task.cancel()
        proved = [t.result() for t in tasks if t in done and t.exception() is None]
        if pending:
            log.info("peer candidates not proved within the budget", extra={"dropped": len(pending)})
        return [c for c in proved if c is not None]

    async def _prove_candidate(self, claim: ClaimRow, q: Question, ours: Invocation) -> Candidate | None:
        """One peer candidate, proved: its statement kept here already (no network), else read from its lookup
        answer (the lookup's answers are kept for obtaining it) or from Kubo; a result of it held here already
        (an earlier peer hit or derivation, checked enough for the mode) is used as it is."""
        hit = self.index.results.execution(claim.invocation)
        held = hit if hit is not None and hit.trust in accepts(q.mode) and hit.failure is None else None
        statement = self._statements.get(claim.invocation)
        asking = None
        if statement is None:
            try:
                providers = () if held else check_announcement(claim.announcement).providers
            except ClaimRefused:
                return None
            asking = None if held else self.peers.ask(CID.decode(claim.invocation), q.emit)
            answers: LookupAnswers = await asking if asking is not None else {}
            carried = {k: v for items in answers.values() for _, blocks in items for k, v in blocks.items()}
            statement = await supersets.read_statement(self.kubo, claim.invocation, carried, tuple(providers))
            if statement is None:
                return None
            self._statements.put(claim.invocation, statement)
        proved = await self._prove(statement.query, q.cq) if statement.answers_inputs_of(ours) else None
        return None if proved is None else Candidate(claim, statement, *proved, held, asking)

    async def _obtain(self, cand: Candidate, q: Question, hints: list[str]) -> Outcome | None:
        """A proved candidate's result: held here, else fetched as a peer hit of its invocation is (every check,
        quorum, community, refusals and scores; the lookup made while proving it is reused)."""
        claim, st = cand.claim, cand.statement
        if cand.held is not None:
            peer: dict[str, Any] = {
                "peer": claim.peer,
                "signer": claim.signer,
                "mode": q.mode,
                "receipt": cand.held.receipt,
            }
            return Outcome(cand.held, "local", cand.held.trust, peer)
        theirs = replace(
            q,
            cq=replace(q.cq, statement=st.query.statement),
            objects=(*q.objects[:-1], st.qy_block),
            iv_block=st.iv_block,
        )
        found = await self.peers.find(theirs, hints, cand.asking)
        if found is None:
            return None
        return await self.peers.keep(found, theirs, found.peer(q.mode))

    async def _prove(self, qy: Query, cq: CanonicalQuery) -> tuple[Rewrite, int] | None:
        """The rewrite of ``cq`` over the result of a peer's query ``qy`` (same inputs), and that result's number of
        columns; ``None`` unless a rule proves it. A peer's statement is parsed only once this node's canonicalizer
        (its checks and limits) gives it back unchanged, as ``recompute`` requires."""
        schemas = {
            chr(ord("a") + i): [(f"col_{j}", t) for j, t in enumerate(ts)] for i, ts in enumerate(cq.input_types)
        }
        try:
            theirs = await self.canonicalizer.canonicalize(qy.statement, schemas)
        except CairnError as e:
            log.info("a peer's candidate superset is not canonical here", extra={"error": str(e)})
            return None
        if theirs.statement != qy.statement or theirs.order_by is not None:
            return None
        cand = CanonicalQuery(qy.statement, cq.inputs, cq.input_types, theirs.output_names, None)
        found = await asyncio.to_thread(rewrite, cand, cq)
        return None if found is None else (found, len(theirs.output_names))
