"""The projected state of snapshot versions (node/services/datasets/projection.py), made once per block: kept in memory,
and
in ``cache/projections/HEAD.json`` across restarts while its slices are still in the slice cache."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

from node.domain.model import CID, cid_str
from node.domain.ports.block_store import BlockStore
from node.services.datasets import projection as projecting
from node.services.datasets.chain import SliceRef, Version
from node.services.datasets.slice_cache import SliceCache
from node.services.datasets.versions import MEMO_VERSIONS
from node.services.datasets.workdirs import disk_full_is_507

log = logging.getLogger("cairn.datasets")


class Projections:
    """Snapshot versions' states: their slices written to ``cache``, added to ``kubo``; their records in
    ``projections_dir``; the work done under ``tmp_dir``."""

    def __init__(self, kubo: BlockStore, cache: SliceCache, projections_dir: Path, tmp_dir: Path) -> None:
        self.kubo = kubo
        self.cache = cache
        self.projections_dir = projections_dir  # HEAD.json: the state of a snapshot version
        self.tmp_dir = tmp_dir
        self._locks: dict[CID, asyncio.Lock] = {}
        self._kept: OrderedDict[CID, projecting.Projection] = OrderedDict()  # same bound as versions

    async def projection(self, v: Version) -> projecting.Projection:
        """The state of the snapshot version ``v``, computed once per block: remembered here, and in
        ``cache/projections/HEAD.json`` across restarts while its slices are still in the slice cache."""
        async with self._locks.setdefault(v.head, asyncio.Lock()):  # concurrent queries over a block: one fold
            p = self._kept.get(v.head) or await self._remembered(v)
            if p is None:
                p = await self._project(v)
                (self.projections_dir / f"{cid_str(v.head)}.json").write_text(projecting.to_json(p))
            self._kept[v.head] = p
            self._kept.move_to_end(v.head)
            while len(self._kept) > MEMO_VERSIONS:
                self._kept.popitem(last=False)
            return p

    async def _remembered(self, v: Version) -> projecting.Projection | None:
        """A projection an earlier run made, its slices added to Kubo again from the slice cache (they were added
        unpinned: a GC may have dropped them since, and a receipt's recursive pin must find them here)."""
        path = self.projections_dir / f"{cid_str(v.head)}.json"
        p = projecting.from_json(v, path.read_text()) if path.exists() else None
        for s in p.slices if p is not None else []:
            cached = self.cache.path_of(s.cid)
            if not cached.exists() or bytes((await self.kubo.add(cached, pin=False)).cid) != bytes(s.cid):
                return None  # a slice left the cache, or is not its CID's bytes: project again (the same bytes)
        return p

    async def _project(self, v: Version) -> projecting.Projection:
        """Fold the changelog into its state, write it as canonical slices, add them to Kubo (unpinned: an
        execution that reads them pins them with its input list) and keep them in the slice cache."""
        tables = [t async for t in self.cache.tables(v)]
        work = Path(tempfile.mkdtemp(prefix="inputs-", dir=self.tmp_dir))
        try:
            with disk_full_is_507("projecting a snapshot version", self.tmp_dir):
                table = await asyncio.to_thread(projecting.state, tables, v.merge["primaryKey"])
                written = await asyncio.to_thread(projecting.write_state, table, work)
                slices, offset = [], 0
                for path, rows, lh in written.files:
                    added = await self.kubo.add(path, pin=False)
                    os.replace(path, self.cache.path_of(added.cid))
                    slices.append(SliceRef(added.cid, rows, added.file_size, lh, offset))
                    offset += rows
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("projected a snapshot version", extra={"head": cid_str(v.head), "rows": written.rows})
        return projecting.build(v, slices, written.logical_hash, written.rows)
