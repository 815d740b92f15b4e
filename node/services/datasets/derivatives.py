"""Derivative datasets (node.services.pipelines): a version holding an execution's output slices as they are."""

from __future__ import annotations

import asyncio
from typing import Any

from node.adapters import identity
from node.domain.model import CID, Structure, cid_str
from node.domain.ports.repositories import CatalogRepository
from node.services.datasets.chain import SliceRef
from node.services.datasets.chain_writer import ChainWriter, Signer, schema_blocks
from node.services.datasets.logical_hash import LogicalHasher
from node.services.datasets.slice_cache import SliceCache


async def _slice_refs(cache: SliceCache, slices: list[CID]) -> tuple[list[SliceRef], LogicalHasher | None]:
    """The non-empty ``slices`` as listed in an AddData event, and the hasher over all their rows (None: none)."""
    refs: list[SliceRef] = []
    hasher: LogicalHasher | None = None
    for cid in slices:
        path = await cache.cid_path(cid)
        table = await cache.read_cid(cid)
        if table.num_rows == 0:  # an empty result's one slice carries its shape only: AddData holds rows
            continue
        hasher = hasher or LogicalHasher(table.schema)
        one = LogicalHasher(table.schema)
        await asyncio.to_thread(one.update, table)
        await asyncio.to_thread(hasher.update, table)
        offset = sum(r.rows for r in refs)
        refs.append(SliceRef(cid, table.num_rows, path.stat().st_size, str(one.finish()), offset))
    return refs, hasher


async def derive(
    cache: SliceCache,
    chains: ChainWriter,
    catalog: CatalogRepository,
    slices: list[CID],
    structure: Structure,
    receipt: CID,
    facts: tuple[str, int],
) -> CID:
    """A derivative dataset whose one version holds an execution's output ``slices`` as they are (same CIDs,
    no copy), so a later step reads it as any version: Seed ``derivative``, SetDataSchema, and an AddData
    naming the ``receipt`` that wrote them (``transform``). Its key signs this chain once and is not kept (the
    chain is never extended); nothing is named in the index. ``facts``: the result's (logical hash, rows)."""
    refs, hasher = await _slice_refs(cache, slices)
    ident = identity.generate()
    events: list[dict[str, Any]] = [{"kind": "Seed", "datasetId": ident.node_key, "datasetKind": "derivative"}]
    blocks = schema_blocks(structure, events)
    if refs and hasher is not None:
        rows = sum(r.rows for r in refs)
        listed = [{"data": r.cid, "rows": r.rows, "size": r.size, "logicalHash": r.logical_hash} for r in refs]
        events.append(
            {
                "kind": "AddData",
                "slices": listed,
                "offsets": [0, rows - 1],
                "rows": rows,
                "logicalHash": str(hasher.finish()),
                "merge": {"strategy": "append", "primaryKey": []},
                "transform": receipt,
            }
        )
    signer = Signer(ident.private_key, ident.node_key, "", None, None, 0)
    head = await chains.store(signer, blocks, events, shallow=[r.cid for r in refs])
    catalog.set_version_facts(cid_str(head), *facts)
    return head
