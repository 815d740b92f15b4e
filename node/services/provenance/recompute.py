"""Verification by recomputing (docs/provenance.md "Verify (recompute)").

What offline verification cannot show, that a result's rows are its query's answer, is shown by running the query
again: each receipt's invocation is run on this node's Spark worker over the dataset versions the receipt names
(blocks and slices this node lacks are fetched by CID, each within ``query.lineage_fetch_timeout``), as a miss is
computed (node/services/resolve/compute.py ``Compute.recompute``), and its logical hash and rows compared with the
receipt's. Each step is:

* ``reproduced``: the same logical hash and rows. With canonical Parquet the output slices, and so the ``ex_0``,
  are the same CIDs too (``same_execution`` says whether they are). This node signs its own ``rc_0`` for the
  execution with ``verifies: <the receipt checked>``, stores, indexes (``recomputed-agreed``) and announces it:
  a node that trusts this one may then use the result under ``community``.
* ``diverged``: both logical hashes and row counts, both engines and profiles. The receipt is refused against its
  signer (its score goes down); this node's computed result is what its index keeps.
* ``could not run``: why (a block or slice not found in time, an input that is another result's output rather
  than a dataset version, a Spark failure).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final, NotRequired, TypedDict

from node.adapters.identity import public_key_from_did
from node.adapters.index import ExecutionRow, Index
from node.domain.model import CID, Block, CidText, Invocation, Receipt, cid_str, decode, decode_object, parse_cid
from node.domain.ports.block_store import BlockStore
from node.services.datasets import Datasets, Version
from node.services.provenance.lineage import UNIXFS_CODECS, LineageWalk
from node.services.provenance.verify import OfflineVerify
from node.services.resolve.resolver import Resolver
from node.support.errors import CairnError, KuboUnreachable
from node.support.errors import InvalidInput as NotRun  # a step that could not run, and why (a 4xx elsewhere)

REPRODUCED: Final = "reproduced"
DIVERGED: Final = "diverged"
NOT_RUN: Final = "could not run"

RecomputeCounts = TypedDict("RecomputeCounts", {"reproduced": int, "diverged": int, "could not run": int})


class ResultFacts(TypedDict):
    """What a receipt says of its result (``claimed``), or what recomputing it here gave (``recomputed``)."""

    execution: CidText
    logicalHash: str
    rows: int
    engine: Any
    profile: CidText | None
    receipt: NotRequired[CidText]  # ours, for a recomputed one


class RecomputedStep(TypedDict):
    receipt: CidText
    status: Annotated[str, {"enum": [REPRODUCED, DIVERGED, NOT_RUN]}]
    reason: NotRequired[str]  # why it could not run
    signer: NotRequired[str]
    invocation: NotRequired[CidText]
    claimed: NotRequired[ResultFacts]
    recomputed: NotRequired[ResultFacts]
    same_execution: NotRequired[bool]
    verification: NotRequired[CidText]  # our receipt that verifies theirs, when they agree


class Recomputed(TypedDict):
    """A verification by recomputing: ok only when every receipt was reproduced."""

    cid: str
    offline: bool
    recursive: bool
    ok: bool
    summary: RecomputeCounts
    executions: list[RecomputedStep]


Emit = Callable[[str, dict[str, Any]], None]


@dataclass
class _Question:
    """What a receipt asked, as blocks and versions this node now holds."""

    receipt: Receipt
    qy: Block
    iv: Block
    versions: list[Version]


class Recompute:
    def __init__(
        self,
        kubo: BlockStore,
        datasets: Datasets,
        index: Index,
        resolver: Resolver,
        lineage: dict[str, Any],
        fetch_timeout: float,
    ) -> None:
        self.kubo, self.datasets, self.index, self.resolver = kubo, datasets, index, resolver
        self.lineage = lineage  # max_nodes, timeout: the bounds of the walk --recursive takes
        self.fetch_timeout = fetch_timeout  # one block or slice fetched by CID

    async def verify(self, ref: str, recursive: bool = False, emit: Emit | None = None) -> Recomputed:
        return await self.run(ref, await self.receipt_of(ref), recursive, emit)

    async def run(self, ref: str, receipt: CID, recursive: bool, emit: Emit | None = None) -> Recomputed:
        """Recompute ``receipt`` (the one ``ref`` leads to) and, ``recursive``, every receipt upstream of it."""
        say = emit or (lambda kind, data: None)
        receipts = [receipt]
        if recursive:
            walk = LineageWalk(
                self.kubo, self.datasets, self.index, offline=False, fetch_timeout=self.fetch_timeout, **self.lineage
            )
            graph = await walk.walk(cid_str(receipt))
            receipts += [parse_cid(n["cid"]) for n in graph["nodes"] if n["kind"] == "receipt" and n["cid"]]
        todo = list(dict.fromkeys(cid_str(rc) for rc in receipts))
        steps = []
        for n, rc in enumerate(todo, 1):
            say("step", {"receipt": rc, "step": n, "of": len(todo)})
            step = await self._step(parse_cid(rc), say)
            say("step-done", {"receipt": rc, "step": n, "of": len(todo), "status": step["status"]})
            steps.append(step)

        def count(status: str) -> int:
            return sum(1 for step in steps if step["status"] == status)

        summary: RecomputeCounts = {
            "reproduced": count(REPRODUCED),
            "diverged": count(DIVERGED),
            NOT_RUN: count(NOT_RUN),
        }
        return {
            "cid": ref.strip(),
            "offline": False,
            "recursive": recursive,
            "ok": summary["reproduced"] == len(steps),
            "summary": summary,
            "executions": steps,
        }

    async def receipt_of(self, ref: str) -> CID:
        """As offline verification finds it, once a block named by CID is fetched here (bounded) if it lacks it."""
        try:
            cid = parse_cid(ref.strip())
        except CairnError:
            cid = None  # OfflineVerify words the error
        if cid is not None and cid.codec.name not in UNIXFS_CODECS:
            try:
                await self.kubo.block_get(cid, timeout=self.fetch_timeout)
            except KuboUnreachable:
                raise
            except CairnError:
                pass  # not found in time: OfflineVerify says so (404)
        return await OfflineVerify(self.kubo, self.datasets, self.index, self.lineage)._receipt_of(ref)

    async def _step(self, cid: CID, emit: Emit) -> RecomputedStep:
        receipt = cid_str(cid)
        try:
            q = await self._question(cid)
        except KuboUnreachable:
            raise
        except CairnError as e:  # a block not found in time, a malformed one, an input with no version: why
            return {"receipt": receipt, "status": NOT_RUN, "reason": e.message}
        rc = q.receipt
        claimed: ResultFacts = {
            "execution": cid_str(rc.execution),
            "logicalHash": rc.logical_hash,
            "rows": rc.rows,
            "engine": rc.engine,
            "profile": cid_str(rc.profile) if rc.profile else None,
        }
        signer, invocation = rc.signer, cid_str(rc.invocation)
        try:
            row = await self.resolver.recompute((cid, rc), q.qy, q.iv, q.versions, emit)
        except KuboUnreachable:
            raise
        except CairnError as e:
            reason = f"recomputing failed: {e.message}"
            step: RecomputedStep = {"receipt": receipt, "signer": signer, "invocation": invocation, "status": NOT_RUN}
            return step | {"reason": reason, "claimed": claimed}
        agreed = (row.logical_hash, row.rows) == (rc.logical_hash, rc.rows)
        self.resolver.judge((cid, rc), agreed, row)
        step = {
            "receipt": receipt,
            "signer": signer,
            "invocation": invocation,
            "status": REPRODUCED if agreed else DIVERGED,
            "claimed": claimed,
            "recomputed": await self._ours(row),
            "same_execution": row.execution == cid_str(rc.execution),
        }
        if agreed:
            step["verification"] = row.receipt  # our rc_0 that verifies the receipt
        return step

    async def _ours(self, row: ExecutionRow) -> ResultFacts:
        rc = await self._object(parse_cid(row.receipt), Receipt)
        return {
            "execution": row.execution,
            "receipt": row.receipt,
            "logicalHash": row.logical_hash,
            "rows": row.rows,
            "engine": rc.engine,
            "profile": row.profile,
        }

    async def _question(self, cid: CID) -> _Question:
        """The receipt, its invocation and query, and the dataset versions it read, each fetched if need be."""
        rc = await self._object(cid, Receipt)
        # A receipt whose signature fails says nothing of its signer: recomputing it would score that key for a
        # claim it never made (`cairn verify --offline` says what is wrong with it).
        rc.verify(public_key_from_did(rc.signer))
        iv_data = await self._block(rc.invocation, "the invocation")
        iv = decode_object(decode(iv_data, rc.invocation.codec.code))
        if not isinstance(iv, Invocation):
            raise NotRun(f"the receipt's invocation {cid_str(rc.invocation)} is not an iv_0")
        qy_data = await self._block(iv.query, "the query")
        if len(rc.versions) != len(iv.inputs):
            # An input that is another result's output (a pipeline's later step) names no dataset version: what it
            # read is that result, which --recursive recomputes on its own.
            raise NotRun(
                f"the invocation reads {len(iv.inputs)} inputs, the receipt names {len(rc.versions)} dataset "
                "versions: an input that is another result's output has no dataset version to run over here"
            )
        versions = [await self._version(i, head) for i, head in enumerate(rc.versions)]
        for v in versions:
            for s in v.slices:  # fetched now, bounded: the Spark job then reads them from the cache
                try:
                    await self.datasets.slice_path(s, timeout=self.fetch_timeout)
                except KuboUnreachable:
                    raise
                except CairnError as e:
                    raise NotRun(f"slice {cid_str(s.cid)} of dataset version {cid_str(v.head)}: {e.message}") from None
        return _Question(rc, Block(iv.query, qy_data), Block(rc.invocation, iv_data), versions)

    async def _version(self, i: int, head: CID) -> Version:
        try:
            return await self.datasets.version(head, timeout=self.fetch_timeout)
        except KuboUnreachable:
            raise
        except (CairnError, KeyError) as e:
            why = getattr(e, "message", str(e))
            raise NotRun(f"input {i}: dataset version {cid_str(head)}: {why}") from None

    async def _block(self, cid: CID, what: str) -> bytes:
        try:
            return await self.kubo.block_get(cid, timeout=self.fetch_timeout)  # re-hashed against its CID
        except KuboUnreachable:
            raise
        except CairnError as e:
            raise NotRun(f"{what} {cid_str(cid)}: {e.message}") from None

    async def _object(self, cid: CID, kind: type[Receipt]) -> Receipt:
        obj = decode_object(decode(await self._block(cid, "the receipt"), cid.codec.code))
        if not isinstance(obj, kind):
            raise NotRun(f"{cid_str(cid)} is not a {kind.typed_version}")
        return obj
