"""Computing on Spark: a miss's canonical statement over its inputs (its result published, or its deterministic
failure recorded), a receipt's invocation again (docs/provenance.md "Verify (recompute)"), and the statements a
derived answer runs over cached results when Arrow in the node cannot compute them exactly."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from node.adapters.index import ExecutionRow
from node.domain.model import CID, Block, Invocation, Query, Receipt, block_of, cid_str, decode, decode_object
from node.domain.sql import CanonicalQuery, SortKey
from node.domain.sql.rewrite import Rewrite
from node.domain.sql.sandbox import Sandbox
from node.services.datasets import Datasets, SliceRef, Version
from node.services.resolve.empty_input import write_empty
from node.services.resolve.execution import Result, order_indices
from node.services.resolve.failures import deterministic, recorded_failure
from node.services.resolve.publish import Publisher
from node.services.resolve.question import Event, Question, input_structure
from node.services.resolve.spark import RunResult, SparkWorker
from node.services.resolve.staging import Staging
from node.support.errors import InvalidInput, SparkError

log = logging.getLogger("cairn.resolve")
SparkInputs = dict[str, tuple[list[Path | str], list[str]]]  # table → (Parquet files, column names)


class Compute:
    """Jobs on the Spark worker, counted (``computed``), each under ``query_timeout``; the worker is started on
    first need (``worker_ready``): a peer or index hit never starts Spark."""

    def __init__(
        self,
        datasets: Datasets,
        worker: SparkWorker,
        publisher: Publisher,
        canonicalizer: Sandbox,
        work_dir: Path,
        query_timeout: float | None = None,
        worker_ready: Callable[[Event], Awaitable[None]] | None = None,
        staging: Staging | None = None,
    ) -> None:
        self.datasets, self.worker, self.publisher, self.canonicalizer = datasets, worker, publisher, canonicalizer
        self.work_dir, self.query_timeout, self.worker_ready = work_dir, query_timeout, worker_ready
        self.staging = staging  # spark.staging: where Spark reads the inputs (None: the node's slice cache)
        self.computed = 0  # Spark jobs started

    async def compute(self, q: Question) -> ExecutionRow:
        """Compute ``q`` and publish its result; a deterministic failure is published as one and raised."""
        t0 = time.perf_counter()
        try:
            run = await self._run(q.cq.statement, q.versions, q.emit)
        except SparkError as e:
            cls = deterministic(e)
            if cls is None:  # an accident of this run (timeout, dead worker, budget, …): never recorded
                raise
            failed = await self.publisher.publish_failure(q, e, cls, t0)
            raise recorded_failure(failed, None, first=True) from None
        t1 = time.perf_counter()
        result = await _result(run, q.cq.order_by)
        q.emit("publishing", {"rows": run.table.num_rows})
        row = await self.publisher.publish(q, result, t0, remember=True)
        log.info(
            "computed", extra={"invocation": row.invocation, "rows": row.rows, "compute_ms": round((t1 - t0) * 1000, 1)}
        )
        return row

    async def recompute(
        self, claim: tuple[CID, Receipt], qy_block: Block, iv_block: Block, versions: list[Version], emit: Event
    ) -> ExecutionRow:
        """Run a receipt's invocation again here, over the dataset versions it names (docs/provenance.md "Verify
        (recompute)"), as a miss is computed, and publish our result: signed with a receipt that ``verifies`` the
        claim when the logical hash and rows agree, a plain computed one when not (the index keeps it over a peer's
        row: ours is computed). Inputs that are not the invocation's: InvalidInput."""
        qy = decode_object(decode(qy_block.data))
        iv = decode_object(decode(iv_block.data))
        if not isinstance(qy, Query) or not isinstance(iv, Invocation) or len(iv.inputs) != len(versions):
            raise InvalidInput("the receipt's invocation does not name a query over its dataset versions")
        abstract = [block_of(input_structure(v).abstract()) for v in versions]
        await self._check_inputs(iv, abstract, versions)
        cq = await self._canonical(qy, versions)
        q = Question(cq, (*abstract, qy_block), iv_block, tuple(versions), "verify", emit)
        t0 = time.perf_counter()
        run = await self._run(cq.statement, versions, emit)
        result = await _result(run, cq.order_by)
        emit("publishing", {"rows": run.table.num_rows})
        return await self.publisher.publish(q, result, t0, claim)

    async def _check_inputs(self, iv: Invocation, abstract: list[Block], versions: list[Version]) -> None:
        """Each version is the data the invocation names (structure, logical hash, rows)."""
        for i, (ab, v, ident) in enumerate(zip(abstract, versions, iv.inputs)):
            facts = (ab.cid, *await self.datasets.version_hash(v))
            if bytes(facts[0]) != bytes(ident.structure) or facts[1:] != (ident.logical_hash, ident.rows):
                raise InvalidInput(
                    f"input {i}: dataset version {cid_str(v.head)} is not the data the invocation names "
                    "(structure, logical hash or rows differ)"
                )

    async def _canonical(self, qy: Query, versions: list[Version]) -> CanonicalQuery:
        """A peer's statement runs only as this node's canonicalizer gives it (its checks and limits): canonical
        SQL canonicalizes to itself, and the round gives its order (or none)."""
        structures = map(input_structure, versions)
        schemas = {chr(ord("a") + i): list(st.abstract().schema) for i, st in enumerate(structures)}
        cq = await self.canonicalizer.canonicalize(qy.statement, schemas)
        if cq.statement != qy.statement:
            raise InvalidInput(
                f"the query's statement is not canonical for this node's canonicalizer ({cq.canonicalizer}; the "
                f"query names {qy.canonicalizer}): not run"
            )
        return cq

    async def derive(self, cached: ExecutionRow, rw: Rewrite, width: int, emit: Event) -> Result:
        """The rewritten statement run over the cached result's (staged) slices."""
        paths = [await self._staged(await self.datasets.cid_path(CID.decode(s)), CID.decode(s)) for s in cached.slices]
        if self.worker_ready is not None:  # after a restart the worker may not be up yet
            await self.worker_ready(emit)
        emit("computing", {"engine": "spark", "derived_from": cached.execution, "rule": rw.rule})
        return await _result(await self._job(rw.statement, {"a": (paths, _columns(width))}, emit), None)

    async def forward(
        self, cached: ExecutionRow, rw: Rewrite, width: int, fresh: list[SliceRef], names: list[str], emit: Event
    ) -> Result:
        """The forward statement: the appended slices as ``a``, the old result as ``b``."""
        old = [await self._staged(await self.datasets.cid_path(CID.decode(s)), CID.decode(s)) for s in cached.slices]
        new = [await self.input_path(s) for s in fresh]
        if self.worker_ready is not None:
            await self.worker_ready(emit)
        emit("computing", {"engine": "spark", "derived_from": cached.execution, "rule": rw.rule})
        run = await self._job(rw.statement, {"a": (new, names), "b": (old, _columns(width))}, emit)
        return await _result(run, None)

    async def _run(self, statement: str, versions: Sequence[Version], emit: Event) -> RunResult:
        """Run the canonical statement over the versions' slices, as tables ``a, b, …`` of columns ``col_i``."""
        work = Path(tempfile.mkdtemp(prefix="inputs-", dir=self.work_dir))
        try:
            inputs: SparkInputs = {}
            for i, v in enumerate(versions):
                paths: list[Path | str] = [await self.input_path(s) for s in v.slices]
                if not paths:  # a version with no rows is a table of 0 rows: an empty file of its structure
                    empty = write_empty(work / f"empty-{i}.parquet", input_structure(v).schema)
                    paths = [await self.staging.stage(empty) if self.staging else empty]
                inputs[chr(ord("a") + i)] = (paths, _columns(len(input_structure(v).schema)))
            if self.worker_ready is not None:
                await self.worker_ready(emit)
            emit("computing", {"engine": "spark"})
            return await self._job(statement, inputs, emit)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _job(self, statement: str, inputs: SparkInputs, emit: Event) -> RunResult:
        self.computed += 1
        return await self.worker.run(
            statement, inputs, timeout=self.query_timeout, on_progress=lambda p: emit("spark", p)
        )

    async def input_path(self, s: SliceRef) -> Path | str:
        """Where Spark reads the slice: the node's cache, or (``spark.staging``) the shared copy of it."""
        return await self._staged(await self.datasets.slice_path(s), s.cid)

    async def _staged(self, local: Path, cid: CID) -> Path | str:
        """``local`` itself, or (``spark.staging``) its shared copy where executors read it."""
        return await self.staging.stage(local, cid) if self.staging is not None else local


async def _result(run: RunResult, order_by: tuple[SortKey, ...] | None) -> Result:
    """A job's result, with the indices that put it in canonical order (sorting a large result takes seconds, 1M
    rows 0.7 s: not on the event loop) and its receipt timings."""
    order = await asyncio.to_thread(order_indices, run.table, order_by)
    timings = {"compute_ms": round(run.elapsed_ms, 3), "engine_round_trip_ms": round(run.total_ms, 3)}
    return Result(run.table, timings, run.profile, order)


def _columns(width: int) -> list[str]:
    return [f"col_{i}" for i in range(width)]
