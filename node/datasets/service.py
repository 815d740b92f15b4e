"""Datasets: ingest into slices and a signed metadata chain, resolve references, read versions.

The head of a dataset moves only after every slice and block is stored in Kubo and pinned
(recursively, from the new head): a failure anywhere before leaves the previous head intact and
nothing half-published visible.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node import clock, identity
from node.datasets import merge as merging
from node.datasets import projection as projecting
from node.datasets.chain import SliceRef, Version, appends, build_version
from node.datasets.fetching import SliceVisit, fetch_file, scan_slices
from node.datasets.logical_hash import LogicalHasher, canonical_type
from node.datasets.readers import Input, InputLimits, ReadOptions, open_input
from node.datasets.slices import (
    iter_slices,
    read_slice,
    read_slice_head,
    slice_schema,
    take_canonical,
    write_parquet_slice,
)
from node.errors import (
    CairnError,
    Conflict,
    InsufficientStorage,
    InvalidInput,
    InvalidObject,
    KuboError,
    NotFound,
    SchemaChangeRefused,
    did_you_mean,
    quote,
)
from node.index import DatasetRow, Index
from node.ipfs import KuboClient
from node.ipfs.client import CHUNK_SIZE
from node.ipfs.client import AddResult as AddedFile
from node.ipfs.unixfs import bytes_cid, file_cid
from node.model import CID, Block, MetadataBlock, Structure, block_of, cid_str, decode, decode_object, parse_cid
from node.model.names import check_dataset_name

log = logging.getLogger("cairn.datasets")

DEFAULT_ROWS_PER_SLICE = 1 << 20
_MEMO_VERSIONS = 256  # versions kept built (see DatasetService.version)
KEPT_HASHERS = 8  # versions whose logical hasher is kept for appends to resume from (a few KiB each)
Progress = Callable[[int, int], None]  # (bytes read, rows read)


@dataclass(frozen=True)
class AddResult:
    name: str
    dataset_id: str
    head: CID
    previous: CID | None
    rows_read: int
    rows_added: int
    slices: list[SliceRef]
    schema_changed: bool


def _structure(schema: pa.Schema) -> Structure:
    return Structure("parquet", tuple((f.name, canonical_type(f.type)) for f in schema))


def evolve(old: Structure, new: pa.Schema) -> list[str]:
    """Column order for new data under an existing structure; refuses all but added columns."""
    new_types = {f.name: canonical_type(f.type) for f in new}
    for name, typ in old.schema:
        if name not in new_types:
            raise SchemaChangeRefused(
                f"schema change refused: column {name!r} is missing (only adding columns is allowed)"
            )
        if new_types[name] != typ:
            raise SchemaChangeRefused(
                f"schema change refused: column {name!r} would change type "
                f"{typ} -> {new_types[name]} (only adding columns is allowed)"
            )
    known = set(old.names)  # a set: 10,000 columns checked against a list was 10^8 comparisons
    return old.names + [n for n in new.names if n not in known]


@dataclass
class _Ingest:
    """What one read of a source gave: slices stored in Kubo (not pinned yet) and the facts about them."""

    structure: Structure
    start: int  # the dataset's row count before this ingest: the first new row's offset
    total: LogicalHasher
    offset: int = field(init=False)  # the next row's offset
    slices: list[SliceRef] = field(default_factory=list)
    files: list[tuple[Path, CID]] = field(default_factory=list)
    event_max: list[Any] = field(default_factory=list)  # each batch's latest event time
    rows_read: int = 0

    def __post_init__(self) -> None:
        self.offset = self.start

    @property
    def added_rows(self) -> int:
        return self.offset - self.start


@dataclass(frozen=True)
class _Signer:
    """The key a dataset's chain is signed with, and the block the next one follows."""

    key: Ed25519PrivateKey
    did: str
    key_name: str
    ipns: str | None
    prev: CID | None
    seq: int


def _merged_batches(
    inp: Input, old: Version | None, strategy: str, pk: list[str], prior_tables: list[pa.Table]
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The input's batches in the dataset's column order, through the merge strategy, and their schema."""
    schema = inp.schema
    merging.check_primary_key(schema, strategy, pk)
    user_struct = old.structure if old and old.structure else None
    if user_struct is not None and strategy == "snapshot":
        user_struct = Structure(user_struct.format, user_struct.schema[1:])  # without op
    order = evolve(user_struct, schema) if user_struct else schema.names
    schema = pa.schema([schema.field(n) for n in order])
    batches: Iterator[pa.RecordBatch] = (b.select(order) for b in inp.batches)
    if strategy == "ledger":
        seen = {k for t in prior_tables for k in merging._keys(t, pk)}
        batches = merging.ledger(batches, pk, seen)
    elif strategy == "snapshot":
        state = merging.fold_state(prior_tables, pk)
        batches = merging.snapshot(batches, schema, pk, state)
        schema = merging.with_op(schema)
    return schema, batches


def _prepared(
    inp: Input, old: Version | None, strategy: str, pk: list[str], prior_tables: list[pa.Table]
) -> tuple[pa.Schema, Iterator[pa.RecordBatch], _Ingest]:
    """The merged batches, their schema and the ingest's record (structure, hasher): schema-wide work, run on a
    thread (10,000 columns took the event loop for seconds)."""
    schema, batches = _merged_batches(inp, old, strategy, pk, prior_tables)
    return schema, batches, _Ingest(_structure(schema), old.rows if old else 0, LogicalHasher(schema))


def _tracked(
    batches: Iterator[pa.RecordBatch],
    inp: Input,
    event_time: str | None,
    progress: Progress | None,
    event_max: list[Any],
) -> Iterator[pa.RecordBatch]:
    """The batches unchanged, noting each one's latest event time and reporting progress as they pass."""
    for b in batches:
        if event_time and b.num_rows:
            event_max.append(pc.max(b.column(event_time)).as_py())
        if progress:
            progress(inp.bytes_read, inp.rows_read)
        yield b


def _schema_blocks(
    structure: Structure, events: list[dict[str, Any]], known: dict[CID, Structure] | None = None
) -> list[Block]:
    """The structure's blocks (concrete and abstract); appends the SetDataSchema event naming them, and puts both
    structures in ``known`` by CID."""
    abstract = structure.abstract()
    st_block, abs_block = block_of(structure), block_of(abstract)
    events.append({"kind": "SetDataSchema", "structure": st_block.cid, "abstract": abs_block.cid})
    if known is not None:
        known.update({st_block.cid: structure, abs_block.cid: abstract})
    return [st_block, abs_block]


def _add_data_event(got: _Ingest, strategy: str, pk: list[str]) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "kind": "AddData",
        "slices": [{"data": s.cid, "rows": s.rows, "size": s.size, "logicalHash": s.logical_hash} for s in got.slices],
        "offsets": [got.start, got.offset - 1],
        "rows": got.added_rows,
        "logicalHash": str(got.total.finish()),
        "merge": {"strategy": strategy, "primaryKey": pk},
    }
    if got.event_max and any(v is not None for v in got.event_max):
        ev["eventTime"] = max(v for v in got.event_max if v is not None).isoformat()
    return ev


# Work directories under $CAIRN_HOME/tmp that a killed node leaves behind, swept at start:
# ingest-*, pull-* (datasets), inputs-*, result-* (queries), and upload-* (an upload's spool file, written by
# node/api/uploads.py; a node killed mid-ingest left it: tests/integration/test_faults.py). Nothing in them is
# needed after a restart.
TMP_PREFIXES = ("ingest-", "pull-", "inputs-", "result-", "upload-")


def sweep_tmp(tmp_dir: Path) -> int:
    """Remove what an earlier run of the node left in ``tmp_dir`` (called once, before anything runs)."""
    swept = 0
    for entry in tmp_dir.iterdir():
        if entry.name.startswith(TMP_PREFIXES):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            swept += 1
    if swept:
        log.info("swept %d leftover work directories from %s", swept, tmp_dir)
    return swept


@contextmanager
def _labelled(source: Any, label: str | None) -> Iterator[None]:
    """A file read under another name (an upload's spool file): its path never shows in an error, even inside a
    library's own text (pyarrow names the files it fails on)."""
    try:
        yield
    except CairnError as e:
        path = os.fspath(source) if label and isinstance(source, (str, os.PathLike)) else None
        if isinstance(path, str) and path in e.message:
            e.args = (e.message.replace(path, label or ""), *e.args[1:])
        raise


@contextmanager
def disk_full_is_507(what: str, tmp_dir: Path) -> Iterator[None]:
    """A full disk met by the work inside (its files cut under ``tmp_dir``, or Kubo storing them in its repo) is
    a clear 507 ``InsufficientStorage``, not a 500 or a 502; the caller removes its work files."""
    try:
        yield
    except (OSError, KuboError) as e:
        if InsufficientStorage.is_disk_full(e):
            where = "in Kubo's repo" if isinstance(e, KuboError) else f"under $CAIRN_HOME/{tmp_dir.name}"
            raise InsufficientStorage(what, where) from None
        raise


def bound_arrow_memory() -> None:
    """Make Arrow give freed memory back to the system at once (an ingest's RSS bounded by its slices, and flat
    whatever the input's size).

    With pyarrow's default pool (mimalloc) the node's peak during `scripts/bench/ingest.py` was 536 MB for 1 GB and
    605 MB for 4 GB of CSV; with jemalloc returning dirty pages at once, 491 and 495 MB. The price: ~12 % more CPU
    (the kernel zeroes each slice's pages again). Process-wide and idempotent; a pyarrow without jemalloc keeps its
    default."""
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(0)
    except (pa.ArrowNotImplementedError, NotImplementedError):  # pragma: no cover - built without jemalloc
        pass


class Datasets:
    def __init__(
        self,
        kubo: KuboClient,
        index: Index,
        home: Path,
        rows_per_slice: int = DEFAULT_ROWS_PER_SLICE,
        limits: InputLimits | None = None,
    ) -> None:
        """``limits``: the caps every ingest's input is read under (its spool directory and stop signal are set
        per ingest); None: no caps."""
        bound_arrow_memory()
        self.limits = limits or InputLimits()
        self.kubo = kubo
        self.index = index
        self.keys_dir = home / "keys"
        self.cache_dir = home / "cache" / "slices"
        self.projections_dir = home / "cache" / "projections"  # HEAD.json: the state of a snapshot version
        self.tmp_dir = home / "tmp"
        for d in (self.keys_dir, self.cache_dir, self.projections_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)
        sweep_tmp(self.tmp_dir)
        self.rows_per_slice = rows_per_slice
        self._locks: dict[str, asyncio.Lock] = {}
        self._blocks: dict[CID, MetadataBlock] = {}  # immutable: a cache never goes stale
        self._structures: dict[CID, Structure] = {}
        # Versions built from a head (a head names its whole chain, so a version never changes). Every query,
        # hits included, resolved its inputs by rebuilding them: every block's signature checked again.
        self._versions: OrderedDict[CID, Version] = OrderedDict()
        self._building: dict[CID, asyncio.Future[Version]] = {}
        self._hashing: dict[str, tuple[asyncio.Future[tuple[str, int]], int]] = {}  # version hashes running, askers
        self._projections: OrderedDict[CID, projecting.Projection] = OrderedDict()  # same bound as versions
        # head → the logical hasher after its rows: a version that appends to it resumes from there (else a 1 %
        # append to 10 M rows hashes all 10 M again before its first query can be answered)
        self._hashers: OrderedDict[str, LogicalHasher] = OrderedDict()

    # -- objects ------------------------------------------------------------------------------

    async def _put(self, block: Block) -> None:
        await self.kubo.block_put(block.data, codec=block.cid.codec.name)

    async def _get_object(self, cid: CID, timeout: float | None = None) -> Any:
        data = await self.kubo.block_get(cid, timeout=timeout)  # verified against the CID by the client
        return decode_object(decode(data))

    async def block(self, cid: CID, timeout: float | None = None) -> MetadataBlock:
        if cid not in self._blocks:
            obj = await self._get_object(cid, timeout)
            if not isinstance(obj, MetadataBlock):
                raise InvalidInput(f"{cid} is not a dataset metadata block (mb_0)")
            self._blocks[cid] = obj
        return self._blocks[cid]

    async def structure(self, cid: CID, timeout: float | None = None) -> Structure:
        if cid not in self._structures:
            obj = await self._get_object(cid, timeout)
            if not isinstance(obj, Structure):
                raise InvalidObject(f"{cid} is not a structure (st_0)")
            self._structures[cid] = obj
        return self._structures[cid]

    def remember(self, blocks: Iterable[tuple[CID, MetadataBlock]], structures: Mapping[CID, Structure]) -> None:
        """Cache objects checked elsewhere (a pull verified every one against its CID), so reading the
        version does not fetch them again."""
        self._blocks.update(blocks)
        self._structures.update(structures)

    async def version(self, head: CID, timeout: float | None = None) -> Version:
        """The checked version whose head is ``head`` (remembered: the last ``_MEMO_VERSIONS`` built)."""
        v = self._versions.get(head)
        while v is None:
            # One build per head even when callers overlap (a hit and a background announce after an ingest):
            # later callers await the first one's build, and build again only if that caller was cancelled.
            pending = self._building.get(head)
            if pending is not None:
                await asyncio.wait([pending])
                if not pending.cancelled():
                    return pending.result()
                v = self._versions.get(head)
                continue
            v = await self._build_once(head, timeout)
        self._versions.move_to_end(head)
        return v

    async def _build_once(self, head: CID, timeout: float | None) -> Version:
        fut: asyncio.Future[Version] = asyncio.get_running_loop().create_future()
        self._building[head] = fut
        try:
            v = await self._build_version(head, timeout)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as e:
            fut.set_exception(e)
            fut.exception()  # marked retrieved: this caller raises it, any waiter gets it too
            raise
        finally:
            del self._building[head]
        fut.set_result(v)
        self._versions[head] = v
        while len(self._versions) > _MEMO_VERSIONS:
            self._versions.popitem(last=False)
        return v

    async def _build_version(self, head: CID, timeout: float | None) -> Version:
        blocks: list[tuple[CID, MetadataBlock]] = []
        cid: CID | None = head
        while cid is not None:
            b = await self.block(cid, timeout)
            blocks.append((cid, b))
            cid = b.prev
        structures = {}
        for _, b in blocks:
            if b.kind == "SetDataSchema":
                structures[b.event["structure"]] = await self.structure(b.event["structure"], timeout)
        return build_version(head, blocks, structures)

    # -- references ---------------------------------------------------------------------------

    async def resolve(self, ref: str) -> tuple[DatasetRow | None, Version]:
        """A name, a dataset id (did:key) or a block CID (a frozen version) → its version; any of them followed by
        ``@BLOCKCID`` (a block of that dataset's chain) or ``@-N`` (N data versions back) → that earlier version."""
        if "@" in ref and self.index.dataset(ref) is None:  # a name may hold '@': the whole name comes first
            base, _, when = ref.rpartition("@")
            row, now = await self._resolve_now(base)
            return row, await self._as_of(base, now, when)
        return await self._resolve_now(ref)

    async def input(self, ref: str) -> Version:
        """What a query reads for ``ref``: its version, or for a snapshot dataset the state "as at" it (ODF
        "Projection"; node/datasets/projection.py); ``REF/changelog`` is the raw changelog (no name holds '/')."""
        if ref.endswith(projecting.CHANGELOG):
            return (await self.resolve(ref.removesuffix(projecting.CHANGELOG)))[1]
        return await self.as_input((await self.resolve(ref))[1])

    async def as_input(self, v: Version) -> Version:
        """``v`` as a query reads it by default: a changelog (snapshot dataset) as its projected state."""
        return await self.projection(v) if projecting.is_changelog(v) else v

    async def projection(self, v: Version) -> projecting.Projection:
        """The state of the snapshot version ``v``, computed once per block: remembered here, and in
        ``cache/projections/HEAD.json`` across restarts while its slices are still in the slice cache."""
        async with self._lock("projection " + cid_str(v.head)):  # concurrent queries over a block: one fold
            p = self._projections.get(v.head) or await self._remembered(v)
            if p is None:
                p = await self._project(v)
                (self.projections_dir / f"{cid_str(v.head)}.json").write_text(projecting.to_json(p))
            self._projections[v.head] = p
            self._projections.move_to_end(v.head)
            while len(self._projections) > _MEMO_VERSIONS:
                self._projections.popitem(last=False)
            return p

    async def _remembered(self, v: Version) -> projecting.Projection | None:
        """A projection an earlier run made, its slices added to Kubo again from the slice cache (they were added
        unpinned: a GC may have dropped them since, and a receipt's recursive pin must find them here)."""
        path = self.projections_dir / f"{cid_str(v.head)}.json"
        p = projecting.from_json(v, path.read_text()) if path.exists() else None
        for s in p.slices if p is not None else []:
            cached = self.cache_dir / f"{cid_str(s.cid)}.parquet"
            if not cached.exists() or bytes((await self.kubo.add(cached, pin=False)).cid) != bytes(s.cid):
                return None  # a slice left the cache, or is not its CID's bytes: project again (the same bytes)
        return p

    async def _project(self, v: Version) -> projecting.Projection:
        """Fold the changelog into its state, write it as canonical slices, add them to Kubo (unpinned: an
        execution that reads them pins them with its input list) and keep them in the slice cache."""
        tables = [t async for t in self.tables(v)]
        work = Path(tempfile.mkdtemp(prefix="inputs-", dir=self.tmp_dir))
        try:
            with disk_full_is_507("projecting a snapshot version", self.tmp_dir):
                table = await asyncio.to_thread(projecting.state, tables, v.merge["primaryKey"])
                written = await asyncio.to_thread(projecting.write_state, table, work)
                slices, offset = [], 0
                for path, rows, lh in written.files:
                    added = await self.kubo.add(path, pin=False)
                    os.replace(path, self.cache_dir / f"{cid_str(added.cid)}.parquet")
                    slices.append(SliceRef(added.cid, rows, added.file_size, lh, offset))
                    offset += rows
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("projected a snapshot version", extra={"head": cid_str(v.head), "rows": written.rows})
        return projecting.build(v, slices, written.logical_hash, written.rows)

    async def _as_of(self, base: str, now: Version, when: str) -> Version:
        """``now``'s dataset as of ``when``: a block CID of its chain, or ``-N``, the version N AddData blocks back
        (each AddData block ends a version: the chain up to it; SetInfo and SetDataSchema blocks add no rows)."""
        if when.startswith("-") and when[1:].isdecimal() and when[1:].isascii():
            adds = [cid for cid, b in now.blocks if b.kind == "AddData"]  # newest first
            back = int(when[1:]) if len(when) < 20 else len(adds)  # int() refuses 4300+ digits: past the first
            if back == 0:
                return now
            if back >= len(adds):
                have = f"{len(adds)} version{'s' if len(adds) != 1 else ''}"
                raise NotFound(
                    f"{quote(base + '@' + when)} goes back before the first version of {quote(base)} ({have})"
                )
            return await self.version(adds[back])
        try:
            cid = parse_cid(when)
        except CairnError:
            raise InvalidInput(
                f"{quote(base + '@' + when)}: after '@' give a block CID of the dataset's chain or -N (N versions back)"
            ) from None
        if cid not in dict(now.blocks):
            raise NotFound(
                f"block {when} is not in the chain of dataset {quote(base)}: `cairn log {quote(base)}` lists it"
            )
        return await self.version(cid)

    async def _resolve_now(self, ref: str) -> tuple[DatasetRow | None, Version]:
        row = self.index.dataset(ref) if not ref.startswith("did:") else self.index.dataset_by_id(ref)
        if row is not None:
            return row, await self.version(parse_cid(row.head))
        if ref.startswith("did:"):
            raise NotFound(f"no dataset with id {ref} on this node")
        try:
            cid = parse_cid(ref)
        except CairnError:
            raise NotFound(f"no dataset named {ref!r} on this node{self.suggest(ref)}") from None
        v = await self.version(cid, timeout=30.0)
        return self.index.dataset_by_id(v.dataset_id), v

    def find_table(self, name: str) -> DatasetRow | None:
        """The dataset a query's table ``name`` names when no ``--input`` declares it. Spark's table names are
        case-insensitive: ``FROM Orders`` finds ``orders`` when no other name differs from it only in case."""
        row = self.index.dataset(name)
        if row is None:
            same = [r for r in self.index.datasets() if r.name.lower() == name.lower()]
            row = same[0] if len(same) == 1 else None
        return row

    def suggest(self, name: str) -> str:
        """`` (did you mean 'orders'?)`` when a dataset of this node has a name close to ``name``, else ``""``."""
        return did_you_mean(name, (row.name for row in self.index.datasets()))

    # -- ingest -------------------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _new_key(self) -> tuple[Ed25519PrivateKey, str, str, str | None]:
        ident = identity.generate()
        did = ident.node_key
        key_name = "cairn-" + did.removeprefix("did:key:")
        path = self.keys_dir / f"{key_name}.pem"
        identity.save(ident, path)
        ipns = await self.kubo.key_import(key_name, path.read_bytes())
        return ident.private_key, did, key_name, ipns

    def _load_key(self, key_name: str) -> Ed25519PrivateKey:
        return identity.load(self.keys_dir / f"{key_name}.pem").private_key

    async def add(
        self,
        source: str | Path | BinaryIO,
        *,
        name: str,
        create: bool,
        options: ReadOptions,
        strategy: str = "append",
        primary_key: list[str] | None = None,
        info: dict[str, Any] | None = None,
        progress: Progress | None = None,
        stop: threading.Event | None = None,
    ) -> AddResult:
        """Ingest ``source`` as a new dataset (``create``) or a new version of ``name``. ``stop``, once set (its
        client went away), ends the ingest at its next read or slice with ``IngestCancelled`` and nothing kept, up
        to its commit (storing and pinning the chain, moving the head), which then runs to its end."""
        if strategy not in ("append", "ledger", "snapshot"):
            raise InvalidInput(f"unknown merge strategy {strategy!r}: use append, ledger or snapshot")
        if create:  # a new name must be printable; an existing one is looked up as it is
            check_dataset_name(name)
        elif not name:
            raise InvalidInput("give the name of the dataset to append to")
        pk = list(primary_key or [])
        async with self._lock(name):
            row = self.index.dataset(name)
            if create and row is not None:
                raise InvalidInput(f"dataset {name!r} already exists: append with --to {name}")
            if not create and row is None:
                hint = self.suggest(name)
                raise NotFound(f"no dataset named {name!r}{hint}: create it with --name {name}")
            old = await self.version(parse_cid(row.head)) if row else None
            if old is not None and old.merge["strategy"] != strategy and old.rows:
                raise InvalidInput(f"dataset {name!r} merges with {old.merge['strategy']}, not {strategy}")
            work = Path(tempfile.mkdtemp(prefix="ingest-", dir=self.tmp_dir))
            # The caps, with this ingest's spool directory (its work directory, never the system temp dir) and stop.
            stopping = stop or threading.Event()
            limits = replace(self.limits, spool_dir=str(work), stop=stopping)
            try:
                with disk_full_is_507("the ingest", self.tmp_dir), _labelled(source, options.label):
                    return await self._add(source, name, row, old, options, strategy, pk, info, progress, limits, work)
            except asyncio.CancelledError:
                stopping.set()  # the reading threads end at their next read
                raise
            finally:
                shutil.rmtree(work, ignore_errors=True)

    async def _add(
        self,
        source: Any,
        name: str,
        row: DatasetRow | None,
        old: Version | None,
        options: ReadOptions,
        strategy: str,
        pk: list[str],
        info: dict[str, Any] | None,
        progress: Progress | None,
        limits: InputLimits,
        work: Path,
    ) -> AddResult:
        got = await self._read_source(source, old, options, strategy, pk, progress, limits, work)
        limits.check_stop(options.label or "the input")  # the last moment to stop: from here the commit runs through
        structure = got.structure
        if old is not None and got.added_rows == 0:
            # A column no row carries is not added: a schema changes with the first rows that have it,
            # so a version's last slice always holds every column (readers and the worker rely on it).
            structure = old.structure or structure
        if old is not None and got.added_rows == 0 and not info:
            # Nothing new (e.g. a ledger that had seen every row): the chain stays as it is.
            return AddResult(name, old.dataset_id, old.head, old.head, got.rows_read, 0, [], False)
        signer = await self._signer(row, old)
        schema_changed = old is None or old.structure != structure
        events = [] if old is not None else [{"kind": "Seed", "datasetId": signer.did, "datasetKind": "root"}]
        # Off the loop (10,000 columns: a second of encoding), and remembered: a version built from the new head
        # need not decode them again.
        known: dict[CID, Structure] = {}
        blocks = await asyncio.to_thread(_schema_blocks, structure, events, known) if schema_changed else []
        self._structures.update(known)
        if got.added_rows:
            events.append(_add_data_event(got, strategy, pk))
        if info:
            events.append({"kind": "SetInfo", **info})
        head = await self._store_chain(signer, blocks, events)
        await self._move_head(name, row, old, signer, head, got)
        previous = old.head if old else None
        return AddResult(name, signer.did, head, previous, got.rows_read, got.added_rows, got.slices, schema_changed)

    async def _read_source(
        self,
        source: Any,
        old: Version | None,
        options: ReadOptions,
        strategy: str,
        pk: list[str],
        progress: Progress | None,
        limits: InputLimits,
        work: Path,
    ) -> _Ingest:
        """Read the source through the merge strategy into slices stored (unpinned) in Kubo; ``work``: this ingest's
        work directory (``limits.spool_dir``), where its slices are written."""
        prior_tables = list(await self._prior_tables(old)) if old and strategy != "append" else []
        inp = await asyncio.to_thread(open_input, source, options, limits)
        try:
            schema, batches, got = await asyncio.to_thread(_prepared, inp, old, strategy, pk, prior_tables)
            tracked = _tracked(batches, inp, options.event_time, progress, got.event_max)
            await self._write_slices(tracked, schema, got, work)
            if progress:
                progress(inp.bytes_read, inp.rows_read)
            got.rows_read = inp.rows_read
        finally:
            inp.close()
        return got

    async def _write_slices(
        self, batches: Iterator[pa.RecordBatch], schema: pa.Schema, got: _Ingest, work: Path
    ) -> None:
        """Three stages overlap: the reader thread parses and cuts slice n+1, worker threads write and
        hash slice n, and Kubo adds slice n-1. Slices are written, added and listed in their order, so the bytes,
        the CIDs and the AddData event are those of one slice at a time. At most two slices are held in memory."""
        adding: asyncio.Future[tuple[AddedFile, Path, int, str]] | None = None
        try:
            async with _Prefetch(iter_slices(batches, schema, self.rows_per_slice)) as slices:
                n = 0
                while (holder := await slices.get()) is not None:
                    path = work / f"slice-{n}.parquet"
                    rows, lh = await _write_slice(holder, path, got.total)
                    slices.release()  # the slice's Arrow data is gone: the reader may start another
                    if adding is not None:
                        _record(got, *await adding)
                    adding = asyncio.ensure_future(self._add_file(path, rows, lh))
                    n += 1
            if adding is not None:
                _record(got, *await adding)
        finally:
            if adding is not None and not adding.done():
                adding.cancel()
                await asyncio.gather(adding, return_exceptions=True)

    async def _add_file(self, path: Path, rows: int, lh: str) -> tuple[AddedFile, Path, int, str]:
        return await self.kubo.add(path, pin=False), path, rows, lh

    async def _signer(self, row: DatasetRow | None, old: Version | None) -> _Signer:
        """The dataset's key and where its chain goes on: a new key and a new chain for a new dataset."""
        if row is None or old is None:  # `old` is read from `row`: both or neither
            key, did, key_name, ipns = await self._new_key()
            return _Signer(key, did, key_name, ipns, None, 0)
        return _Signer(self._load_key(row.key_name), old.dataset_id, row.key_name, row.ipns, old.head, old.seq + 1)

    async def _store_chain(
        self, signer: _Signer, blocks: list[Block], events: list[dict[str, Any]], shallow: list[CID] | None = None
    ) -> CID:
        """Sign `events` into metadata blocks after the signer's head, store them with `blocks`, pin the new head.
        ``shallow``: the version's slices, pinned with each block directly instead of the head recursively (a
        derivative version's AddData links the receipt that wrote it: a recursive pin would follow it into the
        producer's own datasets, which a node that took the answer from a peer need not hold)."""
        prev, seq = signer.prev, signer.seq
        chain: list[Block] = []
        for event in events:
            mb = MetadataBlock(prev, seq, clock.utc_now_iso(), event).signed(signer.key.sign)
            blk = block_of(mb)
            chain.append(blk)
            self._blocks[blk.cid] = mb
            prev, seq = blk.cid, seq + 1
        for blk in blocks + chain:
            await self._put(blk)
        head = chain[-1].cid
        if shallow is None:
            await self.kubo.pin_add(head, recursive=True)  # slices, structures and chain: all or nothing
            return head
        for cid in shallow:
            await self.kubo.pin_add(cid, recursive=True)
        for blk in blocks + chain:
            await self.kubo.pin_add(blk.cid, recursive=False)
        return head

    async def _move_head(
        self, name: str, row: DatasetRow | None, old: Version | None, signer: _Signer, head: CID, got: _Ingest
    ) -> None:
        if old is None or old.rows == 0:
            # The whole version is this ingest's rows: its logical hash is known now, not at the first query.
            self.index.set_version_facts(cid_str(head), str(got.total.finish()), got.total.rows)
            self._keep_hasher(head, got.total)
        # Everything is stored and pinned: now, and only now, the head moves.
        if row is None:
            self.index.create_dataset(name, signer.did, cid_str(head), signer.ipns, signer.key_name)
        elif not self.index.move_head(name, row.head, cid_str(head)):
            raise Conflict(f"dataset {name!r} moved while this ingest ran; nothing was changed")
        if old is not None:
            await self.kubo.pin_rm(old.head, recursive=True)  # covered by the new recursive pin
        for path, cid in got.files:  # keep the local copies: reads and queries need no round trip
            os.replace(path, self.cache_dir / f"{cid}.parquet")
        await self._publish(signer.key_name, head)

    async def _publish(self, key_name: str, head: CID) -> None:
        try:
            await self.kubo.name_publish(head, key=key_name, allow_offline=True)
        except CairnError as e:  # the local head is authoritative; IPNS is how others follow it
            log.warning("IPNS publish failed", extra={"key": key_name, "head": cid_str(head), "error": e.message})

    async def _prior_tables(self, old: Version | None) -> list[pa.Table]:
        return [t async for t in self.tables(old)] if old else []

    # -- derivative datasets (node.pipelines) ---------------------------------------------------

    async def derive(self, slices: list[CID], structure: Structure, receipt: CID, facts: tuple[str, int]) -> CID:
        """A derivative dataset whose one version holds an execution's output ``slices`` as they are (same CIDs,
        no copy), so a later step reads it as any version: Seed ``derivative``, SetDataSchema, and an AddData
        naming the ``receipt`` that wrote them (``transform``). Its key signs this chain once and is not kept (the
        chain is never extended); nothing is named in the index. ``facts``: the result's (logical hash, rows)."""
        refs: list[SliceRef] = []
        hasher: LogicalHasher | None = None
        for cid in slices:
            path = await self.cid_path(cid)
            table = await self.read_cid(cid)
            if table.num_rows == 0:  # an empty result's one slice carries its shape only: AddData holds rows
                continue
            hasher = hasher or LogicalHasher(table.schema)
            one = LogicalHasher(table.schema)
            await asyncio.to_thread(one.update, table)
            await asyncio.to_thread(hasher.update, table)
            offset = sum(r.rows for r in refs)
            refs.append(SliceRef(cid, table.num_rows, path.stat().st_size, str(one.finish()), offset))
        ident = identity.generate()
        events: list[dict[str, Any]] = [{"kind": "Seed", "datasetId": ident.node_key, "datasetKind": "derivative"}]
        blocks = _schema_blocks(structure, events)
        if refs and hasher is not None:
            rows = sum(r.rows for r in refs)
            listed = [{"data": r.cid, "rows": r.rows, "size": r.size, "logicalHash": r.logical_hash} for r in refs]
            events.append(
                {
                    "kind": "AddData",
                    "slices": listed,
                    "offsets": [0, rows - 1],
                    "rows": rows,
                    "logicalHash": str(hasher.finish()),
                    "merge": {"strategy": "append", "primaryKey": []},
                    "transform": receipt,
                }
            )
        signer = _Signer(ident.private_key, ident.node_key, "", None, None, 0)
        head = await self._store_chain(signer, blocks, events, shallow=[r.cid for r in refs])
        self.index.set_version_facts(cid_str(head), *facts)
        return head

    # -- reading ------------------------------------------------------------------------------

    async def slice_path(self, s: SliceRef, timeout: float | None = None) -> Path:
        """The slice as a local file, fetched from IPFS once (Kubo verifies every block it fetches)."""
        return await self.cid_path(s.cid, size=s.size or None, timeout=timeout)

    async def cid_path(self, cid: CID, *, size: int | None = None, timeout: float | None = None) -> Path:
        """The UnixFS file ``cid`` as a local file in the CID-keyed cache.

        The cache is trusted by name, so nothing enters it unhashed: each fetch writes its own temp file
        (concurrent fetches never share one), the bytes must give ``cid`` before the atomic rename, and a
        cancelled or failed fetch removes its temp. A cached file of the wrong size is re-fetched.
        """
        path = self.cache_dir / f"{cid_str(cid)}.parquet"
        if path.exists():
            if size is None or path.stat().st_size == size:
                return path
            log.warning("cached slice has the wrong size: fetching it again", extra={"cid": cid_str(cid)})
            path.unlink(missing_ok=True)
        return await fetch_file(self.kubo, cid, path, timeout=timeout)

    def cached(self, cid: CID) -> bool:
        """Whether the slice is in the CID-keyed cache (read without a fetch)."""
        return (self.cache_dir / f"{cid_str(cid)}.parquet").exists()

    async def cache_slice(self, cid: CID, data: bytes) -> None:
        """Cache a slice whose bytes are already here (a peer's lookup answer carried them): only if they are
        the whole file ``cid`` names (one UnixFS leaf, hashed here), so that nothing enters the cache unhashed."""
        path = self.cache_dir / f"{cid_str(cid)}.parquet"
        if path.exists() or len(data) > CHUNK_SIZE:
            return
        if bytes(bytes_cid(data)) != bytes(cid):
            return  # not this file's bytes: cid_path fetches it as usual

        def write() -> None:
            fd, name = tempfile.mkstemp(prefix=f"{cid_str(cid)}.", suffix=".part", dir=self.cache_dir)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(name, path)
            finally:
                Path(name).unlink(missing_ok=True)

        await asyncio.to_thread(write)

    async def scan_slices(
        self,
        cids: list[CID],
        visit: SliceVisit,
        *,
        timeout: float | None = None,
        done: Callable[[int], None] | None = None,
    ) -> None:
        """Every slice's rows, in order, to ``visit`` (on a worker thread): cached slices read from the cache,
        the others decoded while they are fetched into it (node/datasets/fetching.py)."""
        await scan_slices(
            self.kubo,
            self.cache_dir,
            cids,
            visit,
            lambda cid: self.read_cid(cid, timeout=timeout),
            timeout=timeout,
            done=done,
        )

    async def file_cid(self, path: Path) -> CID:
        """The UnixFS CID of a local file, as Kubo's add with Cairn's parameters gives it (node/ipfs/unixfs.py)."""

        return await asyncio.to_thread(file_cid, path)

    async def read_cid(self, cid: CID, *, size: int | None = None, timeout: float | None = None) -> pa.Table:
        """Read a cached slice; if it does not read as Parquet, re-hash the cached file (the suspicion), drop it
        if it is not ``cid``'s bytes, fetch it again and read once more."""
        path = await self.cid_path(cid, size=size, timeout=timeout)
        try:
            return await asyncio.to_thread(read_slice, path)
        except InvalidInput:
            if path.exists() and bytes(await self.file_cid(path)) == bytes(cid):
                raise  # the bytes are the CID's: the slice itself is not Parquet
            log.warning("cached slice was corrupt: fetching it again", extra={"cid": cid_str(cid)})
            path.unlink(missing_ok=True)
            return await asyncio.to_thread(read_slice, await self.cid_path(cid, size=size, timeout=timeout))

    async def head_cid(self, cid: CID, rows: int) -> pa.Table:
        """The first ``rows`` rows of a slice, decoding only the pages they are in; a cached file that does not
        read is handled as ``read_cid`` does."""
        path = await self.cid_path(cid)
        try:
            return await asyncio.to_thread(read_slice_head, path, rows)
        except InvalidInput:
            return (await self.read_cid(cid)).slice(0, max(rows, 0))

    async def version_schema(self, v: Version) -> pa.Schema:
        """The schema ``tables`` gives the version's rows (its last slice's, without metadata), read from that
        slice's Parquet footer alone; a version with no slices has no columns."""
        if not v.slices:
            return pa.schema([])
        last = v.slices[-1]
        path = await self.cid_path(last.cid, size=last.size or None)
        return (await asyncio.to_thread(slice_schema, path)).remove_metadata()

    async def tables(self, v: Version, only: list[SliceRef] | None = None) -> AsyncIterator[pa.Table]:
        """The version's rows, slice by slice (``only`` these of its slices); older slices get nulls for columns
        added later."""
        target: pa.Schema | None = None
        if v.slices:
            last = v.slices[-1]
            target = (await self.read_cid(last.cid, size=last.size or None)).schema
        for s in v.slices if only is None else only:
            t = await self.read_cid(s.cid, size=s.size or None)
            if target is not None and t.schema.names != target.names:
                t = pa.table(
                    {
                        f.name: t.column(f.name) if f.name in t.schema.names else pa.nulls(t.num_rows, f.type)
                        for f in target
                    },
                    schema=target,
                )
            yield t

    async def version_hash(self, v: Version) -> tuple[str, int]:
        """Logical hash of all the version's rows in order (cached: a version never changes). Callers asking for
        the same version at once share one computation (a query arriving while the ingest's background hash runs)."""
        if isinstance(v, projecting.Projection):  # the state's own, not the changelog's (same head)
            return v.logical_hash, v.row_count
        key = cid_str(v.head)
        cached = self.index.version_facts(key)
        if cached:
            return cached
        running, waiting = self._hashing.get(key, (None, 0))
        if running is None:
            running = asyncio.ensure_future(self._version_hash(v))
        self._hashing[key] = (running, waiting + 1)
        try:
            return await asyncio.shield(running)
        finally:
            left = self._hashing[key][1] - 1
            if left:
                self._hashing[key] = (running, left)
            else:  # the last asker left (done, or cancelled: a client gone, the node closing): so does the work
                del self._hashing[key]
                running.cancel()

    async def _version_hash(self, v: Version) -> tuple[str, int]:
        """Hashed from the first row, or resumed from an older version's hasher that ``v`` appends to (its rows
        are that version's, then the appended slices': the same streams fed in the same order)."""
        hasher, only = self._resumable(v)
        try:
            async for t in self.tables(v, only):
                hasher = hasher or LogicalHasher(t.schema)
                await asyncio.to_thread(hasher.update, t)
        except InvalidInput:  # an appended slice of other types than the older rows: hashed from the start
            if only is None:
                raise
            hasher, only = None, None
            async for t in self.tables(v):
                hasher = hasher or LogicalHasher(t.schema)
                await asyncio.to_thread(hasher.update, t)
        if hasher is None:
            return ("", 0)
        facts = (str(hasher.finish()), hasher.rows)
        self.index.set_version_facts(cid_str(v.head), *facts)
        self._keep_hasher(v.head, hasher)
        return facts

    def _keep_hasher(self, head: CID, hasher: LogicalHasher) -> None:
        self._hashers[cid_str(head)] = hasher
        while len(self._hashers) > KEPT_HASHERS:
            self._hashers.popitem(last=False)

    def _resumable(self, v: Version) -> tuple[LogicalHasher | None, list[SliceRef] | None]:
        """A copy of the kept hasher of the nearest older head ``v`` only appends to, and the slices since; else
        (None, None): hash every slice."""
        for old_head, fresh in appends(v):
            kept = self._hashers.get(cid_str(old_head))
            if kept is not None:
                return kept.copy(), fresh
        return None, None


class _Prefetch:
    """Run a blocking iterator of slices on its own thread, one slice ahead of the consumer. Memory is bounded by
    two slices: the reader takes a slot before making one, and the consumer gives it back (``release``) once it is
    done with the slice it got; the reader keeps no reference to a slice it has handed over."""

    _DONE = object()
    SLOTS = 2  # the slice being written, and the one being read

    def __init__(self, it: Iterator[pa.Table]) -> None:
        self._it = it
        self._queue: queue.Queue[object] = queue.Queue()
        self._slots = threading.Semaphore(self.SLOTS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cairn-ingest-read", daemon=True)

    def _run(self) -> None:
        try:
            while self._take_slot():
                item = next(self._it, self._DONE)
                self._queue.put(item if item is self._DONE else [item])
                if item is self._DONE:
                    return
                del item  # handed over: the consumer's reference is the only one
        except BaseException as e:  # noqa: BLE001  handed to the consumer, raised there
            self._queue.put(e)

    def _take_slot(self) -> bool:
        while not self._stop.is_set():
            if self._slots.acquire(timeout=0.1):
                return True
        return False

    async def __aenter__(self) -> _Prefetch:
        self._thread.start()
        return self

    async def get(self) -> list[pa.Table] | None:
        """The next slice, in a one-item list the consumer empties (so that it holds the only reference); None at
        the end."""
        item = await asyncio.to_thread(self._queue.get)
        if item is self._DONE:
            return None
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, list)
        return item

    def release(self) -> None:
        self._slots.release()

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()  # a consumer that failed must not leave the reader blocked forever
        await asyncio.to_thread(self._thread.join)


async def _write_slice(holder: list[pa.Table], path: Path, total: LogicalHasher) -> tuple[int, str]:
    """Write one slice to ``path``; its rows and logical hash (also fed to the version's hasher). The Parquet
    writer runs on one thread: the hashing runs beside it, on the same canonical table (the logical hash does not
    depend on the Arrow layout, so it is the hash of the rows as read)."""
    table = await asyncio.to_thread(take_canonical, holder)

    def hash_rows() -> str:
        total.update(table)
        own = LogicalHasher(table.schema)
        own.update(table)
        return str(own.finish())

    write = asyncio.to_thread(write_parquet_slice, table, str(path))
    _, lh = await asyncio.gather(write, asyncio.to_thread(hash_rows))
    return table.num_rows, lh


def _record(got: _Ingest, added: AddedFile, path: Path, rows: int, lh: str) -> None:
    """A slice Kubo has stored (unpinned): listed, in order, with its file kept for the slice cache."""
    got.slices.append(SliceRef(added.cid, rows, added.file_size, lh, got.offset))
    got.files.append((path, added.cid))
    got.offset += rows
