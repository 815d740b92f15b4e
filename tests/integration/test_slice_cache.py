"""The CID-keyed slice cache against a real Kubo: concurrent and cancelled fetches, hashing
before the rename, and re-verification of a cached file that is suspect; slices decoded while they arrive, which
count only once their bytes gave their CID."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.adapters.index import Index
from node.adapters.ipfs import KuboClient, ManagedKubo
from node.adapters.ipfs.rpc_files import CHUNK_SIZE
from node.adapters.ipfs.unixfs import UnixfsHasher
from node.domain.model import CID, cid_str
from node.services.datasets import Datasets, LogicalHasher, SliceRef
from node.services.datasets.fetching import SliceVisit
from node.services.datasets.logical_hash import logical_hash
from node.services.datasets.slices import write_parquet_slice
from node.support.errors import InvalidInput, KuboNotFound, SliceCorrupt


def _datasets(kubo: KuboClient, home: Path) -> Datasets:
    return Datasets(kubo, Index(home / "index.sqlite").catalog, home)


def _leftovers(ds: Datasets) -> list[str]:
    return sorted(p.name for p in ds.cache_dir.iterdir() if p.name.endswith(".part"))


async def _add_bytes(kubo: KuboClient, path: Path, data: bytes) -> CID:
    await asyncio.to_thread(path.write_bytes, data)
    return (await kubo.add(path, pin=True)).cid


async def test_concurrent_fetches_of_one_slice(kubo_client: KuboClient, tmp_path: Path) -> None:
    """Eight coroutines fetch the same 3.5 MiB slice at once: each gets the exact bytes, no temp is left."""
    data = os.urandom(3 * CHUNK_SIZE + 12345)
    cid = await _add_bytes(kubo_client, tmp_path / "src.bin", data)
    ds = _datasets(kubo_client, tmp_path / "home")
    ref = SliceRef(cid, 0, len(data), "", 0)
    paths = await asyncio.gather(*(ds.slice_path(ref, timeout=60) for _ in range(8)))
    assert {str(p) for p in paths} == {str(ds.cache_dir / f"{cid_str(cid)}.parquet")}
    assert paths[0].read_bytes() == data
    assert _leftovers(ds) == []


async def test_cancelled_fetch_leaves_nothing(kubo_client: KuboClient, tmp_path: Path) -> None:
    data = os.urandom(8 * CHUNK_SIZE)
    cid = await _add_bytes(kubo_client, tmp_path / "src.bin", data)
    ds = _datasets(kubo_client, tmp_path / "home")
    ref = SliceRef(cid, 0, len(data), "", 0)
    slow = _SlowKubo(kubo_client)
    ds.cache.kubo = slow  # type: ignore[assignment]
    task = asyncio.ensure_future(ds.slice_path(ref, timeout=60))
    await asyncio.wait_for(slow.first_chunk.wait(), 60)  # bytes are being written to a temp file
    assert _leftovers(ds), "the fetch writes to a temp file first"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _leftovers(ds) == [] and not (ds.cache_dir / f"{cid_str(cid)}.parquet").exists()
    ds.cache.kubo = kubo_client
    assert (await ds.slice_path(ref, timeout=60)).read_bytes() == data


async def test_cancelled_and_concurrent_fetches_never_cache_a_partial_file(
    kubo_client: KuboClient, tmp_path: Path
) -> None:
    """One fetch cancelled while another of the same CID runs: the cached file is whole."""
    data = os.urandom(5 * CHUNK_SIZE + 7)
    cid = await _add_bytes(kubo_client, tmp_path / "src.bin", data)
    ds = _datasets(kubo_client, tmp_path / "home")
    ref = SliceRef(cid, 0, len(data), "", 0)
    slow = _SlowKubo(kubo_client)
    ds.cache.kubo = slow  # type: ignore[assignment]
    doomed = asyncio.ensure_future(ds.slice_path(ref, timeout=60))
    await asyncio.wait_for(slow.first_chunk.wait(), 60)
    survivor = asyncio.ensure_future(ds.slice_path(ref, timeout=60))
    await asyncio.sleep(0)
    doomed.cancel()
    path = await survivor
    assert path.read_bytes() == data and _leftovers(ds) == []


async def test_bytes_that_do_not_give_the_cid_never_enter_the_cache(kubo_client: KuboClient, tmp_path: Path) -> None:
    data = os.urandom(2 * CHUNK_SIZE)
    cid = await _add_bytes(kubo_client, tmp_path / "src.bin", data)
    ds = _datasets(kubo_client, tmp_path / "home")
    ds.cache.kubo = _FlippingKubo(kubo_client)  # type: ignore[assignment]
    with pytest.raises(SliceCorrupt):
        await ds.cid_path(cid, timeout=60)
    assert not (ds.cache_dir / f"{cid_str(cid)}.parquet").exists() and _leftovers(ds) == []


async def test_a_refused_slice_leaves_kubo_unless_pinned(kubo: ManagedKubo, tmp_path: Path) -> None:
    """A slice whose bytes do not give its CID is refused and dropped from Kubo (not kept, not served by /ipfs/),
    every block of it; a pinned one stays, whatever a fetch made of it. A Kubo of its own: before it removes a block
    Kubo walks the pinned DAGs to prove it unpinned, and on the daemon the whole suite shares (everything pinned so
    far) the removal once did not happen within the client's timeout; the node then keeps the blocks and logs
    why, which is what this test would see."""
    async with kubo.client(timeout=20.0) as kubo_client:
        await _refused_slices_leave(kubo_client, tmp_path)


async def _refused_slices_leave(kubo_client: KuboClient, tmp_path: Path) -> None:
    ds = _datasets(kubo_client, tmp_path / "home")
    ds.cache.kubo = _FlippingKubo(kubo_client)  # type: ignore[assignment]
    for pin in (False, True):
        path = tmp_path / f"src-{pin}.bin"
        await asyncio.to_thread(path.write_bytes, os.urandom(2 * CHUNK_SIZE + 5))
        cid = (await kubo_client.add(path, pin=pin)).cid
        blocks = [cid, *await kubo_client.refs(cid)]
        assert len(blocks) == 4  # a root over three leaves
        with pytest.raises(SliceCorrupt):
            await ds.cid_path(cid, timeout=60)
        held = [c for c in blocks if await _held(kubo_client, c)]
        assert held == (blocks if pin else []), (pin, held)


async def _held(kubo: KuboClient, cid: CID) -> bool:
    try:
        await kubo.block_stat(cid, offline=True)
    except KuboNotFound:
        return False
    return True


async def test_corrupt_cached_slice_is_verified_and_fetched_again(kubo_client: KuboClient, tmp_path: Path) -> None:
    table = pa.table({"k": pa.array(range(5000), pa.int64()), "v": pa.array([f"x{i}" for i in range(5000)])})
    src = tmp_path / "slice.parquet"
    write_parquet_slice(table, str(src))
    cid = (await kubo_client.add(src, pin=True)).cid
    ds = _datasets(kubo_client, tmp_path / "home")
    cached = ds.cache_dir / f"{cid_str(cid)}.parquet"
    good = src.read_bytes()
    cached.write_bytes(good[:-64] + b"\0" * 64)  # same size, a hole over the footer: unreadable
    got = await ds.read_cid(cid, timeout=60)
    assert got.equals(pq.read_table(src)) and cached.read_bytes() == good  # pyarrow on the original: the oracle
    cached.write_bytes(good[: len(good) // 2])  # truncated: the known size gives it away before any read
    assert (await ds.slice_path(SliceRef(cid, 0, len(good), "", 0), timeout=60)).read_bytes() == good


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.one_of(
        st.integers(0, 4096), st.integers(CHUNK_SIZE - 2, CHUNK_SIZE + 2), st.integers(CHUNK_SIZE + 3, 5 * CHUNK_SIZE)
    ),
    piece=st.integers(1, 3 * CHUNK_SIZE),
)
async def test_unixfs_cid_equals_kubo(kubo_client: KuboClient, tmp_path: Path, size: int, piece: int) -> None:
    """The CID the cache checks against, computed here while bytes stream in (any piece sizes) and from a file,
    is the CID Kubo's own add gives the same bytes."""
    data = os.urandom(size)
    path = tmp_path / f"f{size}.bin"
    path.write_bytes(data)
    kubo_cid = (await kubo_client.add(path, pin=False, only_hash=True)).cid
    hasher = UnixfsHasher()
    for i in range(0, size, piece):
        hasher.update(data[i : i + piece])
    assert bytes(hasher.cid()) == bytes(kubo_cid)
    assert bytes(await _datasets(kubo_client, tmp_path / "home").file_cid(path)) == bytes(kubo_cid)


@pytest.mark.parametrize("chunks", [174, 175])
async def test_unixfs_cid_of_a_two_level_tree_equals_kubo(kubo_client: KuboClient, tmp_path: Path, chunks: int) -> None:
    """Past 174 chunks Kubo's balanced layout grows a second level of nodes."""
    path = tmp_path / "big.bin"
    await asyncio.to_thread(path.write_bytes, os.urandom(CHUNK_SIZE * chunks) + b"tail")
    kubo_cid = (await kubo_client.add(path, pin=False, only_hash=True)).cid
    assert bytes(await _datasets(kubo_client, tmp_path / "home").file_cid(path)) == bytes(kubo_cid)


def _big_slice(path: Path, rows: int = 200_000) -> pa.Table:
    """A few MiB of Parquet in several row groups (ids and incompressible strings)."""
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "s": pa.array([os.urandom(12).hex() for _ in range(rows)]),
        }
    )
    pq.write_table(table, str(path), row_group_size=rows // 4, compression="zstd")
    return table


def _hash_visit(hashers: dict[int, LogicalHasher], seen: list[int]) -> SliceVisit:
    def visit(i: int, schema: pa.Schema, rows: Iterable[pa.RecordBatch | pa.Table]) -> None:
        hashers[i] = LogicalHasher(schema)
        for batch in rows:
            hashers[i].update(batch)
            seen.append(i)

    return visit


async def test_scan_decodes_a_slice_while_its_bytes_arrive(kubo_client: KuboClient, tmp_path: Path) -> None:
    """The transfer of a slice is held at half its bytes until its first rows are decoded: they are (the footer is
    asked first), the scan ends with every slice's rows hashed as pyarrow reads them, and the slices cached."""
    big = _big_slice(tmp_path / "big.parquet")
    small = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": pa.array(["a", "b", None])})
    write_parquet_slice(small, str(tmp_path / "small.parquet"))
    cids = [(await kubo_client.add(tmp_path / n, pin=True)).cid for n in ("big.parquet", "small.parquet")]
    ds = _datasets(kubo_client, tmp_path / "home")
    gated = _GatedKubo(kubo_client, (tmp_path / "big.parquet").stat().st_size // 2)
    ds.cache.kubo = gated  # type: ignore[assignment]
    loop = asyncio.get_running_loop()
    hashers: dict[int, LogicalHasher] = {}
    seen: list[int] = []
    visit = _hash_visit(hashers, seen)

    def opening(i: int, schema: pa.Schema, rows: Iterable[pa.RecordBatch | pa.Table]) -> None:
        def opened() -> Iterator[pa.RecordBatch | pa.Table]:
            for n, batch in enumerate(rows):
                yield batch
                if n == 0:
                    loop.call_soon_threadsafe(gated.decoded.set)

        visit(i, schema, opened())

    done: list[int] = []
    await ds.scan_slices(cids, opening, timeout=60, done=done.append)
    assert gated.held, "the transfer was held until the first rows were decoded"
    assert done == [0, 1] and sorted(set(seen)) == [0, 1]
    assert hashers[0].finish() == logical_hash(big) and hashers[1].finish() == logical_hash(small)
    assert all(ds.cached(c) for c in cids) and _leftovers(ds) == []
    # Cached now: read from the cache, same rows.
    again: dict[int, LogicalHasher] = {}
    await ds.scan_slices(cids, _hash_visit(again, []), timeout=60)
    assert again[0].finish() == logical_hash(big)


async def test_scan_refuses_bytes_that_do_not_give_the_cid(kubo_client: KuboClient, tmp_path: Path) -> None:
    _big_slice(tmp_path / "big.parquet")
    cid = (await kubo_client.add(tmp_path / "big.parquet", pin=True)).cid
    ds = _datasets(kubo_client, tmp_path / "home")
    ds.cache.kubo = _FlippingKubo(kubo_client)  # type: ignore[assignment]
    with pytest.raises(SliceCorrupt):
        await ds.scan_slices([cid], _hash_visit({}, []), timeout=60)
    assert not ds.cached(cid) and _leftovers(ds) == []


async def test_scan_refuses_a_footer_that_is_not_the_files(kubo_client: KuboClient, tmp_path: Path) -> None:
    """The footer is asked of Kubo apart from the file's bytes: one that is not their end is refused even though
    the file's bytes give its CID."""
    _big_slice(tmp_path / "big.parquet")
    cid = (await kubo_client.add(tmp_path / "big.parquet", pin=True)).cid
    ds = _datasets(kubo_client, tmp_path / "home")
    ds.cache.kubo = _TailLyingKubo(kubo_client)  # type: ignore[assignment]
    with pytest.raises(SliceCorrupt, match="footer"):
        await ds.scan_slices([cid], _hash_visit({}, []), timeout=60)
    assert not ds.cached(cid) and _leftovers(ds) == []


async def test_scan_of_bytes_that_are_not_parquet_names_the_slice(kubo_client: KuboClient, tmp_path: Path) -> None:
    for size in (100, 3 * CHUNK_SIZE):  # a tail read from the file, and one asked of Kubo
        cid = await _add_bytes(kubo_client, tmp_path / f"junk{size}.bin", os.urandom(size))
        ds = _datasets(kubo_client, tmp_path / f"home{size}")
        with pytest.raises(InvalidInput, match=f"slice {cid_str(cid)}: not a readable Parquet slice"):
            await ds.scan_slices([cid], _hash_visit({}, []), timeout=60)
        assert _leftovers(ds) == []


async def test_cancelled_scan_leaves_nothing(kubo_client: KuboClient, tmp_path: Path) -> None:
    _big_slice(tmp_path / "big.parquet")
    cid = (await kubo_client.add(tmp_path / "big.parquet", pin=True)).cid
    ds = _datasets(kubo_client, tmp_path / "home")
    slow = _SlowKubo(kubo_client)
    ds.cache.kubo = slow  # type: ignore[assignment]
    task = asyncio.ensure_future(ds.scan_slices([cid], _hash_visit({}, []), timeout=60))
    await asyncio.wait_for(slow.first_chunk.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _leftovers(ds) == [] and not ds.cached(cid)


class _SlowKubo:
    """The real client, with ``cat`` slowed after its first chunk so a test can cancel mid-transfer."""

    def __init__(self, real: KuboClient) -> None:
        self.real = real
        self.first_chunk = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def cat(self, cid: Any, **kw: Any) -> AsyncIterator[bytes]:
        async for chunk in self.real.cat(cid, **kw):
            yield chunk
            self.first_chunk.set()
            await asyncio.sleep(0.01)


class _FlippingKubo(_SlowKubo):
    """The real client, with one byte of ``cat``'s output flipped: what a broken transfer would give."""

    async def cat(self, cid: Any, **kw: Any) -> AsyncIterator[bytes]:
        first = True
        async for chunk in self.real.cat(cid, **kw):
            if first and chunk:
                chunk, first = bytes([chunk[0] ^ 1]) + chunk[1:], False
            yield chunk


class _GatedKubo(_SlowKubo):
    """The real client, with a file's ``cat`` held once ``hold_at`` bytes are out until ``decoded`` is set (at
    most 60 s: a decoder that needs the last byte first fails the test instead of hanging it)."""

    def __init__(self, real: KuboClient, hold_at: int) -> None:
        super().__init__(real)
        self.hold_at, self.held = hold_at, False
        self.decoded = asyncio.Event()

    async def cat(self, cid: Any, **kw: Any) -> AsyncIterator[bytes]:
        out = 0
        async for chunk in self.real.cat(cid, **kw):
            yield chunk
            out += len(chunk)
            if kw.get("offset") is None and out >= self.hold_at and not self.decoded.is_set():
                await asyncio.wait_for(self.decoded.wait(), 60)
                self.held = True


class _TailLyingKubo(_SlowKubo):
    """The real client, whose ``cat`` of a file's tail (an offset asked) answers other bytes than the file's."""

    async def cat(self, cid: Any, **kw: Any) -> AsyncIterator[bytes]:
        tail = kw.get("offset") is not None
        async for chunk in self.real.cat(cid, **kw):
            yield bytes(len(chunk) - 4) + chunk[-4:] if tail else chunk
