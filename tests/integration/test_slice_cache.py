"""The CID-keyed slice cache (issue 12 item 4) against a real Kubo: concurrent and cancelled fetches, hashing
before the rename, and re-verification of a cached file that is suspect."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.datasets import Datasets, SliceRef
from node.datasets.slices import write_parquet_slice
from node.errors import SliceCorrupt
from node.index import Index
from node.ipfs import KuboClient
from node.ipfs.client import CHUNK_SIZE
from node.ipfs.unixfs import UnixfsHasher
from node.model import CID, cid_str


def _datasets(kubo: KuboClient, home: Path) -> Datasets:
    return Datasets(kubo, Index(home / "index.sqlite"), home)


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
    ds.kubo = slow  # type: ignore[assignment]
    task = asyncio.ensure_future(ds.slice_path(ref, timeout=60))
    await asyncio.wait_for(slow.first_chunk.wait(), 60)  # bytes are being written to a temp file
    assert _leftovers(ds), "the fetch writes to a temp file first"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _leftovers(ds) == [] and not (ds.cache_dir / f"{cid_str(cid)}.parquet").exists()
    ds.kubo = kubo_client
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
    ds.kubo = slow  # type: ignore[assignment]
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
    ds.kubo = _FlippingKubo(kubo_client)  # type: ignore[assignment]
    with pytest.raises(SliceCorrupt):
        await ds.cid_path(cid, timeout=60)
    assert not (ds.cache_dir / f"{cid_str(cid)}.parquet").exists() and _leftovers(ds) == []


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
