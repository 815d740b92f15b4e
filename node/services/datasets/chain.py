"""A dataset version as its metadata chain describes it (ODF "Metadata Chain")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from multiformats import CID

from node.adapters.identity import public_key_from_did
from node.domain.model import MetadataBlock, Structure
from node.support.errors import InvalidObject


@dataclass(frozen=True)
class SliceRef:
    cid: CID
    rows: int
    size: int
    logical_hash: str
    offset: int  # offset of the slice's first row in the dataset


@dataclass
class Version:
    """Everything a block CID freezes: identity, schema, data slices, info."""

    head: CID
    blocks: list[tuple[CID, MetadataBlock]]  # newest first
    dataset_id: str = ""
    structure: Structure | None = None
    structure_cid: CID | None = None
    abstract_cid: CID | None = None
    slices: list[SliceRef] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    merge: dict[str, Any] = field(default_factory=lambda: {"strategy": "append", "primaryKey": []})

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.slices)

    @property
    def seq(self) -> int:
        return self.blocks[0][1].seq


def appends(v: Version) -> Iterator[tuple[CID, list[SliceRef]]]:
    """The older heads ``v`` extends by AddData blocks with the append merge only (ODF "AddData": no schema change,
    no retraction between), nearest first, each with the slices appended since: the rows of ``v`` are that head's
    rows followed by these slices' rows."""
    for k in range(1, len(v.blocks)):
        _, block = v.blocks[k - 1]
        if block.kind != "AddData" or block.event.get("merge", {}).get("strategy") != "append":
            return  # anything else between changes what the old rows mean
        since = block.event["offsets"][0]
        yield v.blocks[k][0], [s for s in v.slices if s.offset >= since]


def build_version(head: CID, blocks: list[tuple[CID, MetadataBlock]], structures: dict[CID, Structure]) -> Version:
    """Check a chain (newest first) end to end and fold it into a Version.

    Checks: sequence numbers step by one, prev links match, the chain starts with a Seed, and every
    block's signature verifies with the key the Seed names (its did:key is the dataset id).
    """
    if not blocks or blocks[0][0] != head:
        raise InvalidObject(f"chain of {head} is empty or does not start at its head")
    _, seed = blocks[-1]
    if seed.kind != "Seed":
        raise InvalidObject(f"chain of {head} does not end with a Seed")
    v = Version(head=head, blocks=blocks, dataset_id=seed.event["datasetId"])
    key = public_key_from_did(v.dataset_id)
    expected_prev: CID | None = None
    for seq, (cid, block) in enumerate(reversed(blocks)):
        if block.seq != seq or block.prev != expected_prev:
            raise InvalidObject(f"block {cid}: seq {block.seq}/prev do not follow block {expected_prev}")
        block.verify(key)
        expected_prev = cid
        ev = block.event
        if block.kind == "SetDataSchema":
            v.structure_cid, v.abstract_cid = ev["structure"], ev["abstract"]
            v.structure = structures[ev["structure"]]
        elif block.kind == "AddData":
            offset = ev["offsets"][0]
            if offset != v.rows:
                raise InvalidObject(f"block {cid}: AddData starts at offset {offset}, expected {v.rows}")
            for s in ev["slices"]:
                v.slices.append(SliceRef(s["data"], s["rows"], s["size"], s["logicalHash"], offset))
                offset += s["rows"]
            v.merge = ev["merge"]
        elif block.kind == "SetInfo":
            v.info = {k: val for k, val in ev.items() if k != "kind"}
    return v
