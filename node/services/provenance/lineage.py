"""Lineage: from any result back through every execution to the root datasets.

The links walked are the ones the objects carry (docs/object-model.md): an ``rc_0`` receipt names its ``ex_0``
execution and the dataset versions (``mb_0`` heads) it read; an ``ex_0`` names its input slice lists (``rde_0``);
an ``mb_0`` version's chain ends at its Seed. What no object links is looked up in the node's index, and said so
(``via: index``): from a slice to the execution that wrote it or the dataset that holds it, from an ``ex_0`` or an
``iv_0`` to its receipt, and from an input slice list to an execution whose output it is (a result that is itself
an input chains further: pipelines). Every block is re-hashed against its CID as it is read (the block store), a
receipt's signature is checked with its signer's did:key, a dataset version's whole chain with its dataset key
(ODF "Verifiability": signatures and hashes; data is hashed by ``verify``, not here).

Blocks not held here are fetched by CID through Kubo (bitswap), each within a deadline: a block that does not come
is a ``missing`` node of the answer ("not found within N s"), not a failure of the whole walk. The walk stops at
``max_nodes`` nodes or at its deadline, with a ``cut`` node saying which.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

from node.adapters.identity import public_key_from_did
from node.adapters.index import ExecutionRow, Index
from node.domain.model import (
    CID,
    Announcement,
    Execution,
    Invocation,
    MetadataBlock,
    Receipt,
    RecursiveDataEnvelope,
    cid_str,
    decode,
    decode_object,
    parse_cid,
)
from node.domain.ports.block_store import BlockStore
from node.services.datasets import Datasets, Version
from node.support.errors import BlockMissing as Missing
from node.support.errors import CairnError, InvalidInput, KuboError, KuboTimeout, KuboUnreachable, NotFound

UNIXFS_CODECS = ("raw", "dag-pb")  # a slice is a UnixFS file: its root is one of these


class Fetcher:
    """Blocks by CID: this node's Kubo first (offline), then the network within a deadline unless ``offline``."""

    def __init__(self, kubo: BlockStore, fetch_timeout: float, offline: bool, deadline: float) -> None:
        self.kubo, self.fetch_timeout, self.offline, self.deadline = kubo, fetch_timeout, offline, deadline
        self.fetched: set[str] = set()  # CIDs that came from the network during this walk

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    async def block(self, cid: CID) -> bytes:
        try:
            return await self.kubo.block_get(cid, offline=True, timeout=max(1.0, min(10.0, self.remaining())))
        except KuboUnreachable:
            raise
        except KuboError:
            if self.offline:
                raise Missing(cid_str(cid), "not held by this node (offline: nothing is fetched)") from None
        wait = max(0.5, min(self.fetch_timeout, self.remaining()))
        try:
            data = await asyncio.wait_for(self.kubo.block_get(cid, timeout=wait), wait + 1.0)
        except (KuboError, TimeoutError):
            raise Missing(cid_str(cid), f"not found within {wait:g} s") from None
        self.fetched.add(cid_str(cid))
        return data

    async def obj(self, cid: CID) -> Any:
        data = await self.block(cid)
        return decode_object(decode(data, cid.codec.code))

    async def links(self, cid: CID) -> list[CID]:
        items = decode(await self.block(cid), cid.codec.code)
        if not isinstance(items, list) or not all(isinstance(c, CID) for c in items):
            raise InvalidInput(f"{cid_str(cid)} is not a list of links")
        return items

    def source(self, cid: CID) -> str:
        return "network" if cid_str(cid) in self.fetched else "local"


class LineageNode(TypedDict):
    """A node of the walk. Each kind adds its own fields (a receipt's rows and engine, a dataset's name and seq, a
    missing block's ``want``, …): these are the ones every node has."""

    id: str
    kind: str
    cid: str | None
    label: str
    signer: NotRequired[str | None]
    checks: NotRequired[dict[str, Any]]  # check → "ok" or what failed
    source: NotRequired[str]  # local, or network (fetched by the walk)


LineageEdge = TypedDict("LineageEdge", {"from": str, "to": str, "label": str, "via": str})


class LineageLimits(TypedDict):
    max_nodes: int
    timeout: float
    offline: bool


class LineageGraph(TypedDict):
    start: str
    nodes: list[LineageNode]
    edges: list[LineageEdge]
    complete: bool
    cut: str | None  # why the walk stopped short (max nodes, deadline)
    limits: NotRequired[LineageLimits]  # the walk's bounds (absent from a graph not made by a walk)


@dataclass
class Graph:
    start: str
    max_nodes: int
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: list[LineageEdge] = field(default_factory=list)
    cut: str | None = None

    def full(self) -> bool:
        return len(self.nodes) >= self.max_nodes

    def add(self, key: str, node: dict[str, Any]) -> None:
        self.nodes.setdefault(key, {"id": key, **node})

    def link(self, src: str, dst: str, label: str, via: str = "object") -> None:
        edge: LineageEdge = {"from": src, "to": dst, "label": label, "via": via}
        if edge not in self.edges:
            self.edges.append(edge)

    def to_json(self) -> LineageGraph:
        return {
            "start": self.start,
            # built per kind (``add``), each with at least the fields LineageNode names
            "nodes": cast(list[LineageNode], list(self.nodes.values())),
            "edges": self.edges,
            "complete": self.cut is None
            and not any(n["kind"] in ("missing", "unreadable") for n in self.nodes.values()),
            "cut": self.cut,
        }


def _signature(obj: Receipt | Announcement) -> str:
    try:
        obj.verify(public_key_from_did(obj.signer))
    except CairnError as e:
        return f"failed: {e.message}"
    return "ok"


class LineageWalk:
    """One walk; build one per request (it holds the graph and the deadline)."""

    def __init__(
        self,
        kubo: BlockStore,
        datasets: Datasets,
        index: Index,
        *,
        max_nodes: int,
        timeout: float,
        fetch_timeout: float,
        offline: bool = False,
    ) -> None:
        self.datasets, self.index, self.timeout = datasets, index, timeout
        self.fetch = Fetcher(kubo, fetch_timeout, offline, time.monotonic() + timeout)
        self.max_nodes = max_nodes
        self.graph = Graph("", max_nodes)
        self._queue: list[tuple[str, CID, str | None, str, str]] = []  # (kind, cid, parent, label, via)
        self._receipts: dict[str, Receipt] = {}  # by the execution they attest

    async def walk(self, ref: str) -> LineageGraph:
        """The lineage of ``ref``: a CID (rc_0, ex_0, iv_0, an_0, mb_0, or a slice) or a dataset name or id."""
        kind, cid, asked = await self._start(ref)
        self.graph.start = cid_str(asked)
        self._queue.append((kind, cid, None, "", "object"))
        while self._queue:
            if self.graph.full():
                self.graph.cut = f"max nodes ({self.max_nodes}) reached"
            elif self.fetch.remaining() <= 0 and self.graph.nodes:  # the start itself is always shown
                self.graph.cut = f"deadline ({self.timeout:g} s) reached"
            if self.graph.cut is not None:
                self.graph.add("cut", {"kind": "cut", "cid": None, "label": f"{self.graph.cut}: not walked further"})
                for _, c, parent, label, via in self._queue:
                    if parent is not None and cid_str(c) not in self.graph.nodes:
                        self.graph.link(parent, "cut", label, via)
                break
            kind, cid, parent, label, via = self._queue.pop(0)
            key = cid_str(cid)
            if parent is not None:
                self.graph.link(parent, key, label, via)
            if key not in self.graph.nodes:
                await self._visit(kind, cid)
        out = self.graph.to_json()
        out["limits"] = {"max_nodes": self.max_nodes, "timeout": self.timeout, "offline": self.fetch.offline}
        return out

    def _push(self, kind: str, cid: CID, parent: CID, label: str, via: str = "object") -> None:
        self._queue.append((kind, cid, cid_str(parent), label, via))

    # -- the start --------------------------------------------------------------------------------------

    async def _start(self, ref: str) -> tuple[str, CID, CID]:
        """What ``ref`` is: (kind, where the walk starts, the CID asked about). A dataset name or id is its head
        version; an execution starts at its receipt when the index knows it (no object links them)."""
        ref = ref.strip()
        if not ref:
            raise InvalidInput("lineage of what? give a CID, a dataset name or a dataset id")
        try:
            cid = parse_cid(ref)
        except CairnError:
            head = (await self.datasets.resolve(ref))[1].head  # NotFound (404) for an unknown name or id
            return "dataset", head, head
        if cid.codec.name in UNIXFS_CODECS:
            return "slice", cid, cid
        if cid.codec.name != "dag-cbor":
            raise InvalidInput(f"{cid_str(cid)} ({cid.codec.name}) is not an object lineage can start from")
        try:
            obj = await self.fetch.obj(cid)
        except Missing as e:
            raise NotFound(f"{cid_str(cid)}: {e.message}") from None
        row = self.index.results.executions_by_cid(cid_str(cid)) if isinstance(obj, Execution) else None
        if row is not None:
            return "receipt", parse_cid(row.receipt), cid
        kinds = {Receipt: "receipt", Execution: "execution", MetadataBlock: "dataset", Invocation: "invocation"}
        for cls, name in (*kinds.items(), (Announcement, "announcement")):
            if isinstance(obj, cls):
                return name, cid, cid
        raise InvalidInput(
            f"{cid_str(cid)} is not a receipt, execution, invocation, announcement, dataset block or slice"
        )

    # -- one node ---------------------------------------------------------------------------------------

    async def _visit(self, kind: str, cid: CID) -> None:
        visit = {
            "receipt": self._receipt,
            "execution": self._execution,
            "dataset": self._dataset,
            "slice": self._slice,
            "invocation": self._invocation,
            "announcement": self._announcement,
        }[kind]
        try:
            await visit(cid)
        except Missing as e:
            self.graph.add(cid_str(cid), {"kind": "missing", "cid": cid_str(cid), "label": e.message, "want": kind})
        except CairnError as e:
            if isinstance(e, KuboUnreachable):
                raise
            self.graph.add(cid_str(cid), {"kind": "unreadable", "cid": cid_str(cid), "label": e.message, "want": kind})

    def _node(self, kind: str, cid: CID, label: str, signer: str | None, checks: dict[str, str], **more: Any) -> None:
        checks = {"hash": "ok", **checks}  # every block read was re-hashed against its CID by the Kubo client
        node = {"kind": kind, "cid": cid_str(cid), "label": label, "signer": signer, "checks": checks}
        self.graph.add(cid_str(cid), {**node, "source": self.fetch.source(cid), **more})

    async def _receipt(self, cid: CID) -> None:
        rc = await self.fetch.obj(cid)
        if not isinstance(rc, Receipt):
            raise InvalidInput(f"{cid_str(cid)} is not a receipt (rc_0)")
        checks = {"signature": _signature(rc)}
        label = f"{rc.rows} rows, logical hash {rc.logical_hash[:16]}…"
        detail = {"time": rc.time, "rows": rc.rows, "logicalHash": rc.logical_hash, "engine": rc.engine}
        profile = cid_str(rc.profile) if rc.profile else None
        self._node(
            "receipt", cid, label, rc.signer, checks, **detail, profile=profile, invocation=cid_str(rc.invocation)
        )
        self._receipts[cid_str(rc.execution)] = rc
        self._push("execution", rc.execution, cid, "attests")

    async def _execution(self, cid: CID) -> None:
        rc = self._receipts.get(cid_str(cid))
        ex = await self.fetch.obj(cid)
        if not isinstance(ex, Execution):
            raise InvalidInput(f"{cid_str(cid)} is not an execution (ex_0)")
        signer = rc.signer if rc is not None else None
        label = ex.handle + (" (failed)" if ex.exit_status else "")
        checks = {"signature": "ok (its receipt's)" if rc is not None else "none: no receipt known for it"}
        self._node("execution", cid, label, signer, checks, handle=ex.handle)
        await self._inputs(cid, ex, rc)

    async def _inputs(self, cid: CID, ex: Execution, rc: Receipt | None) -> None:
        """Each input list: the output of an execution this node knows (chains on), else the dataset version the
        receipt names for it, else a bare list of slices (nothing names where they came from)."""
        env = await self.fetch.obj(ex.input)
        if not isinstance(env, RecursiveDataEnvelope):
            raise InvalidInput(f"execution {cid_str(cid)}: input {cid_str(ex.input)} is not an rde_0")
        for i, lst in enumerate(await self.fetch.links(env.content)):
            slices = [cid_str(c) for c in await self.fetch.links(lst)]
            upstream = self._producer(slices)
            if upstream is not None and upstream.execution != cid_str(cid):
                self._push("receipt", parse_cid(upstream.receipt), cid, f"input {i}: output of", "index")
            elif rc is not None and i < len(rc.versions):
                self._push("dataset", rc.versions[i], cid, f"input {i}: read")
            else:
                key = cid_str(lst)
                label = f"input {i}: {len(slices)} slices that no receipt or index entry names"
                self.graph.add(key, {"kind": "data", "cid": key, "label": label, "slices": slices, "checks": {}})
                self.graph.link(cid_str(cid), key, f"input {i}: read")

    def _producer(self, slices: list[str]) -> ExecutionRow | None:
        if not slices:
            return None
        for row in self.index.results.executions_with_slice(slices[0]):
            if list(row.slices) == slices:
                return row
        return None

    async def _dataset(self, cid: CID) -> None:
        wait = max(0.5, min(self.fetch.fetch_timeout, self.fetch.remaining()))
        try:
            version = await asyncio.wait_for(self._version(cid, wait), wait + 1.0)
        except (TimeoutError, KuboTimeout):
            raise Missing(cid_str(cid), f"dataset chain not found within {wait:g} s") from None
        except KuboError as e:
            if isinstance(e, KuboUnreachable):
                raise
            raise Missing(cid_str(cid), f"the dataset chain is not complete here ({e.message})") from None
        except InvalidInput as e:  # a signature or a link of the chain that does not check: say it on the node
            self._node("dataset", cid, "version whose chain does not check", None, {"chain": f"failed: {e.message}"})
            return
        row = self.index.catalog.dataset_by_id(version.dataset_id)
        seed = version.blocks[-1][1].event
        # A derivative version (a pipeline step's result, node.services.pipelines) names the receipt that wrote its
        # slices.
        made_by = [b.event["transform"] for _, b in version.blocks if b.kind == "AddData" and "transform" in b.event]
        for receipt in made_by:
            self._push("receipt", receipt, cid, "output of")
        name = row.name if row is not None else None
        label = f"{name or version.dataset_id[:24] + '…'} version {version.seq}: {version.rows} rows"
        checks = {"signature": "ok (every block of the chain, dataset key)", "chain": "ok"}
        self._node(
            "dataset",
            cid,
            label,
            version.dataset_id,
            checks,
            name=name,
            seq=version.seq,
            root=not made_by,
            datasetKind=seed.get("datasetKind"),
            rows=version.rows,
        )

    async def _version(self, head: CID, wait: float) -> Version:
        if self.fetch.offline:  # every block of the chain must be here already: fetch none
            cid: CID | None = head
            while cid is not None:
                block = await self.fetch.obj(cid)
                cid = block.prev if isinstance(block, MetadataBlock) else None
        return await self.datasets.version(head, timeout=wait)

    async def _slice(self, cid: CID) -> None:
        key = cid_str(cid)
        rows = self.index.results.executions_with_slice(key)
        label = "slice (a UnixFS file: it names nothing; found through the index)"
        self._node("slice", cid, label, None, {"hash": "not checked here (verify hashes data)"})
        for row in rows:
            self._push("receipt", parse_cid(row.receipt), cid, "output of", "index")
        if rows:
            return
        for ds in self.index.catalog.datasets():
            version = await self.datasets.version(parse_cid(ds.head), timeout=self.fetch.fetch_timeout)
            if any(cid_str(s.cid) == key for s in version.slices):
                self._push("dataset", version.head, cid, "slice of", "index")
                return
        self.graph.nodes[key]["label"] = "slice that no execution or dataset of this node lists: the walk stops"

    async def _invocation(self, cid: CID) -> None:
        row = self.index.results.execution(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution of invocation {cid_str(cid)} in this node's index")
        self._node("invocation", cid, "the cache key", None, {})
        self._push("receipt", parse_cid(row.receipt), cid, "answered by", "index")

    async def _announcement(self, cid: CID) -> None:
        an = await self.fetch.obj(cid)
        if not isinstance(an, Announcement):
            raise InvalidInput(f"{cid_str(cid)} is not an announcement (an_0)")
        self._node("announcement", cid, f"claims {an.rows} rows", an.signer, {"signature": _signature(an)})
        self._push("receipt", an.receipt, cid, "claims")
