"""Ingest: a source read into slices stored in Kubo, then signed into the dataset's metadata chain.

The head of a dataset moves only after every slice and block is stored in Kubo and pinned
(recursively, from the new head): a failure anywhere before leaves the previous head intact and
nothing half-published visible.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from node.adapters.index import DatasetRow
from node.domain.model import CID, Structure, cid_str, parse_cid
from node.domain.model.names import check_dataset_name
from node.domain.ports.block_store import BlockStore
from node.domain.ports.repositories import CatalogRepository
from node.services.datasets.chain import SliceRef, Version
from node.services.datasets.chain_writer import ChainWriter, Signer, schema_blocks
from node.services.datasets.ingest_batches import Ingested, Progress, add_data_event, prepared, tracked
from node.services.datasets.ingest_slices import write_slices
from node.services.datasets.readers import InputLimits, ReadOptions, open_input
from node.services.datasets.references import References
from node.services.datasets.slice_cache import SliceCache
from node.services.datasets.version_hashes import VersionHashes
from node.services.datasets.versions import Versions
from node.services.datasets.workdirs import disk_full_is_507
from node.support.errors import CairnError, Conflict, InvalidInput, NotFound

DEFAULT_ROWS_PER_SLICE = 1 << 20


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


@dataclass(frozen=True)
class _Request:
    """One ingest as asked: what to read, into which dataset, merged how."""

    source: Any
    name: str
    options: ReadOptions
    strategy: str
    pk: list[str]
    info: dict[str, Any] | None
    progress: Progress | None


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


class Ingest:
    """New datasets and new versions of the datasets named in ``catalog``; ``limits``: the caps every ingest's input
    is read under (its spool directory and stop signal are set per ingest)."""

    def __init__(
        self,
        kubo: BlockStore,
        catalog: CatalogRepository,
        *,
        versions: Versions,
        cache: SliceCache,
        hashes: VersionHashes,
        chains: ChainWriter,
        references: References,
        tmp_dir: Path,
        rows_per_slice: int,
        limits: InputLimits,
    ) -> None:
        self.kubo = kubo
        self.catalog = catalog
        self.versions = versions
        self.cache = cache
        self.hashes = hashes
        self.chains = chains
        self.references = references
        self.tmp_dir = tmp_dir
        self.rows_per_slice = rows_per_slice
        self.limits = limits
        self._locks: dict[str, asyncio.Lock] = {}

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
        if create:  # a new name must be printable (it is shown everywhere); an existing one is looked up as it is
            check_dataset_name(name)
        elif not name:
            raise InvalidInput("give the name of the dataset to append to")
        req = _Request(source, name, options, strategy, list(primary_key or []), info, progress)
        async with self._locks.setdefault(name, asyncio.Lock()):
            row, old = await self._current(name, create, strategy)
            work = Path(tempfile.mkdtemp(prefix="ingest-", dir=self.tmp_dir))
            # The caps, with this ingest's spool directory (its work directory, never the system temp dir) and stop.
            stopping = stop or threading.Event()
            limits = replace(self.limits, spool_dir=str(work), stop=stopping)
            try:
                with disk_full_is_507("the ingest", self.tmp_dir), _labelled(source, options.label):
                    return await self._add(req, row, old, limits, work)
            except asyncio.CancelledError:
                stopping.set()  # the reading threads end at their next read
                raise
            finally:
                shutil.rmtree(work, ignore_errors=True)

    async def _current(self, name: str, create: bool, strategy: str) -> tuple[DatasetRow | None, Version | None]:
        """The dataset's row and version before this ingest (none for a new one), checked against what is asked."""
        row = self.catalog.dataset(name)
        if create and row is not None:
            raise InvalidInput(f"dataset {name!r} already exists: append with --to {name}")
        if not create and row is None:
            hint = self.references.suggest(name)
            raise NotFound(f"no dataset named {name!r}{hint}: create it with --name {name}")
        old = await self.versions.version(parse_cid(row.head)) if row else None
        if old is not None and old.merge["strategy"] != strategy and old.rows:
            raise InvalidInput(f"dataset {name!r} merges with {old.merge['strategy']}, not {strategy}")
        return row, old

    async def _add(
        self, req: _Request, row: DatasetRow | None, old: Version | None, limits: InputLimits, work: Path
    ) -> AddResult:
        got = await self._read_source(req, old, limits, work)
        # The last moment to stop: from here the commit runs through.
        limits.check_stop(req.options.label or "the input")
        structure = got.structure
        if old is not None and got.added_rows == 0:
            # A column no row carries is not added: a schema changes with the first rows that have it,
            # so a version's last slice always holds every column (readers and the worker rely on it).
            structure = old.structure or structure
        if old is not None and got.added_rows == 0 and not req.info:
            # Nothing new (e.g. a ledger that had seen every row): the chain stays as it is.
            return AddResult(req.name, old.dataset_id, old.head, old.head, got.rows_read, 0, [], False)
        signer = await self.chains.signer(row, old)
        schema_changed = old is None or old.structure != structure
        events = [] if old is not None else [{"kind": "Seed", "datasetId": signer.did, "datasetKind": "root"}]
        # Off the loop (10,000 columns: a second of encoding), and remembered: a version built from the new head
        # need not decode them again.
        known: dict[CID, Structure] = {}
        blocks = await asyncio.to_thread(schema_blocks, structure, events, known) if schema_changed else []
        self.versions.remember([], known)
        if got.added_rows:
            events.append(add_data_event(got, req.strategy, req.pk))
        if req.info:
            events.append({"kind": "SetInfo", **req.info})
        head = await self.chains.store(signer, blocks, events)
        await self._move_head(req.name, row, old, signer, head, got)
        previous = old.head if old else None
        return AddResult(
            req.name, signer.did, head, previous, got.rows_read, got.added_rows, got.slices, schema_changed
        )

    async def _read_source(self, req: _Request, old: Version | None, limits: InputLimits, work: Path) -> Ingested:
        """Read the source through the merge strategy into slices stored (unpinned) in Kubo; the spool and slice
        files under ``work``."""
        prior_tables = list(await self._prior_tables(old)) if old and req.strategy != "append" else []
        inp = await asyncio.to_thread(open_input, req.source, req.options, limits)
        try:
            schema, batches, got = await asyncio.to_thread(prepared, inp, old, req.strategy, req.pk, prior_tables)
            batches = tracked(batches, inp, req.options.event_time, req.progress, got.event_max)
            await write_slices(self.kubo, batches, schema, got, work, self.rows_per_slice)
            if req.progress:
                req.progress(inp.bytes_read, inp.rows_read)
            got.rows_read = inp.rows_read
        finally:
            inp.close()
        return got

    async def _move_head(
        self, name: str, row: DatasetRow | None, old: Version | None, signer: Signer, head: CID, got: Ingested
    ) -> None:
        if old is None or old.rows == 0:
            # The whole version is this ingest's rows: its logical hash is known now, not at the first query.
            self.catalog.set_version_facts(cid_str(head), str(got.total.finish()), got.total.rows)
            self.hashes.keep_hasher(head, got.total)
        # Everything is stored and pinned: now, and only now, the head moves.
        if row is None:
            self.catalog.create_dataset(name, signer.did, cid_str(head), signer.ipns, signer.key_name)
        elif not self.catalog.move_head(name, row.head, cid_str(head)):
            raise Conflict(f"dataset {name!r} moved while this ingest ran; nothing was changed")
        if old is not None:
            await self.kubo.pin_rm(old.head, recursive=True)  # covered by the new recursive pin
        for path, cid in got.files:  # keep the local copies: reads and queries need no round trip
            os.replace(path, self.cache.cache_dir / f"{cid}.parquet")
        await self.chains.publish(signer.key_name, head)

    async def _prior_tables(self, old: Version | None) -> list[pa.Table]:
        return [t async for t in self.cache.tables(old)] if old else []
