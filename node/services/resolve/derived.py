"""Answers derived from results held here (docs/reuse.md "Answers from supersets"): a cached superset's result
restricted by a proved rewrite (node.domain.sql.rewrite), or our result of the same statement over an older version
brought forward over the appended slices; in the node with Arrow when node.domain.sql.arrow_eval computes Spark's exact
result, else on Spark. The receipt names the execution and the rule it came from."""

from __future__ import annotations

import asyncio
import logging
import time

import pyarrow as pa

from node.adapters.index import ExecutionRow, Index
from node.adapters.ipfs import KuboClient
from node.domain.model import CID, Block
from node.domain.sql import arrow_eval
from node.domain.sql.rewrite import Rewrite
from node.services.datasets import Datasets, SliceRef
from node.services.resolve import supersets
from node.services.resolve.compute import Compute
from node.services.resolve.execution import Result, published_order
from node.services.resolve.publish import Publisher
from node.services.resolve.question import Event, Question, input_structure
from node.services.resolve.result_reading import Results
from node.services.resolve.spark import SparkWorker
from node.support.errors import CairnError
from node.support.lru import Lru

log = logging.getLogger("cairn.resolve")
# A cached result at most this long is read into the node to derive an answer with Arrow (node.domain.sql.arrow_eval).
ARROW_EVAL_MAX_ROWS = 1_000_000
PROFILES_KEPT = 64  # engine profiles (ep_0) read for derived answers, kept: one per worker start, a few blocks


class DerivedAnswers:
    def __init__(
        self,
        kubo: KuboClient,
        index: Index,
        datasets: Datasets,
        worker: SparkWorker,
        results: Results,
        compute: Compute,
        publisher: Publisher,
    ) -> None:
        self.kubo, self.index, self.datasets, self.worker = kubo, index, datasets, worker
        self.results, self.compute, self.publisher = results, compute, publisher
        self.derived = 0  # answers computed from a cached superset's result (ours or a peer's)
        self.forwarded = 0  # answers brought forward over appended slices from an older version's
        self.evaluated = 0  # answers computed with Arrow in the node (no Spark job)
        self._profiles: Lru[Block] = Lru(PROFILES_KEPT)  # cached executions' ep_0 blocks (``_profile_of``)

    async def from_superset(self, q: Question) -> ExecutionRow | None:
        """The answer computed from a cached superset's result slices; its receipt names that execution and the
        rule. ``None`` when no candidate is proved."""
        async for cached, rw, width in supersets.candidates(self.index, q.cq, q.versions):
            t0 = time.perf_counter()
            found = await self.derive(cached, rw, width, q.emit)
            if found is None:
                continue
            row = await self.publish(q, cached, rw.rule, found, t0)
            log.info("derived", extra={"invocation": row.invocation, "from": cached.execution, "rule": rw.rule})
            return row
        return None

    async def derive(self, cached: ExecutionRow, rw: Rewrite, width: int, emit: Event) -> Result | None:
        """``rw`` over ``cached``'s result: with Arrow in the node where it computes it exactly, else on Spark;
        ``None`` when that fails (the inputs still answer: a failed derivation costs time, not the query)."""
        try:
            found = await self._derive_here(cached, rw, width, emit)
            return found if found is not None else await self.compute.derive(cached, rw, width, emit)
        except CairnError as e:
            log.warning("derived answer failed", extra={"from": cached.execution, "error": str(e)})
            return None

    async def from_append(self, q: Question) -> ExecutionRow | None:
        """The answer brought forward from our result of the same statement over an older version: computed over
        the appended slices only and merged (node.domain.sql.rewrite.forward); receipt ``derived`` names the old
        execution with rule ``append``. ``None`` when there is none or the merge fails (then computed in full)."""
        for cached, rw, width, fresh in supersets.appended(self.index, q.cq, q.versions):
            t0 = time.perf_counter()
            names = [f"col_{j}" for j in range(len(input_structure(q.versions[0]).schema))]
            try:
                found = await self._forward_here(q, cached, fresh, names)
                if found is None:
                    found = await self.compute.forward(cached, rw, width, fresh, names, q.emit)
            except CairnError as e:  # e.g. an ANSI overflow of a partial sum: the full computation still answers
                log.warning("forwarded answer failed", extra={"from": cached.execution, "error": str(e)})
                continue
            row = await self.publish(q, cached, rw.rule, found, t0)
            log.info("forwarded", extra={"invocation": row.invocation, "from": cached.execution, "slices": len(fresh)})
            return row
        return None

    async def publish(
        self, q: Question, cached: ExecutionRow, rule: str, found: Result, t0: float, trust: str = "computed"
    ) -> ExecutionRow:
        """Publish an answer computed from ``cached``'s result by ``rule`` (receipt ``derived``), and count it. A
        forwarded answer is indexed as a superset of later queries (nothing else covers its version); one derived
        from a superset is not: its source answers all it can, and restrictions remembered would push that source
        out of the bounded candidate list (``ShapeRepository.shape_candidates``). ``trust``: a peer's result's label,
        for an answer derived from it (never "computed": docs/peers.md "Trust labels"); such a row is neither
        announced nor a candidate."""
        derived = (CID.decode(cached.execution), rule)
        forwarded = rule == "append"
        row = await self.publisher.publish(q, found, t0, derived=derived, remember=forwarded, trust=trust)
        if forwarded:
            self.forwarded += 1
        else:
            self.derived += 1
        return row

    async def _derive_here(self, cached: ExecutionRow, rw: Rewrite, width: int, emit: Event) -> Result | None:
        """The rewritten statement evaluated in the node (node.domain.sql.arrow_eval), for a small cached result whose
        statement is in the subset Arrow computes exactly as Spark; ``None`` otherwise. Receipt timings: ``arrow_ms``
        (no Spark job ran); the engine profile (an ep_0 block) is the cached execution's."""
        if cached.rows > ARROW_EVAL_MAX_ROWS or (cached.profile is None and not self.worker.profile):
            return None
        tables = await self.results.tables(cached)
        t1 = time.perf_counter()

        def run() -> pa.Table | None:
            whole = pa.concat_tables(tables).rename_columns([f"col_{i}" for i in range(width)])
            result = arrow_eval.evaluate(rw.statement, whole)
            return None if result is None else published_order(result, None)

        table = await asyncio.to_thread(run)
        if table is None:
            return None
        emit("computing", {"engine": "arrow", "derived_from": cached.execution, "rule": rw.rule})
        self.evaluated += 1
        timings = {"arrow_ms": round((time.perf_counter() - t1) * 1000, 3)}
        if cached.profile is None:  # a result from before engine profiles: the running worker's
            return Result(table, timings, self.worker.profile, None)
        # The cached execution's engine profile: its semantics are the answer's, and no worker need be up.
        return Result(table, timings, await self._profile_of(cached, cached.profile), None)

    async def _forward_here(
        self, q: Question, cached: ExecutionRow, fresh: list[SliceRef], names: list[str]
    ) -> Result | None:
        """The forwarded answer computed in the node with Arrow (node.domain.sql.arrow_eval.forward), when the old
        result
        and the appended rows are small and the statement is in Arrow's exact subset; ``None`` otherwise."""
        if cached.rows > ARROW_EVAL_MAX_ROWS or sum(s.rows for s in fresh) > ARROW_EVAL_MAX_ROWS:
            return None
        if cached.profile is None:
            return None
        profile = cached.profile
        old = await self.results.tables(cached)
        new = [await self.datasets.read_cid(s.cid, size=s.size) for s in fresh]
        t1 = time.perf_counter()

        def run() -> pa.Table | None:
            try:
                appended = pa.concat_tables(new).rename_columns(names)
            except pa.ArrowInvalid:  # slices of differing schemas: Spark reads them under the last one's
                return None
            result = arrow_eval.forward(q.cq.statement, pa.concat_tables(old), appended)
            return None if result is None else published_order(result, None)

        table = await asyncio.to_thread(run)
        if table is None:
            return None
        q.emit("computing", {"engine": "arrow", "derived_from": cached.execution, "rule": "append"})
        self.evaluated += 1
        timings = {"arrow_ms": round((time.perf_counter() - t1) * 1000, 3)}
        return Result(table, timings, await self._profile_of(cached, profile), None)

    async def _profile_of(self, cached: ExecutionRow, profile: str) -> Block:
        """The ep_0 block ``profile`` of a cached execution's engine profile (pinned with its receipt), checked."""
        block = self._profiles.get(profile)
        if block is None:
            cid = CID.decode(profile)
            # A peer's result's profile was not fetched by its checks: then from the network (its receipt names it).
            block = Block(cid, await self.kubo.block_get(cid, offline=cached.source != "peer", timeout=10.0))
            block.verify()
            self._profiles.put(profile, block)  # immutable: its CID names it
        return block
