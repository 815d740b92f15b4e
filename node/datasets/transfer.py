"""Moving datasets between nodes: the ODF Simple Transfer Protocol (serving and pulling) and pulls by CID.

A pull trusts nothing it receives: every block must hash to its CID, the chain must be continuous and
signed by the key its Seed names, every slice's bytes must give its CID under the same UnixFS
parameters, and its rows must give the logical hash and row count its AddData block claims. The first
failure refuses the whole pull, naming the CID, and nothing of it becomes visible here.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from node.datasets.chain import SliceRef, Version, build_version
from node.datasets.logical_hash import LogicalHasher
from node.datasets.service import Datasets, disk_full_is_507
from node.datasets.slices import read_slice
from node.errors import CairnError, Conflict, InvalidInput, NotFound, PullRefused
from node.index import DatasetRow
from node.ipfs import KuboClient
from node.model import CID, MetadataBlock, Structure, cid_str, decode, decode_object, parse_cid, verify_block
from node.model.names import check_dataset_name, name_problem


@dataclass(frozen=True)
class PullResult:
    name: str
    dataset_id: str
    head: CID
    blocks: int
    slices: int
    bytes: int


class _Source(Protocol):
    """Where a pull reads from: a peer's transfer endpoint or our Kubo."""

    base: str

    async def head(self) -> CID: ...
    async def block(self, cid: CID) -> bytes: ...
    async def data(self, cid: CID, dest: Path) -> None: ...
    async def close(self) -> None: ...


class _HttpSource:
    """A peer's ODF Simple Transfer Protocol endpoint: ``{base}/refs/head``, ``/blocks/{cid}``, ``/data/{cid}``."""

    def __init__(self, base: str, timeout: float) -> None:
        import aiohttp

        self.base = base.rstrip("/")
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout, sock_connect=10)
        )

    async def close(self) -> None:
        await self._session.close()

    async def _get(self, path: str) -> Any:
        import aiohttp

        try:
            resp = await self._session.get(self.base + path)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise PullRefused(f"cannot reach {self.base}: {e or type(e).__name__}") from None
        if resp.status != 200:
            text = (await resp.text(errors="replace"))[:200].replace("\n", " ")
            resp.release()
            raise PullRefused(f"{self.base}{path} answered {resp.status}: {text}")
        return resp

    async def head(self) -> CID:
        resp = await self._get("/refs/head")
        try:  # a foreign answer may be any bytes (issue 15: UnicodeDecodeError was a 500)
            text = (await resp.read()).decode("ascii").strip()
            return parse_cid(text)
        except (UnicodeDecodeError, CairnError):
            raise PullRefused(f"{self.base}/refs/head did not answer a CID") from None

    async def block(self, cid: CID) -> bytes:
        resp = await self._get(f"/blocks/{cid}")
        return await resp.read()

    async def data(self, cid: CID, dest: Path) -> None:
        resp = await self._get(f"/data/{cid}")
        with open(dest, "wb") as f:  # noqa: ASYNC230  a local temp file, written in 1 MiB chunks between reads
            async for chunk in resp.content.iter_chunked(1 << 20):
                f.write(chunk)


class _IpfsSource:
    """The same objects fetched by CID through our Kubo (bitswap), starting from a known head."""

    def __init__(self, kubo: KuboClient, head: CID, timeout: float) -> None:
        self.kubo, self._head, self.timeout = kubo, head, timeout
        self.base = "ipfs"

    async def close(self) -> None:
        pass

    async def head(self) -> CID:
        return self._head

    async def block(self, cid: CID) -> bytes:
        return await self.kubo.block_get(cid, timeout=self.timeout)

    async def data(self, cid: CID, dest: Path) -> None:
        with open(dest, "wb") as f:  # noqa: ASYNC230  a local temp file, written in 1 MiB chunks between reads
            async for chunk in self.kubo.cat(cid, timeout=self.timeout):
                f.write(chunk)


class _Fetcher:
    """Fetches objects from a source, refusing any whose bytes do not hash to its CID; keeps the bytes."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.raw: dict[CID, bytes] = {}

    async def object(self, cid: CID) -> Any:
        data = await self.src.block(cid)
        try:
            verify_block(cid, data)
        except CairnError:
            raise PullRefused(f"block {cid} from {self.src.base} does not match its CID: refused") from None
        self.raw[cid] = data
        try:
            return decode_object(decode(data))
        except CairnError as e:
            raise PullRefused(f"block {cid} from {self.src.base} is not a valid object: {e.message}") from None

    async def chain(self, head: CID) -> list[tuple[CID, MetadataBlock]]:
        """The metadata blocks from ``head`` back to the seed, newest first."""
        blocks: list[tuple[CID, MetadataBlock]] = []
        cid: CID | None = head
        while cid is not None:
            obj = await self.object(cid)
            if not isinstance(obj, MetadataBlock):
                raise PullRefused(f"block {cid} from {self.src.base} is not a metadata block (mb_0)")
            blocks.append((cid, obj))
            cid = obj.prev
            if len(blocks) > 1_000_000:
                raise PullRefused(f"chain of {head} is longer than a million blocks: refused")
        return blocks

    async def structures(self, blocks: list[tuple[CID, MetadataBlock]]) -> dict[CID, Structure]:
        """The structures the chain's SetDataSchema events name."""
        out: dict[CID, Structure] = {}
        for _, b in blocks:
            if b.kind == "SetDataSchema":
                for key in ("structure", "abstract"):
                    obj = await self.object(b.event[key])
                    if not isinstance(obj, Structure):
                        raise PullRefused(f"block {b.event[key]} from {self.src.base} is not a structure (st_0)")
                    out[b.event[key]] = obj
        return out


def _open_source(ds: Datasets, source: str, timeout: float) -> tuple[_Source, str | None]:
    """The source of a pull (a peer's transfer endpoint, or a head CID fetched through Kubo) and its default name."""
    if source.startswith(("http://", "https://")):
        return _HttpSource(source, timeout), source.rstrip("/").rsplit("/", 1)[-1]
    return _IpfsSource(ds.kubo, parse_cid(source), timeout), None


def _refuse_divergence(existing: DatasetRow | None, head: CID, v: Version) -> None:
    """A pull may only move a local dataset forward along its own history."""
    if existing is None or existing.head == cid_str(head):
        return
    if all(cid_str(c) != existing.head for c, _ in v.blocks):
        raise PullRefused(
            f"dataset {existing.name!r} here has head {existing.head}, which the pulled "
            f"chain {head} does not contain: histories diverge"
        )


async def _fetch_slice(ds: Datasets, src: _Source, s: SliceRef, work: Path) -> int:
    """Fetch one slice into the cache, refusing bytes that do not give its CID, logical hash and row count."""
    part = work / f"{s.cid}.parquet"
    await src.data(s.cid, part)
    added = await ds.kubo.add(part, pin=False)  # same UnixFS parameters: same CID or tampered
    if added.cid != s.cid:
        raise PullRefused(f"slice {s.cid} from {src.base} does not match its CID (its bytes give {added.cid}): refused")
    table = await asyncio.to_thread(read_slice, part)
    h = LogicalHasher(table.schema)
    h.update(table)
    if str(h.finish()) != s.logical_hash or table.num_rows != s.rows:
        raise PullRefused(
            f"slice {s.cid} from {src.base}: its rows do not match the logical hash "
            f"and row count its AddData block claims: refused"
        )
    size = part.stat().st_size
    os.replace(part, ds.cache_dir / f"{s.cid}.parquet")
    return size


def _register(
    ds: Datasets, v: Version, head: CID, existing: DatasetRow | None, name: str | None, default_name: str | None
) -> str:
    """Make the pulled head visible under a local name (new dataset, or the existing one moved forward)."""
    if existing is None:
        local = name or default_name or v.info.get("title") or v.dataset_id
        # A name from the source (URL tail, title) that could not be typed here gives way to the id (issue 15).
        if name_problem(local) or ds.index.dataset(local) is not None:
            local = name or v.dataset_id.removeprefix("did:key:")
        if ds.index.dataset(local) is not None:
            raise InvalidInput(f"a dataset named {local!r} exists here already: pull with --name")
        ds.index.create_dataset(local, v.dataset_id, cid_str(head), None, "")
        return local
    if existing.head != cid_str(head) and not ds.index.move_head(existing.name, existing.head, cid_str(head)):
        raise Conflict(f"dataset {existing.name!r} moved while pulling; nothing was changed")
    return existing.name


async def pull(ds: Datasets, source: str, *, name: str | None = None, timeout: float = 60.0) -> PullResult:
    """Pull a dataset (chain, structures, slices), check all of it, then store it and make it visible here."""
    if name is not None:
        check_dataset_name(name)  # before anything is fetched
    src, default_name = _open_source(ds, source, timeout)
    work = Path(tempfile.mkdtemp(prefix="pull-", dir=ds.tmp_dir))
    try:
        with disk_full_is_507("the pull", ds.tmp_dir):
            return await _pull(ds, src, default_name, name, work)
    finally:
        await src.close()
        shutil.rmtree(work, ignore_errors=True)


async def _pull(ds: Datasets, src: _Source, default_name: str | None, name: str | None, work: Path) -> PullResult:
    """Fetch and check everything, then store it and make it visible (the work of ``pull``)."""
    head = await src.head()
    fetcher = _Fetcher(src)
    blocks = await fetcher.chain(head)
    structures = await fetcher.structures(blocks)
    try:
        v = build_version(head, blocks, structures)
    except CairnError as e:
        raise PullRefused(f"chain of {head} from {src.base} refused: {e.message}") from None
    existing = ds.index.dataset_by_id(v.dataset_id)
    _refuse_divergence(existing, head, v)
    total_bytes = 0
    for s in v.slices:
        if not (ds.cache_dir / f"{s.cid}.parquet").exists():
            total_bytes += await _fetch_slice(ds, src, s, work)
    # Everything checked: only now does any of it reach Kubo and the caches.
    for c, data in fetcher.raw.items():
        await ds.kubo.block_put(data, codec=c.codec.name)
    await ds.kubo.pin_add(head, recursive=True)
    ds.remember(blocks, structures)
    local = _register(ds, v, head, existing, name, default_name)
    return PullResult(local, v.dataset_id, head, len(fetcher.raw), len(v.slices), total_bytes)


async def block_of_dataset(ds: Datasets, ref: str, cid: CID) -> bytes:
    """A block of the dataset's chain (or one of its structures), for the transfer protocol."""
    _, v = await ds.resolve(ref)
    members = {c for c, _ in v.blocks}
    members |= {b.event[k] for _, b in v.blocks if b.kind == "SetDataSchema" for k in ("structure", "abstract")}
    if cid not in members:
        raise NotFound(f"{cid} is not a block of dataset {ref}")
    return await ds.kubo.block_get(cid)


async def slice_of_dataset(ds: Datasets, ref: str, cid: CID) -> Path:
    _, v = await ds.resolve(ref)
    for s in v.slices:
        if s.cid == cid:
            return await ds.slice_path(s)
    raise NotFound(f"{cid} is not a data slice of dataset {ref}")
