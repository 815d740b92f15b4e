"""Resolving a query (DESIGN.md "Resolving a query"): local index → (peers, issue 5) → compute → publish.

The query is hashed before it runs: canonical statement + abstract input structures give the ``qy_0``,
and with the content identities of the inputs (abstract structure, logical hash, rows) the ``iv_0``,
whose CID is the cache key. Identical invocations in flight share one computation (single-flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import itertools
import logging
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from node import clock, values
from node.datasets import Datasets, LogicalHasher, SliceRef, Version, canonical_type
from node.datasets.slices import iter_slices, write_parquet_slice
from node.errors import (
    CairnError,
    ClaimRefused,
    InvalidCID,
    InvalidInput,
    InvalidObject,
    KuboError,
    QueryRefused,
    RecordedFailure,
    SparkError,
    Unauthorized,
)
from node.identity import Identity
from node.index import TRUST_LABELS, ClaimRow, Divergence, ExecutionRow, Index
from node.ipfs import KuboClient
from node.lru import Lru
from node.model import (
    CID,
    Announcement,
    Block,
    EngineProfile,
    Execution,
    Failure,
    InputIdentity,
    Invocation,
    Query,
    Receipt,
    RecursiveDataEnvelope,
    Structure,
    block_of,
    cid_str,
    decode,
    decode_object,
    parse_cid,
)
from node.query import CanonicalQuery, SortKey, arrow_eval
from node.query.result_order import canonical_indices
from node.query.rewrite import Rewrite, rewrite
from node.query.sandbox import Sandbox
from node.resolve import quorum, supersets
from node.resolve.carry import FetchAhead
from node.resolve.claims import Verified, asked, bytecode_of, check_announcement, connect_providers, fetch_and_verify
from node.resolve.empty_input import write_empty
from node.resolve.failures import deterministic
from node.resolve.spark import SparkWorker
from node.resolve.staging import Staging

log = logging.getLogger("cairn.resolve")
# A derived answer: its rows, receipt timings, engine profile (the worker's report, or an ep_0 block), and the
# indices that put the rows in canonical order (None: they are in it).
Derived = tuple[pa.Table, dict[str, float], Mapping[str, Any] | Block, pa.Array | None]
# A cached result at most this long is read into the node to derive an answer with Arrow (node.query.arrow_eval).
ARROW_EVAL_MAX_ROWS = 1_000_000

ENGINE_HANDLE = "cairn.spark-sql"  # the ex_0 handle: the engine entry point that ran the bytecode
MAX_PREPARED = 1024  # questions remembered (statement + versions → canonical form, qy_0, iv_0)
MAX_IMPLICIT_INPUTS = 32  # tables a statement may read by dataset name without --input (one canonicalization each)
Event = Callable[[str, dict[str, Any]], None]


TRUST_MODES = ("self", "community", "verify", "any")
# Which stored trust labels each mode may answer with (DESIGN.md: "a stricter request never receives a looser
# row"); a row it may not use is a miss for it: it goes to peers or computes. docs/peers.md.
ACCEPTS: dict[str, tuple[str, ...]] = {
    "self": ("computed", "recomputed-agreed"),
    "verify": ("computed", "recomputed-agreed"),
    "community": ("computed", "recomputed-agreed", "trusted-signer"),
    "any": TRUST_LABELS,
}
VERIFIED_LABELS = ("computed", "recomputed-agreed")  # "verified": true only for these
# quorum:K[:communities] (issue 22 item 2): a local row is used only if checked here; a peer's answer only when
# K signers agree on it, counted again at each ask (node/resolve/quorum.py, docs/peers.md "Quorum").


def accepts(mode: str) -> tuple[str, ...]:
    """The stored trust labels a mode may answer with (quorum modes: only what was checked here)."""
    return VERIFIED_LABELS if quorum.parse(mode) is not None else ACCEPTS[mode]


def valid_mode(mode: str) -> bool:
    """One of TRUST_MODES or a well-formed quorum:K[:communities] (a malformed quorum raises InvalidInput)."""
    return mode in TRUST_MODES or quorum.parse(mode) is not None


POLICY = "policy: "  # a refusal reason that judges the signer or the mode, not the claim: not counted, not final
# Per peer, its answer's announcements, each with the blocks it carried (CID bytes → hash-checked bytes).
Lookup = Callable[[CID], Awaitable[Mapping[str, Sequence[tuple[bytes, Mapping[bytes, bytes]]]]]]
PIN_RETRY = 10.0  # seconds before owed pins that failed are tried again
PIN_DELAY = 0.2  # seconds between an answer and the pins it queued
# Work owed behind answers (pins, a derived answer's announcement) waits until no miss is in flight and none ended
# for QUIET_FOR seconds, at most DEFER_MAX: a burst of answers is not slowed by the pins of the ones before (a
# receipt's recursive pin walks its inputs' DAG: 20-35 ms of Kubo at 10 M rows, issue 22 item 5).
QUIET_FOR = 0.1
DEFER_MAX = 2.0
ROUTE_TTL = 60.0  # seconds a provider's Kubo, once dialled ahead of need, is not dialled again for another claim
MAX_ROUTES = 1024
RESULTS_KEPT_BYTES = 64 * 1024 * 1024  # decoded cached results kept for deriving answers (``_result_tables``)
PROFILES_KEPT = 64  # engine profiles (ep_0) read for derived answers, kept: one per worker start, a few blocks
BLOCKS_DELAY = 0.01  # seconds between a peer's answer and the put of the blocks it owed (reads of Kubo wait for it)
_NEEDS_TOKEN = "this query is not in the index: computing it needs the node's API token (Authorization: Bearer)"


@dataclass(frozen=True)
class _Candidate:
    """A peer's claim of the query's shape, proved to answer it: what obtaining its result needs."""

    claim: ClaimRow
    statement: supersets.Statement
    rw: Rewrite
    width: int  # its result's number of columns
    held: ExecutionRow | None  # its result, kept here already
    asking: asyncio.Future[Any] | None  # the lookup of its invocation made while proving it


@dataclass(frozen=True)
class Claim:
    peer: str
    announcement: Announcement
    carried: Mapping[bytes, bytes] = field(default_factory=dict, compare=False)  # blocks its lookup answer brought

    @property
    def signer(self) -> str:
        return self.announcement.signer


@dataclass(frozen=True)
class Outcome:
    row: ExecutionRow
    source: str
    trust: str  # one of TRUST_LABELS: how this answer was checked
    peer: dict[str, Any] | None = None
    hints: tuple[str, ...] = ()  # what peers had that could not be used, and what the asker could do


@dataclass
class Answer:
    query: CID
    invocation: CID
    execution: ExecutionRow
    source: str  # local | peer | computed
    elapsed_ms: float
    output_names: tuple[str, ...]
    versions: dict[str, str] = field(default_factory=dict)  # alias → dataset version used
    peer: dict[str, Any] | None = None  # for source "peer": which peer, which signer, which mode
    trust: str = "computed"  # one of TRUST_LABELS
    hints: tuple[str, ...] = ()  # e.g. a peer has this answer but its signer is not trusted (issue 16)

    @property
    def verified(self) -> bool:
        return self.trust in VERIFIED_LABELS


class Resolver:
    def __init__(
        self,
        datasets: Datasets,
        kubo: KuboClient,
        index: Index,
        worker: SparkWorker,
        identity: Identity,
        work_dir: Path,
        rows_per_slice: int,
        query_timeout: float | None = None,
        trust_mode: str = "community",
        community: str | None = None,
        fetch_timeout: float = 60.0,
        lookup: Lookup | None = None,
        resolve_timeout: float = 10.0,
        worker_ready: Callable[[Event], Awaitable[None]] | None = None,
        canonicalizer: Sandbox | None = None,
        fetch_ahead_bytes: int = 0,
        from_supersets: bool = False,
        from_peer_supersets: bool = False,
        staging: Staging | None = None,
    ) -> None:
        # Off the event loop, bounded, refusals remembered (issue 15; docs/queries.md "Limits"). Started lazily.
        self.canonicalizer = canonicalizer or Sandbox()
        self.worker_ready = worker_ready
        self.query_timeout = query_timeout
        self.trust_mode, self.community, self.fetch_timeout = trust_mode, community, fetch_timeout
        self.resolve_timeout = resolve_timeout  # the whole network stage (peers.resolve_timeout)
        self.lookup = lookup  # asks connected peers; set by the node once its p2p host runs
        self.on_published: Callable[[ExecutionRow], Awaitable[None]] | None = None  # gossip, when networked
        self.on_refused: Callable[[str, str], None] | None = None  # (peer, reason): the network strikes the peer
        self.datasets, self.kubo, self.index, self.worker = datasets, kubo, index, worker
        self.identity = identity
        self.work_dir = work_dir
        self.rows_per_slice = rows_per_slice
        self.from_supersets = from_supersets  # query.answer_from_supersets
        self.from_peer_supersets = from_peer_supersets  # query.answer_from_peer_supersets
        self.derived = 0  # answers computed from a cached superset's result (issue 22 item 3)
        self.forwarded = 0  # answers brought forward over appended slices from an older version's (item 4)
        self._inflight: dict[tuple[str, str, bool, bool], asyncio.Future[Outcome]] = {}
        self._waiting: dict[asyncio.Future[Outcome], int] = {}  # callers awaiting each flight
        self._last_landed = 0.0  # time.monotonic() when the last miss ended (``_quiet``)
        self.computed = 0  # Spark jobs this resolver started
        self.staging = staging  # spark.staging: where Spark reads the inputs (None: the node's slice cache)
        self._previews: dict[tuple[str, int], asyncio.Future[tuple[pa.Schema, list[list[Any]]]]] = {}
        self._profile: tuple[Mapping[str, Any], Block] | None = None  # the worker's last report, as an ep_0
        self._profiles_put: set[str] = set()  # ep_0 CIDs already written to Kubo (written once)
        self._results_kept: OrderedDict[str, list[pa.Table]] = OrderedDict()  # by execution CID
        self._profiles_read: Lru[Block] = Lru(PROFILES_KEPT)  # cached executions' ep_0 blocks (``_profile_of``)
        self._pinner: asyncio.Future[None] | None = None  # drains the owed pins (index.pending_pins)
        self._reaching: set[asyncio.Future[Any]] = set()  # after answering: connects to its providers, block puts
        self._routes: dict[str, float] = {}  # provider peer id → when our Kubo last dialled it ahead of need
        # Trusted signers' claims' blocks, before we are asked: of the shapes we ask (``resolve`` tells it).
        self.ahead = FetchAhead(kubo, fetch_ahead_bytes, identity.node_key)
        self.divergences = 0  # peers' answers that disagreed with ours, recorded since start
        self._statements = supersets.statements()  # peer candidates' statements read (immutable, bounded)
        self._arrow_warmed = False  # arrow_eval.warm() started (once: the first result a later one can derive from)
        Prepared = tuple[CanonicalQuery, list[Block], Invocation, list[Version]]
        self._prepared: OrderedDict[Any, tuple[Prepared, tuple[tuple[str, str], ...]]] = OrderedDict()

    # -- hashing the question -------------------------------------------------------------------

    async def prepare(
        self, sql: str, inputs: Mapping[str, str]
    ) -> tuple[CanonicalQuery, list[Block], Invocation, list[Version]]:
        """Resolve input refs to versions (now, once), canonicalize, and build qy_0 and iv_0. A table the statement
        reads that is neither an input nor a CTE is the dataset of that name (implicit inputs, issue 16 item 5):
        the invocation is the one ``--input NAME=NAME`` gives."""
        versions: dict[str, Version] = {}
        for alias, ref in inputs.items():
            versions[alias] = _with_schema(alias, ref, await self.datasets.input(ref))  # snapshot: its state
        # The question is a pure function of the statement and the versions it reads (a version never changes):
        # remembered, a hit skips canonicalizing and hashing it again (issue 18 item 1).
        key = (sql, tuple((a, cid_str(v.head), type(v).__name__) for a, v in versions.items()))
        memo = self._prepared.get(key)
        if memo is not None and self._same_implicit(memo[1]):
            self._prepared.move_to_end(key)
            cq, objects, iv, ordered = memo[0]
            return cq, list(objects), iv, list(ordered)  # lists of its own: the caller may extend them
        explicit = set(versions)
        prepared = await self._prepare(sql, versions)
        implicit = tuple((a, cid_str(v.head)) for a, v in versions.items() if a not in explicit)
        self._prepared[key] = (prepared, implicit)
        if len(self._prepared) > MAX_PREPARED:
            self._prepared.popitem(last=False)
        return prepared

    def _same_implicit(self, implicit: tuple[tuple[str, str], ...]) -> bool:
        """The tables read by dataset name still name the same versions (an ingest moves a head)."""
        for name, head in implicit:
            row = self.datasets.find_table(name)
            if row is None or row.head != head:
                return False
        return True

    async def _prepare(
        self, sql: str, versions: dict[str, Version]
    ) -> tuple[CanonicalQuery, list[Block], Invocation, list[Version]]:
        cq = await self._canonicalize(sql, versions)
        if not versions:  # a statement that reads no table (SELECT 1): nothing to answer from
            raise InvalidInput("a query reads at least one dataset: FROM a dataset's name, or --input NAME=DATASET")
        ordered = [versions[a] for a in cq.inputs]
        abstract = [block_of(_structure(v).abstract()) for v in ordered]
        qy = Query(cq.syntax, cq.dialect, cq.canonicalizer, cq.statement, tuple(b.cid for b in abstract))
        qy_block = block_of(qy)
        idents = []
        for v, ab in zip(ordered, abstract):
            logical, rows = await self.datasets.version_hash(v)
            idents.append(InputIdentity(ab.cid, logical, rows))
        iv = Invocation(qy_block.cid, tuple(idents))
        return cq, [*abstract, qy_block], iv, ordered

    async def _canonicalize(self, sql: str, versions: dict[str, Version]) -> CanonicalQuery:
        """Canonicalize over ``versions``; a table the canonicalizer finds undeclared (``unknown-table``) is looked
        up as a dataset name, added to ``versions`` and the statement canonicalized again (each round is one
        remembered sandbox call; at most ``MAX_IMPLICIT_INPUTS`` rounds)."""
        for _ in range(MAX_IMPLICIT_INPUTS + 1):
            try:
                return await self.canonicalizer.canonicalize(
                    sql, {a: list(_structure(v).schema) for a, v in versions.items()}
                )
            except QueryRefused as e:
                name = e.fragment  # the table's name; the whole statement when sqlglot's resolver refused it
                if e.rule != "unknown-table" or name in ("", QueryRefused("", "", sql).fragment):
                    raise
                if name.lower() in {a.lower() for a in versions}:
                    raise
                if len(versions) >= MAX_IMPLICIT_INPUTS:
                    raise InvalidInput(f"a query reads at most {MAX_IMPLICIT_INPUTS} datasets") from None
                versions[name] = await self._implicit_input(name)
        raise CairnError("unreachable: the last round returns or raises")  # for mypy's flow analysis

    async def _implicit_input(self, name: str) -> Version:
        """The version of the dataset named like the table, as ``--input NAME=NAME`` resolves it."""
        row = self.datasets.find_table(name)
        if row is None:
            hint = self.datasets.suggest(name)
            why = f"not a declared input, a CTE of the statement, nor a dataset of this node{hint}"
            raise QueryRefused("unknown-table", why, name) from None
        v = await self.datasets.as_input(await self.datasets.version(parse_cid(row.head)))  # snapshot: its state
        return _with_schema(name, row.name, v)

    # -- answering -----------------------------------------------------------------------------

    async def resolve(
        self,
        sql: str,
        inputs: Mapping[str, str],
        on_event: Event | None = None,
        trust: str | None = None,
        may_compute: bool = True,
        retry: bool = False,
    ) -> Answer:
        """``retry``: a recorded failure (here or a peer's) is not the answer: computed again (issue 22 item 1)."""
        started = time.perf_counter()
        emit = on_event or (lambda kind, data: None)
        mode = trust or self.trust_mode
        if not valid_mode(mode):
            raise InvalidInput(f"unknown trust mode {mode!r}: use {', '.join(TRUST_MODES)} or quorum:K")
        cq, objects, iv, versions = await self.prepare(sql, inputs)
        self.ahead.asked(supersets.public_shape(cq, iv))  # peers' new claims of this shape: fetched ahead
        iv_block = block_of(iv)
        key = cid_str(iv_block.cid)
        emit("prepared", {"query": cid_str(iv.query), "invocation": key})
        hit = self.index.execution(key)
        if hit is not None and hit.trust not in accepts(mode):
            log.info(
                "local row too loosely checked for this request",
                extra={"invocation": key, "trust": hit.trust, "mode": mode},
            )
            hit = None
        if hit is not None and hit.failure is not None and retry:
            hit = None
        outcome = Outcome(hit, "local", hit.trust) if hit is not None else None
        if outcome is None:
            # Identical invocations in flight share one resolution (single-flight); one that may not compute
            # is its own flight, so its refusal never reaches an asker that may.
            fkey = (key, mode, may_compute, retry)
            flight = self._inflight.get(fkey)
            if flight is None:
                flight = asyncio.ensure_future(
                    self._miss(cq, objects, iv_block, versions, mode, emit, may_compute, retry)
                )
                self._inflight[fkey] = flight
                flight.add_done_callback(lambda _: self._landed(fkey))
            outcome = await self._wait_flight(flight)
        if outcome.row.failure is not None:
            raise recorded_failure(outcome.row, outcome.peer)
        return Answer(
            iv.query,
            iv_block.cid,
            outcome.row,
            outcome.source,
            round((time.perf_counter() - started) * 1000, 3),
            cq.output_names,
            {a: cid_str(v.head) for a, v in zip(cq.inputs, versions)},
            outcome.peer,
            outcome.trust,
            outcome.hints,
        )

    def _landed(self, fkey: tuple[str, str, bool, bool]) -> None:
        self._inflight.pop(fkey, None)
        self._last_landed = time.monotonic()

    async def _quiet(self) -> None:
        """Return once no miss is in flight and none ended for ``QUIET_FOR`` seconds, or after ``DEFER_MAX``."""
        deadline = time.monotonic() + DEFER_MAX
        while (now := time.monotonic()) < deadline:
            if not self._inflight and now - self._last_landed >= QUIET_FOR:
                return
            await asyncio.sleep(QUIET_FOR)

    async def _wait_flight(self, flight: asyncio.Future[Outcome]) -> Outcome:
        """Await a shared miss; when its last caller leaves (client gone, job deleted), cancel it, which closes
        its Spark connection and so cancels the Spark job (issue 15: an abandoned query kept the worker busy)."""
        self._waiting[flight] = self._waiting.get(flight, 0) + 1
        try:
            return await asyncio.shield(flight)
        finally:
            left = self._waiting.pop(flight) - 1
            if left:
                self._waiting[flight] = left
            elif not flight.done():
                flight.cancel()

    async def _miss(
        self,
        cq: CanonicalQuery,
        objects: list[Block],
        iv_block: Block,
        versions: list[Version],
        mode: str,
        emit: Event,
        may_compute: bool = True,
        retry: bool = False,
    ) -> Outcome:
        """Not in the index (or not checked enough for ``mode``): ask peers (per the trust policy), else compute
        (only if ``may_compute``: issue 15 item 1, computing needs the API token or ``api.open_compute``).
        ``retry``: peers are not asked (their answer may be the recorded failure retried): computed here."""
        if not may_compute and (mode in ("self", "verify") or retry):  # these answer a miss only by computing
            raise Unauthorized(_NEEDS_TOKEN)
        hints: list[str] = []  # what peers had that could not be used, and what to do: said in the answer
        if may_compute and self.from_supersets and not retry:  # a cached superset's result: ours, small, here
            derived = await self._from_superset(cq, objects, iv_block, versions, emit)
            if derived is None:
                derived = await self._from_append(cq, objects, iv_block, versions, emit)
            if derived is not None:
                return Outcome(derived, "computed", "computed")
        asks = mode != "self" and not retry
        tallied: list[quorum.Tally] = []  # the quorum count, in a quorum mode
        found = await self._from_peers(cq, iv_block, versions, mode, emit, hints, tallied) if asks else None
        if found is None and not may_compute:
            raise Unauthorized(f"{_NEEDS_TOKEN}{''.join(f'; {h}' for h in hints)}")
        peer_supersets = self.from_supersets and self.from_peer_supersets
        if found is None and asks and mode != "verify" and peer_supersets:  # a peer's superset, derived here
            via = await self._from_peer_superset(cq, objects, iv_block, versions, mode, emit, hints)
            if via is not None:
                return via
        if found is not None:
            claim, got = found
            peer = _peer_part(claim, got, mode, tallied)
            if mode == "verify":
                await self._put_blocks(got.carried)
                self._owe_pins(claim, got, provide=False)  # kept as before: the claim checked is what we compare
                mine = await self._compute_judging(claim, got, cq, objects, iv_block, versions, emit)
                if mine.logical_hash != got.row.logical_hash or mine.rows != got.row.rows:
                    self._refuse(claim, "recomputed here: the logical hash differs")
                    return Outcome(mine, "computed", "computed")
                self._accept(claim)
                # Our own signed receipt for the same execution is the agreement receipt.
                return Outcome(mine, "peer", "recomputed-agreed", {**peer, "agreement": mine.receipt})
            return await self._keep_peer_answer(claim, got, objects, iv_block, peer)
        row = await self._compute(cq, objects, iv_block, versions, emit)
        return Outcome(row, "computed", "computed", hints=tuple(hints))

    async def _compute_judging(
        self,
        claim: Claim,
        got: Verified,
        cq: CanonicalQuery,
        objects: list[Block],
        iv_block: Block,
        versions: list[Version],
        emit: Event,
    ) -> ExecutionRow:
        """Compute to verify a claim; a failure recorded here judges a claim first: the same error class agrees
        with a recorded failure, any other claim is refused (issue 22 item 1)."""
        try:
            return await self._compute(cq, objects, iv_block, versions, emit)
        except RecordedFailure as e:
            theirs = got.row.failure
            if theirs is not None and theirs.error_class == e.error_class:
                self._accept(claim)
            else:
                self._refuse(claim, f"recomputed here: it fails with {e.error_class}")
            raise

    async def _keep_peer_answer(
        self, claim: Claim, got: Verified, objects: list[Block], iv_block: Block, peer: dict[str, Any]
    ) -> Outcome:
        """Record a checked peer answer and answer: the blocks it was checked from, its pins and provides are
        owed in the index first (one transaction), then put, pinned and provided in the background (docs/peers.md
        "Answer first"): a crash loses none, and this node's later Kubo calls wait for the put."""
        label = "trusted-signer" if self._trusted(claim.signer) else "unverified"
        row = replace(got.row, query=cid_str(objects[-1].cid), trust=label)
        # What we answer with is kept: the carried blocks used, and the question itself, so that the record is
        # whole here too. Owed durably before answering, put into Kubo right after (its fsyncs took 6-10 ms of
        # a 45 ms peer hit, issue 18 item 4); reads of our Kubo wait for that put (KuboClient.write_behind).
        blocks = [*got.carried, *((b.cid, b.data) for b in (*objects, iv_block))]
        self._owe_pins(claim, got, provide=True, blocks=blocks)
        self.index.add_execution(row)
        self._accept(claim)
        self._reach_later(claim.announcement.providers)
        stored = self.index.execution(row.invocation) or row
        return Outcome(stored, "peer", stored.trust, peer)

    def _reach_later(self, providers: Sequence[str]) -> None:
        """Connect our Kubo to the claim's providers after answering: an answer from carried blocks never did,
        and what comes next (lineage, verify, a pipeline's next step) fetches the peer's other blocks by CID."""
        self._keep_task(asyncio.ensure_future(connect_providers(self.kubo, tuple(providers))))

    async def _put_blocks(self, blocks: Sequence[tuple[CID, bytes]]) -> None:
        """Blocks into our Kubo: one call per codec, the calls at once."""
        by_codec: dict[str, dict[bytes, bytes]] = {}
        for cid, data in blocks:  # once each: a self-join names one structure twice
            by_codec.setdefault(cid.codec.name, {})[bytes(cid)] = data
        await asyncio.gather(*(self.kubo.block_put_many(list(d.values()), codec=c) for c, d in by_codec.items()))

    def _owe_pins(self, claim: Claim, got: Verified, provide: bool, blocks: Sequence[tuple[CID, bytes]] = ()) -> None:
        """Queue what keeping a checked claim takes (before anything is answered with it): the ``blocks`` to put
        (put now, in the background), then pins; and drain it."""
        wanted = {bytes(got.receipt.execution), bytes(claim.announcement.receipt)} if provide else set()
        pins = [(cid_str(c), rec, bytes(c) in wanted) for c, rec in got.pins]
        self.index.queue_pins(pins, [(cid_str(c), d) for c, d in blocks])
        if blocks:
            self._keep_task(self.kubo.write_behind(self._put_owed_blocks(BLOCKS_DELAY)))
        self.drain_pins()

    async def _put_owed_blocks(self, delay: float = 0.0) -> None:
        """Put the blocks owed to our Kubo; those put leave the queue. A failed put (Kubo down or restarting)
        leaves them owed: tried again before the next pins (``_drain_pins``) and at start. ``delay``: the answer
        that owed them goes out first (its rows are read from the slice cache, not Kubo)."""
        await asyncio.sleep(delay)
        owed = self.index.pending_blocks()
        if not owed:
            return
        try:
            await self._put_blocks([(parse_cid(c), d) for c, d in owed])
        except CairnError as e:
            log.warning("owed blocks not put: tried again", extra={"blocks": len(owed), "reason": e.message})
            return
        self.index.blocks_done([c for c, _ in owed])

    def _keep_task(self, task: asyncio.Task[Any]) -> None:
        self._reaching.add(task)  # cancelled at stop (stop_pins); what it owed stays in the index
        task.add_done_callback(self._reaching.discard)

    def _warm_arrow(self) -> None:
        """Once, in the background: what node.query.arrow_eval needs, imported before a first derived answer."""
        if not self._arrow_warmed:
            self._arrow_warmed = True
            self._keep_task(asyncio.ensure_future(asyncio.to_thread(arrow_eval.warm)))

    def drain_pins(self) -> None:
        """Start the background pinning of what the index says is owed, unless it runs (also at node start)."""
        if self._pinner is None or self._pinner.done():
            self._pinner = asyncio.ensure_future(self._drain_pins())

    async def stop_pins(self) -> None:
        for task in [self._pinner, *self._reaching]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in [self._pinner, *self._reaching] if t is not None), return_exceptions=True)
        await self.ahead.stop()

    async def _drain_pins(self) -> None:
        """Pin, then provide, each owed CID, oldest first; each leaves the queue only once pinned. A pin that
        fails (Kubo down or restarting) is tried again after ``PIN_RETRY``. Started after ``PIN_DELAY``: the
        answer that queued them goes out first, its Kubo calls not queued behind the pins; then once misses are
        quiet (``_quiet``)."""
        await asyncio.sleep(PIN_DELAY)
        await self._quiet()
        while owed := self.index.pending_pins():
            await self._put_owed_blocks()  # before the pins (a pin of a block not here would fetch it); at start too
            failed = False
            for cid, recursive, provide in owed:
                try:
                    await self.kubo.pin_add(cid, recursive=recursive, timeout=self.fetch_timeout)
                except CairnError as e:
                    log.warning("owed pin failed: tried again", extra={"cid": cid, "reason": e.message})
                    failed = True
                    continue
                if provide:
                    await self._provide([parse_cid(cid)])
                self.index.pin_done(cid, recursive)
            if failed:
                await asyncio.sleep(PIN_RETRY)

    async def _from_peers(
        self,
        cq: CanonicalQuery,
        iv_block: Block,
        versions: list[Version],
        mode: str,
        emit: Event,
        hints: list[str] | None = None,
        tallied: list[quorum.Tally] | None = None,
        asked_already: asyncio.Future[Any] | None = None,
    ) -> tuple[Claim, Verified] | None:
        """The first claim that passes every check, all within ``resolve_timeout`` (DESIGN.md "Resolving a
        query": bounded deadline). Each output slice that arrives and checks out pushes the deadline on, so a
        large result that keeps flowing is fetched while a claim that stalls is given up; then we compute.
        ``asked_already``: the lookup's answers, when the caller asked already (a peer's candidate superset)."""
        asking = asked_already or self._ask_peers(iv_block.cid, emit)  # first: peers work while we build the checks
        want = asked(iv_block, cq.statement, ENGINE_HANDLE, [tuple(s.cid for s in v.slices) for v in versions])
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.resolve_timeout) as deadline:

                def progress() -> None:
                    with contextlib.suppress(RuntimeError):
                        deadline.reschedule(loop.time() + self.resolve_timeout)

                for claim in self._quorum(await self._claims(iv_block.cid, asking), mode, emit, hints, tallied):
                    if mode == "community" and not self._trusted(claim.signer):
                        self._refuse(claim, f"{POLICY}signer is not in a trusted community", score=False)
                        if hints is not None and _untrusted(claim.signer) not in hints:
                            hints.append(_untrusted(claim.signer))
                            emit("untrusted-claim", {"peer": claim.peer, "signer": claim.signer})
                        continue
                    emit("fetching", {"peer": claim.peer, "signer": claim.signer})
                    try:
                        return claim, await fetch_and_verify(
                            self.kubo,
                            self.datasets,
                            claim.announcement,
                            want,
                            self.fetch_timeout,
                            progress,
                            claim.carried,
                        )
                    except ClaimRefused as e:
                        self._refuse(claim, e.message)
        except TimeoutError:
            log.warning(
                "peers gave no usable answer within peers.resolve_timeout: computing",
                extra={"invocation": cid_str(iv_block.cid), "timeout": self.resolve_timeout},
            )
            emit("peers-deadline", {"timeout": self.resolve_timeout})
            if hints is not None:
                hints.append(
                    f"a peer claims this answer, but its data did not arrive within peers.resolve_timeout "
                    f"({self.resolve_timeout:g} s): computed here; is the peer's Kubo reachable from this one?"
                )
        finally:
            if asking is not None:
                asking.cancel()  # done by now, unless a failure or the deadline left it running
        return None

    def _quorum(
        self,
        claims: list[Claim],
        mode: str,
        emit: Event,
        hints: list[str] | None,
        tallied: list[quorum.Tally] | None,
    ) -> list[Claim]:
        """In a quorum mode, the claims of the output K signers agree on (best first), none without a quorum; the
        outvoted are refused, counted against their signers (not the peers that relayed them: gossip relays every
        claim). Other modes: ``claims`` as they are."""
        q = quorum.parse(mode)
        if q is None:
            return claims

        def output(c: Claim) -> quorum.Output:
            an = c.announcement
            return (an.logical_hash if an.failure is None else f"failure:{an.failure}", an.rows)

        communities: dict[str, set[str]] = {}
        for key, community in self.index.trusted():
            communities.setdefault(key, set()).add(community)
        frozen = {k: frozenset(v) for k, v in communities.items()}
        t = quorum.tally(((c.signer, output(c)) for c in claims), q, frozen)
        if tallied is not None:
            tallied.append(t)
        emit("quorum", {"agree": t.counted, "k": q.k, "signers": list(t.agree), "dissent": list(t.dissent)})
        if t.output is None:
            if hints is not None and claims:
                what = "communities" if q.communities else "signers"
                hints.append(f"{mode}: {t.counted} {what} of {q.k} agree on one answer, {len(t.dissent)} differ")
            return []
        for c in claims:
            if c.signer in t.dissent:
                an = c.announcement
                reason = f"outvoted under {mode}: {len(t.agree)} signers agree on another output"
                log.warning("claim outvoted", extra={"signer": c.signer, "invocation": cid_str(an.invocation)})
                self.record_claim(c.peer, an, an.block().data)
                self.index.set_claim_status(cid_str(an.invocation), an.signer, cid_str(an.execution), "refused", reason)
        return [c for c in claims if c.signer in t.agree and output(c) == t.output]

    def _ask_peers(self, invocation: CID, emit: Event) -> asyncio.Future[Any] | None:
        """Start the lookup among connected peers (None without a p2p host)."""
        if self.lookup is None:
            return None
        emit("lookup", {})
        return asyncio.ensure_future(self.lookup(invocation))

    async def _claims(self, invocation: CID, asking: Awaitable[Any] | None) -> list[Claim]:
        """Claims about an invocation: those already received (gossip), then the answers of the lookup among
        peers (``asking``, started by the caller)."""
        found: dict[tuple[str, str], Claim] = {}
        rows = self.index.claims(cid_str(invocation))
        # A claim refused for what it is stays refused; one refused by policy (untrusted signer, bad score) is
        # looked at again: another mode, or a better score, may allow it.
        refused = {(r.signer, r.execution) for r in rows if r.status == "refused" and not r.reason.startswith(POLICY)}
        await self.ahead.settle([r.execution for r in rows])  # the lookup (``asking``) runs meanwhile
        for row in rows:
            if (row.signer, row.execution) not in refused:
                try:
                    an = check_announcement(row.announcement)
                    found[(row.signer, row.execution)] = Claim(row.peer, an, self.ahead.blocks(row.execution))
                except ClaimRefused:
                    continue
        if asking is not None:
            for peer, answers in (await asking).items():
                for data, carried in answers:
                    try:
                        an = check_announcement(data)
                    except ClaimRefused as e:
                        log.warning("refused a lookup answer", extra={"peer": peer, "reason": e.message})
                        self.index.log_refusal(peer, e.message)
                        continue
                    self.record_claim(peer, an, data)
                    if (an.signer, cid_str(an.execution)) not in refused:
                        key = (an.signer, cid_str(an.execution))
                        if key not in found or not found[key].carried:  # the same claim, now with its blocks
                            found[key] = Claim(peer, an, carried)
        # Prefer signers with a good record; never those refused more often than accepted (docs/peers.md).
        scores = {c.signer: self.index.signer_score(c.signer) for c in found.values()}
        usable = []
        for c in found.values():
            ok, bad = scores[c.signer]
            if not _same(c.announcement.invocation, invocation):
                continue
            if bad > ok:
                self._refuse(
                    c, f"{POLICY}signer refused {bad} times, accepted {ok}: its claims are not used", score=False
                )
                continue
            usable.append(c)
        return sorted(usable, key=lambda c: scores[c.signer][0] - 2 * scores[c.signer][1], reverse=True)

    def record_claim(self, peer: str, an: Announcement, data: bytes) -> bool:
        self._check_divergence(peer, an)
        return self.index.add_claim(
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
        if not peers or (fresh and not self.ahead.wanted(an, near)) or not self._trusted(an.signer):
            return
        if len(self._routes) >= MAX_ROUTES:
            self._routes = {p: t for p, t in self._routes.items() if now - t < ROUTE_TTL}
        self._routes.update(dict.fromkeys(peers, now))
        if not self.ahead.start(an, near):
            self._reach_later(an.providers)

    def _trusted(self, signer: str) -> bool:
        return any(key == signer for key, _ in self.index.trusted(self.community))

    def _refuse(self, claim: Claim, reason: str, score: bool = True) -> None:
        """Refuse a claim with its reason; ``score`` False for policy refusals, which say nothing of its truth."""
        an = claim.announcement
        log.warning("claim refused", extra={"peer": claim.peer, "signer": claim.signer, "reason": reason})
        self.record_claim(claim.peer, an, an.block().data)
        self.index.set_claim_status(
            cid_str(an.invocation), an.signer, cid_str(an.execution), "refused", reason, score=score
        )
        if score and self.on_refused is not None:
            self.on_refused(claim.peer, reason)

    def _accept(self, claim: Claim) -> None:
        an = claim.announcement
        self.index.set_claim_status(cid_str(an.invocation), an.signer, cid_str(an.execution), "accepted")

    def announcement(self, row: ExecutionRow, providers: list[str]) -> Announcement:
        """A signed an_0 for an execution we hold (we computed it, or verified it)."""
        from node.model import parse_cid

        engine = {"name": "spark", **({"profile": row.profile} if row.profile else {})}
        return Announcement(
            parse_cid(row.invocation),
            parse_cid(row.execution),
            parse_cid(row.receipt),
            row.logical_hash,
            row.rows,
            engine,
            tuple(providers),
            self.identity.node_key,
            clock.utc_now_iso(),
            failure=row.failure.error_class if row.failure is not None else None,
            # Only a result computed here is indexed by shape (supersets.remember): a failure never is.
            shape=self.index.shape_of(row.invocation) if row.failure is None else None,
        ).signed(self.identity.sign)

    async def recompute(
        self, claim: tuple[CID, Receipt], qy_block: Block, iv_block: Block, versions: list[Version], emit: Event
    ) -> ExecutionRow:
        """Run a receipt's invocation again here, over the dataset versions it names (issue 17 item 2; docs/
        provenance.md "Verify (recompute)"), as a miss is computed, and publish our result: signed with a receipt
        that ``verifies`` the claim when the logical hash and rows agree, a plain computed one when not (the
        index keeps it over a peer's row: ours is computed). Inputs that are not the invocation's: InvalidInput."""
        qy = decode_object(decode(qy_block.data))
        iv = decode_object(decode(iv_block.data))
        if not isinstance(qy, Query) or not isinstance(iv, Invocation) or len(iv.inputs) != len(versions):
            raise InvalidInput("the receipt's invocation does not name a query over its dataset versions")
        abstract = [block_of(_structure(v).abstract()) for v in versions]
        for i, (ab, v, ident) in enumerate(zip(abstract, versions, iv.inputs)):
            facts = (ab.cid, *await self.datasets.version_hash(v))
            if not _same(facts[0], ident.structure) or facts[1:] != (ident.logical_hash, ident.rows):
                raise InvalidInput(
                    f"input {i}: dataset version {cid_str(v.head)} is not the data the invocation names "
                    "(structure, logical hash or rows differ)"
                )
        # A peer's statement runs only as this node's canonicalizer gives it (its checks and limits: issue 15):
        # canonical SQL canonicalizes to itself, and the round gives its order (or none).
        schemas = {chr(ord("a") + i): list(b.abstract().schema) for i, b in enumerate(map(_structure, versions))}
        cq = await self.canonicalizer.canonicalize(qy.statement, schemas)
        if cq.statement != qy.statement:
            raise InvalidInput(
                f"the query's statement is not canonical for this node's canonicalizer ({cq.canonicalizer}; the "
                f"query names {qy.canonicalizer}): not run"
            )
        t0 = time.perf_counter()
        result = await self._run_on_spark(cq.statement, versions, emit)
        table = result.table
        order = await asyncio.to_thread(_canonical_indices, table, cq.order_by)
        emit("publishing", {"rows": table.num_rows})
        timings = {"compute_ms": round(result.elapsed_ms, 3), "engine_round_trip_ms": round(result.total_ms, 3)}
        return await self._publish(
            cq, [*abstract, qy_block], iv_block, versions, table, timings, t0, result.profile, claim, order=order
        )

    def judge(self, claim: tuple[CID, Receipt], agreed: bool, ours: ExecutionRow) -> None:
        """Score a receipt's signer by what recomputing it here found: accepted, or refused (as ``_refuse`` does
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
        peers = [c.peer for c in self.index.claims(iv) if c.signer == receipt.signer and c.execution == ex]
        if self.on_refused is not None:
            for peer in peers:
                self.on_refused(peer, reason)
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
        if self.index.add_divergence(d):
            self.divergences += 1

    async def _compute(
        self, cq: CanonicalQuery, objects: list[Block], iv_block: Block, versions: list[Version], emit: Event
    ) -> ExecutionRow:
        t0 = time.perf_counter()
        try:
            result = await self._run_on_spark(cq.statement, versions, emit)
        except SparkError as e:
            cls = deterministic(e)
            if cls is None:  # an accident of this run (timeout, dead worker, budget, …): never recorded
                raise
            failed = await self._publish_failure(cq, objects, iv_block, versions, e, cls, t0)
            raise recorded_failure(failed, None, first=True) from None
        t1 = time.perf_counter()
        # Sorting a large result takes seconds (1M rows: 0.7 s; 200k lists: 1.5 s): not on the loop (issue 15).
        table = result.table
        order = await asyncio.to_thread(_canonical_indices, table, cq.order_by)
        emit("publishing", {"rows": table.num_rows})
        row = await self._publish(
            cq,
            objects,
            iv_block,
            versions,
            table,
            {"compute_ms": round(result.elapsed_ms, 3), "engine_round_trip_ms": round(result.total_ms, 3)},
            t0,
            result.profile,
            order=order,
            remember=True,
        )
        log.info(
            "computed", extra={"invocation": row.invocation, "rows": row.rows, "compute_ms": round((t1 - t0) * 1000, 1)}
        )
        return row

    async def _from_superset(
        self, cq: CanonicalQuery, objects: list[Block], iv_block: Block, versions: list[Version], emit: Event
    ) -> ExecutionRow | None:
        """The answer computed from a cached superset's result slices (node.query.rewrite proves the statement): in
        the node with Arrow when node.query.arrow_eval can compute Spark's exact result, else on Spark; its receipt
        names that execution and the rule. ``None`` when no candidate is proved."""
        async for cached, rw, width in supersets.candidates(self.index, cq, versions):
            t0 = time.perf_counter()
            found = await self._derive(cached, rw, width, emit)
            if found is None:
                continue
            row = await self._publish_derived(cq, objects, iv_block, versions, cached, rw.rule, found, t0)
            self.derived += 1
            log.info("derived", extra={"invocation": row.invocation, "from": cached.execution, "rule": rw.rule})
            return row
        return None

    async def _derive(self, cached: ExecutionRow, rw: Rewrite, width: int, emit: Event) -> Derived | None:
        """``rw`` over ``cached``'s result: with Arrow in the node where it computes it exactly, else on Spark;
        ``None`` when that fails (the inputs still answer: a failed derivation costs time, not the query)."""
        try:
            found = await self._derive_here(cached, rw, width, emit)
            return found if found is not None else await self._derive_on_spark(cached, rw, width, emit)
        except CairnError as e:
            log.warning("derived answer failed", extra={"from": cached.execution, "error": str(e)})
            return None

    async def _from_peer_superset(
        self,
        cq: CanonicalQuery,
        objects: list[Block],
        iv_block: Block,
        versions: list[Version],
        mode: str,
        emit: Event,
        hints: list[str],
    ) -> Outcome | None:
        """The answer derived from a peer's result whose announcement names this query's shape (issue 22 item 3,
        docs/reuse.md "Answers from supersets"): the newest such claims (``supersets.peer_candidates``), proved all
        at once within one budget (``_proved_candidates``), then each proved one obtained as a peer hit of its
        invocation, with all its checks under ``mode``. The answer carries the trust its source was accepted with
        and says whose it is (``peer``, with ``derived``). ``None``: none was proved and obtained (then computed)."""
        ours = decode_object(decode(iv_block.data))
        shape = supersets.public_shape(cq, ours) if isinstance(ours, Invocation) else None
        if shape is None or not isinstance(ours, Invocation):
            return None
        listed = supersets.peer_candidates(
            self.index.shape_claims(shape),
            self.identity.node_key,
            cid_str(iv_block.cid),
            lambda c: c.status != "refused" or c.reason.startswith(POLICY),
        )
        for cand in await self._proved_candidates(listed, cq, ours, mode, emit):
            t0 = time.perf_counter()
            source = await self._obtain_candidate(cand, cq, objects, versions, mode, emit, hints)
            found = None if source is None else await self._derive(source.row, cand.rw, cand.width, emit)
            if source is None or found is None:
                continue
            row = await self._publish_derived(
                cq, objects, iv_block, versions, source.row, cand.rw.rule, found, t0, trust=source.trust
            )
            self.derived += 1
            log.info("derived from a peer's result", extra={"invocation": row.invocation, "from": cand.claim.execution})
            derived = {"execution": source.row.execution, "invocation": source.row.invocation, "rule": cand.rw.rule}
            return Outcome(row, "peer", row.trust, {**(source.peer or {}), "derived": derived})
        return None

    async def _proved_candidates(
        self, listed: Sequence[ClaimRow], cq: CanonicalQuery, ours: Invocation, mode: str, emit: Event
    ) -> list[_Candidate]:
        """The candidates a rule proves can answer ``cq``, in ``listed`` order: their statements read and proved at
        once, all within ``supersets.PEER_PROOF_BUDGET``; one still unread then is dropped (with its lookup), so a
        miss never waits on many slow peers one after another before it computes."""
        if not listed:
            return []
        tasks = [asyncio.ensure_future(self._prove_candidate(c, cq, ours, mode, emit)) for c in listed]
        try:
            done, pending = await asyncio.wait(tasks, timeout=supersets.PEER_PROOF_BUDGET)
        finally:  # the miss itself cancelled (its client gone, the node stopping): no proof left running
            for task in tasks:
                task.cancel()
        proved = [t.result() for t in tasks if t in done and t.exception() is None]
        if pending:
            log.info("peer candidates not proved within the budget", extra={"dropped": len(pending)})
        return [c for c in proved if c is not None]

    async def _prove_candidate(
        self, claim: ClaimRow, cq: CanonicalQuery, ours: Invocation, mode: str, emit: Event
    ) -> _Candidate | None:
        """One peer candidate, proved: its statement kept here already (no network), else read from its lookup
        answer (the lookup's answers are kept for obtaining it) or from Kubo; a result of it held here already
        (an earlier peer hit or derivation, checked enough for ``mode``) is used as it is."""
        hit = self.index.execution(claim.invocation)
        held = hit if hit is not None and hit.trust in accepts(mode) and hit.failure is None else None
        statement = self._statements.get(claim.invocation)
        asking = None
        if statement is None:
            try:
                providers = () if held else check_announcement(claim.announcement).providers
            except ClaimRefused:
                return None
            asking = None if held else self._ask_peers(CID.decode(claim.invocation), emit)
            answers = await asking if asking is not None else {}
            carried = {k: v for items in answers.values() for _, blocks in items for k, v in blocks.items()}
            statement = await supersets.read_statement(self.kubo, claim.invocation, carried, tuple(providers))
            if statement is None:
                return None
            self._statements.put(claim.invocation, statement)
        proved = await self._prove(statement.query, cq) if statement.answers_inputs_of(ours) else None
        return None if proved is None else _Candidate(claim, statement, *proved, held, asking)

    async def _obtain_candidate(
        self,
        cand: _Candidate,
        cq: CanonicalQuery,
        objects: list[Block],
        versions: list[Version],
        mode: str,
        emit: Event,
        hints: list[str],
    ) -> Outcome | None:
        """A proved candidate's result: held here, else fetched as a peer hit of its invocation is (every check,
        quorum, community, refusals and scores; the lookup made while proving it is reused)."""
        claim, st = cand.claim, cand.statement
        if cand.held is not None:
            peer = {"peer": claim.peer, "signer": claim.signer, "mode": mode, "receipt": cand.held.receipt}
            return Outcome(cand.held, "local", cand.held.trust, peer)
        want_cq = replace(cq, statement=st.query.statement)
        tallied: list[quorum.Tally] = []
        found = await self._from_peers(want_cq, st.iv_block, versions, mode, emit, hints, tallied, cand.asking)
        if found is None:
            return None
        c, got = found
        cand_objects = [*objects[:-1], st.qy_block]
        return await self._keep_peer_answer(c, got, cand_objects, st.iv_block, _peer_part(c, got, mode, tallied))

    async def _prove(self, qy: Query, cq: CanonicalQuery) -> tuple[Rewrite, int] | None:
        """The rewrite of ``cq`` over the result of a peer's query ``qy`` (same inputs), and that result's number of
        columns; ``None`` unless a rule proves it. A peer's statement is parsed only once this node's canonicalizer
        (its checks and limits, issue 15) gives it back unchanged, as ``recompute`` requires."""
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

    async def _derive_here(self, cached: ExecutionRow, rw: Rewrite, width: int, emit: Event) -> Derived | None:
        """The rewritten statement evaluated in the node (node.query.arrow_eval), for a small cached result whose
        statement is in the subset Arrow computes exactly as Spark; ``None`` otherwise. Receipt timings: ``arrow_ms``
        (no Spark job ran); the engine profile (an ep_0 block) is the cached execution's."""
        if cached.rows > ARROW_EVAL_MAX_ROWS or (cached.profile is None and not self.worker.profile):
            return None
        tables = await self._result_tables(cached)
        t1 = time.perf_counter()

        def run() -> pa.Table | None:
            whole = pa.concat_tables(tables).rename_columns([f"col_{i}" for i in range(width)])
            result = arrow_eval.evaluate(rw.statement, whole)
            return None if result is None else _canonical_order(result, None)

        table = await asyncio.to_thread(run)
        if table is None:
            return None
        emit("computing", {"engine": "arrow", "derived_from": cached.execution, "rule": rw.rule})
        self.computed += 1
        timings = {"arrow_ms": round((time.perf_counter() - t1) * 1000, 3)}
        if cached.profile is None:  # a result from before engine profiles: the running worker's
            return table, timings, self.worker.profile, None
        # The cached execution's engine profile: its semantics are the answer's, and no worker need be up.
        return table, timings, await self._profile_of(cached), None

    async def _result_tables(self, cached: ExecutionRow) -> list[pa.Table]:
        """A cached result's slices, decoded: kept in memory once read (``RESULTS_KEPT_BYTES`` in all, least recently
        used dropped first), since the same superset answers many restrictions. Decoding a 200 000-row result took
        10-13 ms of a ~40 ms derived answer (issue 22 item 5); a result never changes, so keeping it is safe."""
        kept = self._results_kept.get(cached.execution)
        if kept is not None:
            self._results_kept.move_to_end(cached.execution)
            return kept
        tables = [await self.datasets.read_cid(CID.decode(s)) for s in cached.slices]
        size = sum(t.nbytes for t in tables)
        if size <= RESULTS_KEPT_BYTES // 4:  # one large result must not push out all the others
            self._results_kept[cached.execution] = tables
            total = sum(t.nbytes for ts in self._results_kept.values() for t in ts)
            while total > RESULTS_KEPT_BYTES:
                _, dropped = self._results_kept.popitem(last=False)
                total -= sum(t.nbytes for t in dropped)
        return tables

    async def _derive_on_spark(self, cached: ExecutionRow, rw: Rewrite, width: int, emit: Event) -> Derived:
        """The rewritten statement run on the Spark worker over the cached result's (staged) slices."""
        paths = [await self._staged(await self.datasets.cid_path(CID.decode(s)), CID.decode(s)) for s in cached.slices]
        if self.worker_ready is not None:  # after a restart the worker may not be up yet
            await self.worker_ready(emit)
        emit("computing", {"engine": "spark", "derived_from": cached.execution, "rule": rw.rule})
        self.computed += 1
        result = await self.worker.run(
            rw.statement,
            {"a": (paths, [f"col_{i}" for i in range(width)])},
            timeout=self.query_timeout,
            on_progress=lambda p: emit("spark", p),
        )
        order = await asyncio.to_thread(_canonical_indices, result.table, None)
        timings = {"compute_ms": round(result.elapsed_ms, 3), "engine_round_trip_ms": round(result.total_ms, 3)}
        return result.table, timings, result.profile, order

    async def _from_append(
        self, cq: CanonicalQuery, objects: list[Block], iv_block: Block, versions: list[Version], emit: Event
    ) -> ExecutionRow | None:
        """The answer brought forward from our result of the same statement over an older version: computed over
        the appended slices only and merged (node.query.rewrite.forward), in the node with Arrow where
        node.query.arrow_eval computes it exactly, else on Spark; receipt ``derived`` names the old execution with
        rule ``append``. ``None`` when there is none or the merge fails (then computed in full)."""
        for cached, rw, width, fresh in supersets.appended(self.index, cq, versions):
            t0 = time.perf_counter()
            names = [f"col_{j}" for j in range(len(_structure(versions[0]).schema))]
            try:
                found = await self._forward_here(cq, cached, fresh, names, emit)
                if found is None:
                    found = await self._forward_on_spark(cached, rw, width, fresh, names, emit)
            except CairnError as e:  # e.g. an ANSI overflow of a partial sum: the full computation still answers
                log.warning("forwarded answer failed", extra={"from": cached.execution, "error": str(e)})
                continue
            row = await self._publish_derived(cq, objects, iv_block, versions, cached, rw.rule, found, t0)
            self.forwarded += 1
            log.info("forwarded", extra={"invocation": row.invocation, "from": cached.execution, "slices": len(fresh)})
            return row
        return None

    async def _publish_derived(
        self,
        cq: CanonicalQuery,
        objects: list[Block],
        iv_block: Block,
        versions: list[Version],
        cached: ExecutionRow,
        rule: str,
        found: Derived,
        t0: float,
        trust: str = "computed",
    ) -> ExecutionRow:
        """Publish an answer computed from ``cached``'s result by ``rule`` (receipt ``derived``). A forwarded answer
        is indexed as a superset of later queries (nothing else covers its version); one derived from a superset is
        not: its source answers all it can, and restrictions remembered would push that source out of the bounded
        candidate list (``Index.shape_candidates``). ``trust``: a peer's result's label, for an answer derived from
        it (never "computed": docs/peers.md "Trust labels"); such a row is neither announced nor a candidate."""
        table, timings, profile, order = found
        derived = (CID.decode(cached.execution), rule)
        return await self._publish(
            cq,
            objects,
            iv_block,
            versions,
            table,
            timings,
            t0,
            profile,
            derived=derived,
            order=order,
            remember=rule == "append",
            trust=trust,
        )

    async def _forward_here(
        self, cq: CanonicalQuery, cached: ExecutionRow, fresh: list[SliceRef], names: list[str], emit: Event
    ) -> Derived | None:
        """The forwarded answer computed in the node with Arrow (node.query.arrow_eval.forward), when the old result
        and the appended rows are small and the statement is in Arrow's exact subset; ``None`` otherwise."""
        if cached.rows > ARROW_EVAL_MAX_ROWS or sum(s.rows for s in fresh) > ARROW_EVAL_MAX_ROWS:
            return None
        if cached.profile is None:
            return None
        old = await self._result_tables(cached)
        new = [await self.datasets.read_cid(s.cid, size=s.size) for s in fresh]
        t1 = time.perf_counter()

        def run() -> pa.Table | None:
            try:
                appended = pa.concat_tables(new).rename_columns(names)
            except pa.ArrowInvalid:  # slices of differing schemas: Spark reads them under the last one's
                return None
            result = arrow_eval.forward(cq.statement, pa.concat_tables(old), appended)
            return None if result is None else _canonical_order(result, None)

        table = await asyncio.to_thread(run)
        if table is None:
            return None
        emit("computing", {"engine": "arrow", "derived_from": cached.execution, "rule": "append"})
        self.computed += 1
        timings = {"arrow_ms": round((time.perf_counter() - t1) * 1000, 3)}
        return table, timings, await self._profile_of(cached), None

    async def _profile_of(self, cached: ExecutionRow) -> Block:
        """The ep_0 block of a cached execution's engine profile (pinned with its receipt), checked."""
        assert cached.profile is not None
        block = self._profiles_read.get(cached.profile)
        if block is None:
            cid = CID.decode(cached.profile)
            # A peer's result's profile was not fetched by its checks: then from the network (its receipt names it).
            block = Block(cid, await self.kubo.block_get(cid, offline=cached.source != "peer", timeout=10.0))
            block.verify()
            self._profiles_read.put(cached.profile, block)  # immutable: its CID names it
        return block

    async def _forward_on_spark(
        self, cached: ExecutionRow, rw: Rewrite, width: int, fresh: list[SliceRef], names: list[str], emit: Event
    ) -> Derived:
        """The forward statement on the Spark worker: the appended slices as ``a``, the old result as ``b``."""
        old = [await self._staged(await self.datasets.cid_path(CID.decode(s)), CID.decode(s)) for s in cached.slices]
        new = [await self._input_path(s) for s in fresh]
        if self.worker_ready is not None:
            await self.worker_ready(emit)
        emit("computing", {"engine": "spark", "derived_from": cached.execution, "rule": rw.rule})
        self.computed += 1
        result = await self.worker.run(
            rw.statement,
            {"a": (new, names), "b": (old, [f"col_{i}" for i in range(width)])},
            timeout=self.query_timeout,
            on_progress=lambda p: emit("spark", p),
        )
        order = await asyncio.to_thread(_canonical_indices, result.table, None)
        timings = {"compute_ms": round(result.elapsed_ms, 3), "engine_round_trip_ms": round(result.total_ms, 3)}
        return result.table, timings, result.profile, order

    async def _run_on_spark(self, statement: str, versions: list[Version], emit: Event) -> Any:
        """Run the canonical statement over the versions' slices, as tables ``a, b, …`` of columns ``col_i``."""
        work = Path(tempfile.mkdtemp(prefix="inputs-", dir=self.work_dir))
        try:
            inputs: dict[str, tuple[list[Path | str], list[str]]] = {}
            for i, v in enumerate(versions):
                paths: list[Path | str] = [await self._input_path(s) for s in v.slices]
                if not paths:  # a version with no rows is a table of 0 rows: an empty file of its structure
                    empty = write_empty(work / f"empty-{i}.parquet", _structure(v).schema)
                    paths = [await self.staging.stage(empty) if self.staging else empty]
                names = [f"col_{j}" for j in range(len(_structure(v).schema))]
                inputs[chr(ord("a") + i)] = (paths, names)
            if self.worker_ready is not None:
                await self.worker_ready(emit)
            emit("computing", {"engine": "spark"})
            self.computed += 1
            return await self.worker.run(
                statement, inputs, timeout=self.query_timeout, on_progress=lambda p: emit("spark", p)
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _input_path(self, s: SliceRef) -> Path | str:
        """Where Spark reads the slice: the node's cache, or (``spark.staging``) the shared copy of it."""
        return await self._staged(await self.datasets.slice_path(s), s.cid)

    async def _staged(self, local: Path, cid: CID) -> Path | str:
        """``local`` itself, or (``spark.staging``) its shared copy where executors read it."""
        return await self.staging.stage(local, cid) if self.staging is not None else local

    async def _publish(
        self,
        cq: CanonicalQuery,
        objects: list[Block],
        iv_block: Block,
        versions: list[Version],
        table: pa.Table,
        timings: dict[str, float],
        t0: float,
        profile: Mapping[str, Any] | Block,
        claim: tuple[CID, Receipt] | None = None,
        derived: tuple[CID, str] | None = None,
        order: pa.Array | None = None,
        remember: bool = False,
        trust: str = "computed",
    ) -> ExecutionRow:
        """Store, pin, index and announce our result (``table``'s rows in the order of the indices ``order``, or as
        they are). ``claim`` (a receipt being verified, and its CID): our receipt ``verifies`` it when our result
        agrees, and is then labelled ``recomputed-agreed``. ``derived``: the execution and rule an answer from a
        superset came from (receipt ``derived``), ``trust`` its label if a peer's. ``remember``: index its shape."""
        ep_block = profile if isinstance(profile, Block) else await self._profile_block(profile)
        work = Path(tempfile.mkdtemp(prefix="result-", dir=self.work_dir))
        try:
            slices, files, logical = await self._write_result(table, work, order)
            st_block = block_of(Structure("parquet", tuple((f.name, canonical_type(f.type)) for f in table.schema)))
            ex_blocks = _execution_blocks(cq, versions, slices)
            ex = ex_blocks[-1]
            timings = {**timings, "total_ms": round((time.perf_counter() - t0) * 1000, 3)}
            agrees = claim is not None and (claim[1].logical_hash, claim[1].rows) == (logical, table.num_rows)
            rc = self._receipt(cq, ex.cid, iv_block.cid, logical, table.num_rows, st_block.cid, versions, timings)
            came, rule = derived if derived else (None, None)
            verifies = claim[0] if claim and agrees else None
            rc = replace(rc, profile=ep_block.cid, verifies=verifies, derived_from=came, rewrite=rule)
            rc_block = block_of(rc.signed(self.identity.sign))
            blocks = [(b.cid, b.data) for b in [*objects, iv_block, st_block, *ex_blocks, rc_block]]
            behind = derived is not None and trust in VERIFIED_LABELS and claim is None  # stored after the answer
            await self._store(rc_block.cid, rc, blocks, trust, behind)
            for path, cid in files:
                os.replace(path, self.datasets.cache_dir / f"{cid_str(cid)}.parquet")
            row = ExecutionRow(
                cid_str(iv_block.cid),
                cid_str(objects[-1].cid),
                cid_str(ex.cid),
                cid_str(rc_block.cid),
                logical,
                table.num_rows,
                cid_str(st_block.cid),
                tuple(cid_str(c) for c in slices),
                "computed",
                clock.now(),
                trust="recomputed-agreed" if rc.verifies is not None else trust,
                profile=cid_str(ep_block.cid),
            )
            if remember:  # before it is announced: the announcement names the shape
                self._remember_shape(cq, versions, row, iv_block)
            return await self._record(row, [ex.cid, rc_block.cid, *slices], own=claim is not None, behind=behind)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _remember_shape(self, cq: CanonicalQuery, versions: list[Version], row: ExecutionRow, iv_block: Block) -> None:
        """Index a result as a candidate superset of later queries (and warm what deriving from it needs)."""
        self._warm_arrow()
        iv = decode_object(decode(iv_block.data))
        supersets.remember(self.index, cq, versions, row, iv if isinstance(iv, Invocation) else None)

    async def _publish_failure(
        self,
        cq: CanonicalQuery,
        objects: list[Block],
        iv_block: Block,
        versions: list[Version],
        err: SparkError,
        cls: str,
        t0: float,
    ) -> ExecutionRow:
        """Store, pin, index and announce a deterministic failure as a result is (issue 22 item 1): an ex_0 with
        exitStatus true and no output (Holium "Execution": exitStatus false is success), and a signed receipt
        naming the error class, with no logical hash, 0 rows and the structure of no columns."""
        ep_block = await self._profile_block(self.worker.profile)
        st_block = block_of(Structure("parquet", ()))
        ex_blocks = _execution_blocks(cq, versions, None)
        ex = ex_blocks[-1]
        failure = Failure(cls, err.sqlstate or "", err.message)
        rc = Receipt(
            ex.cid,
            iv_block.cid,
            self.identity.node_key,
            clock.utc_now_iso(),
            {**engine_versions(cq), **self.worker.deployment},
            "",
            0,
            st_block.cid,
            tuple(v.head for v in versions),
            {"total_ms": round((time.perf_counter() - t0) * 1000, 3)},
            profile=ep_block.cid,
            failure=failure,
        )
        rc_block = block_of(rc.signed(self.identity.sign))
        await self._put_blocks([(b.cid, b.data) for b in [*objects, iv_block, st_block, *ex_blocks, rc_block]])
        await self._pin_receipt(rc_block.cid, rc)
        row = ExecutionRow(
            cid_str(iv_block.cid),
            cid_str(objects[-1].cid),
            cid_str(ex.cid),
            cid_str(rc_block.cid),
            "",
            0,
            cid_str(st_block.cid),
            (),
            "computed",
            clock.now(),
            trust="computed",
            profile=cid_str(ep_block.cid),
            failure=failure,
        )
        log.info("deterministic failure recorded", extra={"invocation": row.invocation, "class": cls})
        await self._record(row, [ex.cid, rc_block.cid], own=True)
        return row

    def _receipt(
        self,
        cq: CanonicalQuery,
        ex: CID,
        iv: CID,
        logical: str,
        rows: int,
        structure: CID,
        versions: list[Version],
        timings: dict[str, float],
    ) -> Receipt:
        """Our unsigned receipt for an execution (``_publish`` adds profile, verifies and derived)."""
        return Receipt(
            ex,
            iv,
            self.identity.node_key,
            clock.utc_now_iso(),
            {**engine_versions(cq), **self.worker.deployment},  # mode/master: absent in local mode
            logical,
            rows,
            structure,
            tuple(v.head for v in versions),
            timings,
        )

    async def _write_result(
        self, table: pa.Table, work: Path, order: pa.Array | None = None
    ) -> tuple[list[CID], list[tuple[Path, CID]], str]:
        """The result (its rows in the order of the indices ``order``, or as they are) cut into Parquet slices stored
        (unpinned) in Kubo: their CIDs, local files, logical hash. Rows are taken a slice at a time: the sorted result
        is never held whole beside the result (issue 21 item 2)."""
        slices: list[CID] = []
        files: list[tuple[Path, CID]] = []
        hasher = LogicalHasher(table.schema)
        size = self.rows_per_slice

        def cut(n: int, part: pa.Table | None) -> pa.Table:
            if part is None:  # the n-th slice's rows, taken (in this thread) in order
                assert order is not None
                part = table.take(order.slice(n * size, size))
            write_parquet_slice(part, str(work / f"out-{n}.parquet"))
            return part

        parts: Iterable[pa.Table | None] = (
            iter_slices(table.to_batches(), table.schema, size)
            if order is None
            else itertools.repeat(None, -(-table.num_rows // size))
        )
        for n, item in enumerate(parts):
            path = work / f"out-{n}.parquet"
            part = await asyncio.to_thread(cut, n, item)
            hasher.update(part)
            added = await self.kubo.add(path, pin=False)
            slices.append(added.cid)
            files.append((path, added.cid))
        if not slices:  # an empty result still has a shape: one empty slice carries it
            path = work / "out-0.parquet"
            await asyncio.to_thread(write_parquet_slice, table, str(path))
            added = await self.kubo.add(path, pin=False)
            slices.append(added.cid)
            files.append((path, added.cid))
        return slices, files, str(hasher.finish())

    async def _record(
        self, row: ExecutionRow, provide: list[CID], own: bool = False, behind: bool = False
    ) -> ExecutionRow:
        """Index a stored and pinned execution, announce what we now provide, and tell the listener. ``own``: the
        announcement names this row's receipt (a verification's), even when the index keeps an earlier row.
        ``behind``: its pin is owed (drained now); provides and the announcement go out after the answer."""
        self.index.add_execution(row)
        stored = self.index.execution(row.invocation) or row
        if behind:
            self.drain_pins()
            self._keep_task(asyncio.ensure_future(self._publish_later(stored, provide)))
            return stored
        await self._provide(provide)
        # Derived from a peer's unchecked result: not signed for to peers (network._ours, docs/peers.md).
        if self.on_published is not None and row.trust in VERIFIED_LABELS:
            await self.on_published(row if own else stored)
        return row if own else stored

    async def _publish_later(self, row: ExecutionRow, provide: list[CID]) -> None:
        """Provide and announce a derived answer (ours: ``behind`` rows are verified) once misses are quiet. Not
        owed durably: Kubo's reprovider provides what is pinned, and a lookup answers from the index."""
        await self._quiet()
        await self._provide(provide)
        if self.on_published is not None:
            await self.on_published(row)

    async def _store(
        self, receipt: CID, rc: Receipt, blocks: Sequence[tuple[CID, bytes]], trust: str, behind: bool
    ) -> None:
        """An answer's blocks into our Kubo, its receipt pinned: now, or (``behind``: a derived answer of ours) owed
        and done after it (``_owe_receipt``)."""
        if behind:
            self._owe_receipt(receipt, blocks)
            return
        await self._put_blocks(blocks)  # one call per codec, at once (13 calls one after the other: 20-26 ms)
        if rc.verifies is None and trust in VERIFIED_LABELS:
            # Our own answer: its blocks are in Kubo before it is announced; the recursive pin, which walks every
            # input slice's blocks (about 50 ms at 10 M rows, issue 18: a miss was 1.26x Spark), is owed in the
            # index before the row is written and drained once misses are quiet: a crash loses none.
            self._owe_receipt(receipt)
            self.drain_pins()
            return
        await self._pin_receipt(receipt, rc, foreign=trust not in VERIFIED_LABELS)

    def _owe_receipt(self, receipt: CID, blocks: Sequence[tuple[CID, bytes]] = ()) -> None:
        """A derived answer's blocks and its receipt's recursive pin, owed in the index (one transaction: a crash
        loses none, the next start puts and pins them), put right after the answer (later calls of our Kubo wait
        for that put: ``KuboClient.write_behind``), pinned once misses are quiet (``_drain_pins``). They took 10-15
        ms of Kubo calls, and the pin 20-35 ms, of a derived answer at 10 M rows (issue 22 item 5). No ``blocks``:
        an answer computed here, whose blocks were put before it; only its pin is owed."""
        self.index.queue_pins([(cid_str(receipt), True, False)], [(cid_str(c), d) for c, d in blocks])
        if blocks:  # none: our own computed answer's blocks were put before it
            self._keep_task(self.kubo.write_behind(self._put_owed_blocks(BLOCKS_DELAY)))

    async def _pin_receipt(self, cid: CID, rc: Receipt, foreign: bool = False) -> None:
        """The receipt links everything: one recursive pin keeps result, execution and sources together. A
        verification receipt also links the receipt it verifies, whose own links (its signer's engine profile)
        this node may not hold: that one is pinned alone, so pinning never waits on the network. ``foreign``: the
        receipt is derived from a peer's execution, whose DAG (its bytecode, …) this node may not hold either: it
        is not pinned here (the peer hit that brought it owes the pins of what was used)."""
        if rc.verifies is None and not foreign:
            await self.kubo.pin_add(cid, recursive=True)
            return
        own = [rc.execution, rc.invocation, rc.structure, *rc.versions, *([rc.profile] if rc.profile else [])]
        for link in own:
            await self.kubo.pin_add(link, recursive=True)
        for alone in (*([rc.verifies] if rc.verifies is not None else []), cid):
            try:
                await self.kubo.pin_add(alone, recursive=False)
            except KuboError as e:  # our own receipt, verified again: kept already, with all it links
                if "already pinned recursively" not in e.message:
                    raise

    async def _profile_block(self, profile: Mapping[str, Any]) -> Block:
        """The ep_0 of the worker's reported profile, written to Kubo the first time it is seen.

        DESIGN.md "Engine profile": written once, linked from every receipt (the receipt's recursive pin
        keeps it). The worker's report is one object per worker start, so it is encoded once per start.
        """
        if self._profile is None or self._profile[0] is not profile:
            try:
                block = block_of(EngineProfile.from_report(profile))
            except InvalidObject as e:
                raise CairnError(f"the Spark worker reported a malformed engine profile: {e}") from None
            self._profile = (profile, block)
        block = self._profile[1]
        key = cid_str(block.cid)
        if key not in self._profiles_put:
            await self.kubo.block_put(block.data, codec=block.cid.codec.name)
            self._profiles_put.add(key)
            log.info("engine profile", extra={"profile": key})
        return block

    def _check_divergence(self, peer: str, an: Announcement) -> None:
        """A claim for an invocation we hold whose answer differs from ours is recorded, never cached.

        DESIGN.md "Engine profile": two receipts for one invocation under different profiles that disagree
        are a divergence to surface. Our row stays the answer (first writer wins in the index); the
        divergence names both executions and both profiles (the claim's from its announcement's engine).
        """
        ours = self.index.execution(cid_str(an.invocation))
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
        if self.index.add_divergence(d):
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

    async def _provide(self, cids: list[CID]) -> None:
        """Announce on the IPFS DHT; with no peers Kubo refuses at once, which is not an error for us."""
        for cid in cids:
            try:
                await self.kubo.routing_provide(cid, timeout=5.0)
            except CairnError as e:
                log.debug("provide skipped", extra={"cid": cid_str(cid), "reason": e.message})
                return

    async def iter_result(self, row: ExecutionRow) -> AsyncIterator[pa.Table]:
        """The result's slices in order, read one at a time (a caller that has enough stops early)."""
        for s in row.slices:
            yield await self.datasets.read_cid(parse_cid(s))

    async def iter_result_files(self, row: ExecutionRow) -> AsyncIterator[Path]:
        """The result's slices in order, each as its local Parquet file (fetched into the slice cache first), for a
        reader that streams a slice in small batches rather than holding it whole."""
        for s in row.slices:
            yield await self.datasets.cid_path(parse_cid(s))

    def preview(self, row: ExecutionRow, limit: int) -> Awaitable[tuple[pa.Schema, list[list[Any]]]]:
        """The result's schema and first ``limit`` rows, rendered JSON-safe (node.values); cached, since
        results never change."""
        key = (row.execution, limit)
        cached = self._previews.get(key)
        if cached is None:
            cached = asyncio.ensure_future(self._preview(row, limit))
            self._previews[key] = cached
            cached.add_done_callback(
                lambda f: (f.cancelled() or f.exception() is not None) and self._previews.pop(key, None)
            )
            while len(self._previews) > 256:
                self._previews.pop(next(iter(self._previews)))
        return asyncio.shield(cached)

    async def _preview(self, row: ExecutionRow, limit: int) -> tuple[pa.Schema, list[list[Any]]]:
        schema: pa.Schema | None = None
        parts: list[pa.Table] = []
        shown = 0
        for s in row.slices:  # only the rows shown are decoded (a large peer hit read its first slice whole)
            t = await self.datasets.head_cid(parse_cid(s), max(0, limit - shown))
            schema = schema or t.schema
            parts.append(t)
            shown += t.num_rows
            if shown >= limit:
                break
        assert schema is not None
        head = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        return schema, await asyncio.to_thread(values.json_rows, head)  # 100k rows: 0.24 s, off the loop


def _same(a: CID, b: CID) -> bool:
    return bytes(a) == bytes(b)


def _untrusted(key: str) -> str:
    """What to do about a claim the trust mode did not allow (issue 16: the node recomputed silently)."""
    return f"a peer has this answer, signed by {key}, not trusted: cairn trust add {key}, or --trust verify"


def _execution_blocks(cq: CanonicalQuery, versions: list[Version], slices: list[CID] | None) -> list[Block]:
    """The blocks of an execution of `cq` over `versions` giving `slices`, in storing order: the execution last.
    ``slices`` None: the execution failed (exitStatus true, no output)."""
    sql_leaf, mbe = bytecode_of(cq.statement)  # the same bytecode a peer's claim is checked against
    in_lists, in_root, in_env = _input_blocks(versions)
    if slices is None:
        ex = block_of(Execution(mbe.cid, ENGINE_HANDLE, in_env.cid, True, None))
        return [sql_leaf, mbe, *in_lists, in_root, in_env, ex]
    out_list = block_of(list(slices))
    out_env = block_of(RecursiveDataEnvelope(out_list.cid))
    ex = block_of(Execution(mbe.cid, ENGINE_HANDLE, in_env.cid, False, out_env.cid))
    return [sql_leaf, mbe, *in_lists, in_root, out_list, in_env, out_env, ex]


INPUT_BLOCKS_KEPT = 64
_INPUT_BLOCKS: Lru[tuple[list[Block], Block, Block]] = Lru(INPUT_BLOCKS_KEPT)


def _input_blocks(versions: Sequence[Version]) -> tuple[list[Block], Block, Block]:
    """An execution's input blocks: one link list of slices per version, their root and its envelope. The same for
    every query over the same slices, so encoded once, keyed by the slices (not the head: a snapshot dataset's
    changelog view has its head and other slices). A 10 M-row version's list took 2-3 ms of a derived answer's ~40
    (issue 22 item 5)."""
    key = " ".join(",".join(str(s.cid) for s in v.slices) for v in versions)
    found = _INPUT_BLOCKS.get(key)
    if found is None:
        in_lists = [block_of([s.cid for s in v.slices]) for v in versions]
        in_root = block_of([b.cid for b in in_lists])
        found = (in_lists, in_root, block_of(RecursiveDataEnvelope(in_root.cid)))
        _INPUT_BLOCKS.put(key, found)
    return found


def recorded_failure(row: ExecutionRow, peer: Mapping[str, Any] | None, first: bool = False) -> RecordedFailure:
    """The one-line 4xx a recorded failure answers with (docs/queries.md "Recorded failures")."""
    f = row.failure
    assert f is not None
    by = f"recorded by peer signer {peer['signer']}" if peer else "failed here" if first else "recorded failure"
    return RecordedFailure(
        f"{by}: {f.error_class}{f' ({f.sqlstate})' if f.sqlstate else ''}: {f.message} [execution "
        f"{row.execution}, receipt {row.receipt}]; it fails the same way on these inputs: "
        f'--retry (API: "retry": true) computes it again',
        error_class=f.error_class,
        execution=row.execution,
        receipt=row.receipt,
    )


def engine_versions(cq: CanonicalQuery) -> dict[str, str]:
    # The installed distribution's version: importing pyspark here cost a first miss 0.25 s (issue 18 item 7).
    return {"name": "spark", "spark": _pyspark_version(), "pyarrow": pa.__version__, "canonicalizer": cq.canonicalizer}


@functools.cache
def _pyspark_version() -> str:
    return importlib.metadata.version("pyspark")


def _canonical_order(table: pa.Table, order_by: tuple[SortKey, ...] | None) -> pa.Table:
    """Rows in canonical order (DESIGN.md): the query's total ORDER BY if it has one, else all columns."""
    indices = _canonical_indices(table, order_by)
    return table if indices is None else table.take(indices)


def _canonical_indices(table: pa.Table, order_by: tuple[SortKey, ...] | None) -> pa.Array | None:
    """The indices that put ``table``'s rows in canonical order (``_canonical_order``); None: they are in it."""
    if order_by:
        # The canonicalizer completed the statement's ORDER BY to a total order: Spark's order is canonical.
        return None
    try:  # every column, nested ones by their canonical byte encoding (docs/queries.md "Order")
        return canonical_indices(table)
    except (pa.ArrowException, TypeError) as e:  # a result type with no canonical order: say so, not a 500
        raise InvalidInput(f"cannot put the result in canonical order ({e}); add an ORDER BY") from None


def _with_schema(alias: str, ref: str, v: Version) -> Version:
    if v.structure is None:  # no schema yet; a known schema with 0 rows is a table
        raise InvalidInput(f"input {alias!r} ({ref}) has no schema yet: add rows before querying it")
    return v


def _structure(v: Version) -> Structure:
    """The version's schema; a query's inputs are checked to have one when it is planned."""
    if v.structure is None:
        raise InvalidInput(f"dataset version {cid_str(v.head)} has no schema yet: add rows before querying it")
    return v.structure


def _peer_part(claim: Claim, got: Verified, mode: str, tallied: list[quorum.Tally]) -> dict[str, Any]:
    """An answer's ``peer``: which peer, which signer, which mode, which receipt (and quorum, verifies)."""
    peer: dict[str, Any] = {
        "peer": claim.peer,
        "signer": claim.signer,
        "mode": mode,
        "receipt": cid_str(claim.announcement.receipt),
    }
    if got.receipt.verifies is not None:  # the signer recomputed another's receipt and agreed
        peer["verifies"] = cid_str(got.receipt.verifies)
    if tallied:
        t = tallied[0]
        peer["quorum"] = {"agree": t.counted, "signers": list(t.agree), "dissent": list(t.dissent)}
    return peer
