"""Offline verification: everything about a result that can be checked without computing it (issue 17 item 2).

ODF "Verifiability" asks a reader to check a derivative's data against its metadata without trusting the
publisher; what only recomputing can show (that the rows are the query's answer) is out of reach offline and
is said so. Offline means this node's Kubo only: no block and no slice is fetched from the network.

For a receipt (``rc_0``; an ``ex_0``, ``iv_0``, ``an_0`` or output slice leads to one), each a check that is
``ok``, ``failed`` (with what was expected and what was found) or ``unchecked`` (with why):

* every block re-hashed against its CID (the Kubo client does it on read); the receipt's signature with the key
  its ``signer`` names;
* the execution succeeded and runs the bytecode of the invocation's canonical query (``mbe_0`` of the ``qy_0``
  statement, built here) with the engine's handle;
* one input list per invocation input and per receipt version; each version's chain (every block's signature with
  its dataset key); the input list is that version's slices; the input's identity ``{structure, logicalHash,
  rows}`` (DESIGN.md "iv_0") recomputed from the version's Parquet data equals the invocation's; for an input that
  read a snapshot version's state (node/datasets/projection.py), the projection recomputed from the version's slices
  is the input list, and its identity the invocation's;
* the output slices' structure is the receipt's ``st_0``, and their logical hash and row count, recomputed from
  the Parquet data (node.datasets.logical_hash; docs/hashing.md), equal the receipt's;
* every slice's bytes give its CID, and so does this node's cached copy of it (the cache is trusted by name
  when answering, so a forged copy is a failure here).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from node.datasets import Datasets, LogicalHasher, Version, canonical_type, projection
from node.datasets.chain import build_version
from node.datasets.slices import read_slice
from node.errors import BlockMissing as Missing
from node.errors import CairnError, InvalidInput, KuboError, KuboUnreachable, NotFound
from node.identity import public_key_from_did
from node.index import Index
from node.ipfs import KuboClient
from node.ipfs.unixfs import UnixfsHasher
from node.model import (
    CID,
    Announcement,
    Execution,
    InputIdentity,
    Invocation,
    MetadataBlock,
    Query,
    Receipt,
    RecursiveDataEnvelope,
    Structure,
    block_of,
    cid_str,
    parse_cid,
)
from node.provenance.lineage import UNIXFS_CODECS, Fetcher, LineageWalk
from node.resolve.claims import bytecode_of
from node.resolve.resolver import ENGINE_HANDLE

OK, FAILED, UNCHECKED = "ok", "failed", "unchecked"


@dataclass
class Check:
    name: str
    subject: str  # the CID the check is about
    status: str  # OK, FAILED or UNCHECKED
    detail: str = ""
    expected: Any = None
    got: Any = None

    def to_json(self) -> dict[str, Any]:
        out = {"check": self.name, "subject": self.subject, "status": self.status, "detail": self.detail}
        if self.status == FAILED and (self.expected is not None or self.got is not None):
            out |= {"expected": self.expected, "got": self.got}
        return out


class Report:
    def __init__(self) -> None:
        self.checks: list[Check] = []

    def add(
        self, name: str, subject: CID | str, status: str, detail: str = "", expected: Any = None, got: Any = None
    ) -> None:
        self.checks.append(
            Check(name, str(subject) if isinstance(subject, str) else cid_str(subject), status, detail, expected, got)
        )

    def compare(self, name: str, subject: CID, expected: Any, got: Any, detail: str = "") -> bool:
        same = expected == got
        self.add(name, subject, OK if same else FAILED, detail, expected, got)
        return same


def summary(checks: list[dict[str, Any]]) -> dict[str, int]:
    return {s: sum(1 for c in checks if c["status"] == s) for s in (OK, FAILED, UNCHECKED)}


class OfflineVerify:
    def __init__(self, kubo: KuboClient, datasets: Datasets, index: Index, lineage: dict[str, Any]) -> None:
        self.kubo, self.datasets, self.index = kubo, datasets, index
        self.lineage = lineage  # max_nodes, timeout: the bounds of the walk --recursive takes
        self.fetch = Fetcher(kubo, 0.0, offline=True, deadline=float("inf"))

    async def verify(self, ref: str, recursive: bool = False) -> dict[str, Any]:
        receipt = await self._receipt_of(ref)
        receipts = [receipt]
        if recursive:
            walk = LineageWalk(self.kubo, self.datasets, self.index, offline=True, fetch_timeout=0.0, **self.lineage)
            graph = await walk.walk(cid_str(receipt))
            receipts += [parse_cid(n["cid"]) for n in graph["nodes"] if n["kind"] == "receipt"]
        done: dict[str, dict[str, Any]] = {}
        for rc in receipts:
            if cid_str(rc) not in done:
                report = Report()
                await self._receipt(rc, report)
                checks = [c.to_json() for c in report.checks]
                done[cid_str(rc)] = {"receipt": cid_str(rc), "checks": checks, "summary": summary(checks)}
        steps = list(done.values())
        every = [c for s in steps for c in s["checks"]]
        total = summary(every)
        return {
            "cid": ref.strip(),
            "offline": True,
            "recursive": recursive,
            "ok": total[FAILED] == 0 and total[UNCHECKED] == 0,
            "summary": total,
            "executions": steps,
        }

    async def _receipt_of(self, ref: str) -> CID:
        """The receipt a CID leads to (an ex_0, iv_0 or slice through the index; an an_0 names it)."""
        try:
            cid = parse_cid(ref.strip())
        except CairnError:
            raise InvalidInput(
                f"not a CID: {ref.strip()[:80]!r} (verify takes a receipt, execution or slice CID)"
            ) from None
        if cid.codec.name in UNIXFS_CODECS:
            rows = self.index.executions_with_slice(cid_str(cid))
            if not rows:
                raise NotFound(f"no execution of this node's index lists the slice {cid_str(cid)}")
            return parse_cid(rows[0].receipt)
        try:
            obj = await self.fetch.obj(cid)
        except Missing as e:
            raise NotFound(f"{cid_str(cid)}: {e.message}") from None
        if isinstance(obj, Receipt):
            return cid
        if isinstance(obj, Announcement):
            return obj.receipt
        row = None
        if isinstance(obj, Execution):
            row = self.index.executions_by_cid(cid_str(cid))
        elif isinstance(obj, Invocation):
            row = self.index.execution(cid_str(cid))
        if row is not None:
            return parse_cid(row.receipt)
        raise InvalidInput(f"{cid_str(cid)} is not a receipt, or an execution, invocation or slice with one here")

    async def _receipt(self, cid: CID, r: Report) -> None:
        try:
            rc = await self.fetch.obj(cid)
        except Missing as e:
            r.add("receipt held", cid, UNCHECKED, e.message)
            return
        if not isinstance(rc, Receipt):
            r.add("receipt", cid, FAILED, "not an rc_0")
            return
        r.add("block hash", cid, OK, "receipt block re-hashed against its CID")
        try:
            rc.verify(public_key_from_did(rc.signer))
            r.add("receipt signature", cid, OK, f"signed by {rc.signer}")
        except CairnError as e:
            r.add("receipt signature", cid, FAILED, e.message)
        # Each part on its own: a block this node lacks leaves that part unchecked, not the others.
        for step in (self._execution, self._question, self._output, self._profile):
            try:
                await step(rc, r)
            except Missing as e:
                r.add("block held", e.cid, UNCHECKED, e.message)
            except KuboUnreachable:
                raise
            except CairnError as e:  # a malformed object the receipt links to: the receipt's claim fails
                r.add("object", cid, FAILED, e.message)

    async def _profile(self, rc: Receipt, r: Report) -> None:
        if rc.profile is None:
            r.add("engine profile", rc.execution, UNCHECKED, "the receipt names no ep_0 (written before profiles)")
            return
        await self.fetch.block(rc.profile)
        r.add("block hash", rc.profile, OK, "engine profile (ep_0) held and re-hashed")

    async def _ex(self, rc: Receipt) -> Execution:
        ex = await self.fetch.obj(rc.execution)
        if not isinstance(ex, Execution):
            raise InvalidInput(f"the receipt's execution {cid_str(rc.execution)} is not an ex_0")
        return ex

    async def _execution(self, rc: Receipt, r: Report) -> None:
        ex = await self._ex(rc)
        r.add("block hash", rc.execution, OK, "execution block re-hashed against its CID")
        r.compare("execution succeeded", rc.execution, False, ex.exit_status, "exitStatus")

    async def _question(self, rc: Receipt, r: Report) -> None:
        """The execution answers the invocation's query over the invocation's inputs."""
        ex = await self._ex(rc)
        iv = await self.fetch.obj(rc.invocation)
        qy = await self.fetch.obj(iv.query) if isinstance(iv, Invocation) else None
        if not isinstance(iv, Invocation) or not isinstance(qy, Query):
            r.add("invocation", rc.invocation, FAILED, "the receipt's invocation is not an iv_0 naming a qy_0")
            return
        want = bytecode_of(qy.statement)[1].cid
        r.compare("bytecode is the query's", rc.execution, cid_str(want), cid_str(ex.bytecode), "mbe_0 of qy_0")
        r.compare("engine handle", rc.execution, ENGINE_HANDLE, ex.handle)
        await self._inputs(rc, ex, iv, r)

    async def _inputs(self, rc: Receipt, ex: Execution, iv: Invocation, r: Report) -> None:
        lists = await self._lists(ex.input, rc.execution, "input")
        counts = (len(iv.inputs), len(rc.versions))
        if not r.compare("input count", rc.execution, counts, (len(lists), len(lists)), "(invocation, receipt)"):
            return
        for i, (lst, ident, head) in enumerate(zip(lists, iv.inputs, rc.versions)):
            version = await self._version(head, r)
            if version is None:
                continue
            if projection.is_changelog(version) and ident.structure != version.abstract_cid:  # read as its state
                await self._projected(i, lst, ident, head, version, r)
                continue
            slices = await self.fetch.links(lst)
            want = [cid_str(s.cid) for s in version.slices]
            r.compare(f"input {i} is the version's slices", lst, want, [cid_str(c) for c in slices])
            got = await self._identity(version, r)
            if got is None:
                continue
            structure = cid_str(version.abstract_cid) if version.abstract_cid else None
            r.compare(f"input {i} structure", head, cid_str(ident.structure), structure, "abstract st_0")
            r.compare(f"input {i} logical hash", head, ident.logical_hash, got[0], "recomputed from its Parquet data")
            r.compare(f"input {i} rows", head, ident.rows, got[1], "counted in its Parquet data")

    async def _projected(self, i: int, lst: CID, ident: InputIdentity, head: CID, version: Version, r: Report) -> None:
        """Input ``i`` read the state of a snapshot version "as at" its block (ODF "Projection";
        node/datasets/projection.py): the projection recomputed here from the version's slices (their bytes hashed
        here) must be the listed slices, whose held copies must give their CIDs, and the invocation's identity."""
        tables = [await self._slice(s.cid, r) for s in version.slices]
        if any(t is None for t in tables):
            return
        work = Path(tempfile.mkdtemp(prefix="result-verify-", dir=self.datasets.tmp_dir))
        try:
            want = await asyncio.to_thread(projection.expected, version, [t for t in tables if t is not None], work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        listed = await self.fetch.links(lst)
        what = "recomputed from the version's changelog"
        r.compare(
            f"input {i} is the projection of the version",
            lst,
            [cid_str(c) for c in want.slices],
            [cid_str(c) for c in listed],
            what,
        )
        for c in listed:
            await self._slice(c, r)  # a forged copy in this node's cache fails here
        r.compare(
            f"input {i} structure",
            head,
            cid_str(ident.structure),
            cid_str(want.structure),
            "abstract st_0 of the state",
        )
        r.compare(f"input {i} logical hash", head, ident.logical_hash, want.logical_hash, what)
        r.compare(f"input {i} rows", head, ident.rows, want.rows, what)

    async def _lists(self, env_cid: CID, ex: CID, what: str) -> list[CID]:
        env = await self.fetch.obj(env_cid)
        if not isinstance(env, RecursiveDataEnvelope):
            raise InvalidInput(f"execution {cid_str(ex)}: {what} is not an rde_0")
        return await self.fetch.links(env.content)

    async def _version(self, head: CID, r: Report) -> Version | None:
        """The version's chain, every block held here and signed by its dataset key (ODF Metadata Chain)."""
        blocks: list[tuple[CID, MetadataBlock]] = []
        structures: dict[CID, Structure] = {}
        cid: CID | None = head
        while cid is not None:
            block = await self.fetch.obj(cid)
            if not isinstance(block, MetadataBlock):
                r.add("dataset chain", head, FAILED, f"{cid_str(cid)} is not an mb_0")
                return None
            blocks.append((cid, block))
            if block.kind == "SetDataSchema":
                st = await self.fetch.obj(block.event["structure"])
                if isinstance(st, Structure):
                    structures[block.event["structure"]] = st
            cid = block.prev
        try:
            version = build_version(head, blocks, structures)
        except (CairnError, KeyError) as e:
            r.add("dataset chain signatures", head, FAILED, getattr(e, "message", str(e)))
            return None
        r.add("dataset chain signatures", head, OK, f"{len(blocks)} blocks signed by {version.dataset_id}")
        return version

    async def _identity(self, version: Version, r: Report) -> tuple[str, int] | None:
        """Logical hash and rows of the version's rows, as Datasets.tables gives them (older slices get nulls for
        columns added later), from slices whose bytes were hashed here."""
        tables = []
        for s in version.slices:
            table = await self._slice(s.cid, r)
            if table is None:
                return None
            own = LogicalHasher(table.schema)
            own.update(table)
            r.compare("slice logical hash", s.cid, s.logical_hash, str(own.finish()), "as its AddData block says")
            tables.append(table)
        if not tables:
            return ("", 0)
        target = tables[-1].schema
        hasher = LogicalHasher(target)
        for t in tables:
            if t.schema.names != target.names:
                cols = {
                    f.name: t.column(f.name) if f.name in t.schema.names else pa.nulls(t.num_rows, f.type)
                    for f in target
                }
                t = pa.table(cols, schema=target)
            await asyncio.to_thread(hasher.update, t)
        return str(hasher.finish()), hasher.rows

    async def _output(self, rc: Receipt, r: Report) -> None:
        ex = await self._ex(rc)
        if ex.output is None:
            r.add("output", rc.execution, FAILED, "the execution has no output")
            return
        slices = await self._lists(ex.output, rc.execution, "output")  # the rde_0 holds the slice list itself
        hasher: LogicalHasher | None = None
        for cid in slices:
            table = await self._slice(cid, r)
            if table is None:
                return
            structure = block_of(Structure("parquet", tuple((f.name, canonical_type(f.type)) for f in table.schema)))
            r.compare("output structure", cid, cid_str(rc.structure), cid_str(structure.cid), "the receipt's st_0")
            hasher = hasher or LogicalHasher(table.schema)
            await asyncio.to_thread(hasher.update, table)
        got = (str(hasher.finish()), hasher.rows) if hasher is not None else ("", 0)
        r.compare("output logical hash", rc.execution, rc.logical_hash, got[0], "recomputed from the output slices")
        r.compare("output rows", rc.execution, rc.rows, got[1], "counted in the output slices")

    async def _slice(self, cid: CID, r: Report) -> pa.Table | None:
        """A slice's rows from bytes hashed here: the cached copy if it gives the CID, else Kubo's (offline)."""
        cached = self.datasets.cache_dir / f"{cid_str(cid)}.parquet"
        if cached.exists():
            got = await self.datasets.file_cid(cached)
            if r.compare("cached copy gives its CID", cid, cid_str(cid), cid_str(got), "this node's slice cache"):
                return await self._read(cached, cid, r)
        try:
            path, got_cid = await self._from_kubo(cid)
        except KuboError as e:
            if isinstance(e, KuboUnreachable):
                raise
            r.add("slice held", cid, UNCHECKED, f"not held by this node ({e.message})")
            return None
        try:
            if not r.compare("slice bytes give its CID", cid, cid_str(cid), cid_str(got_cid)):
                return None
            return await self._read(path, cid, r)
        finally:
            path.unlink(missing_ok=True)

    @staticmethod
    async def _read(path: Path, cid: CID, r: Report) -> pa.Table | None:
        try:
            return await asyncio.to_thread(read_slice, path)
        except InvalidInput:  # pyarrow's text names the local file: not for the answer
            r.add(
                "slice reads as Parquet", cid, FAILED, "its bytes (which give its CID) are not a readable Parquet file"
            )
            return None

    async def _from_kubo(self, cid: CID) -> tuple[Path, CID]:
        """Kubo's bytes of the slice, offline, in a temporary file; and the CID they give (hashed as they come)."""
        fd, name = tempfile.mkstemp(prefix="result-verify-", suffix=".parquet", dir=self.datasets.tmp_dir)
        hasher = UnixfsHasher()
        try:
            with os.fdopen(fd, "wb") as f:
                async for chunk in self.kubo.cat(cid, offline=True, timeout=60.0):
                    f.write(chunk)
                    hasher.update(chunk)
        except BaseException:
            Path(name).unlink(missing_ok=True)  # noqa: ASYNC240  one local unlink on failure: no thread
            raise
        return Path(name), hasher.cid()
