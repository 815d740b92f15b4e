"""Every type through every face, on an in-process node (real Kubo, real Spark): HTTP JSON, SSE, `cairn query --json`,
`--format jsonl|csv|parquet` to stdout, the terminal table and `/executions/{cid}/data`.

The oracle is the input itself: the Parquet file the test wrote with pyarrow, decoded back from each face with
independent parsers (strict json, csv, decimal, datetime.fromisoformat, base64), never our own output.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import decimal
import io
import math
import os
import pty
import sys
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, cli, inprocess_node
from tests.unit.test_values import decode_back, same, strict_loads

UTC = dt.UTC
BIG = 2**53 + 1
TYPES = pa.table(
    {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "i64": pa.array([BIG, -(2**63), None, 7], pa.int64()),
        "f64": pa.array([math.nan, math.inf, -math.inf, None]),
        "dec": pa.array(
            [
                decimal.Decimal("12345678901234567890.0123456789"),
                decimal.Decimal("-0.0000000001"),
                None,
                decimal.Decimal("1.1000000000"),
            ],
            pa.decimal128(38, 10),
        ),
        "d": pa.array([dt.date(2013, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31), None]),
        "ts": pa.array(
            [
                dt.datetime(2013, 1, 1, 10, tzinfo=UTC),
                dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
                None,
                dt.datetime(2020, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
            ],
            pa.timestamp("us", "UTC"),
        ),
        "ntz": pa.array(
            [dt.datetime(2013, 1, 1, 5), None, dt.datetime(2000, 1, 1, 0, 0, 0, 500000), dt.datetime(1, 1, 1)],
            pa.timestamp("us"),
        ),
        "s": pa.array(["plain", 'quote " comma , newline \n end', "", None]),
        "u": pa.array(["é漢字🙂", None, " lead", "trail "]),
        "b": pa.array([b"\x00\xff\x10", b"", None, b"abc"]),
        "flag": pa.array([True, False, None, True]),
        "arr": pa.array([[1, None, BIG], [], None, [2]], pa.list_(pa.int64())),
        "st": pa.array(
            [{"x": 1.5, "y": "a"}, {"x": math.nan, "y": None}, None, {"x": None, "y": "z"}],
            pa.struct([("x", pa.float64()), ("y", pa.string())]),
        ),
        "m": pa.array([[("k", 1)], [], None, [("a", None), ("b", BIG)]], pa.map_(pa.string(), pa.int64())),
        "nested": pa.array(
            [[{"p": [dt.date(2020, 1, 2)]}], None, [], [{"p": None}]],
            pa.list_(pa.struct([("p", pa.list_(pa.date32()))])),
        ),
    }
)
SELECT_ALL = "SELECT * FROM types ORDER BY id"

pytestmark = pytest.mark.asyncio(loop_scope="module")  # one node and one worker for the module


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[InNode]:
    base = tmp_path_factory.mktemp("faces")
    pq.write_table(TYPES, base / "types.parquet")
    pq.write_table(pa.table({"x": pa.array([], pa.int64()), "y": pa.array([], pa.string())}), base / "empty.parquet")
    (base / "odd.csv").write_text("id,first name,é,select,from\n1,Ann,x,s1,f1\n2,Bob,y,s2,f2\n")
    async with inprocess_node(base / "n", kubo_session) as n:
        await n[0].spark.ensure()
        for name, file in (("types", "types.parquet"), ("empty", "empty.parquet"), ("odd", "odd.csv")):
            resp = await n[1].post("/api/v0/datasets", params={"name": name, "path": str(base / file)})
            assert resp.status == 201, await resp.text()
        yield n


async def post_raw(node: InNode, body: dict[str, Any]) -> tuple[int, bytes]:
    resp = await node[1].post("/api/v0/query", json=body)
    return resp.status, await resp.read()


async def ask(node: InNode, sql: str, inputs: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    status, raw = await post_raw(node, {"sql": sql, "inputs": inputs or {"types": "types"}, **extra})
    assert status == 200, raw
    return strict_loads(raw)


async def get_raw(node: InNode, path: str, status: int = 200) -> bytes:
    resp = await node[1].get(path)
    assert resp.status == status, await resp.text()
    return await resp.read()


async def cli_ok(node: InNode, *args: str) -> bytes:
    rc, out, err = await cli(node[0], *args)
    assert rc == 0, err.decode()
    return out


def check_rows_against_input(columns: list[str], rows: list[list[Any]], table: pa.Table) -> None:
    """Each rendered value decodes back (independent parsers) to the value written in the input file."""
    assert columns == table.schema.names
    want = table.to_pylist()
    assert len(rows) == len(want)
    for got, expected in zip(rows, want):
        for f, v in zip(table.schema, got):
            w = expected[f.name]
            if pa.types.is_map(f.type) and w is not None:
                w = list(w)
            assert same(decode_back(f.type, v), w), (f.name, v, w)


async def test_every_type_over_http_json(node: InNode) -> None:
    out = await ask(node, SELECT_ALL)
    assert out["row_count"] == 4 and not out["truncated"]
    check_rows_against_input(out["columns"], out["rows"], TYPES)
    again = await ask(node, SELECT_ALL)  # a local hit renders the same answer
    assert again["source"] == "local" and again["rows"] == out["rows"]


async def test_every_type_over_sse(node: InNode) -> None:
    status, raw = await post_raw(node, {"sql": SELECT_ALL, "inputs": {"types": "types"}, "wait": False})
    assert status == 202
    text = (await get_raw(node, strict_loads(raw)["events"])).decode()
    datas = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("data: ")]
    assert datas and all(strict_loads(d) is not None for d in datas)
    final = strict_loads(datas[-1])
    check_rows_against_input(final["columns"], final["rows"], TYPES)


async def test_every_type_over_cli_json_and_table(node: InNode) -> None:
    out = strict_loads(await cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--json"))
    check_rows_against_input(out["columns"], out["rows"], TYPES)
    # The terminal is 80 columns here: a few columns, so that rich does not elide the cells.
    table = (await cli_ok(node, "query", "SELECT i64, f64, b FROM types ORDER BY id", "-i", "types=types")).decode()
    assert "9007199254740993" in table and "NaN" in table and "AP8Q" in table and "∅" in table


async def test_every_type_as_jsonl_csv_and_parquet_on_stdout(node: InNode) -> None:
    lines = (await cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--format", "jsonl")).splitlines()
    objs = [strict_loads(line) for line in lines]
    check_rows_against_input(list(objs[0]), [list(o.values()) for o in objs], TYPES)

    text = (await cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--format", "csv")).decode()
    assert text.endswith("\r\n")
    records = list(csv.reader(io.StringIO(text, newline="")))
    assert records[0] == TYPES.schema.names and len(records) == 5
    # Text cells decode back too: null is an empty field, nested values are their JSON.
    rows = [[_cell_value(f.type, c) for f, c in zip(TYPES.schema, rec)] for rec in records[1:]]
    rows[0][TYPES.schema.names.index("s")] = "plain"
    for got, expected in zip(rows, TYPES.to_pylist()):
        for f, v in zip(TYPES.schema, got):
            w = expected[f.name]
            if w == "" or (f.name == "b" and w == b""):
                continue  # an empty string and null are told apart by quoting, which csv.reader drops
            w = list(w) if pa.types.is_map(f.type) and w is not None else w
            assert same(decode_back(f.type, v), w), (f.name, v, w)

    data = await cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--format", "parquet")
    back = pq.read_table(io.BytesIO(data))
    assert back.schema.names == TYPES.schema.names and back.num_rows == 4
    for name in ("id", "i64", "dec", "d", "s", "u", "b", "flag", "arr"):
        assert back.column(name).to_pylist() == TYPES.column(name).to_pylist(), name


def _cell_value(t: pa.DataType, cell: str) -> Any:
    if cell == "":
        return None
    if pa.types.is_nested(t):
        return strict_loads(cell)
    if pa.types.is_integer(t):
        return int(cell)
    if pa.types.is_boolean(t):
        return {"true": True, "false": False}[cell]
    if pa.types.is_floating(t) and cell not in ("NaN", "Infinity", "-Infinity"):
        return float(cell)
    return cell


async def test_execution_data_keeps_the_users_names(node: InNode) -> None:
    out = await ask(node, "SELECT `first name`, é, `select`, `from` AS `where` FROM odd ORDER BY id", {"odd": "odd"})
    assert out["columns"] == ["first name", "é", "select", "where"]
    assert out["rows"] == [["Ann", "x", "s1", "f1"], ["Bob", "y", "s2", "f2"]]
    csv_text = (await get_raw(node, f"/api/v0/executions/{out['execution']}/data?format=csv")).decode()
    assert csv_text.splitlines()[0] == "first name,é,select,where"
    lines = (await get_raw(node, f"/api/v0/executions/{out['execution']}/data?format=jsonl")).splitlines()
    assert strict_loads(lines[0]) == {"first name": "Ann", "é": "x", "select": "s1", "where": "f1"}


async def test_duplicate_output_names_round_trip(node: InNode) -> None:
    sql = "SELECT a.id, b.id, a.u FROM types a JOIN types b ON a.id = b.id ORDER BY a.id"
    out = await ask(node, sql)
    assert out["columns"] == ["id", "id", "u"] and [r[:2] for r in out["rows"]] == [[1, 1], [2, 2], [3, 3], [4, 4]]
    text = (await cli_ok(node, "query", sql, "-i", "types=types", "--format", "csv")).decode()
    assert text.splitlines()[:2] == ["id,id,u", "1,1,é漢字🙂"]
    first = strict_loads((await cli_ok(node, "query", sql, "-i", "types=types", "--format", "jsonl")).splitlines()[0])
    assert first == {"id": 1, "id_2": 1, "u": "é漢字🙂"}


async def test_empty_result_on_every_face(node: InNode) -> None:
    sql = "SELECT id, dec, m FROM types WHERE id < 0 ORDER BY id"
    out = await ask(node, sql)
    assert out["rows"] == [] and out["row_count"] == 0 and out["columns"] == ["id", "dec", "m"]
    assert await cli_ok(node, "query", sql, "-i", "types=types", "--format", "csv") == b"id,dec,m\r\n"
    assert await cli_ok(node, "query", sql, "-i", "types=types", "--format", "jsonl") == b""
    back = pq.read_table(io.BytesIO(await cli_ok(node, "query", sql, "-i", "types=types", "--format", "parquet")))
    assert back.num_rows == 0 and back.schema.names == ["id", "dec", "m"]
    assert strict_loads(await cli_ok(node, "query", sql, "-i", "types=types", "--json"))["rows"] == []


async def test_empty_input_dataset_is_an_answer(node: InNode) -> None:
    out = await ask(node, "SELECT COUNT(*) AS n, MAX(y) AS top FROM empty", {"empty": "empty"})
    assert out["rows"] == [[0, None]]
    out = await ask(node, "SELECT * FROM empty", {"empty": "empty"})
    assert out["rows"] == [] and out["columns"] == ["x", "y"]


async def test_spark_values_without_a_file_type(node: InNode) -> None:
    """Values only Spark makes (intervals, literals past 2^53, NaN from a cast): written by the documented
    mapping (docs/queries.md); the expected strings are the mapping's, spelled out by hand."""
    out = await ask(
        node,
        "SELECT id, make_dt_interval(1, 2, 3, 4.5) AS dts, "
        "X'00FF' AS bin, 9007199254740993 AS big, CAST('NaN' AS DOUBLE) AS nan, "
        "CAST(1.10 AS DECIMAL(5,2)) AS dec, TIMESTAMP '2013-01-01 10:00:00' AS ts, "
        "ARRAY(CAST('Infinity' AS DOUBLE)) AS inf "
        "FROM types WHERE id = 1 ORDER BY id",
    )
    assert out["rows"] == [
        [1, "P1DT2H3M4.5S", "AP8=", "9007199254740993", "NaN", "1.10", "2013-01-01T10:00:00Z", ["Infinity"]]
    ]
    assert out["schema"][0] == ["id", "int64"]


async def test_query_spark_refuses_is_a_4xx(node: InNode) -> None:
    # Valid for the canonicalizer, refused by Spark's analyzer (a computed map cannot be sorted): the asker's
    # query, so a 422 with Spark's reason on one line, not a 500.
    status, raw = await post_raw(
        node, {"sql": "SELECT id, MAP(id, u) AS m FROM types ORDER BY id", "inputs": {"types": "types"}}
    )
    assert status == 422 and "\n" not in strict_loads(raw)["error"]["message"]
    # Spark 4.3 cannot hand year-month intervals over as Arrow: refused with its reason, not a 500.
    status, raw = await post_raw(
        node, {"sql": "SELECT id, make_ym_interval(1, 2) AS ym FROM types ORDER BY id", "inputs": {"types": "types"}}
    )
    assert status == 422 and "YearMonthIntervalType" in strict_loads(raw)["error"]["message"]


async def test_bad_input_is_a_clear_4xx(node: InNode) -> None:
    status, raw = await post_raw(node, {"sql": "SELECT * FROM types", "inputs": {"types": "types"}, "limit": "all"})
    assert status == 400 and b"limit" in raw
    ex = (await ask(node, SELECT_ALL))["execution"]
    for q in ("format=xml", "names=a,b"):
        raw = await get_raw(node, f"/api/v0/executions/{ex}/data?{q}", status=400)
        assert strict_loads(raw)["error"]["message"]


async def test_parquet_refuses_a_terminal(node: InNode) -> None:
    leader, follower = pty.openpty()
    try:
        argv = ("-m", "node", "query", SELECT_ALL, "-i", "types=types", "--format", "parquet")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv,
            stdout=follower,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "CAIRN_HOME": str(node[0].home.path)},
        )
        _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 1 and b"terminal" in err and len(err.splitlines()) == 1
