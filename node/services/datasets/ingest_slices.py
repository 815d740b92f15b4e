"""An ingest's batches cut into slices, written, hashed and added to Kubo, three stages overlapping on the node's
cores: the reader thread parses and cuts slice n+1, worker threads write and hash slice n, and Kubo adds slice n-1."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from node.adapters.ipfs.kubo_client import AddResult as AddedFile
from node.domain.ports.block_store import BlockStore
from node.services.datasets.chain import SliceRef
from node.services.datasets.ingest_batches import Ingested
from node.services.datasets.logical_hash import LogicalHasher
from node.services.datasets.slices import iter_slices, take_canonical, write_parquet_slice


class Prefetch:
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

    async def __aenter__(self) -> Prefetch:
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


def _record(got: Ingested, added: AddedFile, path: Path, rows: int, lh: str) -> None:
    """A slice Kubo has stored (unpinned): listed, in order, with its file kept for the slice cache."""
    got.slices.append(SliceRef(added.cid, rows, added.file_size, lh, got.offset))
    got.files.append((path, added.cid))
    got.offset += rows


async def _add_file(kubo: BlockStore, path: Path, rows: int, lh: str) -> tuple[AddedFile, Path, int, str]:
    return await kubo.add(path, pin=False), path, rows, lh


async def write_slices(
    kubo: BlockStore,
    batches: Iterator[pa.RecordBatch],
    schema: pa.Schema,
    got: Ingested,
    work: Path,
    rows_per_slice: int,
) -> None:
    """Three stages overlap: the reader thread parses and cuts slice n+1, worker threads write and
    hash slice n, and Kubo adds slice n-1. Slices are written, added and listed in their order, so the bytes,
    the CIDs and the AddData event are those of one slice at a time. At most two slices are held in memory."""
    adding: asyncio.Future[tuple[AddedFile, Path, int, str]] | None = None
    try:
        async with Prefetch(iter_slices(batches, schema, rows_per_slice)) as slices:
            n = 0
            while (holder := await slices.get()) is not None:
                path = work / f"slice-{n}.parquet"
                rows, lh = await _write_slice(holder, path, got.total)
                slices.release()  # the slice's Arrow data is gone: the reader may start another
                if adding is not None:
                    _record(got, *await adding)
                adding = asyncio.ensure_future(_add_file(kubo, path, rows, lh))
                n += 1
        if adding is not None:
            _record(got, *await adding)
    finally:
        if adding is not None and not adding.done():
            adding.cancel()
            await asyncio.gather(adding, return_exceptions=True)
