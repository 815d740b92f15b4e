"""Datasets: the service's one face, wiring its parts and handing each call to the part that does the job.

- ingest into slices and a signed metadata chain: node/services/datasets/ingest.py (batches: ``ingest_batches.py``, the
  slice pipeline: ``ingest_slices.py``, the chain signed and stored: ``chain_writer.py``);
- derivative datasets (node.services.pipelines): ``derivatives.py``;
- references resolved to versions: ``references.py``; versions built from heads, blocks and structures cached:
  ``versions.py``; snapshot versions' states: ``projection_cache.py``;
- slices read through the CID-keyed cache: ``slice_cache.py``; versions' logical hashes: ``version_hashes.py``;
- work directories swept at start, a full disk a 507: ``workdirs.py``.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from node.adapters.index import DatasetRow
from node.domain.model import CID, MetadataBlock, Structure
from node.domain.ports.block_store import BlockStore
from node.domain.ports.repositories import CatalogRepository
from node.services.datasets import projection as projecting
from node.services.datasets.chain import SliceRef, Version
from node.services.datasets.chain_writer import ChainWriter
from node.services.datasets.derivatives import derive
from node.services.datasets.fetching import SliceVisit
from node.services.datasets.ingest import DEFAULT_ROWS_PER_SLICE, AddResult, Ingest, bound_arrow_memory
from node.services.datasets.ingest_batches import Progress
from node.services.datasets.projection_cache import Projections
from node.services.datasets.readers import InputLimits, ReadOptions
from node.services.datasets.references import References
from node.services.datasets.slice_cache import SliceCache
from node.services.datasets.version_hashes import VersionHashes
from node.services.datasets.versions import Versions
from node.services.datasets.workdirs import disk_full_is_507, sweep_tmp

__all__ = ["AddResult", "Datasets", "disk_full_is_507"]


class Datasets:
    """Ingest, resolve, read and derive the datasets of one node: each method handed to the part that holds it
    (``cache``, ``versions``, ``hashes``, ``projections``, ``references``, ``chains``, ``ingest``)."""

    def __init__(
        self,
        kubo: BlockStore,
        catalog: CatalogRepository,
        home: Path,
        rows_per_slice: int = DEFAULT_ROWS_PER_SLICE,
        limits: InputLimits | None = None,
    ) -> None:
        """``limits``: the caps every ingest's input is read under (its spool directory and stop signal are set
        per ingest); None: no caps."""
        bound_arrow_memory()
        self.kubo = kubo
        self.catalog = catalog
        self.keys_dir = home / "keys"
        self.cache_dir = home / "cache" / "slices"
        self.projections_dir = home / "cache" / "projections"  # HEAD.json: the state of a snapshot version
        self.tmp_dir = home / "tmp"
        for d in (self.keys_dir, self.cache_dir, self.projections_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)
        sweep_tmp(self.tmp_dir)
        self.cache = SliceCache(kubo, self.cache_dir)
        self.versions = Versions(kubo)
        self.hashes = VersionHashes(catalog, self.cache)
        self.projections = Projections(kubo, self.cache, self.projections_dir, self.tmp_dir)
        self.references = References(catalog, self.versions, self.projections)
        self.chains = ChainWriter(kubo, self.versions, self.keys_dir)
        self.ingest = Ingest(
            kubo,
            catalog,
            versions=self.versions,
            cache=self.cache,
            hashes=self.hashes,
            chains=self.chains,
            references=self.references,
            tmp_dir=self.tmp_dir,
            rows_per_slice=rows_per_slice,
            limits=limits or InputLimits(),
        )

    @property
    def rows_per_slice(self) -> int:
        return self.ingest.rows_per_slice

    @property
    def limits(self) -> InputLimits:
        return self.ingest.limits

    # -- objects and versions (versions.py) ----------------------------------------------------

    async def block(self, cid: CID, timeout: float | None = None) -> MetadataBlock:
        return await self.versions.block(cid, timeout)

    async def structure(self, cid: CID, timeout: float | None = None) -> Structure:
        return await self.versions.structure(cid, timeout)

    def remember(self, blocks: Iterable[tuple[CID, MetadataBlock]], structures: Mapping[CID, Structure]) -> None:
        """Cache objects checked elsewhere (a pull verified every one against its CID), so reading the
        version does not fetch them again."""
        self.versions.remember(blocks, structures)

    async def version(self, head: CID, timeout: float | None = None) -> Version:
        """The checked version whose head is ``head`` (remembered: the last ones built)."""
        return await self.versions.version(head, timeout)

    # -- references (references.py, projection_cache.py) ---------------------------------------

    async def resolve(self, ref: str) -> tuple[DatasetRow | None, Version]:
        """A name, a dataset id (did:key) or a block CID (a frozen version) → its version; any of them followed by
        ``@BLOCKCID`` (a block of that dataset's chain) or ``@-N`` (N data versions back) → that earlier version."""
        return await self.references.resolve(ref)

    async def input(self, ref: str) -> Version:
        """What a query reads for ``ref``: its version, or for a snapshot dataset the state "as at" it;
        ``REF/changelog`` is the raw changelog."""
        return await self.references.input(ref)

    async def as_input(self, v: Version) -> Version:
        """``v`` as a query reads it by default: a changelog (snapshot dataset) as its projected state."""
        return await self.references.as_input(v)

    async def projection(self, v: Version) -> projecting.Projection:
        """The state of the snapshot version ``v``, computed once per block."""
        return await self.projections.projection(v)

    def find_table(self, name: str) -> DatasetRow | None:
        """The dataset a query's table ``name`` names when no ``--input`` declares it (case-insensitively)."""
        return self.references.find_table(name)

    def suggest(self, name: str) -> str:
        """`` (did you mean 'orders'?)`` when a dataset of this node has a name close to ``name``, else ``""``."""
        return self.references.suggest(name)

    # -- ingest and derivative datasets (ingest.py, derivatives.py) ----------------------------

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
        """Ingest ``source`` as a new dataset (``create``) or a new version of ``name`` (``Ingest.add``)."""
        return await self.ingest.add(
            source,
            name=name,
            create=create,
            options=options,
            strategy=strategy,
            primary_key=primary_key,
            info=info,
            progress=progress,
            stop=stop,
        )

    async def derive(self, slices: list[CID], structure: Structure, receipt: CID, facts: tuple[str, int]) -> CID:
        """A derivative dataset whose one version holds an execution's output ``slices`` as they are."""
        return await derive(self.cache, self.chains, self.catalog, slices, structure, receipt, facts)

    # -- reading (slice_cache.py, version_hashes.py) -------------------------------------------

    async def slice_path(self, s: SliceRef, timeout: float | None = None) -> Path:
        """The slice as a local file, fetched from IPFS once (Kubo verifies every block it fetches)."""
        return await self.cache.slice_path(s, timeout)

    async def cid_path(self, cid: CID, *, size: int | None = None, timeout: float | None = None) -> Path:
        """The UnixFS file ``cid`` as a local file in the CID-keyed cache (hashed before it is kept)."""
        return await self.cache.cid_path(cid, size=size, timeout=timeout)

    def cached(self, cid: CID) -> bool:
        """Whether the slice is in the CID-keyed cache (read without a fetch)."""
        return self.cache.cached(cid)

    async def cache_slice(self, cid: CID, data: bytes) -> None:
        """Cache a slice whose bytes are already here, only if they are the whole file ``cid`` names."""
        await self.cache.cache_slice(cid, data)

    async def scan_slices(
        self,
        cids: list[CID],
        visit: SliceVisit,
        *,
        timeout: float | None = None,
        done: Callable[[int], None] | None = None,
    ) -> None:
        """Every slice's rows, in order, to ``visit`` (on a worker thread), decoded while they are fetched."""
        await self.cache.scan_slices(cids, visit, timeout=timeout, done=done)

    async def file_cid(self, path: Path) -> CID:
        """The UnixFS CID of a local file, as Kubo's add with Cairn's parameters gives it."""
        return await self.cache.file_cid(path)

    async def read_cid(self, cid: CID, *, size: int | None = None, timeout: float | None = None) -> pa.Table:
        """Read a slice through the cache (a cached file that does not read is checked and fetched again)."""
        return await self.cache.read_cid(cid, size=size, timeout=timeout)

    async def head_cid(self, cid: CID, rows: int) -> pa.Table:
        """The first ``rows`` rows of a slice, decoding only the pages they are in."""
        return await self.cache.head_cid(cid, rows)

    async def version_schema(self, v: Version) -> pa.Schema:
        """The schema ``tables`` gives the version's rows, read from its last slice's Parquet footer alone."""
        return await self.cache.version_schema(v)

    def tables(self, v: Version, only: list[SliceRef] | None = None) -> AsyncIterator[pa.Table]:
        """The version's rows, slice by slice (``only`` these of its slices); older slices get nulls for columns
        added later."""
        return self.cache.tables(v, only)

    async def version_hash(self, v: Version) -> tuple[str, int]:
        """Logical hash and rows of all the version's rows in order (computed once per version)."""
        return await self.hashes.version_hash(v)
