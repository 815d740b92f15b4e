"""The CID-keyed slice cache (``$CAIRN_HOME/cache/slices``): slices fetched from IPFS once, each hashed before it
is kept, and read back as Arrow tables, a version's rows slice by slice."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pyarrow as pa

from node.adapters.ipfs.rpc_files import CHUNK_SIZE
from node.adapters.ipfs.unixfs import bytes_cid, file_cid
from node.domain.model import CID, cid_str
from node.domain.ports.block_store import BlockStore
from node.services.datasets.chain import SliceRef, Version
from node.services.datasets.fetching import SliceVisit, fetch_file, scan_slices
from node.services.datasets.slices import read_slice, read_slice_head, slice_schema
from node.support.errors import InvalidInput

log = logging.getLogger("cairn.datasets")


class SliceCache:
    """Slices by CID in ``cache_dir``, fetched from ``kubo`` when missing."""

    def __init__(self, kubo: BlockStore, cache_dir: Path) -> None:
        self.kubo = kubo
        self.cache_dir = cache_dir

    def path_of(self, cid: CID) -> Path:
        """Where the slice ``cid`` is kept (whether or not it is there yet)."""
        return self.cache_dir / f"{cid_str(cid)}.parquet"

    async def slice_path(self, s: SliceRef, timeout: float | None = None) -> Path:
        """The slice as a local file, fetched from IPFS once (Kubo verifies every block it fetches)."""
        return await self.cid_path(s.cid, size=s.size or None, timeout=timeout)

    async def cid_path(self, cid: CID, *, size: int | None = None, timeout: float | None = None) -> Path:
        """The UnixFS file ``cid`` as a local file in the CID-keyed cache.

        The cache is trusted by name, so nothing enters it unhashed: each fetch writes its own temp file
        (concurrent fetches never share one), the bytes must give ``cid`` before the atomic rename, and a
        cancelled or failed fetch removes its temp. A cached file of the wrong size is re-fetched.
        """
        path = self.path_of(cid)
        if path.exists():
            if size is None or path.stat().st_size == size:
                return path
            log.warning("cached slice has the wrong size: fetching it again", extra={"cid": cid_str(cid)})
            path.unlink(missing_ok=True)
        return await fetch_file(self.kubo, cid, path, timeout=timeout)

    def cached(self, cid: CID) -> bool:
        """Whether the slice is in the CID-keyed cache (read without a fetch)."""
        return self.path_of(cid).exists()

    async def cache_slice(self, cid: CID, data: bytes) -> None:
        """Cache a slice whose bytes are already here (a peer's lookup answer carried them): only if they are
        the whole file ``cid`` names (one UnixFS leaf, hashed here), so that nothing enters the cache unhashed."""
        path = self.path_of(cid)
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
        the others decoded while they are fetched into it (node/services/datasets/fetching.py)."""
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
        """The UnixFS CID of a local file, as Kubo's add with Cairn's parameters gives it
        (node/adapters/ipfs/unixfs.py)."""

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
