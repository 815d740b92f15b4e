"""Offline verification: everything about a result that can be checked without computing it.

ODF "Verifiability" asks a reader to check a derivative's data against its metadata without trusting the
publisher; what only recomputing can show (that the rows are the query's answer) is out of reach offline and
is said so. Offline means no block and no slice is fetched from the network: the checks read a
:class:`BlockSource`, which is this node's Kubo (:class:`KuboSource`) or a proof's CAR file with no node at all
(``node.services.provenance.car_source``). The checks are the same over both.

For a receipt (``rc_0``; an ``ex_0``, ``iv_0``, ``an_0`` or output slice leads to one), each a check that is
``ok``, ``failed`` (with what was expected and what was found) or ``unchecked`` (with why):

* every block re-hashed against its CID (the source does it on read); the receipt's signature with the key
  its ``signer`` names;
* the execution succeeded and runs the bytecode of the invocation's canonical query (``mbe_0`` of the ``qy_0``
  statement, built here) with the engine's handle; the query's input structures are the invocation's;
* one input list per invocation input and per receipt version; each version's chain (every block's signature with
  its dataset key); the input list is that version's slices; the input's identity ``{structure, logicalHash,
  rows}`` (DESIGN.md "iv_0") recomputed from the version's Parquet data equals the invocation's; for an input that
  read a snapshot version's state (node/services/datasets/projection.py), the projection recomputed from the version's
  slices
  is the input list, and its identity the invocation's;
* the output slices' structure is the receipt's ``st_0``, and their logical hash and row count, recomputed from
  the Parquet data (node.services.datasets.logical_hash; docs/hashing.md), equal the receipt's;
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
from typing import Annotated, Any, Final, NotRequired, Protocol, TypedDict

import pyarrow as pa

from node.adapters.identity import public_key_from_did
from node.adapters.index import Index
from node.adapters.ipfs.unixfs import UnixfsHasher
from node.domain.model import (
    CID,
    Announcement,
    CidText,
    Execution,
    InputIdentity,
    Invocation,
    MetadataBlock,
    ModuleBytecodeEnvelope,
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
from node.domain.ports.block_store import BlockStore
from node.services.datasets import Datasets, LogicalHasher, Version, canonical_type, projection
from node.services.datasets.chain import build_version
from node.services.datasets.slices import read_slice
from node.services.provenance.lineage import UNIXFS_CODECS, Fetcher, LineageWalk
from node.services.resolve.claim_checks import bytecode_of
from node.services.resolve.resolver import ENGINE_HANDLE
from node.support.errors import BlockMissing as Missing
from node.support.errors import CairnError, InvalidInput, KuboError, KuboUnreachable, NotFound, ProofLacks

OK: Final = "ok"
FAILED: Final = "failed"
UNCHECKED: Final = "unchecked"


class CheckJson(TypedDict):
    check: str
    subject: str  # the CID the check is about
    status: Annotated[str, {"enum": [OK, FAILED, UNCHECKED]}]
    detail: str
    expected: NotRequired[Any]  # a failed comparison: what the object says
    got: NotRequired[Any]  # and what was found


class CheckCounts(TypedDict):
    ok: int
    failed: int
    unchecked: int


class ReceiptChecks(TypedDict):
    receipt: CidText
    checks: list[CheckJson]
    summary: CheckCounts


class Checked(TypedDict):
    """An offline verification: every check of every receipt, ok only when all are."""

    cid: str
    offline: bool
    recursive: bool
    ok: bool
    summary: CheckCounts
    executions: list[ReceiptChecks]


@dataclass
class Check:
    name: str
    subject: str  # the CID the check is about
    status: str  # OK, FAILED or UNCHECKED
    detail: str = ""
    expected: Any = None
    got: Any = None

    def to_json(self) -> CheckJson:
        out: CheckJson = {"check": self.name, "subject": self.subject, "status": self.status, "detail": self.detail}
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

    def step(self, receipt: str) -> ReceiptChecks:
        checks = [c.to_json() for c in self.checks]
        return {"receipt": receipt, "checks": checks, "summary": summary(checks)}


def summary(checks: list[CheckJson]) -> CheckCounts:
    def count(status: str) -> int:
        return sum(1 for c in checks if c["status"] == status)

    return {"ok": count(OK), "failed": count(FAILED), "unchecked": count(UNCHECKED)}


def answer(ref: str, steps: list[ReceiptChecks], recursive: bool) -> Checked:
    """The verify answer over the receipts' steps: ok only when every check of every step is ok."""
    total = summary([c for s in steps for c in s["checks"]])
    return {
        "cid": ref.strip(),
        "offline": True,
        "recursive": recursive,
        "ok": total[FAILED] == 0 and total[UNCHECKED] == 0,
        "summary": total,
        "executions": steps,
    }


class BlockSource(Protocol):
    """Where the checks read: ``block`` gives bytes already checked against the CID (else raises BlockMissing);
    ``table`` gives a slice's rows from bytes that gave its CID, or None after adding to ``r`` why not."""

    absent: str  # how a block or slice it lacks is described ("not held by this node")

    async def block(self, cid: CID) -> bytes: ...

    async def table(self, cid: CID, r: Report) -> pa.Table | None: ...


class KuboSource:
    """This node's Kubo, offline; a slice from this node's cache first (checked against its CID)."""

    absent = "not held by this node"

    def __init__(self, kubo: BlockStore, datasets: Datasets) -> None:
        self.kubo, self.datasets = kubo, datasets
        self.fetch = Fetcher(kubo, 0.0, offline=True, deadline=float("inf"))

    async def block(self, cid: CID) -> bytes:
        return await self.fetch.block(cid)

    async def table(self, cid: CID, r: Report) -> pa.Table | None:
        """A slice's rows from bytes hashed here: the cached copy if it gives the CID, else Kubo's (offline)."""
        cached = self.datasets.cache_dir / f"{cid_str(cid)}.parquet"
        if cached.exists():
            got = await self.datasets.file_cid(cached)
            if r.compare("cached copy gives its CID", cid, cid_str(cid), cid_str(got), "this node's slice cache"):
                return await read_table(cached, cid, r)
        try:
            path, got_cid = await self._from_kubo(cid)
        except KuboError as e:
            if isinstance(e, KuboUnreachable):
                raise
            r.add("slice held", cid, UNCHECKED, f"{self.absent} ({e.message})")
            return None
        try:
            if not r.compare("slice bytes give its CID", cid, cid_str(cid), cid_str(got_cid)):
                return None
            return await read_table(path, cid, r)
        finally:
            path.unlink(missing_ok=True)

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


async def read_table(path: Path, cid: CID, r: Report) -> pa.Table | None:
    try:
        return await asyncio.to_thread(read_slice, path)
    except InvalidInput:  # pyarrow's text names the local file: not for the answer
        r.add("slice reads as Parquet", cid, FAILED, "its bytes (which give its CID) are not a readable Parquet file")
        return None


class Checks:
    """The checks of one receipt over a block source (the same whether it is a node's Kubo or a proof file)."""

    def __init__(self, source: BlockSource) -> None:
        self.source = source

    async def obj(self, cid: CID) -> Any:
        return decode_object(decode(await self.source.block(cid), cid.codec.code))

    async def links(self, cid: CID) -> list[CID]:
        items = decode(await self.source.block(cid), cid.codec.code)
        if not isinstance(items, list) or not all(isinstance(c, CID) for c in items):
            raise InvalidInput(f"{cid_str(cid)} is not a list of links")
        return items

    async def receipt(self, cid: CID, r: Report) -> None:
        try:
            rc = await self.obj(cid)
        except Missing as e:
            r.add("receipt held", cid, UNCHECKED, e.message)
            return
        except CairnError as e:
            r.add("receipt", cid, FAILED, e.message)
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

    async def _held(self, cid: CID, r: Report, what: str) -> bytes:
        data = await self.source.block(cid)
        r.add("block hash", cid, OK, f"{what} held and re-hashed")
        return data

    async def _profile(self, rc: Receipt, r: Report) -> None:
        if rc.profile is None:
            r.add("engine profile", rc.execution, UNCHECKED, "the receipt names no ep_0 (written before profiles)")
            return
        await self._held(rc.profile, r, "engine profile (ep_0)")

    async def _ex(self, rc: Receipt) -> Execution:
        ex = await self.obj(rc.execution)
        if not isinstance(ex, Execution):
            raise InvalidInput(f"the receipt's execution {cid_str(rc.execution)} is not an ex_0")
        return ex

    async def _execution(self, rc: Receipt, r: Report) -> None:
        ex = await self._ex(rc)
        r.add("block hash", rc.execution, OK, "execution block re-hashed against its CID")
        if rc.failure is not None:  # a recorded failure (docs/queries.md "Recorded failures"): it must have failed
            r.compare("execution failed, as its receipt records", rc.execution, True, ex.exit_status, "exitStatus")
            return
        r.compare("execution succeeded", rc.execution, False, ex.exit_status, "exitStatus")

    async def _question(self, rc: Receipt, r: Report) -> None:
        """The execution answers the invocation's query over the invocation's inputs."""
        ex = await self._ex(rc)
        iv = await self.obj(rc.invocation)
        qy = await self.obj(iv.query) if isinstance(iv, Invocation) else None
        if not isinstance(iv, Invocation) or not isinstance(qy, Query):
            r.add("invocation", rc.invocation, FAILED, "the receipt's invocation is not an iv_0 naming a qy_0")
            return
        mbe = bytecode_of(qy.statement)[1]
        r.compare("bytecode is the query's", rc.execution, cid_str(mbe.cid), cid_str(ex.bytecode), "mbe_0 of qy_0")
        r.compare("engine handle", rc.execution, ENGINE_HANDLE, ex.handle)
        await self._bytecode(ex.bytecode, r)
        r.compare(
            "query inputs are the invocation's",
            rc.invocation,
            [cid_str(i.structure) for i in iv.inputs],
            [cid_str(c) for c in qy.inputs],
            "abstract st_0 of each input",
        )
        for st in dict.fromkeys(qy.inputs):
            await self._held(st, r, "query input structure (st_0)")
        await self._inputs(rc, ex, iv, r)

    async def _bytecode(self, cid: CID, r: Report) -> None:
        """The bytecode's blocks, when the source has them: their CID was just compared with the one built here
        from the query, so a source without them (a node that took a peer's answer) loses no check."""
        try:
            data = await self._held(cid, r, "bytecode envelope (mbe_0)")
        except (Missing, ProofLacks):
            return
        env = decode_object(decode(data, cid.codec.code))
        if isinstance(env, ModuleBytecodeEnvelope):  # held, then whole: its SQL leaf too
            await self._held(env.content, r, "bytecode (the canonical SQL)")

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
            slices = await self.links(lst)
            want = [cid_str(s.cid) for s in version.slices]
            r.compare(f"input {i} is the version's slices", lst, want, [cid_str(c) for c in slices])
            got = await self._identity(version, r)
            structure = cid_str(version.abstract_cid) if version.abstract_cid else None
            r.compare(f"input {i} structure", head, cid_str(ident.structure), structure, "abstract st_0")
            if got is None:
                why = f"a slice of the version is {self.source.absent}"
                r.add(f"input {i} logical hash", head, UNCHECKED, why)
                r.add(f"input {i} rows", head, UNCHECKED, why)
                continue
            r.compare(f"input {i} logical hash", head, ident.logical_hash, got[0], "recomputed from its Parquet data")
            r.compare(f"input {i} rows", head, ident.rows, got[1], "counted in its Parquet data")

    async def _projected(self, i: int, lst: CID, ident: InputIdentity, head: CID, version: Version, r: Report) -> None:
        """Input ``i`` read the state of a snapshot version "as at" its block (ODF "Projection";
        node/services/datasets/projection.py): the projection recomputed here from the version's slices (their bytes
        hashed
        here) must be the listed slices, whose held copies must give their CIDs, and the invocation's identity."""
        tables = [await self.source.table(s.cid, r) for s in version.slices]
        if any(t is None for t in tables):
            return
        work = Path(tempfile.mkdtemp(prefix="cairn-verify-"))  # no node's tmp dir when checking a proof file
        try:
            want = await asyncio.to_thread(projection.expected, version, [t for t in tables if t is not None], work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        listed = await self.links(lst)
        what = "recomputed from the version's changelog"
        got = [cid_str(c) for c in listed]
        r.compare(f"input {i} is the projection of the version", lst, [cid_str(c) for c in want.slices], got, what)
        for c in listed:
            await self.source.table(c, r)  # a forged copy in this node's cache fails here
        r.compare(f"input {i} structure", head, cid_str(ident.structure), cid_str(want.structure), "of the state")
        r.compare(f"input {i} logical hash", head, ident.logical_hash, want.logical_hash, what)
        r.compare(f"input {i} rows", head, ident.rows, want.rows, what)

    async def _lists(self, env_cid: CID, ex: CID, what: str) -> list[CID]:
        env = await self.obj(env_cid)
        if not isinstance(env, RecursiveDataEnvelope):
            raise InvalidInput(f"execution {cid_str(ex)}: {what} is not an rde_0")
        return await self.links(env.content)

    async def _version(self, head: CID, r: Report) -> Version | None:
        """The version's chain, every block held here and signed by its dataset key (ODF Metadata Chain)."""
        blocks: list[tuple[CID, MetadataBlock]] = []
        structures: dict[CID, Structure] = {}
        cid: CID | None = head
        while cid is not None:
            block = await self.obj(cid)
            if not isinstance(block, MetadataBlock):
                r.add("dataset chain", head, FAILED, f"{cid_str(cid)} is not an mb_0")
                return None
            blocks.append((cid, block))
            if block.kind == "SetDataSchema":
                st = await self.obj(block.event["structure"])
                if isinstance(st, Structure):
                    structures[block.event["structure"]] = st
                if isinstance(block.event.get("abstract"), CID):
                    await self.source.block(block.event["abstract"])
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
        columns added later), from slices whose bytes were hashed here; None when a slice could not be read."""
        tables = []
        for s in version.slices:  # every slice, so that each one the source lacks is said
            table = await self.source.table(s.cid, r)
            if table is None:
                continue
            own = LogicalHasher(table.schema)
            own.update(table)
            r.compare("slice logical hash", s.cid, s.logical_hash, str(own.finish()), "as its AddData block says")
            tables.append(table)
        if len(tables) < len(version.slices):
            return None
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
        if rc.failure is not None and ex.output is None:  # a recorded failure has no output to hash
            r.add("output", rc.execution, OK, f"none: the execution failed with {rc.failure.error_class}")
            return
        if ex.output is None:
            r.add("output", rc.execution, FAILED, "the execution has no output")
            return
        await self._held(rc.structure, r, "the receipt's structure (st_0)")
        slices = await self._lists(ex.output, rc.execution, "output")  # the rde_0 holds the slice list itself
        hasher: LogicalHasher | None = None
        whole = True
        for cid in slices:  # every slice, so that each one the source lacks is said
            table = await self.source.table(cid, r)
            if table is None:
                whole = False
                continue
            structure = block_of(Structure("parquet", tuple((f.name, canonical_type(f.type)) for f in table.schema)))
            r.compare("output structure", cid, cid_str(rc.structure), cid_str(structure.cid), "the receipt's st_0")
            hasher = hasher or LogicalHasher(table.schema)
            await asyncio.to_thread(hasher.update, table)
        if not whole:
            why = f"an output slice is {self.source.absent}"
            r.add("output logical hash", rc.execution, UNCHECKED, why)
            r.add("output rows", rc.execution, UNCHECKED, why)
            return
        got = (str(hasher.finish()), hasher.rows) if hasher is not None else ("", 0)
        r.compare("output logical hash", rc.execution, rc.logical_hash, got[0], "recomputed from the output slices")
        r.compare("output rows", rc.execution, rc.rows, got[1], "counted in the output slices")


class OfflineVerify(Checks):
    """The checks over this node's Kubo; a ref that is not a receipt is led to one through the index."""

    def __init__(self, kubo: BlockStore, datasets: Datasets, index: Index, lineage: dict[str, Any]) -> None:
        source = KuboSource(kubo, datasets)
        super().__init__(source)
        self.kubo, self.datasets, self.index = kubo, datasets, index
        self.lineage = lineage  # max_nodes, timeout: the bounds of the walk --recursive takes
        self.fetch = source.fetch

    async def verify(self, ref: str, recursive: bool = False) -> Checked:
        receipt = await self.receipt_of(ref)
        receipts = [receipt]
        if recursive:
            walk = LineageWalk(self.kubo, self.datasets, self.index, offline=True, fetch_timeout=0.0, **self.lineage)
            graph = await walk.walk(cid_str(receipt))
            receipts += [parse_cid(n["cid"]) for n in graph["nodes"] if n["kind"] == "receipt" and n["cid"]]
        done: dict[str, ReceiptChecks] = {}
        for rc in receipts:
            if cid_str(rc) not in done:
                report = Report()
                await self.receipt(rc, report)
                done[cid_str(rc)] = report.step(cid_str(rc))
        return answer(ref, list(done.values()), recursive)

    async def receipt_of(self, ref: str) -> CID:
        """The receipt a CID leads to (an ex_0, iv_0 or slice through the index; an an_0 names it)."""
        try:
            cid = parse_cid(ref.strip())
        except CairnError:
            raise InvalidInput(
                f"not a CID: {ref.strip()[:80]!r} (verify takes a receipt, execution or slice CID)"
            ) from None
        if cid.codec.name in UNIXFS_CODECS:
            rows = self.index.results.executions_with_slice(cid_str(cid))
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
            row = self.index.results.executions_by_cid(cid_str(cid))
        elif isinstance(obj, Invocation):
            row = self.index.results.execution(cid_str(cid))
        if row is not None:
            return parse_cid(row.receipt)
        raise InvalidInput(f"{cid_str(cid)} is not a receipt, or an execution, invocation or slice with one here")

    # The names before the checks took a block source (other modules may still call them)
    _receipt_of = receipt_of
    _receipt = Checks.receipt
    _read = staticmethod(read_table)

    async def _slice(self, cid: CID, r: Report) -> pa.Table | None:
        return await self.source.table(cid, r)

    async def _from_kubo(self, cid: CID) -> tuple[Path, CID]:
        return await KuboSource(self.kubo, self.datasets)._from_kubo(cid)
