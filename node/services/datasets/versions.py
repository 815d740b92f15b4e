"""Metadata blocks and structures by CID, and the versions built from heads: all immutable (a head names its whole
chain), so every one is cached and never goes stale."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from node.domain.model import CID, MetadataBlock, Structure, decode, decode_object
from node.domain.ports.block_store import BlockStore
from node.services.datasets.chain import Version, build_version
from node.support.errors import InvalidInput, InvalidObject

MEMO_VERSIONS = 256  # versions kept built (see Versions.version)


class Versions:
    """The checked objects of dataset chains read from ``kubo``, and the versions they make."""

    def __init__(self, kubo: BlockStore) -> None:
        self.kubo = kubo
        self._blocks: dict[CID, MetadataBlock] = {}  # immutable: a cache never goes stale
        self._structures: dict[CID, Structure] = {}
        # Versions built from a head (a head names its whole chain, so a version never changes). Every query,
        # hits included, resolved its inputs by rebuilding them: every block's signature checked again.
        self._versions: OrderedDict[CID, Version] = OrderedDict()
        self._building: dict[CID, asyncio.Future[Version]] = {}

    async def _get_object(self, cid: CID, timeout: float | None = None) -> Any:
        data = await self.kubo.block_get(cid, timeout=timeout)  # verified against the CID by the client
        return decode_object(decode(data))

    async def block(self, cid: CID, timeout: float | None = None) -> MetadataBlock:
        if cid not in self._blocks:
            obj = await self._get_object(cid, timeout)
            if not isinstance(obj, MetadataBlock):
                raise InvalidInput(f"{cid} is not a dataset metadata block (mb_0)")
            self._blocks[cid] = obj
        return self._blocks[cid]

    async def structure(self, cid: CID, timeout: float | None = None) -> Structure:
        if cid not in self._structures:
            obj = await self._get_object(cid, timeout)
            if not isinstance(obj, Structure):
                raise InvalidObject(f"{cid} is not a structure (st_0)")
            self._structures[cid] = obj
        return self._structures[cid]

    def remember(self, blocks: Iterable[tuple[CID, MetadataBlock]], structures: Mapping[CID, Structure]) -> None:
        """Cache objects checked elsewhere (a pull verified every one against its CID, an ingest made them), so
        reading the version does not fetch or decode them again."""
        self._blocks.update(blocks)
        self._structures.update(structures)

    async def version(self, head: CID, timeout: float | None = None) -> Version:
        """The checked version whose head is ``head`` (remembered: the last ``MEMO_VERSIONS`` built)."""
        v = self._versions.get(head)
        while v is None:
            # One build per head even when callers overlap (a hit and a background announce after an ingest):
            # later callers await the first one's build, and build again only if that caller was cancelled.
            pending = self._building.get(head)
            if pending is not None:
                await asyncio.wait([pending])
                if not pending.cancelled():
                    return pending.result()
                v = self._versions.get(head)
                continue
            v = await self._build_once(head, timeout)
        self._versions.move_to_end(head)
        return v

    async def _build_once(self, head: CID, timeout: float | None) -> Version:
        fut: asyncio.Future[Version] = asyncio.get_running_loop().create_future()
        self._building[head] = fut
        try:
            v = await self._build_version(head, timeout)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as e:
            fut.set_exception(e)
            fut.exception()  # marked retrieved: this caller raises it, any waiter gets it too
            raise
        finally:
            del self._building[head]
        fut.set_result(v)
        self._versions[head] = v
        while len(self._versions) > MEMO_VERSIONS:
            self._versions.popitem(last=False)
        return v

    async def _build_version(self, head: CID, timeout: float | None) -> Version:
        blocks: list[tuple[CID, MetadataBlock]] = []
        cid: CID | None = head
        while cid is not None:
            b = await self.block(cid, timeout)
            blocks.append((cid, b))
            cid = b.prev
        structures = {}
        for _, b in blocks:
            if b.kind == "SetDataSchema":
                structures[b.event["structure"]] = await self.structure(b.event["structure"], timeout)
        return build_version(head, blocks, structures)
