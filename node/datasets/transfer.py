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
from typing import Any

from node.datasets.chain import build_version
from node.datasets.logical_hash import LogicalHasher
from node.datasets.service import Datasets
from node.datasets.slices import read_slice
from node.errors import CairnError, Conflict, InvalidInput, NotFound, PullRefused
from node.ipfs import KuboClient
from node.model import CID, MetadataBlock, Structure, cid_str, decode, decode_object, parse_cid, verify_block


@dataclass(frozen=True)
class PullResult:
    name: str
    dataset_id: str
    head: CID
    blocks: int
    slices: int
    bytes: int


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
            text = (await resp.text())[:200].replace("\n", " ")
            resp.release()
            raise PullRefused(f"{self.base}{path} answered {resp.status}: {text}")
        return resp

    async def head(self) -> CID:
        resp = await self._get("/refs/head")
        return parse_cid((await resp.text()).strip())

    async def block(self, cid: CID) -> bytes:
        resp = await self._get(f"/blocks/{cid}")
        return await resp.read()

    async def data(self, cid: CID, dest: Path) -> None:
        resp = await self._get(f"/data/{cid}")
        with open(dest, "wb") as f:
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
        with open(dest, "wb") as f:
            async for chunk in self.kubo.cat(cid, timeout=self.timeout):
                f.write(chunk)


async def pull(ds: Datasets, source: str, *, name: str | None = None, timeout: float = 60.0) -> PullResult:

    if source.startswith(("http://", "https://")):
        src: Any = _HttpSource(source, timeout)
        default_name = source.rstrip("/").rsplit("/", 1)[-1]
    else:
        src = _IpfsSource(ds.kubo, parse_cid(source), timeout)
        default_name = None
    work = Path(tempfile.mkdtemp(prefix="pull-", dir=ds.tmp_dir))
    try:
        head = await src.head()
        raw: dict[CID, bytes] = {}

        async def fetch(cid: CID) -> Any:
            data = await src.block(cid)
            try:
                verify_block(cid, data)
            except CairnError:
                raise PullRefused(f"block {cid} from {src.base} does not match its CID: refused") from None
            raw[cid] = data
            try:
                return decode_object(decode(data))
            except CairnError as e:
                raise PullRefused(f"block {cid} from {src.base} is not a valid object: {e.message}") from None

        blocks: list[tuple[CID, MetadataBlock]] = []
        cid: CID | None = head
        while cid is not None:
            obj = await fetch(cid)
            if not isinstance(obj, MetadataBlock):
                raise PullRefused(f"block {cid} from {src.base} is not a metadata block (mb_0)")
            blocks.append((cid, obj))
            cid = obj.prev
            if len(blocks) > 1_000_000:
                raise PullRefused(f"chain of {head} is longer than a million blocks: refused")
        structures: dict[CID, Structure] = {}
        for _, b in blocks:
            if b.kind == "SetDataSchema":
                for key in ("structure", "abstract"):
                    obj = await fetch(b.event[key])
                    if not isinstance(obj, Structure):
                        raise PullRefused(f"block {b.event[key]} from {src.base} is not a structure (st_0)")
                    structures[b.event[key]] = obj
        try:
            v = build_version(head, blocks, structures)
        except CairnError as e:
            raise PullRefused(f"chain of {head} from {src.base} refused: {e.message}") from None

        existing = ds.index.dataset_by_id(v.dataset_id)
        if (
            existing is not None
            and existing.head != cid_str(head)
            and all(cid_str(c) != existing.head for c, _ in v.blocks)
        ):
            raise PullRefused(
                f"dataset {existing.name!r} here has head {existing.head}, which the pulled "
                f"chain {head} does not contain: histories diverge"
            )

        total_bytes = 0
        for s in v.slices:
            cached = ds.cache_dir / f"{s.cid}.parquet"
            if cached.exists():
                continue
            part = work / f"{s.cid}.parquet"
            await src.data(s.cid, part)
            total_bytes += part.stat().st_size
            added = await ds.kubo.add(part, pin=False)  # same UnixFS parameters: same CID or tampered
            if added.cid != s.cid:
                raise PullRefused(
                    f"slice {s.cid} from {src.base} does not match its CID (its bytes give {added.cid}): refused"
                )
            table = await asyncio.to_thread(read_slice, part)
            h = LogicalHasher(table.schema)
            h.update(table)
            if str(h.finish()) != s.logical_hash or table.num_rows != s.rows:
                raise PullRefused(
                    f"slice {s.cid} from {src.base}: its rows do not match the logical hash "
                    f"and row count its AddData block claims: refused"
                )
            os.replace(part, cached)
        for c, data in raw.items():
            await ds.kubo.block_put(data, codec=c.codec.name)
        await ds.kubo.pin_add(head, recursive=True)
        for c, b in blocks:
            ds._blocks[c] = b
        ds._structures.update(structures)

        if existing is None:
            local = name or default_name or v.info.get("title") or v.dataset_id
            if local.startswith("did:") or ds.index.dataset(local) is not None:
                local = name or v.dataset_id.removeprefix("did:key:")
            if ds.index.dataset(local) is not None:
                raise InvalidInput(f"a dataset named {local!r} exists here already: pull with --name")
            ds.index.create_dataset(local, v.dataset_id, cid_str(head), None, "")
        elif existing.head != cid_str(head):
            if not ds.index.move_head(existing.name, existing.head, cid_str(head)):
                raise Conflict(f"dataset {existing.name!r} moved while pulling; nothing was changed")
            local = existing.name
        else:
            local = existing.name
        return PullResult(local, v.dataset_id, head, len(raw), len(v.slices), total_bytes)
    finally:
        await src.close()
        shutil.rmtree(work, ignore_errors=True)


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
