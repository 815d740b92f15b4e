"""mb_0 MetadataBlock: one signed link of a dataset's metadata chain (ODF "Metadata Chain").

``{"typedVersion": "mb_0", "content": {"prev", "seq", "time", "event", "sig"}}``

- ``prev``: link to the previous block (null for the Seed), ``seq``: 0 for the Seed, +1 each block
  (ODF MetadataBlock.prevBlockHash / sequenceNumber), ``time``: system time, RFC 3339 UTC.
- ``event``: a map with ``kind`` ∈ Seed, SetDataSchema, AddData, SetInfo (ODF metadata events). An AddData of a
  derivative dataset (a pipeline step's result) may carry ``transform``: the ``rc_0`` of the execution whose output
  slices it adds (what ODF's ExecuteTransform records: which transformation produced the new data).
- ``sig``: ed25519 signature by the dataset key over the DAG-CBOR bytes of the same envelope
  without ``sig``. The key is the one the Seed names: ``datasetId`` is its ``did:key``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from multiformats import CID

from node.domain.model._shape import Ctx, want_int, want_link, want_list, want_map, want_str
from node.domain.model.kinds import Kind, register_kind
from node.domain.model.signed import Signed

EVENT_KINDS = ("Seed", "SetDataSchema", "AddData", "SetInfo")
MERGE_STRATEGIES = ("append", "ledger", "snapshot")


def _check_event(ev: Any, ctx: Ctx) -> dict[str, Any]:
    m = want_map(ev, ctx, required=("kind",), optional=None)
    kind = want_str(m["kind"], ctx.at("kind"))
    if kind == "Seed":
        want_map(m, ctx, required=("kind", "datasetId", "datasetKind"))
        did = want_str(m["datasetId"], ctx.at("datasetId"))
        if not did.startswith("did:key:z"):
            raise ctx.at("datasetId").fail(f"expected a did:key, got {did[:40]!r}")
        if m["datasetKind"] not in ("root", "derivative"):
            raise ctx.at("datasetKind").fail('expected "root" or "derivative"')
    elif kind == "SetDataSchema":
        want_map(m, ctx, required=("kind", "structure", "abstract"))
        want_link(m["structure"], ctx.at("structure"))
        want_link(m["abstract"], ctx.at("abstract"))
    elif kind == "AddData":
        want_map(
            m,
            ctx,
            required=("kind", "slices", "offsets", "rows", "logicalHash", "merge"),
            optional=("eventTime", "transform"),
        )
        if "transform" in m:  # a derivative dataset's data: the rc_0 of the execution that wrote these slices
            want_link(m["transform"], ctx.at("transform"))
        for i, s in enumerate(want_list(m["slices"], ctx.at("slices"))):
            sc = ctx.at("slices").at(i)
            sm = want_map(s, sc, required=("data", "rows", "size", "logicalHash"))
            want_link(sm["data"], sc.at("data"))
            want_int(sm["rows"], sc.at("rows"), 1)
            want_int(sm["size"], sc.at("size"), 0)
            want_str(sm["logicalHash"], sc.at("logicalHash"))
        off = want_list(m["offsets"], ctx.at("offsets"), 2)
        start = want_int(off[0], ctx.at("offsets").at(0, "start"), 0)
        end = want_int(off[1], ctx.at("offsets").at(1, "end"), start)
        rows = want_int(m["rows"], ctx.at("rows"), 1)
        if end - start + 1 != rows or sum(s["rows"] for s in m["slices"]) != rows:
            raise ctx.at("rows").fail("offsets, rows and slice rows disagree")
        want_str(m["logicalHash"], ctx.at("logicalHash"))
        mg = want_map(m["merge"], ctx.at("merge"), required=("strategy", "primaryKey"))
        if mg["strategy"] not in MERGE_STRATEGIES:
            raise ctx.at("merge").at("strategy").fail(f"expected one of {', '.join(MERGE_STRATEGIES)}")
        for j, k in enumerate(want_list(mg["primaryKey"], ctx.at("merge").at("primaryKey"))):
            want_str(k, ctx.at("merge").at("primaryKey").at(j))
    elif kind == "SetInfo":
        want_map(m, ctx, required=("kind",), optional=("title", "description", "license", "keywords"))
        for key in ("title", "description", "license"):
            if key in m:
                want_str(m[key], ctx.at(key))
        for j, k in enumerate(want_list(m.get("keywords", []), ctx.at("keywords"))):
            want_str(k, ctx.at("keywords").at(j))
    else:
        raise ctx.at("kind").fail(f"unknown event {kind!r} (known: {', '.join(EVENT_KINDS)})")
    return m


@register_kind
@dataclass(frozen=True)
class MetadataBlock(Signed, Kind):
    typed_version: ClassVar[str] = "mb_0"
    prev: CID | None
    seq: int
    time: str
    event: dict[str, Any]
    sig: bytes = b""

    def _unsigned(self) -> dict[str, Any]:
        return {"prev": self.prev, "seq": self.seq, "time": self.time, "event": self.event}

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        m = want_map(content, ctx, required=("prev", "seq", "time", "event", "sig"))
        seq = want_int(m["seq"], ctx.at("seq"), 0)
        prev = None if m["prev"] is None else want_link(m["prev"], ctx.at("prev"))
        if (prev is None) != (seq == 0):
            raise ctx.at("prev").fail("only the first block (seq 0) has no prev")
        if not isinstance(m["sig"], bytes):
            raise ctx.at("sig").wrong("bytes", m["sig"])
        event = _check_event(m["event"], ctx.at("event"))
        if (event["kind"] == "Seed") != (seq == 0):
            raise ctx.at("event").fail("a chain starts with a Seed, and only there")
        return {"prev": prev, "seq": seq, "time": want_str(m["time"], ctx.at("time")), "event": event, "sig": m["sig"]}

    @property
    def kind(self) -> str:
        return str(self.event["kind"])

    def _who(self) -> str:
        return f"mb_0 seq {self.seq}"
