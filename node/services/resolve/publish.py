"""Publishing an answer: its result cut into slices and stored, its execution and signed receipt written, pinned,
indexed, provided and announced; a deterministic failure recorded the same way (docs/queries.md "Recorded
failures"); our signed announcement of an execution we hold."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from node.adapters.identity import Identity
from node.adapters.index import ExecutionRow, Index
from node.adapters.ipfs import KuboClient
from node.domain.model import (
    CID,
    Announcement,
    Block,
    EngineProfile,
    Failure,
    Invocation,
    Receipt,
    Structure,
    block_of,
    cid_str,
    decode,
    decode_object,
    parse_cid,
)
from node.domain.sql import arrow_eval
from node.services.datasets import Datasets, LogicalHasher, canonical_type
from node.services.datasets.slices import iter_slices, write_parquet_slice
from node.services.resolve import supersets
from node.services.resolve.execution import Result, engine_versions, execution_blocks
from node.services.resolve.owed import Owed
from node.services.resolve.peer_link import PeerLink
from node.services.resolve.question import Question
from node.services.resolve.spark import SparkWorker
from node.services.resolve.trust_modes import VERIFIED_LABELS
from node.support import wall_clock as clock
from node.support.errors import CairnError, InvalidObject, KuboError, SparkError

log = logging.getLogger("cairn.resolve")


class Publisher:
    def __init__(
        self,
        datasets: Datasets,
        kubo: KuboClient,
        index: Index,
        identity: Identity,
        worker: SparkWorker,
        owed: Owed,
        link: PeerLink,
        work_dir: Path,
        rows_per_slice: int,
    ) -> None:
        self.datasets, self.kubo, self.index, self.identity, self.worker = datasets, kubo, index, identity, worker
        self.owed, self.link, self.work_dir, self.rows_per_slice = owed, link, work_dir, rows_per_slice
        self._profile: tuple[Mapping[str, Any], Block] | None = None  # the worker's last report, as an ep_0
        self._profiles_put: set[str] = set()  # ep_0 CIDs already written to Kubo (written once)
        self._arrow_warmed = False  # arrow_eval.warm() started (once: the first result a later one can derive from)

    async def publish(
        self,
        q: Question,
        result: Result,
        t0: float,
        claim: tuple[CID, Receipt] | None = None,
        derived: tuple[CID, str] | None = None,
        remember: bool = False,
        trust: str = "computed",
    ) -> ExecutionRow:
        """Store, pin, index and announce our result (its rows in the order of the indices ``result.order``, or as
        they are). ``claim`` (a receipt being verified, and its CID): our receipt ``verifies`` it when our result
        agrees, and is then labelled ``recomputed-agreed``. ``derived``: the execution and rule an answer from a
        superset came from (receipt ``derived``), ``trust`` its label if a peer's. ``remember``: index its shape."""
        profile = result.profile
        ep_block = profile if isinstance(profile, Block) else await self._profile_block(profile)
        work = Path(tempfile.mkdtemp(prefix="result-", dir=self.work_dir))
        try:
            table = result.table
            slices, files, logical = await self._write_result(table, work, result.order)
            st_block = block_of(Structure("parquet", tuple((f.name, canonical_type(f.type)) for f in table.schema)))
            ex_blocks = execution_blocks(q.cq, q.versions, slices)
            ex = ex_blocks[-1]
            timings = {**result.timings, "total_ms": round((time.perf_counter() - t0) * 1000, 3)}
            rc = self._receipt(q, ex.cid, logical, table.num_rows, st_block.cid, timings)
            agrees = claim is not None and (claim[1].logical_hash, claim[1].rows) == (logical, table.num_rows)
            came, rule = derived if derived else (None, None)
            verifies = claim[0] if claim and agrees else None
            rc = replace(rc, profile=ep_block.cid, verifies=verifies, derived_from=came, rewrite=rule)
            rc_block = block_of(rc.signed(self.identity.sign))
            blocks = [(b.cid, b.data) for b in [*q.objects, q.iv_block, st_block, *ex_blocks, rc_block]]
            behind = derived is not None and trust in VERIFIED_LABELS and claim is None  # stored after the answer
            await self._store(rc_block.cid, rc, blocks, trust, behind)
            for path, cid in files:
                os.replace(path, self.datasets.cache_dir / f"{cid_str(cid)}.parquet")
            label = "recomputed-agreed" if rc.verifies is not None else trust
            row = _row(q, ex.cid, rc_block.cid, logical, table.num_rows, st_block.cid, slices, label, ep_block.cid)
            if remember:  # before it is announced: the announcement names the shape
                self._remember_shape(q, row)
            return await self._record(row, [ex.cid, rc_block.cid, *slices], own=claim is not None, behind=behind)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _remember_shape(self, q: Question, row: ExecutionRow) -> None:
        """Index a result as a candidate superset of later queries (and warm what deriving from it needs)."""
        if not self._arrow_warmed:  # once, in the background: imported before a first derived answer
            self._arrow_warmed = True
            self.owed.keep_task(asyncio.ensure_future(asyncio.to_thread(arrow_eval.warm)))
        iv = decode_object(decode(q.iv_block.data))
        supersets.remember(self.index, q.cq, q.versions, row, iv if isinstance(iv, Invocation) else None)

    async def publish_failure(self, q: Question, err: SparkError, cls: str, t0: float) -> ExecutionRow:
        """Store, pin, index and announce a deterministic failure as a result is: an ex_0 with exitStatus true and
        no output (Holium "Execution": exitStatus false is success), and a signed receipt naming the error class,
        with no logical hash, 0 rows and the structure of no columns."""
        ep_block = await self._profile_block(self.worker.profile)
        st_block = block_of(Structure("parquet", ()))
        ex_blocks = execution_blocks(q.cq, q.versions, None)
        ex = ex_blocks[-1]
        failure = Failure(cls, err.sqlstate or "", err.message)
        timings = {"total_ms": round((time.perf_counter() - t0) * 1000, 3)}
        rc = replace(self._receipt(q, ex.cid, "", 0, st_block.cid, timings), profile=ep_block.cid, failure=failure)
        rc_block = block_of(rc.signed(self.identity.sign))
        await self.owed.put_blocks([(b.cid, b.data) for b in [*q.objects, q.iv_block, st_block, *ex_blocks, rc_block]])
        await self._pin_receipt(rc_block.cid, rc)
        row = replace(_row(q, ex.cid, rc_block.cid, "", 0, st_block.cid, [], "computed", ep_block.cid), failure=failure)
        log.info("deterministic failure recorded", extra={"invocation": row.invocation, "class": cls})
        await self._record(row, [ex.cid, rc_block.cid], own=True)
        return row

    def _receipt(
        self, q: Question, ex: CID, logical: str, rows: int, structure: CID, timings: dict[str, float]
    ) -> Receipt:
        """Our unsigned receipt for an execution (the caller adds profile, verifies, derived or failure)."""
        return Receipt(
            ex,
            q.iv_block.cid,
            self.identity.node_key,
            clock.utc_now_iso(),
            {**engine_versions(q.cq), **self.worker.deployment},  # mode/master: absent in local mode
            logical,
            rows,
            structure,
            tuple(v.head for v in q.versions),
            timings,
        )

    async def _write_result(
        self, table: pa.Table, work: Path, order: pa.Array | None = None
    ) -> tuple[list[CID], list[tuple[Path, CID]], str]:
        """The result (its rows in the order of the indices ``order``, or as they are) cut into Parquet slices stored
        (unpinned) in Kubo: their CIDs, local files, logical hash. Rows are taken a slice at a time, in a thread:
        the sorted result is never held whole beside the result."""
        slices: list[CID] = []
        files: list[tuple[Path, CID]] = []
        hasher = LogicalHasher(table.schema)
        size = self.rows_per_slice
        parts: Iterable[Callable[[], pa.Table]] = (
            (partial(_as_it_is, part) for part in iter_slices(table.to_batches(), table.schema, size))
            if order is None
            else (partial(_taken, table, order, n * size, size) for n in range(-(-table.num_rows // size)))
        )
        for n, take in enumerate(parts):
            path = work / f"out-{n}.parquet"
            part = await asyncio.to_thread(_written, take, path)
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
        """Index a stored and pinned execution, announce what we now provide, and tell the peers. ``own``: the
        announcement names this row's receipt (a verification's), even when the index keeps an earlier row.
        ``behind``: its pin is owed (drained now); provides and the announcement go out after the answer."""
        self.index.results.add_execution(row)
        stored = self.index.results.execution(row.invocation) or row
        if behind:
            self.owed.drain_pins()
            self.owed.keep_task(asyncio.ensure_future(self._publish_later(stored, provide)))
            return stored
        await self.owed.provide(provide)
        # Derived from a peer's unchecked result: not signed for to peers (peers.outbound_choices, docs/peers.md).
        if row.trust in VERIFIED_LABELS:
            await self.link.published(row if own else stored)
        return row if own else stored

    async def _publish_later(self, row: ExecutionRow, provide: list[CID]) -> None:
        """Provide and announce a derived answer (ours: ``behind`` rows are verified) once misses are quiet. Not
        owed durably: Kubo's reprovider provides what is pinned, and a lookup answers from the index."""
        await self.owed.quiet()
        await self.owed.provide(provide)
        await self.link.published(row)

    async def _store(
        self, receipt: CID, rc: Receipt, blocks: Sequence[tuple[CID, bytes]], trust: str, behind: bool
    ) -> None:
        """An answer's blocks into our Kubo, its receipt pinned: now, or (``behind``: a derived answer of ours) owed
        and done right after it. A derived answer's blocks and pin took 10-15 ms of Kubo calls, and the pin 20-35
        ms, of a derived answer at 10 M rows: owed in the index (one transaction: a crash loses none, the next start
        puts and pins them), put right after the answer, pinned once misses are quiet."""
        if behind:
            self.owed.owe([(cid_str(receipt), True, False)], blocks)
            return
        await self.owed.put_blocks(blocks)  # one call per codec, at once (13 calls one after the other: 20-26 ms)
        if rc.verifies is None and trust in VERIFIED_LABELS:
            # Our own answer: its blocks are in Kubo before it is announced; the recursive pin, which walks every
            # input slice's blocks (about 50 ms at 10 M rows: a miss took 1.26x Spark's time), is owed in the
            # index before the row is written and drained once misses are quiet: a crash loses none.
            self.owed.owe([(cid_str(receipt), True, False)])
            self.owed.drain_pins()
            return
        await self._pin_receipt(receipt, rc, foreign=trust not in VERIFIED_LABELS)

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

    def announcement(self, row: ExecutionRow, providers: list[str]) -> Announcement:
        """A signed an_0 for an execution we hold (we computed it, or verified it)."""
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
            shape=self.index.shapes.shape_of(row.invocation) if row.failure is None else None,
        ).signed(self.identity.sign)


def _row(
    q: Question,
    ex: CID,
    rc: CID,
    logical: str,
    rows: int,
    structure: CID,
    slices: list[CID],
    trust: str,
    profile: CID,
) -> ExecutionRow:
    """The index row of an execution of ``q`` published here."""
    return ExecutionRow(
        q.key,
        cid_str(q.qy_block.cid),
        cid_str(ex),
        cid_str(rc),
        logical,
        rows,
        cid_str(structure),
        tuple(cid_str(c) for c in slices),
        "computed",
        clock.now(),
        trust=trust,
        profile=cid_str(profile),
    )


def _as_it_is(part: pa.Table) -> pa.Table:
    return part


def _taken(table: pa.Table, order: pa.Array, start: int, size: int) -> pa.Table:
    """The rows of one slice, taken by the sort indices (in a worker thread)."""
    return table.take(order.slice(start, size))


def _written(take: Callable[[], pa.Table], path: Path) -> pa.Table:
    part = take()
    write_parquet_slice(part, str(path))
    return part
