"""``node.data``: the datasets of this node (docs/datasets.md): ingest, list, show, history, rows, pulls."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from config import Settings
from node.adapters.ipfs import KuboClient
from node.core.result_types import Dataset, DatasetEntry, Ingested, LogBlock, Pulled
from node.core.serving import Serving
from node.domain.model import CID, cid_str, parse_cid
from node.services.datasets import Datasets, Pulls, ReadOptions, Version, pull
from node.services.resolve.claim_checks import connect_providers
from node.support.errors import KuboError, NotFound, PeerError

if TYPE_CHECKING:
    import pyarrow as pa

    from node.services.peers import Network

IPFS_PROBE = 5.0  # seconds a pull by CID that no peer holds gives our Kubo's swarm to find its first block


class DataOps:
    def __init__(
        self,
        settings: Settings,
        datasets: Datasets,
        kubo: KuboClient,
        network: Network | None,
        serving: Serving,
        pulls: Pulls,
        after_ingest: Callable[[CID], None],
    ) -> None:
        self._settings, self._datasets, self._kubo, self._network = settings, datasets, kubo, network
        self._serving, self._pulls, self._after_ingest = serving, pulls, after_ingest

    async def add(
        self,
        source: Any,
        *,
        name: str,
        create: bool,
        options: ReadOptions,
        strategy: str = "append",
        primary_key: list[str] | None = None,
        info: dict[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Ingested:
        """Ingest a file as a new dataset (``create``) or a new version of one; ``progress`` gets
        (bytes read, rows read) as the input is consumed; ``stop`` set (the client went away) ends it before its
        commit, nothing kept."""
        started = time.perf_counter()
        r = await self._datasets.add(
            source,
            name=name,
            create=create,
            options=options,
            strategy=strategy,
            primary_key=primary_key,
            info=info,
            progress=progress,
            stop=stop,
        )
        self._after_ingest(r.head)
        return {
            "name": r.name,
            "id": r.dataset_id,
            "head": cid_str(r.head),
            "previous": cid_str(r.previous) if r.previous else None,
            "rows_read": r.rows_read,
            "rows_added": r.rows_added,
            "schema_changed": r.schema_changed,
            "slices": [
                {"cid": cid_str(s.cid), "rows": s.rows, "size": s.size, "logicalHash": s.logical_hash} for s in r.slices
            ],
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
        }

    async def listed(self) -> list[DatasetEntry]:
        """Every dataset this node names, with its head's size."""
        out: list[DatasetEntry] = []
        for row in self._datasets.catalog.datasets():
            v = await self._datasets.version(parse_cid(row.head))
            out.append(
                {
                    "name": row.name,
                    "id": row.id,
                    "head": row.head,
                    "rows": v.rows,
                    "slices": len(v.slices),
                    "owned": bool(row.key_name),
                    "updated": row.updated,
                }
            )
        return out

    async def get(self, ref: str) -> Dataset:
        """One dataset at the version ``ref`` names (a name or id: its head; a block CID: that version)."""
        row, v = await self._datasets.resolve(ref)
        logical, rows = await self._datasets.version_hash(v)
        return {
            "name": row.name if row else None,
            "id": v.dataset_id,
            "head": cid_str(v.head),
            "ipns": row.ipns if row else None,
            "seq": v.seq,
            "rows": rows,
            "logicalHash": logical,
            "structure": cid_str(v.structure_cid) if v.structure_cid else None,
            "abstractStructure": cid_str(v.abstract_cid) if v.abstract_cid else None,
            "schema": [list(c) for c in v.structure.schema] if v.structure else [],
            "merge": v.merge,
            "info": v.info,
            "slices": [
                {
                    "cid": cid_str(s.cid),
                    "rows": s.rows,
                    "size": s.size,
                    "logicalHash": s.logical_hash,
                    "offset": s.offset,
                }
                for s in v.slices
            ],
        }

    async def log(self, ref: str) -> list[LogBlock]:
        """The blocks of a dataset's metadata chain, first to last."""
        _, v = await self._datasets.resolve(ref)
        return [{"cid": cid_str(cid), "seq": b.seq, "time": b.time, "event": _plain(b.event)} for cid, b in v.blocks]

    async def version(self, ref: str) -> Version:
        return (await self._datasets.resolve(ref))[1]

    async def rows(self, ref: str) -> tuple[Version, AsyncIterator[pa.Table]]:
        """The version ``ref`` names now, and its rows, slice by slice, read as they are sent."""
        version = await self.version(ref)
        return version, self._datasets.tables(version)

    async def schema(self, ref: str) -> pa.Schema:
        """The columns of a dataset's head, without reading a row (``Datasets.version_schema``)."""
        return await self._datasets.version_schema(await self.version(ref))

    async def pull(self, source: str, name: str | None = None) -> Pulled:
        """A dataset from a node's URL (``/odf/NAME``) or by its head's CID, from the peers that hold it."""
        brought: list[CID] = []  # fetched here by the probe: the pull drops it if it refuses it
        if not source.startswith(("http://", "https://")):
            head = parse_cid(source)
            if not await self._serving.holds(head):
                brought.append(head)
            await self._reach_holders(head)
        work = pull(
            self._datasets,
            source,
            name=name,
            timeout=self._settings.datasets.pull_timeout,
            deadline=self._settings.datasets.pull_deadline,
            brought=brought,
        )
        r = await self._pulls.run(work)  # ended at once when the node stops
        self._after_ingest(r.head)
        return {
            "name": r.name,
            "id": r.dataset_id,
            "head": cid_str(r.head),
            "blocks": r.blocks,
            "slices": r.slices,
            "bytes": r.bytes,
        }

    async def _reach_holders(self, cid: CID) -> None:
        """Before fetching ``cid`` by IPFS: connect our Kubo to the Kubo of a connected peer that holds it (the two
        swarms need not be connected, and our Kubo would wait for blocks nobody sends). When no peer holds it, our
        Kubo's own swarm is given ``IPFS_PROBE`` seconds for the first block; then a 404."""
        if await self._serving.holds(cid):
            return
        network = self._network
        peers = network.host.connected_peers() if network else []
        if network is not None and peers:
            holders = await network.holders(cid)
            if holders:
                if await connect_providers(self._kubo, [a for addrs in holders.values() for a in addrs]):
                    return
                raise PeerError(f"the Kubo of the peers that have {cid_str(cid)} ({', '.join(holders)}) is unreachable")
        if await self._kubo.swarm_peers(timeout=5.0):  # IPFS peers of our Kubo's own (an external Kubo, by hand)
            try:
                await self._kubo.block_get(cid, timeout=IPFS_PROBE)
                return
            except KuboError:
                pass
        who = f"none of the {len(peers)} connected peers has" if peers else "no peer is connected to fetch"
        raise NotFound(
            f"{who} {cid_str(cid)}: connect to a node that has it (`cairn connect ADDR`), "
            "or pull from its URL (http://HOST:PORT/odf/NAME)"
        )


def _plain(value: Any) -> Any:
    """IPLD → JSON for display: links as CID strings."""
    if isinstance(value, CID):
        return cid_str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value
