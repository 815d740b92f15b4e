"""The canonical row order of results without ORDER BY (node.domain.sql.result_order, docs/queries.md "Order"):
total over every type, nested ones included, so any layout of the same rows gives byte-identical Parquet."""

from __future__ import annotations

import io
import math
import random
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.domain.sql.result_order import canonical_order, encode
from node.services.resolve.execution import published_order
from node.support.errors import InvalidInput

NESTED = pa.schema(
    [
        ("k", pa.int64()),
        ("x", pa.float64()),
        ("arr", pa.list_(pa.float64())),
        ("st", pa.struct([("f", pa.float32()), ("G", pa.string())])),
        ("m", pa.map_(pa.string(), pa.int64())),
    ]
)

floats = st.sampled_from([0.0, -0.0, math.nan, 1.5, -1.5, math.inf]) | st.floats(width=32)
cells = {
    "k": st.none() | st.integers(-3, 3),
    "x": st.none() | floats,
    "arr": st.none() | st.lists(st.none() | floats, max_size=3),
    "st": st.none()
    | st.fixed_dictionaries({"f": st.none() | floats, "G": st.none() | st.sampled_from(["", "a", "é"])}),
    "m": st.none() | st.lists(st.tuples(st.sampled_from(["a", "b"]), st.none() | st.integers(0, 2)), max_size=2),
}
row_lists = st.lists(st.fixed_dictionaries(cells), min_size=0, max_size=12)


def parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def exact(value: object) -> object:
    """A cell as exact, comparable Python: floats by their bits (so -0.0 != 0.0, NaN == NaN)."""
    if isinstance(value, float):
        return ("f", struct.pack(">d", value))
    if isinstance(value, dict):
        return tuple((k, exact(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(exact(v) for v in value)
    return value


@settings(max_examples=150, deadline=None)
@given(row_lists, st.randoms(use_true_random=False), st.integers(1, 4))
def test_any_layout_gives_the_same_bytes(rows: list[dict], rnd: random.Random, pieces: int) -> None:
    table = pa.Table.from_pylist(rows, schema=NESTED)
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    # The same rows, another order, in several chunks (as several slices would arrive).
    step = max(1, len(shuffled) // pieces)
    chunks = [pa.Table.from_pylist(shuffled[i : i + step], schema=NESTED) for i in range(0, len(shuffled), step)]
    other = pa.concat_tables(chunks) if chunks else table.slice(0, 0)
    assert parquet(published_order(table, None)) == parquet(published_order(other, None))
    # Nothing lost or added.
    assert sorted(map(repr, map(exact, canonical_order(other).to_pylist()))) == sorted(
        map(repr, map(exact, table.to_pylist()))
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.integers(-5, 5), st.none() | floats, st.none() | st.text(max_size=3)), max_size=15
    )
)
def test_flat_columns_sort_by_value_then_float_bits(rows: list[tuple]) -> None:
    # The oracle: Python's sort on (nulls last, value) per column, -0.0 before 0.0, NaN after numbers.
    table = pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "x": pa.array([r[1] for r in rows], pa.float64()),
            "s": pa.array([r[2] for r in rows], pa.string()),
        }
    )

    def key(row: tuple) -> tuple:
        k, x, s = row
        bits = None if x is None else struct.unpack(">q", struct.pack(">d", x))[0]  # signed: -0.0 < 0.0
        xk = (1,) if x is None else (0, 1, 0, bits) if math.isnan(x) else (0, 0, x, bits)
        return ((k is None, k or 0), xk, (s is None, (s or "").encode()))

    got = canonical_order(table)
    expected = sorted(rows, key=key)
    assert [exact(tuple(r.values())) for r in got.to_pylist()] == [exact(r) for r in expected]


def test_minus_zero_comes_before_zero_everywhere() -> None:
    table = pa.table({"x": pa.array([0.0, -0.0], pa.float32()), "a": pa.array([[0.0], [-0.0]], pa.list_(pa.float64()))})
    out = canonical_order(table)
    assert [math.copysign(1, v) for v in out.column("x").to_pylist()] == [-1, 1]
    table = pa.table({"a": pa.array([[0.0], [-0.0]], pa.list_(pa.float64()))})
    assert [math.copysign(1, v[0]) for v in canonical_order(table).column("a").to_pylist()] == [-1, 1]


def test_nested_outputs_never_raise_a_500() -> None:
    # A list or struct output without ORDER BY raised pyarrow.ArrowTypeError.
    table = pa.table(
        {
            "t": pa.array([[3, 4], [1], [2, 3]], pa.list_(pa.int64())),
            "s": pa.array([{"a": 2}, {"a": 1}, {"a": 1}], pa.struct([("a", pa.int64())])),
            "m": pa.array([[("b", 1)], [("a", 1)], [("a", 1)]], pa.map_(pa.string(), pa.int64())),
        }
    )
    out = published_order(table, None)
    assert out.num_rows == 3 and sorted(map(repr, out.to_pylist())) == sorted(map(repr, table.to_pylist()))


def test_intervals_are_ordered_by_their_encoding() -> None:
    values = [pa.MonthDayNano([1, 2, 3]), pa.MonthDayNano([0, 0, 1]), None]
    table = pa.table({"i": pa.array(values, pa.month_day_nano_interval())})
    first = canonical_order(table)
    assert first.to_pylist() == canonical_order(table.take([2, 1, 0])).to_pylist()
    assert first.column("i").to_pylist()[-1] is None


def test_a_value_with_no_encoding_is_a_4xx(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_encoding(value: object) -> bytes:
        raise TypeError("no canonical encoding for a thing")

    monkeypatch.setattr("node.domain.sql.result_order.encode", no_encoding)
    with pytest.raises(InvalidInput, match="canonical order"):
        published_order(pa.table({"a": pa.array([[1], [2]], pa.list_(pa.int64()))}), None)
    with pytest.raises(TypeError):
        encode(object())


@given(st.lists(st.none() | floats, max_size=3), st.lists(st.none() | floats, max_size=3))
def test_encode_is_injective(a: list, b: list) -> None:
    assert (encode(a) == encode(b)) == (exact(a) == exact(b))
