"""The state of a snapshot dataset "as at" one of its versions (ODF "Projection", AS AT).

A snapshot dataset (``--merge snapshot``) stores its history as an ODF changelog: ``op`` first, then the user
columns, each row an append (0), retract (1), correct-from (2) or correct-to (3) (ODF "Representation of Retractions
and Corrections"; node/services/datasets/merge.py). ODF "Projection" names the state a reader expects: AS AT, "as we
knew at
that time", the system time collapsed at the version's head block. A query reads that state by default; the raw
changelog stays one explicit ref away, ``REF/changelog`` (:data:`CHANGELOG`: dataset names hold no ``/``,
node/domain/model/names.py, so the suffix can never be part of a name).

The state is a pure function of the version's slices, made the same way on every node so that the content an
invocation binds (``{structure, logicalHash, rows}``) and the slice CIDs its execution lists are the same wherever
the block is projected (answers over it are reusable by anyone, old ones included):

- fold the changelog in chain order (ODF "Retractions and Corrections"): an append or correct-to sets its key's row,
  a retract removes the key, a correct-from changes nothing (ODF: its correct-to immediately follows it);
- drop ``op``; sort the surviving rows by the primary key, ascending, nulls last (the state is a set of keyed
  rows: its order comes from the keys, not from the order the history happened to reach it in, so two chains
  reaching the same state project the same bytes); a key Arrow cannot sort (a nested column) keeps the rows in the
  order their last append or correct-to came in the chain;
- cut into slices of :data:`ROWS_PER_SLICE` rows (fixed, not the node's ingest setting), each written with
  ``write_parquet_slice`` (canonical bytes, node/services/datasets/slices.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from node.adapters.ipfs.unixfs import file_cid
from node.domain.model import CID, Structure, block_of, cid_str, parse_cid
from node.services.datasets import merge as merging
from node.services.datasets.chain import SliceRef, Version
from node.services.datasets.logical_hash import LogicalHasher
from node.services.datasets.slices import iter_slices, write_parquet_slice
from node.support.errors import CairnError, InvalidInput

CHANGELOG = "/changelog"  # REF + this: the raw changelog of a snapshot version, op and all
ROWS_PER_SLICE = 1 << 20  # fixed for every node: the projected slices' CIDs must not depend on a setting
FORMAT = 1  # of the remembered projection files (cache/projections/HEAD.json)


@dataclass
class Projection(Version):
    """A snapshot version read as its state: ``head`` and ``blocks`` are the version's (receipts name the block),
    ``structure`` and ``slices`` the projected state's, and the input identity is the state's own."""

    logical_hash: str = ""
    row_count: int = 0


def is_changelog(v: Version) -> bool:
    """Whether ``v`` stores an ODF changelog (a snapshot dataset: ``op`` first): queries read its projection."""
    s = v.structure
    return v.merge.get("strategy") == "snapshot" and s is not None and s.names[:1] == [merging.OP_COLUMN]


def projected_structure(structure: Structure) -> Structure:
    """The changelog's structure without ``op``: the state's."""
    return Structure(structure.format, structure.schema[1:])


def state(tables: list[pa.Table], primary_key: list[str]) -> pa.Table:
    """The rows the changelog ``tables`` (in chain order) add up to, without ``op``, sorted by primary key."""
    if not tables:
        raise ValueError("a changelog with a schema has at least one slice")
    target = tables[-1].schema  # older slices get nulls for columns added later (as Datasets.tables does)
    whole = pa.concat_tables([_widened(t, target) for t in tables])
    live: dict[merging.Key, int] = {}
    ops = whole.column(merging.OP_COLUMN).to_pylist()
    for i, (op, key) in enumerate(zip(ops, merging._keys(whole, primary_key))):
        if op in (merging.OP_APPEND, merging.OP_CORRECT_TO):
            live[key] = i
        elif op == merging.OP_RETRACT:
            live.pop(key, None)
    rows = whole.take(pa.array(sorted(live.values()), pa.int64())).drop_columns([merging.OP_COLUMN])
    try:
        return rows.sort_by([(c, "ascending") for c in primary_key]) if rows.num_rows else rows
    except (
        pa.ArrowNotImplementedError,
        pa.ArrowTypeError,
    ):  # a key Arrow cannot sort (nested): chain order, also a function of the chain
        return rows


def _widened(t: pa.Table, target: pa.Schema) -> pa.Table:
    if t.schema.names == target.names:
        return t
    cols = {f.name: t.column(f.name) if f.name in t.schema.names else pa.nulls(t.num_rows, f.type) for f in target}
    return pa.table(cols, schema=target)


@dataclass(frozen=True)
class Written:
    """The projected state as files in a work directory: each slice's path, rows and logical hash; the total."""

    files: list[tuple[Path, int, str]]
    logical_hash: str
    rows: int


def write_state(table: pa.Table, work: Path) -> Written:
    """Cut the state into canonical slices under ``work``; its logical hash over all rows in order (an empty
    state has no slice and the logical hash of 0 rows of its schema)."""
    total = LogicalHasher(table.schema)
    files = []
    for n, part in enumerate(iter_slices(table.to_batches(), table.schema, ROWS_PER_SLICE)):
        path = work / f"state-{n}.parquet"
        write_parquet_slice(part, path)
        own = LogicalHasher(part.schema)
        own.update(part)
        total.update(part)
        files.append((path, part.num_rows, str(own.finish())))
    return Written(files, str(total.finish()), total.rows)


def _changelog_structure(v: Version) -> Structure:
    """The structure of ``v``'s changelog, which its state's drops ``op`` from (callers checked ``is_changelog``)."""
    if v.structure is None:
        raise InvalidInput(f"version {cid_str(v.head)} has no schema: it has no state to project")
    return v.structure


def build(v: Version, slices: list[SliceRef], logical_hash: str, rows: int) -> Projection:
    """The projection of ``v`` whose state is ``slices``."""
    st = projected_structure(_changelog_structure(v))
    return Projection(
        head=v.head,
        blocks=v.blocks,
        dataset_id=v.dataset_id,
        structure=st,
        structure_cid=block_of(st).cid,
        abstract_cid=block_of(st.abstract()).cid,
        slices=slices,
        info=v.info,
        merge=v.merge,
        logical_hash=logical_hash,
        row_count=rows,
    )


def to_json(p: Projection) -> str:
    """What a node remembers of a projection it made (its slices are in the CID-keyed slice cache and Kubo)."""
    slices = [{"cid": cid_str(s.cid), "rows": s.rows, "size": s.size, "logicalHash": s.logical_hash} for s in p.slices]
    return json.dumps({"format": FORMAT, "logicalHash": p.logical_hash, "rows": p.row_count, "slices": slices})


def from_json(v: Version, text: str) -> Projection | None:
    """The remembered projection of ``v``, or None when the file is not one this code wrote."""
    try:
        got: Any = json.loads(text)
        if not isinstance(got, dict) or got.get("format") != FORMAT:
            return None
        slices, offset = [], 0
        for s in got["slices"]:
            slices.append(SliceRef(parse_cid(s["cid"]), s["rows"], s["size"], s["logicalHash"], offset))
            offset += s["rows"]
        return build(v, slices, got["logicalHash"], got["rows"])
    except (ValueError, KeyError, TypeError, AttributeError, CairnError):  # a damaged file is recomputed, not an error
        return None


@dataclass(frozen=True)
class Expected:
    """What an execution that read the state of a version lists and binds (node/services/provenance/verify.py)."""

    slices: list[CID]
    structure: CID  # the abstract st_0 of the state
    logical_hash: str
    rows: int


def expected(v: Version, tables: list[pa.Table], work: Path) -> Expected:
    """Recompute the projection of ``v`` from its changelog ``tables`` (each read from bytes checked against its
    CID): the slice CIDs (UnixFS, as Kubo's add gives them), the abstract structure and the identity."""
    structure = _changelog_structure(v)
    written = write_state(state(tables, v.merge["primaryKey"]), work)
    cids = []
    for path, _, _ in written.files:
        cids.append(file_cid(path))
    abstract = block_of(projected_structure(structure).abstract()).cid
    return Expected(cids, abstract, written.logical_hash, written.rows)
