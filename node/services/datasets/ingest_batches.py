"""An ingest's input made ready to be cut into slices: its batches in the dataset's column order (only added columns
allowed), through the merge strategy, their event times noted and progress reported; and the AddData event of what
was stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from node.domain.model import CID, Structure
from node.services.datasets import merge as merging
from node.services.datasets.chain import SliceRef, Version
from node.services.datasets.logical_hash import LogicalHasher, canonical_type
from node.services.datasets.readers import Input
from node.support.errors import SchemaChangeRefused

Progress = Callable[[int, int], None]  # (bytes read, rows read)


def structure_of(schema: pa.Schema) -> Structure:
    return Structure("parquet", tuple((f.name, canonical_type(f.type)) for f in schema))


def evolve(old: Structure, new: pa.Schema) -> list[str]:
    """Column order for new data under an existing structure; refuses all but added columns."""
    new_types = {f.name: canonical_type(f.type) for f in new}
    for name, typ in old.schema:
        if name not in new_types:
            raise SchemaChangeRefused(
                f"schema change refused: column {name!r} is missing (only adding columns is allowed)"
            )
        if new_types[name] != typ:
            raise SchemaChangeRefused(
                f"schema change refused: column {name!r} would change type "
                f"{typ} -> {new_types[name]} (only adding columns is allowed)"
            )
    known = set(old.names)  # a set: 10,000 columns checked against a list was 10^8 comparisons
    return old.names + [n for n in new.names if n not in known]


@dataclass
class Ingested:
    """What one read of a source gave: slices stored in Kubo (not pinned yet) and the facts about them."""

    structure: Structure
    start: int  # the dataset's row count before this ingest: the first new row's offset
    total: LogicalHasher
    offset: int = field(init=False)  # the next row's offset
    slices: list[SliceRef] = field(default_factory=list)
    files: list[tuple[Path, CID]] = field(default_factory=list)
    event_max: list[Any] = field(default_factory=list)  # each batch's latest event time
    rows_read: int = 0

    def __post_init__(self) -> None:
        self.offset = self.start

    @property
    def added_rows(self) -> int:
        return self.offset - self.start


def _merged_batches(
    inp: Input, old: Version | None, strategy: str, pk: list[str], prior_tables: list[pa.Table]
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The input's batches in the dataset's column order, through the merge strategy, and their schema."""
    schema = inp.schema
    merging.check_primary_key(schema, strategy, pk)
    user_struct = old.structure if old and old.structure else None
    if user_struct is not None and strategy == "snapshot":
        user_struct = Structure(user_struct.format, user_struct.schema[1:])  # without op
    order = evolve(user_struct, schema) if user_struct else schema.names
    schema = pa.schema([schema.field(n) for n in order])
    batches: Iterator[pa.RecordBatch] = (b.select(order) for b in inp.batches)
    if strategy == "ledger":
        seen = {k for t in prior_tables for k in merging._keys(t, pk)}
        batches = merging.ledger(batches, pk, seen)
    elif strategy == "snapshot":
        state = merging.fold_state(prior_tables, pk)
        batches = merging.snapshot(batches, schema, pk, state)
        schema = merging.with_op(schema)
    return schema, batches


def prepared(
    inp: Input, old: Version | None, strategy: str, pk: list[str], prior_tables: list[pa.Table]
) -> tuple[pa.Schema, Iterator[pa.RecordBatch], Ingested]:
    """The merged batches, their schema and the ingest's record (structure, hasher): schema-wide work, run on a
    thread (10,000 columns took the event loop for seconds)."""
    schema, batches = _merged_batches(inp, old, strategy, pk, prior_tables)
    return schema, batches, Ingested(structure_of(schema), old.rows if old else 0, LogicalHasher(schema))


def tracked(
    batches: Iterator[pa.RecordBatch],
    inp: Input,
    event_time: str | None,
    progress: Progress | None,
    event_max: list[Any],
) -> Iterator[pa.RecordBatch]:
    """The batches unchanged, noting each one's latest event time and reporting progress as they pass."""
    for b in batches:
        if event_time and b.num_rows:
            event_max.append(pc.max(b.column(event_time)).as_py())
        if progress:
            progress(inp.bytes_read, inp.rows_read)
        yield b


def add_data_event(got: Ingested, strategy: str, pk: list[str]) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "kind": "AddData",
        "slices": [{"data": s.cid, "rows": s.rows, "size": s.size, "logicalHash": s.logical_hash} for s in got.slices],
        "offsets": [got.start, got.offset - 1],
        "rows": got.added_rows,
        "logicalHash": str(got.total.finish()),
        "merge": {"strategy": strategy, "primaryKey": pk},
    }
    if got.event_max and any(v is not None for v in got.event_max):
        ev["eventTime"] = max(v for v in got.event_max if v is not None).isoformat()
    return ev
