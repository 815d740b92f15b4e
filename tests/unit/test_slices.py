"""Slices (node/services/datasets/slices.py): deterministic Parquet bytes, re-cutting streams of batches."""

from __future__ import annotations

import decimal
import io
import itertools

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import node.services.datasets.slices as slices
from node.services.datasets.logical_hash import logical_hash
from node.services.datasets.slices import (
    SLICE_WRITER_VERSION,
    WRITER_OPTIONS,
    canonical_slice_schema,
    iter_slices,
    read_slice,
    read_slice_head,
    slice_bytes,
    write_parquet_slice,
)
from node.support.errors import InvalidInput, NotFound

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mixed_table(n: int = 5000) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "v": pa.array([None if i % 7 == 0 else (i * 37) % 101 / 7 for i in range(n)]),
            "s": pa.array([None if i % 5 == 0 else f"name-{i % 40}" for i in range(n)]),
            "b": pa.array([bytes([i % 256]) * (i % 4) for i in range(n)]),
            "ts": pa.array(range(n), pa.int64()).view(pa.timestamp("us", tz="Europe/Paris")),
            "d": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
            "l": pa.array([list(range(i % 3)) for i in range(n)], pa.list_(pa.int32())),
            "st": pa.array(
                [{"x": i, "y": str(i)} for i in range(n)], pa.struct([("x", pa.int64()), ("y", pa.string())])
            ),
        }
    )


# --------------------------------------------------------------------------- determinism


def test_same_table_same_bytes() -> None:
    t = mixed_table()
    a, b = slice_bytes(t), slice_bytes(t)
    assert a == b
    sink = io.BytesIO()
    write_parquet_slice(t, sink)
    assert sink.getvalue() == a


def test_writes_to_paths_too(tmp_path) -> None:
    t = mixed_table(100)
    write_parquet_slice(t, tmp_path / "a.parquet")
    write_parquet_slice(t, str(tmp_path / "b.parquet"))
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes() == slice_bytes(t)
    back = read_slice(tmp_path / "a.parquet")
    assert back.equals(t)
    assert read_slice(str(tmp_path / "a.parquet")).equals(t)


@SETTINGS
@given(st.lists(st.integers(0, 5000), max_size=8))
def test_chunking_does_not_change_the_bytes(cuts: list[int]) -> None:
    t = TABLE
    bounds = sorted({0, t.num_rows, *cuts})
    batches = [b for lo, hi in itertools.pairwise(bounds) for b in t.slice(lo, hi - lo).to_batches()]
    assert slice_bytes(pa.Table.from_batches(batches, t.schema)) == EXPECTED


TABLE = mixed_table()
EXPECTED = slice_bytes(TABLE)


def test_encodings_names_kept_nullability_and_metadata_dropped() -> None:
    t = mixed_table(1000)
    variant = pa.table(
        {
            "id": t["id"],
            "v": t["v"],
            "s": pc.cast(t["s"], pa.large_string()).combine_chunks().dictionary_encode(),
            "b": pc.cast(t["b"], pa.large_binary()),
            "ts": t["ts"],
            "d": pc.cast(t["d"], pa.decimal256(12, 2)),
            "l": pc.cast(t["l"], pa.large_list(pa.field("element", pa.int32(), nullable=False))),
            "st": t["st"],
        }
    )
    schema = pa.schema(
        [f.with_nullable(False).with_metadata({"x": "y"}) for f in variant.schema],
        metadata={"pandas": '{"creator": "pandas 9.9"}'},
    )
    variant = pa.Table.from_arrays(variant.columns, schema=schema)
    assert slice_bytes(variant) == slice_bytes(t)
    # but the names are part of the bytes
    assert slice_bytes(t.rename_columns([f"c{i}" for i in range(t.num_columns)])) != slice_bytes(t)


def test_different_rows_give_different_bytes() -> None:
    t = mixed_table(1000)
    assert slice_bytes(t.slice(1)) != slice_bytes(t)
    assert slice_bytes(t.take(list(range(999, -1, -1)))) != slice_bytes(t)


def test_round_trip_keeps_rows_and_logical_hash() -> None:
    t = mixed_table()
    data = slice_bytes(t)
    for source in (data, bytearray(data), memoryview(data), pa.py_buffer(data), io.BytesIO(data)):
        back = read_slice(source)
        assert back.equals(t)
        assert logical_hash(back) == logical_hash(t)
    assert read_slice(data).schema == canonical_slice_schema(t.schema)


def test_head_read_gives_the_whole_reads_rows(tmp_path, monkeypatch) -> None:
    """The first n rows of a slice read alone (an answer's rows) are the rows and schema of a whole read, across
    row groups, past the end, and for a slice with no rows."""
    monkeypatch.setattr(slices, "ROW_GROUP_ROWS", 1000)
    t = mixed_table(2500)
    path = tmp_path / "s.parquet"
    write_parquet_slice(t, path)
    whole = read_slice(path)
    for n in (0, 1, 100, 999, 1000, 1001, 2500, 10_000):
        head = read_slice_head(path, n)
        assert head.equals(whole.slice(0, n)) and head.schema.equals(whole.schema, check_metadata=True)
    write_parquet_slice(t.slice(0, 0), empty := tmp_path / "empty.parquet")
    assert read_slice_head(empty, 100).equals(read_slice(empty))
    with pytest.raises(NotFound):
        read_slice_head(tmp_path / "missing.parquet", 1)
    (bad := tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InvalidInput, match="not a readable Parquet"):
        read_slice_head(bad, 1)


def test_file_metadata_follows_the_fixed_options() -> None:
    md = pq.ParquetFile(io.BytesIO(EXPECTED)).metadata
    assert md.created_by == f"parquet-cpp-arrow version {pa.__version__}"
    assert md.format_version == "2.6"
    assert md.num_row_groups == 1
    for i in range(md.num_columns):
        col = md.row_group(0).column(i)
        assert col.compression == "ZSTD"
        assert col.is_stats_set
    assert set(md.metadata) == {b"ARROW:schema"}  # no created-at, no pandas blob
    assert SLICE_WRITER_VERSION == "cairn-slice/1"
    assert WRITER_OPTIONS["compression_level"] == 1


def test_row_groups_are_cut_at_a_fixed_row_count(monkeypatch) -> None:
    monkeypatch.setattr(slices, "ROW_GROUP_ROWS", 1000)
    md = pq.ParquetFile(io.BytesIO(slice_bytes(mixed_table(2500)))).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [1000, 1000, 500]


def test_record_batch_input_and_refusals(tmp_path) -> None:
    t = mixed_table(10)
    assert slice_bytes(t.to_batches()[0]) == slice_bytes(t)
    with pytest.raises(InvalidInput):
        write_parquet_slice({"a": [1]}, io.BytesIO())  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="unsupported"):
        write_parquet_slice(pa.table({"a": pa.array([[1]], pa.list_view(pa.int8()))}), io.BytesIO())
    with pytest.raises(InvalidInput, match="not a readable Parquet"):
        read_slice(b"not parquet at all")
    with pytest.raises(NotFound):
        read_slice(tmp_path / "missing.parquet")


# --------------------------------------------------------------------------- iter_slices


SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string())])


def _batches(sizes: list[int], start: int = 0) -> list[pa.RecordBatch]:
    out = []
    for n in sizes:
        rows = range(start, start + n)
        out.append(
            pa.record_batch([pa.array(rows, pa.int64()), pa.array([str(x) for x in rows], pa.string())], schema=SCHEMA)
        )
        start += n
    return out


@SETTINGS
@given(st.lists(st.integers(0, 40), max_size=12), st.integers(1, 50))
def test_iter_slices_boundaries(sizes: list[int], rows_per_slice: int) -> None:
    total = sum(sizes)
    out = list(iter_slices(iter(_batches(sizes)), SCHEMA, rows_per_slice))
    lengths = [t.num_rows for t in out]
    assert sum(lengths) == total
    assert all(n == rows_per_slice for n in lengths[:-1])
    assert not lengths or 0 < lengths[-1] <= rows_per_slice
    assert len(out) == -(-total // rows_per_slice)
    assert all(t.schema == SCHEMA for t in out)
    got = [x for t in out for x in t.column("i").to_pylist()]
    assert got == list(range(total))
    # slicing does not change the logical hash of the whole
    whole = pa.Table.from_batches(_batches(sizes), SCHEMA)
    assert logical_hash(out, schema=SCHEMA) == logical_hash(whole)


def test_iter_slices_is_lazy() -> None:
    consumed = []

    def source():
        for b in _batches([10] * 10):
            consumed.append(b.num_rows)
            yield b

    it = iter_slices(source(), SCHEMA, 25)
    first = next(it)
    assert first.num_rows == 25
    assert len(consumed) == 3  # no more batches read than one slice needs
    assert [t.num_rows for t in it] == [25, 25, 25]


def test_iter_slices_cuts_big_batches() -> None:
    out = list(iter_slices(_batches([7, 100, 3]), SCHEMA, 30))
    assert [t.num_rows for t in out] == [30, 30, 30, 20]
    assert out[1].column("i").to_pylist() == list(range(30, 60))


def test_iter_slices_refusals_and_metadata() -> None:
    with pytest.raises(InvalidInput):
        list(iter_slices(_batches([1]), SCHEMA, 0))
    with pytest.raises(InvalidInput):
        list(iter_slices(_batches([1]), SCHEMA, True))
    with pytest.raises(InvalidInput, match="schema"):
        list(iter_slices([pa.record_batch({"i": [1]})], SCHEMA, 5))
    with pytest.raises(InvalidInput):
        list(iter_slices([pa.table({"i": [1], "s": ["1"]})], SCHEMA, 5))
    with_meta = _batches([3])[0].replace_schema_metadata({"k": "v"})
    (t,) = iter_slices([with_meta], SCHEMA, 5)
    assert t.schema == SCHEMA and t.num_rows == 3
    assert list(iter_slices([], SCHEMA, 5)) == []


# --------------------------------------------------------------------------- take_canonical


def test_take_canonical_is_what_the_writer_writes() -> None:
    """The canonical table taken out of a chunked one (the ingest frees the chunks as it goes) is written to the
    same bytes as the chunked table itself, and writing it again changes nothing."""
    table = mixed_table(3000)
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=333))
    holder = [chunked]
    del chunked
    canonical = slices.take_canonical(holder)
    assert holder == []
    assert all(c.num_chunks == 1 for c in canonical.columns)
    assert slice_bytes(canonical) == slice_bytes(pa.Table.from_batches(table.to_batches(max_chunksize=333)))
    assert logical_hash(canonical) == logical_hash(table)
