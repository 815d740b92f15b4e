"""Running a pipeline: steps in dependency order, each answered like any query (index → peers → Spark), each
result kept as a derivative dataset version a later step reads, the whole recorded as ``pl_0`` + signed ``pr_0``.

Why a derivative dataset version per step result (docs/architecture.md "Pipelines"): a receipt names one dataset
version per input, lineage and offline verify follow those versions, and an invocation binds an input's CONTENT
({structure, logicalHash, rows}), not its dataset id. The version's AddData lists the result's own output slices
(same CIDs, no copy), so a later step's execution reads exactly the earlier execution's output list, and a second
node running the same pipeline builds the same invocations (its derivative dataset ids differ) and gets peer hits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NotRequired, Protocol, TypedDict

from node.adapters.identity import Identity
from node.domain.model import (
    CID,
    Block,
    CidText,
    Connection,
    DryTransformation,
    ExploreIndex,
    Matcher,
    Pipeline,
    PipelineEdge,
    PipelineRun,
    RunStep,
    SelectorEnvelope,
    Structure,
    block_of,
    cid_str,
    decode,
    decode_object,
    parse_cid,
)
from node.domain.model.pipeline_run import RUN_STATUSES, STEP_SOURCES
from node.domain.ports.block_store import BlockStore
from node.services.datasets import Datasets
from node.services.pipelines.spec import PipelineSpec, Step
from node.services.resolve.claim_checks import bytecode_of
from node.services.resolve.resolver import ENGINE_HANDLE
from node.support import wall_clock as clock
from node.support.errors import CairnError, NotFound, quote

log = logging.getLogger("cairn.pipelines")
Emit = Callable[[str, dict[str, Any]], None]
HISTORY_MAX = 1000  # runs a log walks back at most


class QueryFn(Protocol):
    def __call__(
        self, sql: str, inputs: dict[str, str], trust: str | None, on_event: Emit
    ) -> Awaitable[Mapping[str, Any]]: ...


class StepShown(TypedDict):
    """What a run saw of a step it answered (not recorded in the pr_0)."""

    rows: int
    logicalHash: str
    columns: list[str]
    trust: str
    elapsed_ms: float


class StepView(TypedDict):
    name: str
    vertex: int
    source: Annotated[str, {"enum": list(STEP_SOURCES)}]
    invocation: CidText | None
    execution: CidText | None
    receipt: CidText | None
    version: CidText | None  # the derivative dataset version holding the step's result
    error: str | None
    rows: NotRequired[int]  # and the rest of StepShown, for a run just made
    logicalHash: NotRequired[str]
    columns: NotRequired[list[str]]
    trust: NotRequired[str]
    elapsed_ms: NotRequired[float]


class FailedStep(TypedDict):
    step: str
    error: str | None  # None only in a pr_0 another node made without saying why


class PipelineRunView(TypedDict):
    """A recorded run (``pr_0``) as JSON."""

    name: str
    run: CidText
    pipeline: CidText
    previous: CidText | None
    status: Annotated[str, {"enum": list(RUN_STATUSES)}]
    failed: FailedStep | None
    signer: str
    time: str
    computed: int  # steps computed on this node's Spark worker
    steps: list[StepView]


@dataclass
class _Done:
    """One step as it ran: its record in the pr_0, its vertex in the pl_0, and what the asker is told."""

    record: RunStep
    vertex: dict[str, CID]
    positions: dict[str, int]  # alias → its index among the query's inputs (the head selector's index)
    shown: StepShown | None = None


class PipelineRunner:
    """Runs pipelines for one node; ``pipelines.json`` in the home names each pipeline's latest run."""

    def __init__(self, kubo: BlockStore, datasets: Datasets, identity: Identity, home: Path, query: QueryFn) -> None:
        self.kubo, self.datasets, self.identity, self.query = kubo, datasets, identity, query
        self.heads_file = home / "pipelines.json"
        self._locks: dict[str, asyncio.Lock] = {}

    # -- the latest run of each pipeline ------------------------------------------------------------

    def latest(self, name: str) -> CID | None:
        try:
            heads = json.loads(self.heads_file.read_text())
        except FileNotFoundError:
            return None
        return parse_cid(heads[name]) if name in heads else None

    def _set_latest(self, name: str, run: CID) -> None:
        try:
            heads = json.loads(self.heads_file.read_text())
        except FileNotFoundError:
            heads = {}
        heads[name] = cid_str(run)
        tmp = self.heads_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(heads, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.heads_file)  # never half written

    async def load(self, cid: CID) -> PipelineRun:
        run = decode_object(decode(await self.kubo.block_get(cid, timeout=30.0)))
        if not isinstance(run, PipelineRun):
            raise NotFound(f"{cid_str(cid)} is not a pipeline run (pr_0)")
        return run

    async def history(self, name: str, limit: int = 20) -> list[tuple[CID, PipelineRun]]:
        """The runs of ``name``, latest first, along their ``previous`` links."""
        at = self.latest(name)
        if at is None:
            raise NotFound(f"no run of pipeline {quote(name)} on this node: `cairn pipeline run FILE` runs it")
        out: list[tuple[CID, PipelineRun]] = []
        while at is not None and len(out) < min(limit, HISTORY_MAX):
            run = await self.load(at)
            out.append((at, run))
            at = run.previous
        return out

    # -- one run ------------------------------------------------------------------------------------

    async def run(self, spec: PipelineSpec, trust: str | None, emit: Emit) -> PipelineRunView:
        roots = await self._roots(spec)  # every dataset named, checked before any step runs
        async with self._locks.setdefault(spec.name, asyncio.Lock()):
            previous = self.latest(spec.name)
            memo = await self._memo(previous)
            emit("pipeline", {"name": spec.name, "steps": [s.name for s in spec.steps]})
            done: dict[str, _Done] = {}
            for i, step in enumerate(spec.steps):
                done[step.name] = await self._step(step, len(roots) + i, roots, done, memo, trust, emit)
            pl = await self._pipeline(spec, roots, done)
            return await self._record(spec, pl, previous, done)

    async def _roots(self, spec: PipelineSpec) -> dict[str, CID]:
        """Each dataset ref → the version it names now (all steps read the same version of it)."""
        out: dict[str, CID] = {}
        for ref in spec.datasets():
            try:
                out[ref] = (await self.datasets.resolve(ref))[1].head
            except CairnError as e:
                step = next(s for s in spec.steps if ref in s.inputs.values())
                e.args = (f"step {quote(step.name)}: {e.message}", *e.args[1:])  # the same error, naming the step
                raise
        return out

    async def _memo(self, previous: CID | None) -> dict[str, CID]:
        """execution → derivative version from the previous run: a step answered again by the same execution
        reads the same version (same CID), so an unchanged pipeline records unchanged steps."""
        if previous is None:
            return {}
        try:
            run = await self.load(previous)
        except CairnError as e:
            log.warning("previous run unreadable: nothing reused", extra={"run": cid_str(previous), "error": e.message})
            return {}
        return {cid_str(s.execution): s.version for s in run.steps if s.execution and s.version}

    async def _step(
        self,
        step: Step,
        vertex: int,
        roots: dict[str, CID],
        done: dict[str, _Done],
        memo: dict[str, CID],
        trust: str | None,
        emit: Emit,
    ) -> _Done:
        # The version a later step reads of each earlier step it reads: only steps that succeeded have one.
        read = {r: v for r in step.inputs.values() if r in done and (v := done[r].record.version) is not None}
        blocked = [r for r in step.inputs.values() if r in done and r not in read]
        if blocked:
            why = f"not run: step {quote(blocked[0])} it reads did not succeed"
            emit("step", {"step": step.name, "state": "skipped", "error": why})
            return await self._unrun(step, vertex, "skipped", why)
        inputs = {a: cid_str(read[r] if r in done else roots[r]) for a, r in step.inputs.items()}
        emit("step", {"step": step.name, "state": "running"})
        t0 = time.perf_counter()
        try:
            answer = await self.query(step.sql, inputs, trust, lambda k, d: emit(k, {"step": step.name, **d}))
            version = memo.get(answer["execution"]) or await self._derive(answer)
        except CairnError as e:
            emit("step", {"step": step.name, "state": "failed", "error": e.message, "status": e.status})
            return await self._unrun(step, vertex, "failed", e.message)
        record = RunStep(
            step.name,
            vertex,
            answer["source"],
            parse_cid(answer["invocation"]),
            parse_cid(answer["execution"]),
            parse_cid(answer["receipt"]),
            version,
        )
        shown: StepShown = {
            "rows": answer["row_count"],
            "logicalHash": answer["logicalHash"],
            "columns": answer["columns"],
            "trust": answer["trust"],
            "elapsed_ms": round((time.perf_counter() - t0) * 1000, 1),
        }
        emit("step", {"step": step.name, "state": "done", "source": answer["source"], **shown})
        positions = {a: i for i, a in enumerate(answer["inputs"])}
        return _Done(record, {"query": parse_cid(answer["query"])}, positions, shown)

    async def _derive(self, answer: Mapping[str, Any]) -> CID:
        structure = Structure("parquet", tuple((n, t) for n, t in answer["schema"]))
        slices = [parse_cid(s) for s in answer["slices"]]
        facts = (answer["logicalHash"], answer["row_count"])
        return await self.datasets.derive(slices, structure, parse_cid(answer["receipt"]), facts)

    async def _unrun(self, step: Step, vertex: int, source: str, why: str) -> _Done:
        """A step that did not run to a result: its vertex holds the dt_0 of its SQL as written."""
        leaf, mbe = bytecode_of(step.sql)
        dt = block_of(DryTransformation(mbe.cid, ENGINE_HANDLE))
        await self._put(leaf, mbe, dt)
        positions = {a: i for i, a in enumerate(step.inputs)}
        return _Done(RunStep(step.name, vertex, source, error=why), {"transformation": dt.cid}, positions)

    async def _put(self, *blocks: Block) -> None:
        for b in blocks:
            await self.kubo.block_put(b.data, codec=b.cid.codec.name)

    async def _pipeline(self, spec: PipelineSpec, roots: dict[str, CID], done: dict[str, _Done]) -> CID:
        """The pl_0: a vertex per root dataset version, then one per step; an edge per input, its cx_0 from the
        whole output (or dataset) of the tail to the head's input at its position, labelled with its alias."""
        index = {ref: i for i, ref in enumerate(roots)} | {s.name: len(roots) + i for i, s in enumerate(spec.steps)}
        tail = block_of(SelectorEnvelope(Matcher()))
        blocks, edges = [tail], []
        for s in spec.steps:
            d = done[s.name]
            for alias, ref in s.inputs.items():
                head = block_of(SelectorEnvelope(ExploreIndex(d.positions.get(alias, 0), Matcher(alias))))
                cx = block_of(Connection(tail.cid, head.cid))
                blocks += [head, cx]
                edges.append(PipelineEdge(index[ref], index[s.name], cx.cid))
        vertices = [{"dataset": v} for v in roots.values()] + [done[s.name].vertex for s in spec.steps]
        pl = block_of(Pipeline(tuple(vertices), tuple(edges)))
        await self._put(*blocks, pl)
        return pl.cid

    async def _record(
        self, spec: PipelineSpec, pl: CID, previous: CID | None, done: dict[str, _Done]
    ) -> PipelineRunView:
        """Sign and store the pr_0, pin it, and make it the pipeline's latest run. Pinned shallowly: the run and
        every earlier run directly (each stays pinned), its pl_0 recursively (the node's own datasets and queries);
        each step's result is pinned as a result (receipt, derivative version). A recursive pin of the run would
        follow its receipts into the datasets of whichever peer computed a step, which this node need not hold."""
        steps = [done[s.name].record for s in spec.steps]
        failed = next((s for s in steps if s.source == "failed"), None)
        run = PipelineRun(
            spec.name,
            pl,
            previous,
            "failed" if failed else "ok",
            tuple(steps),
            self.identity.node_key,
            clock.utc_now_iso(),
        )
        blk = block_of(run.signed(self.identity.sign))
        await self._put(blk)
        await self.kubo.pin_add(pl, recursive=True)
        await self.kubo.pin_add(blk.cid, recursive=False)
        self._set_latest(spec.name, blk.cid)
        return self.view(blk.cid, run, {s.name: d.shown for s in spec.steps if (d := done[s.name]).shown})

    @staticmethod
    def view(cid: CID, run: PipelineRun, shown: dict[str, StepShown] | None = None) -> PipelineRunView:
        """A run as JSON: its CIDs as strings, and what the run just saw of each step (rows, timing) if given."""
        failed = next((s for s in run.steps if s.source == "failed"), None)
        return {
            "name": run.name,
            "run": cid_str(cid),
            "pipeline": cid_str(run.pipeline),
            "previous": cid_str(run.previous) if run.previous else None,
            "status": run.status,
            "failed": {"step": failed.name, "error": failed.error} if failed else None,
            "signer": run.signer,
            "time": run.time,
            "computed": sum(1 for s in run.steps if s.source == "computed"),
            "steps": [_step_view(s, (shown or {}).get(s.name)) for s in run.steps],
        }


def _step_view(s: RunStep, shown: StepShown | None) -> StepView:
    def link(cid: CID | None) -> str | None:
        return cid_str(cid) if cid is not None else None

    view: StepView = {
        "name": s.name,
        "vertex": s.vertex,
        "source": s.source,
        "invocation": link(s.invocation),
        "execution": link(s.execution),
        "receipt": link(s.receipt),
        "version": link(s.version),
        "error": s.error,
    }
    return view | shown if shown is not None else view
