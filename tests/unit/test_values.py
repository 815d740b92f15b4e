"""node.support.values: one rendering of every Arrow type, checked by decoding it back with independent parsers
(json with a strict parser, decimal.Decimal, datetime.fromisoformat, base64, Python's csv module)."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import io
import json
import math
import zoneinfo
from typing import Any

import pyarrow as pa
import pyarrow.parquet
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.faces.api import export
from node.support import values


def strict_loads(text: str | bytes) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


# -- what a rendered value must decode back to (independent of node.support.values) ---------------------------


def decode_back(t: pa.DataType, v: Any) -> Any:
    """The Python value a rendered JSON value stands for, by the documented mapping."""
    if v is None:
        return None
    if pa.types.is_integer(t):
        return int(v)  # numbers, or exact decimal strings past 2^53
    if pa.types.is_floating(t):
        return (
            float(v) if not isinstance(v, str) else {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v]
        )
    if pa.types.is_decimal(t):
        return decimal.Decimal(v)
    if pa.types.is_date(t):
        return dt.date.fromisoformat(v)
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            assert v.endswith("Z")
            return dt.datetime.fromisoformat(v[:-1]).replace(tzinfo=dt.UTC)
        return dt.datetime.fromisoformat(v)
    if pa.types.is_binary(t):
        return base64.b64decode(v, validate=True)
    if pa.types.is_list(t):
        return [decode_back(t.value_type, x) for x in v]
    if pa.types.is_map(t):
        pairs = v.items() if isinstance(v, dict) else v
        return [(decode_back(t.key_type, k), decode_back(t.item_type, x)) for k, x in pairs]
    if pa.types.is_struct(t):
        return {t.field(i).name: decode_back(t.field(i).type, v[t.field(i).name]) for i in range(t.num_fields)}
    return v


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return (a == b and type(a) is type(b)) or (isinstance(a, int) and isinstance(b, int) and a == b)


# -- generated tables ------------------------------------------------------------------------------------

EPOCH = dt.datetime(1970, 1, 1)
ints64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1])
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([math.nan, math.inf, -math.inf, -0.0])
decimals = st.decimals(min_value=-(10**20), max_value=10**20, places=6, allow_nan=False, allow_infinity=False)
dates = st.dates()
stamps = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59))
texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["", '"', ",", "\r\n", " a"])

SCALARS: list[tuple[pa.DataType, Any]] = [
    (pa.int64(), ints64),
    (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.float64(), floats),
    (pa.decimal128(27, 6), decimals),
    (pa.date32(), dates),
    (pa.timestamp("us"), stamps),
    (pa.timestamp("us", "UTC"), stamps.map(lambda d: d.replace(tzinfo=dt.UTC))),
    (pa.string(), texts),
    (pa.binary(), st.binary(max_size=10)),
    (pa.bool_(), st.booleans()),
]


@st.composite
def typed_column(draw: Any, depth: int = 0) -> tuple[pa.DataType, Any]:
    kind = draw(st.integers(0, len(SCALARS) + (2 if depth < 2 else -1)))
    if kind < len(SCALARS):
        return SCALARS[kind]
    inner_t, inner = draw(typed_column(depth + 1))
    if kind == len(SCALARS):
        return pa.list_(inner_t), st.lists(st.none() | inner, max_size=3)
    if kind == len(SCALARS) + 1:
        return pa.map_(pa.string(), inner_t), st.dictionaries(texts, st.none() | inner, max_size=3).map(
            lambda d: list(d.items())
        )
    return pa.struct([("x", inner_t), ("y y", pa.int64())]), st.fixed_dictionaries(
        {"x": st.none() | inner, "y y": st.none() | ints64}
    )


@st.composite
def tables(draw: Any) -> pa.Table:
    cols = draw(st.lists(typed_column(), min_size=1, max_size=4))
    n = draw(st.integers(0, 6))
    arrays = [pa.array(draw(st.lists(st.none() | gen, min_size=n, max_size=n)), t) for t, gen in cols]
    return pa.table(arrays, names=[f"c{i} é" for i in range(len(arrays))])


@given(tables(), st.integers(0, 3))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_value_renders_to_strict_json_and_decodes_back(table: pa.Table, skip: int) -> None:
    table = table.slice(min(skip, table.num_rows))  # sliced arrays too: offsets must be honoured
    rows = strict_loads(values.dumps(values.json_rows(table)))
    assert len(rows) == table.num_rows
    expected = table.to_pylist()
    for got, want in zip(rows, expected):
        for (name, t), v in zip(((f.name, f.type) for f in table.schema), got):
            w = want[name]
            if pa.types.is_map(t) and w is not None:
                w = list(w)
            assert same(decode_back(t, v), w), (name, t, v, w)


@given(tables())
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_csv_and_jsonl_carry_the_same_values(table: pa.Table) -> None:
    rendered = values.json_rows(table)
    chunks = _export(table, "csv")
    text = b"".join(chunks).decode()
    assert text.endswith("\r\n")  # RFC 4180: every record, the header too, ends with CRLF
    parsed = list(csv.reader(io.StringIO(text, newline="")))
    assert parsed[0] == table.schema.names and len(parsed) == table.num_rows + 1
    for got, want in zip(parsed[1:], rendered):
        for t, cell, v in zip(table.schema.types, got, want):
            if pa.types.is_floating(t) and isinstance(v, float):
                assert float(cell) == v  # any text that reads back as the same float
            else:
                assert cell == ("" if v is None else values.cell_text(v))
    lines = b"".join(_export(table, "jsonl")).splitlines()
    assert [list(strict_loads(line).values()) for line in lines] == strict_loads(values.dumps(rendered))


def _export(table: pa.Table, fmt: str) -> list[bytes]:
    import asyncio

    async def collect() -> list[bytes]:
        async def one() -> Any:
            yield table

        return [c async for c in export.stream(one(), export.writer_for(fmt))]

    return asyncio.run(collect())


NY = zoneinfo.ZoneInfo("America/New_York")


def test_mapping_examples() -> None:
    """The examples of docs/queries.md, "Answers: how values are written"."""
    t = pa.table(
        {
            "big": pa.array([2**53, 7], pa.int64()),
            "f": pa.array([math.nan, -math.inf]),
            "d": pa.array([decimal.Decimal("1.10"), decimal.Decimal("-0.000001")], pa.decimal128(10, 6)),
            "ts": pa.array(
                [dt.datetime(2013, 1, 1, 5, tzinfo=NY), dt.datetime(2013, 1, 1, 5, 0, 0, 250000, tzinfo=NY)],
                pa.timestamp("us", "America/New_York"),
            ),  # an instant: written in UTC
            "ntz": pa.array([dt.datetime(2013, 1, 1, 5), None], pa.timestamp("us")),
            "dur": pa.array(
                [dt.timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=500000), -dt.timedelta(hours=1)],
                pa.duration("us"),
            ),
            "iv": pa.array([pa.MonthDayNano([14, 0, 0]), pa.MonthDayNano([1, -1, 0])], pa.month_day_nano_interval()),
            "bin": pa.array([b"\x00\xff", b""]),
            "m": pa.array([[(1, "a")], []], pa.map_(pa.int32(), pa.string())),
        }
    )
    rows = values.json_rows(t)
    assert rows[0] == [
        "9007199254740992",
        "NaN",
        "1.100000",
        "2013-01-01T10:00:00Z",
        "2013-01-01T05:00:00",
        "P1DT2H3M4.5S",
        "P1Y2M",
        "AP8=",
        [[1, "a"]],
    ]
    assert rows[1] == [7, "-Infinity", "-0.000001", "2013-01-01T10:00:00.250000Z", None, "-PT1H", "P1M-1DT0S", "", []]


def test_unknown_type_is_a_clear_422() -> None:
    arr = pa.array([[1]], pa.list_view(pa.int64()))
    with pytest.raises(values.RenderError) as e:
        values.json_rows(pa.table({"lv": arr}))
    assert e.value.status == 422 and "lv" in e.value.message and "\n" not in e.value.message


def test_duplicate_names_become_unique_keys_in_jsonl() -> None:
    assert values.unique_names(["x", "x", "x_2", "x"]) == ["x", "x_2", "x_2_2", "x_3"]


@pytest.mark.parametrize(
    "t",
    [
        pa.int64(),
        pa.uint8(),
        pa.float32(),
        pa.bool_(),
        pa.string(),
        pa.binary(),
        pa.date32(),
        pa.null(),
        pa.decimal128(38, 10),
        pa.decimal256(50, 2),
        pa.timestamp("us", "UTC"),
        pa.timestamp("ms"),
        pa.timestamp("ns", 'Odd "zone"'),
        pa.time64("us"),
        pa.duration("ns"),
        pa.binary(4),
        pa.list_(pa.int8(), 3),
        pa.list_(pa.struct([("a b", pa.map_(pa.string(), pa.list_(pa.date32()))), ('x"y', pa.float64())])),
    ],
)
def test_empty_input_schema_from_canonical_types(t: pa.DataType, tmp_path: Any) -> None:
    """An input with no rows reaches Spark as an empty Parquet file whose types give the same canonical strings."""
    from node.services.datasets import canonical_type
    from node.services.resolve.empty_input import arrow_type, write_empty

    assert canonical_type(arrow_type(canonical_type(t))) == canonical_type(t)
    back = pa.parquet.read_table(write_empty(tmp_path / "e.parquet", [("c", canonical_type(t))]))
    assert back.num_rows == 0 and back.schema.names == ["c"]
