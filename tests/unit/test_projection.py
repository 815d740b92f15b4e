"""The state "as at" a snapshot version (node/services/datasets/projection.py; ODF "Projection", AS AT): for any
sequence
of snapshot states, the projection of the changelog ingest writes (node/services/datasets/merge.py, the real code path)
up to
each version is that version's snapshot, as a multiset of rows, whatever happened before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import CID

from node.domain.model import Structure
from node.services.datasets import merge as merging
from node.services.datasets import projection
from node.services.datasets.chain import SliceRef, Version
from node.services.datasets.slices import read_slice

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string())])
PK = ["id"]

states = st.lists(
    st.dictionaries(
        st.one_of(st.none(), st.integers(0, 8)),
        st.sampled_from(["Paris", "Lyon", "Nice", "Lille", "Brest", None]),
        max_size=6,
    ),
    min_size=1,
    max_size=6,
)


def changelog(snapshots: list[dict[int, Any]]) -> list[pa.Table]:
    """One changelog table per version, as ingest --merge snapshot writes it (an empty diff adds no table)."""
    tables: list[pa.Table] = []
    for snap in snapshots:
        batch = pa.RecordBatch.from_pydict({"id": list(snap), "city": list(snap.values())}, schema=SCHEMA)
        prior = merging.fold_state(tables, PK)
        out = list(merging.snapshot([batch], SCHEMA, PK, prior))
        if out:
            tables.append(pa.Table.from_batches(out))
    return tables


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(c.to_pylist() for c in table.columns)), key=repr)


@settings(max_examples=150, deadline=None)
@given(states)
def test_the_projection_of_each_prefix_is_that_version_s_snapshot(snapshots: list[dict[int, Any]]) -> None:
    for n in range(1, len(snapshots) + 1):
        tables = changelog(snapshots[:n])
        last = snapshots[n - 1]
        if not tables:  # every snapshot so far was empty: no version has rows
            assert not last
            continue
        got = projection.state(tables, PK)
        assert got.schema.names == ["id", "city"]
        assert rows(got) == sorted(last.items(), key=repr)
        keys = sorted(k for k in last if k is not None) + [None] * (None in last)
        assert got.column("id").to_pylist() == keys  # the documented order: by primary key, nulls last


def test_a_correction_and_a_retraction_are_projected() -> None:
    tables = changelog([{1: "Paris", 2: "Lyon", 3: "Nice"}, {1: "Paris", 2: "Lille", 4: "Brest"}])
    assert sum(t.num_rows for t in tables) == 7  # 3 appends; correct-from, correct-to, append, retract
    got = projection.state(tables, PK)
    assert rows(got) == [(1, "Paris"), (2, "Lille"), (4, "Brest")]


def _version(tables: list[pa.Table]) -> Version:
    structure = Structure("parquet", (("op", "int8"), ("id", "int64"), ("city", "utf8")))
    slices = [SliceRef(CID.decode("bafkqaaa"), t.num_rows, 0, "", 0) for t in tables]
    return Version(
        CID.decode("bafkqaaa"), [], structure=structure, slices=slices, merge={"strategy": "snapshot", "primaryKey": PK}
    )


def test_the_projected_slices_are_the_same_bytes_every_time(tmp_path: Path) -> None:
    tables = changelog([{1: "Paris", 2: "Lyon"}, {2: "Lyon", 3: "Nice"}])
    v = _version(tables)
    assert projection.is_changelog(v)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = projection.expected(v, tables, tmp_path / "a"), projection.expected(v, tables, tmp_path / "b")
    assert a == b and len(a.slices) == 1 and a.rows == 2
    assert rows(read_slice(tmp_path / "a" / "state-0.parquet")) == [(2, "Lyon"), (3, "Nice")]


def test_an_empty_state_has_no_slice_and_the_hash_of_no_rows(tmp_path: Path) -> None:
    tables = changelog([{1: "Paris"}, {}])
    got = projection.expected(_version(tables), tables, tmp_path)
    assert (got.slices, got.rows) == ([], 0) and got.logical_hash


@pytest.mark.parametrize("text", ["", "{}", '{"format": 1, "slices": [{"cid": "nope"}]}', "[1]"])
def test_a_damaged_remembered_projection_is_recomputed(text: str) -> None:
    assert projection.from_json(_version(changelog([{1: "Paris"}])), text) is None
