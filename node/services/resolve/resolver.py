"""Resolving a query (DESIGN.md "Resolving a query"): local index → peers → supersets → compute → publish.

The question is hashed before it runs (node/services/resolve/question.py); its invocation's CID is the cache key.
Identical
invocations in flight share one resolution (single-flight). Each step is a job of its own module: answers from
peers (peer_answers.py, the claims kept in claim_book.py), derived answers (derived.py, peer_supersets.py),
computing on Spark (compute.py), publishing (publish.py, the work owed behind answers in owed.py) and reading
results (results.py); this module keeps their order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from node.adapters.identity import Identity
from node.adapters.index import ExecutionRow, Index
from node.adapters.ipfs import KuboClient
from node.domain.model import CID, Announcement, Block, Receipt, block_of, cid_str
from node.domain.sql.sandbox import Sandbox
from node.services.datasets import Datasets, Version
from node.services.resolve import supersets
from node.services.resolve.carry import FetchAhead
from node.services.resolve.claim_book import ClaimBook
from node.services.resolve.compute import Compute
from node.services.resolve.derived import DerivedAnswers
from node.services.resolve.execution import ENGINE_HANDLE, engine_versions
from node.services.resolve.failures import recorded_failure
from node.services.resolve.owed import Owed
from node.services.resolve.peer_answers import PeerAnswers
from node.services.resolve.peer_link import PeerLink
from node.services.resolve.peer_supersets import PeerSupersets
from node.services.resolve.publish import Publisher
from node.services.resolve.question import Answer, Event, Outcome, Prepared, Question, Questions, silent
from node.services.resolve.result_reading import Results
from node.services.resolve.spark import SparkWorker
from node.services.resolve.staging import Staging
from node.services.resolve.trust_modes import ACCEPTS, POLICY, TRUST_MODES, VERIFIED_LABELS, accepts, valid_mode
from node.support.errors import InvalidInput, Unauthorized

# Names callers import from here.
__all__ = [
    "ACCEPTS",
    "ENGINE_HANDLE",
    "POLICY",
    "TRUST_MODES",
    "VERIFIED_LABELS",
    "Answer",
    "Options",
    "Resolver",
    "accepts",
    "engine_versions",
    "recorded_failure",
    "valid_mode",
]

log = logging.getLogger("cairn.resolve")
# Work owed behind answers (pins, a derived answer's announcement) waits until no miss is in flight and none ended
# for QUIET_FOR seconds, at most DEFER_MAX: a burst of answers is not slowed by the pins of the ones before (a
# receipt's recursive pin walks its inputs' DAG: 20-35 ms of Kubo at 10 M rows).
QUIET_FOR = 0.1
DEFER_MAX = 2.0
_NEEDS_TOKEN = "this query is not in the index: computing it needs the node's API token (Authorization: Bearer)"
FlightKey = tuple[str, str, bool, bool]  # invocation, trust mode, may compute, retry


@dataclass(frozen=True)
class Options:
    """How this node answers (settings: datasets.rows_per_slice, spark.query_timeout, peers.*, query.*)."""

    work_dir: Path  # where results and empty inputs are written before they are stored
    rows_per_slice: int
    query_timeout: float | None = None
    trust_mode: str = "community"  # a request's mode when it names none
    community: str | None = None  # the trusted community (None: all)
    fetch_timeout: float = 60.0
    resolve_timeout: float = 10.0  # the whole network stage
    fetch_ahead_bytes: int = 0
    from_supersets: bool = False  # query.answer_from_supersets
    from_peer_supersets: bool = False  # query.answer_from_peer_supersets


class Flights:
    """Misses in flight, one per question (single-flight), each cancelled when its last caller leaves; and whether
    misses are quiet (work owed behind answers waits for it)."""

    def __init__(self) -> None:
        self._inflight: dict[FlightKey, asyncio.Future[Outcome]] = {}
        self._waiting: dict[asyncio.Future[Outcome], int] = {}  # callers awaiting each flight
        self._last_landed = 0.0  # time.monotonic() when the last miss ended

    async def join(self, key: FlightKey, miss: Callable[[], Awaitable[Outcome]]) -> Outcome:
        """The outcome of the miss in flight for ``key``, started (``miss()``) if there is none."""
        flight = self._inflight.get(key)
        if flight is None:
            flight = asyncio.ensure_future(miss())
            self._inflight[key] = flight
            flight.add_done_callback(lambda _: self._landed(key))
        return await self._wait(flight)

    def _landed(self, key: FlightKey) -> None:
        self._inflight.pop(key, None)
        self._last_landed = time.monotonic()

    async def _wait(self, flight: asyncio.Future[Outcome]) -> Outcome:
        """Await a shared miss; when its last caller leaves (client gone, job deleted), cancel it, which closes
        its Spark connection and so cancels the Spark job: an abandoned query must not keep the worker busy."""
        self._waiting[flight] = self._waiting.get(flight, 0) + 1
        try:
            return await asyncio.shield(flight)
        finally:
            left = self._waiting.pop(flight) - 1
            if left:
                self._waiting[flight] = left
            elif not flight.done():
                flight.cancel()

    async def quiet(self) -> None:
        """Return once no miss is in flight and none ended for ``QUIET_FOR`` seconds, or after ``DEFER_MAX``."""
        deadline = time.monotonic() + DEFER_MAX
        while (now := time.monotonic()) < deadline:
            if not self._inflight and now - self._last_landed >= QUIET_FOR:
                return
            await asyncio.sleep(QUIET_FOR)


class Resolver:
    def __init__(
        self,
        datasets: Datasets,
        kubo: KuboClient,
        index: Index,
        worker: SparkWorker,
        identity: Identity,
        options: Options,
        worker_ready: Callable[[Event], Awaitable[None]] | None = None,
        canonicalizer: Sandbox | None = None,
        staging: Staging | None = None,
    ) -> None:
        o = options
        self.datasets, self.kubo, self.index, self.worker, self.staging = datasets, kubo, index, worker, staging
        self.canonicalizer = canonicalizer or Sandbox()  # started lazily
        self.trust_mode = o.trust_mode
        self.from_supersets, self.from_peer_supersets = o.from_supersets, o.from_peer_supersets
        self.questions = Questions(datasets, self.canonicalizer)
        self.flights = Flights()
        self.link = PeerLink()  # the peer network attaches itself here while it runs
        self.owed = Owed(kubo, index.pins, self.flights.quiet, o.fetch_timeout)
        # Trusted signers' claims' blocks, before we are asked: of the shapes we ask (``resolve`` tells it).
        self.ahead = FetchAhead(kubo, o.fetch_ahead_bytes, identity.node_key)
        self.claim_book = ClaimBook(kubo, index, identity, self.ahead, self.owed, self.link, o.community)
        self.results = Results(datasets)
        self.publisher = Publisher(
            datasets, kubo, index, identity, worker, self.owed, self.link, o.work_dir, o.rows_per_slice
        )
        self.spark = Compute(
            datasets, worker, self.publisher, self.canonicalizer, o.work_dir, o.query_timeout, worker_ready, staging
        )
        self.peers = PeerAnswers(
            datasets, kubo, index, self.claim_book, self.owed, self.link, self.spark, o.fetch_timeout, o.resolve_timeout
        )
        self.derived_answers = DerivedAnswers(kubo, index, datasets, worker, self.results, self.spark, self.publisher)
        self.peer_supersets = PeerSupersets(kubo, index, identity, self.canonicalizer, self.peers, self.derived_answers)

    # -- answering: the order ------------------------------------------------------------------

    async def prepare(self, sql: str, inputs: Mapping[str, str]) -> Prepared:
        """The question's canonical form, its objects (abstract structures, then the qy_0), its iv_0 and the
        versions it reads, in the invocation's input order."""
        return await self.questions.prepare(sql, inputs)

    async def resolve(
        self,
        sql: str,
        inputs: Mapping[str, str],
        on_event: Event | None = None,
        trust: str | None = None,
        may_compute: bool = True,
        retry: bool = False,
    ) -> Answer:
        """``retry``: a recorded failure (here or a peer's) is not the answer: computed again."""
        started = time.perf_counter()
        mode = trust or self.trust_mode
        if not valid_mode(mode):
            raise InvalidInput(f"unknown trust mode {mode!r}: use {', '.join(TRUST_MODES)} or quorum:K")
        cq, objects, iv, versions = await self.prepare(sql, inputs)
        self.ahead.asked(supersets.public_shape(cq, iv))  # peers' new claims of this shape: fetched ahead
        emit = on_event or silent
        q = Question(cq, tuple(objects), block_of(iv), tuple(versions), mode, emit, may_compute, retry)
        emit("prepared", {"query": cid_str(iv.query), "invocation": q.key})
        outcome = self._local(q)
        if outcome is None:
            # Identical invocations in flight share one resolution; one that may not compute is its own flight,
            # so its refusal never reaches an asker that may.
            outcome = await self.flights.join((q.key, mode, may_compute, retry), lambda: self._miss(q))
        if outcome.row.failure is not None:
            raise recorded_failure(outcome.row, outcome.peer)
        return Answer(
            iv.query,
            q.iv_block.cid,
            outcome.row,
            outcome.source,
            round((time.perf_counter() - started) * 1000, 3),
            cq.output_names,
            {a: cid_str(v.head) for a, v in zip(cq.inputs, versions)},
            outcome.peer,
            outcome.trust,
            outcome.hints,
        )

    def _local(self, q: Question) -> Outcome | None:
        """The index's row, if it is checked enough for the mode (and not a recorded failure asked again)."""
        hit = self.index.results.execution(q.key)
        if hit is not None and hit.trust not in accepts(q.mode):
            log.info(
                "local row too loosely checked for this request",
                extra={"invocation": q.key, "trust": hit.trust, "mode": q.mode},
            )
            return None
        if hit is None or (hit.failure is not None and q.retry):
            return None
        return Outcome(hit, "local", hit.trust)

    async def _miss(self, q: Question) -> Outcome:
        """Not in the index (or not checked enough for the mode): a superset's result held here, peers (per the
        trust policy), a peer's superset, else compute (only if ``may_compute``: computing needs the API token or
        ``api.open_compute``). ``retry``: peers are not asked (their answer may be the recorded failure retried)."""
        if not q.may_compute and (q.mode in ("self", "verify") or q.retry):  # these answer a miss only by computing
            raise Unauthorized(_NEEDS_TOKEN)
        hints: list[str] = []  # what peers had that could not be used, and what to do: said in the answer
        if q.may_compute and self.from_supersets and not q.retry:  # a cached superset's result: ours, small, here
            derived = await self.derived_answers.from_superset(q)
            if derived is None:
                derived = await self.derived_answers.from_append(q)
            if derived is not None:
                return Outcome(derived, "computed", "computed")
        asks = q.mode != "self" and not q.retry
        found = await self.peers.find(q, hints) if asks else None
        if found is None and not q.may_compute:
            raise Unauthorized(f"{_NEEDS_TOKEN}{''.join(f'; {h}' for h in hints)}")
        peer_supersets = self.from_supersets and self.from_peer_supersets
        if found is None and asks and q.mode != "verify" and peer_supersets:  # a peer's superset, derived here
            via = await self.peer_supersets.answer(q, hints)
            if via is not None:
                return via
        if found is not None:
            return await self.peers.take(found, q)
        row = await self.spark.compute(q)
        return Outcome(row, "computed", "computed", hints=tuple(hints))

    # -- what other parts of the node call -------------------------------------------------------

    def record_claim(self, peer: str, an: Announcement, data: bytes) -> bool:
        """A checked claim received from ``peer`` (gossip, catch-up), kept; True when it is new."""
        return self.claim_book.record(peer, an, data)

    def reach_ahead(self, an: Announcement, near: bool = False) -> None:
        self.claim_book.reach_ahead(an, near)

    def announcement(self, row: ExecutionRow, providers: list[str]) -> Announcement:
        return self.publisher.announcement(row, providers)

    async def recompute(
        self, claim: tuple[CID, Receipt], qy_block: Block, iv_block: Block, versions: list[Version], emit: Event
    ) -> ExecutionRow:
        return await self.spark.recompute(claim, qy_block, iv_block, versions, emit)

    def judge(self, claim: tuple[CID, Receipt], agreed: bool, ours: ExecutionRow) -> None:
        self.claim_book.judge(claim, agreed, ours)

    def drain_pins(self) -> None:
        """Start pinning what answers given before (a crash or stop) still owe."""
        self.owed.drain_pins()

    async def stop_pins(self) -> None:
        """Stop the work behind answers (what it owed stays in the index) and the fetches ahead."""
        await self.owed.stop()
        await self.ahead.stop()

    def iter_result(self, row: ExecutionRow) -> AsyncIterator[pa.Table]:
        return self.results.iter_result(row)

    def iter_result_files(self, row: ExecutionRow) -> AsyncIterator[Path]:
        return self.results.iter_result_files(row)

    def preview(self, row: ExecutionRow, limit: int) -> Awaitable[tuple[pa.Schema, list[list[Any]]]]:
        return self.results.preview(row, limit)

    @property
    def computed(self) -> int:
        """Answers computed here: Spark jobs started, and derived answers evaluated with Arrow in the node."""
        return self.spark.computed + self.derived_answers.evaluated

    @property
    def derived(self) -> int:
        """Answers derived from a superset's result (ours or a peer's)."""
        return self.derived_answers.derived

    @property
    def forwarded(self) -> int:
        """Answers brought forward over appended slices from an older version's."""
        return self.derived_answers.forwarded

    @property
    def divergences(self) -> int:
        """Peers' answers that disagreed with ours, recorded since start."""
        return self.claim_book.divergences

    @property
    def query_timeout(self) -> float | None:
        return self.spark.query_timeout

    @query_timeout.setter
    def query_timeout(self, seconds: float | None) -> None:
        self.spark.query_timeout = seconds
