"""Reading results: a result's slices in order (as tables or local files), its preview, and the decoded tables of
cached results that derived answers are computed from."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pyarrow as pa

from node.adapters.index import ExecutionRow
from node.domain.model import CID, parse_cid
from node.services.datasets import Datasets
from node.support import values
from node.support.errors import CairnError

RESULTS_KEPT_BYTES = 64 * 1024 * 1024  # decoded cached results kept for deriving answers (``tables``)
PREVIEWS_KEPT = 256  # previews kept (results never change)
Preview = tuple[pa.Schema, list[list[Any]]]


class Results:
    def __init__(self, datasets: Datasets) -> None:
        self.datasets = datasets
        self._previews: dict[tuple[str, int], asyncio.Future[Preview]] = {}
        self._kept: OrderedDict[str, list[pa.Table]] = OrderedDict()  # decoded results, by execution CID

    async def iter_result(self, row: ExecutionRow) -> AsyncIterator[pa.Table]:
        """The result's slices in order, read one at a time (a caller that has enough stops early)."""
        for s in row.slices:
            yield await self.datasets.read_cid(parse_cid(s))

    async def iter_result_files(self, row: ExecutionRow) -> AsyncIterator[Path]:
        """The result's slices in order, each as its local Parquet file (fetched into the slice cache first), for a
        reader that streams a slice in small batches rather than holding it whole."""
        for s in row.slices:
            yield await self.datasets.cid_path(parse_cid(s))

    def preview(self, row: ExecutionRow, limit: int) -> Awaitable[Preview]:
        """The result's schema and first ``limit`` rows, rendered JSON-safe (node.support.values); cached, since
        results never change."""
        key = (row.execution, limit)
        cached = self._previews.get(key)
        if cached is None:
            cached = asyncio.ensure_future(self._preview(row, limit))
            self._previews[key] = cached
            cached.add_done_callback(
                lambda f: (f.cancelled() or f.exception() is not None) and self._previews.pop(key, None)
            )
            while len(self._previews) > PREVIEWS_KEPT:
                self._previews.pop(next(iter(self._previews)))
        return asyncio.shield(cached)

    async def _preview(self, row: ExecutionRow, limit: int) -> Preview:
        parts: list[pa.Table] = []
        shown = 0
        for s in row.slices:  # only the rows shown are decoded (a large peer hit read its first slice whole)
            t = await self.datasets.head_cid(parse_cid(s), max(0, limit - shown))
            parts.append(t)
            shown += t.num_rows
            if shown >= limit:
                break
        if not parts:
            raise CairnError(f"execution {row.execution} has no result slices to preview")
        head = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        return parts[0].schema, await asyncio.to_thread(values.json_rows, head)  # 100k rows: 0.24 s, off the loop

    async def tables(self, cached: ExecutionRow) -> list[pa.Table]:
        """A cached result's slices, decoded: kept in memory once read (``RESULTS_KEPT_BYTES`` in all, least recently
        used dropped first), since the same superset answers many restrictions. Decoding a 200 000-row result took
        10-13 ms of a ~40 ms derived answer; a result never changes, so keeping it is safe."""
        kept = self._kept.get(cached.execution)
        if kept is not None:
            self._kept.move_to_end(cached.execution)
            return kept
        tables = [await self.datasets.read_cid(CID.decode(s)) for s in cached.slices]
        size = sum(t.nbytes for t in tables)
        if size <= RESULTS_KEPT_BYTES // 4:  # one large result must not push out all the others
            self._kept[cached.execution] = tables
            total = sum(t.nbytes for ts in self._kept.values() for t in ts)
            while total > RESULTS_KEPT_BYTES:
                _, dropped = self._kept.popitem(last=False)
                total -= sum(t.nbytes for t in dropped)
        return tables
