"""The logical hash and row count of a version's rows: computed once per version (kept in the index), shared by
callers asking at once, and resumed from an older version's hasher when the newer one only appends to it."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from node.domain.model import CID, cid_str
from node.domain.ports.repositories import CatalogRepository
from node.services.datasets import projection as projecting
from node.services.datasets.chain import SliceRef, Version, appends
from node.services.datasets.logical_hash import LogicalHasher
from node.services.datasets.slice_cache import SliceCache
from node.support.errors import InvalidInput

KEPT_HASHERS = 8  # versions whose logical hasher is kept for appends to resume from (a few KiB each)


class VersionHashes:
    """Versions' (logical hash, rows), read from ``cache``'s slices and kept in ``catalog``."""

    def __init__(self, catalog: CatalogRepository, cache: SliceCache) -> None:
        self.catalog = catalog
        self.cache = cache
        self._hashing: dict[str, tuple[asyncio.Future[tuple[str, int]], int]] = {}  # version hashes running, askers
        # head → the logical hasher after its rows: a version that appends to it resumes from there (without it,
        # a 1 % append to 10 M rows hashed all 10 M again before its first query could be answered)
        self._hashers: OrderedDict[str, LogicalHasher] = OrderedDict()

    async def version_hash(self, v: Version) -> tuple[str, int]:
        """Logical hash of all the version's rows in order (cached: a version never changes). Callers asking for
        the same version at once share one computation (a query arriving while the ingest's background hash runs)."""
        if isinstance(v, projecting.Projection):  # the state's own, not the changelog's (same head)
            return v.logical_hash, v.row_count
        key = cid_str(v.head)
        cached = self.catalog.version_facts(key)
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
            async for t in self.cache.tables(v, only):
                hasher = hasher or LogicalHasher(t.schema)
                await asyncio.to_thread(hasher.update, t)
        except InvalidInput:  # an appended slice of other types than the older rows: hashed from the start
            if only is None:
                raise
            hasher, only = None, None
            async for t in self.cache.tables(v):
                hasher = hasher or LogicalHasher(t.schema)
                await asyncio.to_thread(hasher.update, t)
        if hasher is None:
            return ("", 0)
        facts = (str(hasher.finish()), hasher.rows)
        self.catalog.set_version_facts(cid_str(v.head), *facts)
        self.keep_hasher(v.head, hasher)
        return facts

    def keep_hasher(self, head: CID, hasher: LogicalHasher) -> None:
        """Keep the hasher after ``head``'s rows (the last ``KEPT_HASHERS``): a version appending to it resumes
        from a copy."""
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
