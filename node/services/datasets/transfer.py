"""Moving datasets between nodes: the ODF Simple Transfer Protocol (serving and pulling) and pulls by CID.

A pull trusts nothing it receives: every block must hash to its CID, the chain must be continuous and
signed by the key its Seed names, every slice's bytes must give its CID under the same UnixFS
parameters, and its rows must give the logical hash and row count its AddData block claims. The first
failure refuses the whole pull, naming the CID, and nothing of it becomes visible here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from node.adapters.index import DatasetRow
from node.adapters.ipfs.unixfs import CHUNK, UnixfsHasher
from node.domain.model import (
    CID,
    MAX_BLOCK_BYTES,
    MetadataBlock,
    Structure,
    cid_str,
    decode,
    decode_object,
    parse_cid,
    verify_block,
)
from node.domain.model.names import check_dataset_name, name_problem
from node.domain.ports.block_store import BlockStore
from node.services.datasets.chain import SliceRef, Version, build_version
from node.services.datasets.facade import Datasets
from node.services.datasets.logical_hash import LogicalHasher
from node.services.datasets.readers import InputLimits, check_parquet_file
from node.services.datasets.slices import read_slice
from node.services.datasets.workdirs import disk_full_is_507
from node.support.errors import (
    CairnError,
    Conflict,
    InsufficientStorage,
    InvalidInput,
    KuboCIDMismatch,
    KuboError,
    KuboNotFound,
    NotFound,
    PullCancelled,
    PullRefused,
    PullTimeout,
    TooLarge,
    one_line,
)

log = logging.getLogger("cairn.datasets")


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
    async def data(self, cid: CID, dest: Path, limit: int) -> None: ...
    async def discard(self) -> None: ...
    async def close(self) -> None: ...


# Caps on what a source may send (a source must not fill memory or disk). A head is one CID; a block is
# at most what our codec writes (node.domain.model.MAX_BLOCK_BYTES); a slice at most the size its AddData block claims.
_MAX_HEAD_BYTES = 4096
_MAX_SLICE_BYTES = 4 << 30  # a slice whose block claims no size (0)
_MAX_CHAIN_BYTES = 256 << 20  # metadata blocks and structures of one pull, held in memory until checked
_MAX_REDIRECTS = 3


def _origin(url: Any) -> tuple[str, str, int | None]:
    return (url.scheme, (url.host or "").lower(), url.port)


def _redirect_target(url: Any, location: str | None) -> Any:
    """Where a redirect points, resolved against ``url``; None when it names nowhere usable."""
    from yarl import URL

    try:
        return url.join(URL(location)) if location else None
    except (ValueError, TypeError):  # yarl refuses a malformed Location
        return None


def _why(e: BaseException) -> str:
    """What went wrong reaching a source, without its bytes: aiohttp's response errors quote what the source sent
    (a bad header, a bad status line), so only connection errors keep their (local) text."""
    import aiohttp

    if isinstance(e, (aiohttp.ClientConnectorError, ConnectionError)) or type(e) is OSError:
        return one_line(e, 200)
    if isinstance(e, TimeoutError):
        return "no answer within datasets.pull_timeout"
    return type(e).__name__


class _HttpSource:
    """A peer's ODF Simple Transfer Protocol endpoint: ``{base}/refs/head``, ``/blocks/{cid}``, ``/data/{cid}``.

    Nothing it sends is echoed in an error (it may be any bytes, made to mislead a reader): messages say what was
    wrong (status, size, "not a CID").
    Redirects are followed only within the source's origin (scheme, host, port), at most ``_MAX_REDIRECTS``."""

    def __init__(self, base: str, timeout: float) -> None:
        import aiohttp

        self.base = base.rstrip("/")
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout, sock_connect=10)
        )

    async def close(self) -> None:
        await self._session.close()

    async def discard(self) -> None:
        """Nothing to drop: what this source sends reaches Kubo only once the whole pull is checked."""

    async def _get(self, path: str) -> Any:
        from yarl import URL

        url = URL(self.base + path)
        for _ in range(_MAX_REDIRECTS + 1):
            resp = await self._request(url)
            if resp.status not in (301, 302, 303, 307, 308):
                break
            resp.release()
            target = _redirect_target(url, resp.headers.get("Location"))
            if target is None or _origin(target) != _origin(url):
                raise PullRefused(
                    f"{self.base}{path} redirected to another origin (scheme, host or port) or nowhere: refused"
                )
            url = target
        else:
            raise PullRefused(f"{self.base}{path} redirected more than {_MAX_REDIRECTS} times: refused")
        if resp.status != 200:
            resp.release()
            raise PullRefused(f"{self.base}{path} answered HTTP {resp.status}")
        return resp

    async def _request(self, url: Any) -> Any:
        import aiohttp

        try:
            return await self._session.get(url, allow_redirects=False)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise PullRefused(f"cannot reach {self.base}: {_why(e)}") from None

    async def _fetch(self, path: str, limit: int, sink: Callable[[bytes], object]) -> None:
        """Hand the body to ``sink`` chunk by chunk, refused once it passes ``limit`` bytes (or says it will)."""
        import aiohttp

        resp = await self._get(path)
        try:
            if (resp.content_length or 0) > limit:
                raise PullRefused(f"{self.base}{path} announced {resp.content_length} bytes, over {limit}: refused")
            size = 0
            async for chunk in resp.content.iter_chunked(1 << 20):
                size += len(chunk)
                if size > limit:
                    raise PullRefused(f"{self.base}{path} sent more than {limit} bytes: refused")
                sink(chunk)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise PullRefused(f"{self.base}{path} broke off: {_why(e)}") from None
        finally:
            resp.release()

    async def _read(self, path: str, limit: int) -> bytes:
        parts: list[bytes] = []
        await self._fetch(path, limit, parts.append)
        return b"".join(parts)

    async def head(self) -> CID:
        data = await self._read("/refs/head", _MAX_HEAD_BYTES)
        try:  # a foreign answer may be any bytes (UnicodeDecodeError was a 500; never echoed)
            return parse_cid(data.decode("ascii").strip())
        except (UnicodeDecodeError, CairnError):
            raise PullRefused(f"{self.base}/refs/head answered {len(data)} bytes that are not a CID") from None

    async def block(self, cid: CID) -> bytes:
        return await self._read(f"/blocks/{cid}", MAX_BLOCK_BYTES)

    async def data(self, cid: CID, dest: Path, limit: int) -> None:
        with open(dest, "wb") as f:  # noqa: ASYNC230  a local temp file, written in 1 MiB chunks between reads
            await self._fetch(f"/data/{cid}", limit, f.write)


class _IpfsSource:
    """The same objects fetched by CID through our Kubo (bitswap), starting from a known head."""

    def __init__(self, kubo: BlockStore, head: CID, timeout: float) -> None:
        self.kubo, self._head, self.timeout = kubo, head, timeout
        self.base = "ipfs"
        self.brought: list[CID] = []  # what our Kubo fetched for this pull and did not hold before

    async def close(self) -> None:
        pass

    async def discard(self) -> None:
        """A refused pull: drop from our Kubo what it fetched for it (bitswap stores every block it fetches), so that
        nothing refused is kept or served by /ipfs/ (a pinned block stays: Kubo refuses to remove it)."""
        brought, self.brought = self.brought, []
        await self.kubo.forget(brought, timeout=self.timeout)

    async def _note(self, cid: CID) -> None:
        try:
            await self.kubo.block_stat(cid, timeout=self.timeout, offline=True)
        except KuboNotFound:
            self.brought.append(cid)

    async def head(self) -> CID:
        return self._head

    async def block(self, cid: CID) -> bytes:
        await self._note(cid)
        return await self.kubo.block_get(cid, timeout=self.timeout)

    async def data(self, cid: CID, dest: Path, limit: int) -> None:
        await self._note(cid)
        size = 0
        with open(dest, "wb") as f:  # noqa: ASYNC230  a local temp file, written in 1 MiB chunks between reads
            async for chunk in self.kubo.cat(cid, timeout=self.timeout):
                size += len(chunk)
                if size > limit:
                    raise PullRefused(f"slice {cid} through IPFS is larger than the {limit} bytes claimed: refused")
                f.write(chunk)


class _Fetcher:
    """Fetches objects from a source, refusing any whose bytes do not hash to its CID; keeps the bytes."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.raw: dict[CID, bytes] = {}
        self.held = 0  # bytes in ``raw``

    async def object(self, cid: CID) -> Any:
        data = await self.src.block(cid)
        try:
            verify_block(cid, data)
        except CairnError:
            raise PullRefused(f"block {cid} from {self.src.base} does not match its CID: refused") from None
        self.held += len(data)
        if self.held > _MAX_CHAIN_BYTES:
            raise PullRefused(f"the chain from {self.src.base} holds more than {_MAX_CHAIN_BYTES} bytes: refused")
        self.raw[cid] = data
        try:
            return decode_object(decode(data))
        except CairnError as e:  # its kind only: the decoder's message may quote the foreign bytes
            raise PullRefused(f"block {cid} from {self.src.base} is not a valid object ({type(e).__name__})") from None

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


def _open_source(ds: Datasets, source: str, timeout: float, brought: Sequence[CID]) -> tuple[_Source, str | None]:
    """The source of a pull (a peer's transfer endpoint, or a head CID fetched through Kubo) and its default name."""
    if source.startswith(("http://", "https://")):
        return _HttpSource(source, timeout), source.rstrip("/").rsplit("/", 1)[-1]
    src = _IpfsSource(ds.kubo, parse_cid(source), timeout)
    src.brought.extend(brought)
    return src, None


def _refuse_divergence(existing: DatasetRow | None, head: CID, v: Version) -> None:
    """A pull may only move a local dataset forward along its own history."""
    if existing is None or existing.head == cid_str(head):
        return
    if all(cid_str(c) != existing.head for c, _ in v.blocks):
        raise PullRefused(
            f"dataset {existing.name!r} here has head {existing.head}, which the pulled "
            f"chain {head} does not contain: histories diverge"
        )


def _file_cid(path: Path) -> CID:
    """The CID Kubo's ``add`` gives the file (node.adapters.ipfs.unixfs), computed here: refused bytes never reach
    Kubo."""
    hasher = UnixfsHasher()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
    return hasher.cid()


async def _fetch_slice(ds: Datasets, src: _Source, s: SliceRef, work: Path) -> int:
    """Fetch one slice into the cache, refusing bytes that do not give its CID, logical hash and row count."""
    part = work / f"{s.cid}.parquet"
    await src.data(s.cid, part, s.size or _MAX_SLICE_BYTES)
    got = await asyncio.to_thread(_file_cid, part)  # same UnixFS parameters: same CID or tampered
    if got != s.cid:
        raise PullRefused(f"slice {s.cid} from {src.base} does not match its CID (its bytes give {got}): refused")
    # Within the ingest caps before it is decoded whole: a source's slice may be a column or decompression bomb.
    await asyncio.to_thread(check_parquet_file, str(part), ds.limits, f"slice {s.cid} from {src.base}")
    table = await asyncio.to_thread(read_slice, part)
    h = LogicalHasher(table.schema)
    h.update(table)
    if str(h.finish()) != s.logical_hash or table.num_rows != s.rows:
        raise PullRefused(
            f"slice {s.cid} from {src.base}: its rows do not match the logical hash "
            f"and row count its AddData block claims: refused"
        )
    # Checked: only now do its bytes reach Kubo (unpinned until the head's recursive pin takes them)
    added = await ds.kubo.add(part, pin=False)
    if added.cid != s.cid:  # our hasher and Kubo disagree: a bug or another Kubo, never the source's bytes
        raise KuboCIDMismatch(s.cid, added.cid)
    size = part.stat().st_size
    os.replace(part, ds.cache_dir / f"{s.cid}.parquet")
    return size


def _register(
    ds: Datasets, v: Version, head: CID, existing: DatasetRow | None, name: str | None, default_name: str | None
) -> str:
    """Make the pulled head visible under a local name (new dataset, or the existing one moved forward)."""
    if existing is None:
        local = name or default_name or v.info.get("title") or v.dataset_id
        # A name from the source (URL tail, title) that could not be typed here gives way to the id.
        if name_problem(local) or ds.catalog.dataset(local) is not None:
            local = name or v.dataset_id.removeprefix("did:key:")
        if ds.catalog.dataset(local) is not None:
            raise InvalidInput(f"a dataset named {local!r} exists here already: pull with --name")
        ds.catalog.create_dataset(local, v.dataset_id, cid_str(head), None, "")
        return local
    if existing.head != cid_str(head) and not ds.catalog.move_head(existing.name, existing.head, cid_str(head)):
        raise Conflict(f"dataset {existing.name!r} moved while pulling; nothing was changed")
    return existing.name


@dataclass
class _Fetched:
    """Everything a pull fetched and checked, before any of it is stored."""

    head: CID
    fetcher: _Fetcher
    blocks: list[tuple[CID, MetadataBlock]]
    structures: dict[CID, Structure]
    version: Version
    existing: DatasetRow | None
    bytes: int


def _refuse_overfill(ds: Datasets, src: _Source, missing: list[SliceRef]) -> None:
    """Refuse before fetching slices that, as their blocks claim, would not fit: each is written to the pull's work
    directory, then added to Kubo (a source must not fill the disk)."""
    need = sum(s.size for s in missing)
    free = shutil.disk_usage(ds.tmp_dir).free
    if 2 * need > free:
        # Our disk, not the source, is short: 507 as for any full disk (the retry works once space is freed).
        raise InsufficientStorage(
            f"the slices from {src.base} ({need} bytes, twice; {free} bytes free)", "under $CAIRN_HOME/tmp"
        )


def _refuse_over_caps(
    limits: InputLimits, src: _Source, structures: dict[CID, Structure], missing: list[SliceRef]
) -> None:
    """A pull is an ingest from a peer: the same column and row caps, checked on what the chain claims before any
    slice is fetched (the slices' own footers are checked as they arrive)."""
    for cid, st in structures.items():
        limits.check_columns(len(st.schema), f"structure {cid} from {src.base}")
    rows = sum(s.rows for s in missing)
    if limits.max_rows is not None and rows > limits.max_rows:
        raise TooLarge(f"the pull from {src.base} would add {rows} rows, more than datasets.max_rows: refused")


async def _fetch_checked(ds: Datasets, src: _Source, work: Path) -> _Fetched:
    """Fetch the chain, its structures and the slices not cached here, checking every byte against its claims."""
    head = await src.head()
    fetcher = _Fetcher(src)
    blocks = await fetcher.chain(head)
    structures = await fetcher.structures(blocks)
    try:
        v = build_version(head, blocks, structures)
    except CairnError as e:
        raise PullRefused(f"chain of {head} from {src.base} refused: {e.message}") from None
    existing = ds.catalog.dataset_by_id(v.dataset_id)
    _refuse_divergence(existing, head, v)
    missing = [s for s in v.slices if not (ds.cache_dir / f"{s.cid}.parquet").exists()]
    _refuse_over_caps(ds.limits, src, structures, missing)
    _refuse_overfill(ds, src, missing)
    total_bytes = 0
    for s in missing:
        total_bytes += await _fetch_slice(ds, src, s, work)
    return _Fetched(head, fetcher, blocks, structures, v, existing, total_bytes)


async def _fetch_and_store(
    ds: Datasets, src: _Source, work: Path, deadline: float, name: str | None, default_name: str | None
) -> PullResult:
    """Fetch and check everything within ``deadline``; only then store it and make it visible (the work of pull)."""
    try:
        async with asyncio.timeout(deadline) as within:
            got = await _fetch_checked(ds, src, work)
    except TimeoutError:
        if not within.expired():
            raise
        raise PullTimeout(
            f"the pull from {src.base} did not finish within datasets.pull_deadline ({deadline:g} s): refused"
        ) from None
    # Everything checked: only now does any of it reach Kubo and the caches.
    for c, data in got.fetcher.raw.items():
        await ds.kubo.block_put(data, codec=c.codec.name)
    await ds.kubo.pin_add(got.head, recursive=True)
    ds.remember(got.blocks, got.structures)
    local = _register(ds, got.version, got.head, got.existing, name, default_name)
    v = got.version
    return PullResult(local, v.dataset_id, got.head, len(got.fetcher.raw), len(v.slices), got.bytes)


async def pull(
    ds: Datasets,
    source: str,
    *,
    name: str | None = None,
    timeout: float = 60.0,
    deadline: float = 600.0,
    brought: Sequence[CID] = (),
) -> PullResult:
    """Pull a dataset (chain, structures, slices), check all of it, then store it and make it visible here.
    ``timeout`` bounds each read; ``deadline`` the whole fetch (a source that drips its bytes).
    ``brought``: what our Kubo fetched for this pull before it began (the head, probed): dropped if it is refused."""
    if name is not None:
        check_dataset_name(name)  # before anything is fetched
    src, default_name = _open_source(ds, source, timeout, brought)
    work = Path(tempfile.mkdtemp(prefix="pull-", dir=ds.tmp_dir))
    try:
        with disk_full_is_507("the pull", ds.tmp_dir):
            return await _fetch_and_store(ds, src, work, deadline, name, default_name)
    except (PullRefused, InvalidInput) as e:
        if not isinstance(e, (PullTimeout, PullCancelled)):  # bytes refused, not a pull cut short
            await _discard(src)
        raise
    finally:
        await src.close()
        shutil.rmtree(work, ignore_errors=True)


async def _discard(src: _Source) -> None:
    try:
        await src.discard()
    except KuboError as e:  # the refusal is the answer; what is left is unpinned, and a GC drops it
        log.warning("could not drop what a refused pull fetched: %s", e.message)


class Pulls:
    """The pulls running on a node, so that a stopping node ends them at once instead of waiting for a slow source
    (a slow-drip pull held shutdown). Each pull runs as its own task: cancelling it leaves the request
    that asked for it to answer 503."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[PullResult]] = set()
        self.stopping = False

    async def run(self, work: Coroutine[Any, Any, PullResult]) -> PullResult:
        if self.stopping:
            work.close()
            raise PullCancelled("the node is stopping: pull refused")
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            return await task  # a client that leaves cancels this await, and so the pull (the task awaited)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.stopping and task.cancelled() and not (current and current.cancelling()):
                raise PullCancelled("the node is stopping: pull cancelled, nothing kept") from None
            raise

    async def stop(self) -> None:
        """Cancel every running pull and wait for each to clean up (its work directory removed)."""
        self.stopping = True
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


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
