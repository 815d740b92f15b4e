"""``node.services.provenance``: where a result comes from and whether it holds (docs/provenance.md): lineage,
verification
offline or by recomputing, proofs, Transform.Storage types, and pipelines of SQL steps with their recorded runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from node.core.result_types import (
    AssetChecked,
    Checked,
    JobStarted,
    LineageGraph,
    PipelineRunView,
    Recomputed,
    TypeChecked,
    TypeStored,
    job_started,
)
from node.domain.model import CID, cid_str
from node.services.datasets.facade import disk_full_is_507
from node.services.pipelines import parse_spec
from node.support.errors import NodeStopping

if TYPE_CHECKING:
    from node.core.node import Node
    from node.services.provenance.recompute import Recompute

Emit = Callable[[str, dict[str, Any]], None]


class ProvenanceOps:
    def __init__(self, node: Node) -> None:
        self._node = node

    def _refuse_if_stopping(self, what: str) -> None:
        if self._node.stopping:
            raise NodeStopping(f"the node is stopping: it takes no new {what}")

    def _lineage_bounds(self) -> dict[str, Any]:
        q = self._node.settings.query
        return {"max_nodes": q.lineage_max_nodes, "timeout": q.lineage_timeout}

    # -- lineage, verification, proofs ------------------------------------------------------------------

    async def lineage(self, ref: str, *, offline: bool = False) -> LineageGraph:
        """The walk from ``ref`` (a result's CID, a slice, a dataset block, name or id) back to its root datasets."""
        from node.services.provenance.lineage import LineageWalk

        n = self._node
        fetch = n.settings.query.lineage_fetch_timeout
        walk = LineageWalk(n.kubo, n.datasets, n.index, fetch_timeout=fetch, offline=offline, **self._lineage_bounds())
        return await walk.walk(ref)

    async def verify(
        self, ref: str, *, offline: bool, recursive: bool = False, on_event: Emit | None = None
    ) -> Checked | Recomputed:
        """Check a result without computing it (``offline``), or by recomputing each step on this node's Spark
        worker, signing and announcing a verification receipt for each reproduced one
        (node.services.provenance.recompute)."""
        from node.services.provenance.verify import OfflineVerify

        n = self._node
        with disk_full_is_507("a slice being verified", n.datasets.tmp_dir):
            if offline:
                return await OfflineVerify(n.kubo, n.datasets, n.index, self._lineage_bounds()).verify(ref, recursive)
            return await self._recompute().verify(ref, recursive, on_event)

    def _recompute(self) -> Recompute:
        from node.services.provenance.recompute import Recompute

        n = self._node
        fetch = n.settings.query.lineage_fetch_timeout
        return Recompute(n.kubo, n.datasets, n.index, n.resolver, self._lineage_bounds(), fetch)

    async def start_verify(self, ref: str, *, recursive: bool = False) -> JobStarted:
        """``verify`` by recomputing, as a job whose events follow each step (POST /api/v0/verify). What ``ref``
        leads to is found first: a bad or unknown CID is a 400 or 404 now, not a job that fails."""
        self._refuse_if_stopping("verification")
        check = self._recompute()
        receipt = await check.receipt_of(ref)
        tmp_dir = self._node.datasets.tmp_dir

        async def work(emit: Emit) -> dict[str, Any]:
            with disk_full_is_507("a slice being verified", tmp_dir):
                return dict(await check.run(ref, receipt, recursive, emit))

        return job_started(self._node.jobs.start(work))

    async def export_proof(self, ref: str, *, data: bool = True) -> tuple[CID, AsyncIterator[bytes]]:
        """The receipt ``ref`` leads to and its proof as a CAR stream (docs/provenance.md "Proofs"); ``data`` false
        leaves the slices out. Errors (not a result, a block not held) come before the stream."""
        from node.services.provenance.proof import export_proof

        n = self._node
        return await export_proof(n.kubo, n.datasets, n.index, ref, data=data, timeout=n.settings.ipfs.timeout)

    # -- Transform.Storage types (node.services.type_checks; docs/provenance.md "Types") ------------------------------

    async def type_check(self, ref: str, type_ref: str) -> TypeChecked:
        """Is the data ``ref`` names (a dataset name or id, or a block CID) a term of the type ``type_ref``?"""
        return await self._node.types.check(ref, type_ref)

    async def asset_check(self, cid: str) -> AssetChecked:
        """Is the asset ``cid`` valid (Algorithm 4)?"""
        return await self._node.types.asset(cid)

    async def type_put(self, obj: Any) -> TypeStored:
        """Check a Type, Asset, Function or series type, then store and pin it like ``dag_put``."""
        kind = await self._node.types.kind_of(obj)
        return {"cid": cid_str(await self._node.dag_put(obj)), "kind": kind}

    # -- pipelines (node.services.pipelines; docs/provenance.md "Pipelines") ------------------------------------

    async def run_pipeline(
        self, source: str | bytes | dict[str, Any], *, trust: str | None = None, on_event: Emit | None = None
    ) -> PipelineRunView:
        """Run a pipeline file's steps in dependency order and record the run (``pr_0``); a failed step is in the
        answer (``status: failed``), every dataset and the file itself are checked before anything runs (4xx)."""
        self._refuse_if_stopping("pipeline run")
        spec = parse_spec(source)
        return await self._node.pipelines.run(spec, trust, on_event or (lambda kind, data: None))

    def start_pipeline(self, source: str | bytes | dict[str, Any], *, trust: str | None = None) -> JobStarted:
        """``run_pipeline`` as a job whose events (one ``step`` event per step state, and each step's query
        stages with its ``step`` name) are followed like a query's."""
        self._refuse_if_stopping("pipeline run")
        spec = parse_spec(source)  # a bad file is a 400 now, not a job that fails at once
        runs = self._node.pipelines

        async def work(emit: Emit) -> dict[str, Any]:
            return dict(await runs.run(spec, trust, emit))

        return job_started(self._node.jobs.start(work))

    async def pipeline_log(self, name: str, limit: int = 20) -> list[PipelineRunView]:
        """The runs of pipeline ``name`` on this node, latest first (along each run's ``previous`` link)."""
        runs = self._node.pipelines
        return [runs.view(cid, run) for cid, run in await runs.history(name, limit)]
