"""Slices fetched by CID into the cache, and read as Parquet while their bytes arrive.

A peer's large result is checked slice by slice: each slice's bytes must give its CID, and its rows are decoded
and hashed. Parquet's footer (where every column chunk is) comes last in the file, so decoding used to wait for a
slice's last byte: the last slice's whole decode ran after the transfer had ended, and a slice whose decode
outlasted the next one's transfer held the transfers up. Here the footer is asked of Kubo first (a small second
``cat`` of the file's tail, started as soon as the main ``cat`` has announced the file's size), and the decoder
reads the ``.part`` file the main ``cat`` writes: a read waits until the bytes it asks for are written. The cats
run back to back; a decode may lag into the next slice's transfer (the bytes wait on disk, not in memory).

Nothing counts earlier than it did: what a decode gives is used only once the whole file's bytes gave its CID
(``UnixfsHasher``, as ``fetch_file`` always checked) and the tail the footer was read from is the file's own;
otherwise the fetch fails as before and whatever the decode gave is thrown away.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from node.adapters.ipfs.unixfs import UnixfsHasher
from node.domain.model import CID, cid_str
from node.domain.ports.block_store import BlockStore
from node.support.errors import InvalidInput, KuboError, SliceCorrupt, SliceFetchStopped

__all__ = ["Arrival", "SliceVisit", "fetch_file", "scan_slices"]

log = logging.getLogger("cairn.datasets")

TAIL_BYTES = 64 << 10  # first guess of a footer's size (a slice's is a few KiB); a bigger one is asked again
READ_BUFFER = 1 << 20  # the decoder's reads per column chunk
BATCH_ROWS = 1 << 16  # rows per decoded batch: the most the decoder can lag behind the bytes at the very end
AHEAD = 2  # slices the cats may run ahead of the decoder (bytes on disk, bounded)

# A slice's rows: (slice index, its Arrow schema, its rows in order), called on a worker thread.
SliceVisit = Callable[[int, pa.Schema, Iterable[pa.RecordBatch | pa.Table]], None]


class Arrival:
    """A slice file while its bytes arrive: its size and footer once known, how many bytes are written, or the
    failure. Written from the event loop, waited on from the decoder's thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.size: int | None = None
        self.tail: bytes | None = None  # the file's last bytes, footer included
        self.written = 0
        self.failed: BaseException | None = None
        self.fd: int | None = None  # read side of the .part file (kept open across the rename)
        self.settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _update(self, **values: object) -> None:
        with self._cond:
            for k, v in values.items():
                setattr(self, k, v)
            self._cond.notify_all()

    def advance(self, n: int) -> None:
        self._update(written=self.written + n)

    def fail(self, e: BaseException) -> None:
        if self.failed is None:
            self._update(failed=e)
        if not self.settled.done():
            self.settled.set_exception(e if isinstance(e, Exception) else SliceFetchStopped("cancelled"))
            self.settled.exception()  # read here: the decoder may never look

    def close(self) -> None:
        with self._cond:
            fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def _raise_if_failed(self) -> None:
        if self.failed is not None:
            raise SliceFetchStopped(f"the fetch stopped: {self.failed!r}")

    def _wait(self, ready: Callable[[], bool]) -> None:
        while not ready():  # the caller holds self._cond
            self._raise_if_failed()
            self._cond.wait()

    def wait_tail(self) -> bytes:
        """The file's last bytes, footer included, once known (the small cat's, or the file's own)."""
        with self._cond:
            while (tail := self.tail) is None:
                self._raise_if_failed()
                self._cond.wait()
            return tail

    def read_end(self, n: int) -> bytes:
        """The last ``n`` bytes written of a file whose size is known (fewer if it is smaller), read under the lock
        ``close`` takes, as ``read`` does."""
        with self._cond:
            if self.fd is None:
                raise SliceFetchStopped("the scan ended")
            size = self.size or 0
            n = min(n, size)
            return os.pread(self.fd, n, size - n)

    def read(self, pos: int, n: int) -> bytes:
        """``n`` bytes at ``pos`` (fewer at the end of the file), once written. Read under the lock that
        ``close`` takes, so that a decoder left running by a cancelled scan never reads a closed (or reused) fd."""
        with self._cond:
            end = min(pos + n, self.size or 0)
            self._wait(lambda: self.written >= end)
            if self.fd is None:
                raise SliceFetchStopped("the scan ended")
            return os.pread(self.fd, end - pos, pos) if end > pos else b""


class _Growing:
    """The file-like object pyarrow reads a slice from while it arrives (random access; reads wait for bytes)."""

    def __init__(self, arrival: Arrival) -> None:
        self.arrival, self.pos = arrival, 0
        self.size = arrival.size or 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        data = self.arrival.read(self.pos, self.size - self.pos if n is None or n < 0 else n)
        self.pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset + (0 if whence == 0 else self.pos if whence == 1 else self.size)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def _footer_need(tail: bytes) -> int | None:
    """How many of the file's last bytes hold its footer (its length and the closing magic included)."""
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        return None
    return int.from_bytes(tail[-8:-4], "little") + 8


def _metadata(tail: bytes) -> pq.FileMetaData:
    need = _footer_need(tail)
    if need is None or need > len(tail):
        raise InvalidInput("not a readable Parquet slice: no Parquet footer at its end")
    # The footer alone, behind a leading magic, reads as a file that is all footer: offsets in it are the
    # real file's, which is where the decoder reads them.
    return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[len(tail) - need :]))


async def _fetch_tail(kubo: BlockStore, cid: CID, size: int, arrival: Arrival, timeout: float | None) -> None:
    want = min(size, TAIL_BYTES)
    while True:
        tail = b"".join([c async for c in kubo.cat(cid, offset=size - want, length=want, timeout=timeout)])
        need = _footer_need(tail)
        if need is None or need <= len(tail) or want >= size:
            break
        want = min(size, need)
    if arrival.tail is None:
        arrival._update(tail=tail)


async def _settle_tail(arrival: Arrival, tail_task: asyncio.Future[None] | None, cid: CID) -> None:
    """The tail the decoder uses is the file's own: checked against the bytes written; taken from them when
    the small cat has not answered (or failed: the bytes are here now)."""
    if tail_task is not None and not tail_task.done():
        tail_task.cancel()
    if tail_task is not None:
        await asyncio.gather(tail_task, return_exceptions=True)
    if arrival.tail is None:
        need = _footer_need(arrival.read_end(8)) or 0
        arrival._update(tail=arrival.read_end(max(need, 8)))
    elif arrival.read_end(len(arrival.tail)) != arrival.tail:
        raise SliceCorrupt(f"the footer Kubo gave for {cid_str(cid)} is not the end of its bytes: not cached")


async def fetch_file(
    kubo: BlockStore, cid: CID, path: Path, *, timeout: float | None = None, arrival: Arrival | None = None
) -> Path:
    """Fetch the UnixFS file ``cid`` to ``path`` (atomically: a temp file renamed once its bytes give ``cid``).

    Concurrent fetches never share a temp file; a cancelled or failed fetch removes its own. With ``arrival``, a
    decoder may read the bytes as they are written (module docstring); ``arrival.settled`` says when they are
    checked, or why not."""
    fd, name = tempfile.mkstemp(prefix=f"{cid_str(cid)}.", suffix=".part", dir=path.parent)
    tmp = Path(name)
    hasher = UnixfsHasher()  # hashed as it streams in: no second pass before the rename
    tail_task: asyncio.Future[None] | None = None

    def sized_for(known: Arrival) -> Callable[[int], None]:
        def sized(n: int) -> None:
            nonlocal tail_task
            known._update(size=n)
            if n > TAIL_BYTES:  # a small file's tail is the whole of it: read once it is here
                tail_task = asyncio.ensure_future(_fetch_tail(kubo, cid, n, known, timeout))

        return sized

    on_length = sized_for(arrival) if arrival is not None else None
    try:
        if arrival is not None:
            arrival.fd = os.open(tmp, os.O_RDONLY)
        with os.fdopen(fd, "wb") as f:
            async for chunk in kubo.cat(cid, timeout=timeout, on_length=on_length):
                f.write(chunk)
                hasher.update(chunk)
                if arrival is not None:
                    f.flush()  # the decoder reads the file, not this buffer
                    arrival.advance(len(chunk))
        got = hasher.cid()
        if bytes(got) != bytes(cid):
            await _forget(kubo, cid)
            raise SliceCorrupt(f"the bytes fetched for {cid_str(cid)} give {cid_str(got)}: not cached")
        if arrival is not None:
            if arrival.size != arrival.written:
                arrival._update(size=arrival.written)
            await _settle_tail(arrival, tail_task, cid)
        os.replace(tmp, path)
        if arrival is not None and not arrival.settled.done():
            arrival.settled.set_result(None)
    except BaseException as e:
        if arrival is not None:
            arrival.fail(e)
        raise
    finally:
        if tail_task is not None and not tail_task.done():
            tail_task.cancel()
        # after os.replace this is a no-op; on any failure it removes the temp (one local unlink: no thread)
        tmp.unlink(missing_ok=True)  # noqa: ASYNC240
    return path


async def _forget(kubo: BlockStore, cid: CID) -> None:
    """A refused slice leaves our Kubo (its blocks came by bitswap, each true to its own CID, but the file is not
    one of ours): not kept, not served by /ipfs/. A pinned block stays."""
    try:
        await kubo.forget([cid])
    except KuboError as e:
        log.warning("could not drop the refused slice %s from Kubo: %s", cid_str(cid), e.message)


def _decode(arrival: Arrival, visit: SliceVisit, i: int) -> None:
    """On a worker thread: the slice's rows as they arrive, batch by batch, to ``visit``."""
    tail = arrival.wait_tail()
    try:
        parquet = pq.ParquetFile(_Growing(arrival), metadata=_metadata(tail), pre_buffer=False, buffer_size=READ_BUFFER)
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError) as e:
        raise InvalidInput(f"not a readable Parquet slice: {e}") from None
    visit(i, schema, _batches(parquet))


def _batches(parquet: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
    try:
        yield from parquet.iter_batches(batch_size=BATCH_ROWS)
    except (pa.ArrowException, OSError) as e:  # a failed fetch's SliceFetchStopped is neither: it passes as it is
        raise InvalidInput(f"not a readable Parquet slice: {e}") from None


async def _decoded(cid: CID, arrival: Arrival, visit: SliceVisit, i: int) -> None:
    """Decode a slice as it arrives; any verdict waits for its bytes' check, whose failure comes first."""
    try:
        await asyncio.to_thread(_decode, arrival, visit, i)
    except Exception as e:
        await arrival.settled  # raises the fetch's failure: the decode only saw its effects
        if isinstance(e, InvalidInput):
            raise InvalidInput(f"slice {cid_str(cid)}: {e.message}") from None
        raise
    await arrival.settled


async def scan_slices(
    kubo: BlockStore,
    cache_dir: Path,
    cids: list[CID],
    visit: SliceVisit,
    read_cached: Callable[[CID], Awaitable[pa.Table]],
    *,
    timeout: float | None = None,
    done: Callable[[int], None] | None = None,
) -> None:
    """Every slice's rows to ``visit`` (on a worker thread), in order; ``done(i)`` on the loop once slice ``i``
    is decoded and its bytes checked. Slices not in the cache are fetched into it one after the other, back to
    back, at most ``AHEAD`` ahead of the decoder; cached ones are read with ``read_cached``. A slice that does not
    read as Parquet raises InvalidInput naming it; a failed fetch raises as ``fetch_file`` does."""
    paths = [cache_dir / f"{cid_str(c)}.parquet" for c in cids]
    arrivals = [None if p.exists() else Arrival() for p in paths]
    turns: list[asyncio.Event] = [asyncio.Event() for _ in cids]  # set when the decoder starts slice i

    async def fetch_all() -> None:
        for i, (cid, arrival) in enumerate(zip(cids, arrivals, strict=True)):
            if i >= AHEAD:
                await turns[i - AHEAD].wait()
            if arrival is not None:
                await fetch_file(kubo, cid, paths[i], timeout=timeout, arrival=arrival)

    fetcher = asyncio.ensure_future(fetch_all())
    try:
        for i, (cid, arrival) in enumerate(zip(cids, arrivals, strict=True)):
            turns[i].set()
            if arrival is None:
                await _visit_cached(cid, read_cached, visit, i)
            else:
                await _decoded(cid, arrival, visit, i)
            if done is not None:
                done(i)
        await fetcher
    finally:
        fetcher.cancel()
        for a in arrivals:
            if a is not None:
                a.fail(SliceFetchStopped("the scan ended"))
        await asyncio.gather(fetcher, return_exceptions=True)
        for a in arrivals:
            if a is not None:
                a.close()


async def _visit_cached(cid: CID, read_cached: Callable[[CID], Awaitable[pa.Table]], visit: SliceVisit, i: int) -> None:
    try:
        table = await read_cached(cid)
    except InvalidInput as e:
        raise InvalidInput(f"slice {cid_str(cid)}: {e.message}") from None
    await asyncio.to_thread(visit, i, table.schema, (table,))
