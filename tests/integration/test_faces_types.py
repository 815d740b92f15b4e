"""Every type through every face, on a real node (real Kubo, real Spark): HTTP JSON, SSE, `cairn query --json`,
`--format jsonl|csv|parquet` to stdout, the terminal table and `/executions/{cid}/data`.

The oracle is the input itself: the Parquet file the test wrote with pyarrow, decoded back from each face with
independent parsers (strict json, csv, decimal, datetime.fromisoformat, base64), never our own output.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.nodes import NodeProcess
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


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base = tmp_path_factory.mktemp("faces")
    n = NodeProcess(base / "n", env={"CAIRN_SPARK_AUTOSTART": "true"}).start()
    pq.write_table(TYPES, base / "types.parquet")
    pq.write_table(pa.table({"x": pa.array([], pa.int64()), "y": pa.array([], pa.string())}), base / "empty.parquet")
    (base / "odd.csv").write_text("id,first name,é,select,from\n1,Ann,x,s1,f1\n2,Bob,y,s2,f2\n")
    for name, file in (("types", "types.parquet"), ("empty", "empty.parquet"), ("odd", "odd.csv")):
        r = n.cli("add", str(base / file), "--name", name)
        assert r.returncode == 0, r.stderr.decode()
    yield n
    n.stop()


def post_raw(node: NodeProcess, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        node.api + "/api/v0/query",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def ask(node: NodeProcess, sql: str, inputs: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    status, raw = post_raw(node, {"sql": sql, "inputs": inputs or {"types": "types"}, **extra})
    assert status == 200, raw
    return strict_loads(raw)


def get_raw(node: NodeProcess, path: str) -> bytes:
    with urllib.request.urlopen(node.api + path, timeout=120) as r:
        return r.read()


def cli_ok(node: NodeProcess, *args: str) -> bytes:
    r = node.cli(*args)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


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


def test_every_type_over_http_json(node: NodeProcess) -> None:
    out = ask(node, SELECT_ALL)
    assert out["row_count"] == 4 and not out["truncated"]
    check_rows_against_input(out["columns"], out["rows"], TYPES)
    again = ask(node, SELECT_ALL)  # a local hit renders the same answer
    assert again["source"] == "local" and again["rows"] == out["rows"]


def test_every_type_over_sse(node: NodeProcess) -> None:
    status, raw = post_raw(node, {"sql": SELECT_ALL, "inputs": {"types": "types"}, "wait": False})
    assert status == 202
    text = get_raw(node, strict_loads(raw)["events"]).decode()
    datas = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("data: ")]
    assert datas and all(strict_loads(d) is not None for d in datas)
    final = strict_loads(datas[-1])
    check_rows_against_input(final["columns"], final["rows"], TYPES)


def test_every_type_over_cli_json_and_table(node: NodeProcess) -> None:
    out = strict_loads(cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--json"))
    check_rows_against_input(out["columns"], out["rows"], TYPES)
    # The terminal is 80 columns here: a few columns, so that rich does not elide the cells.
    table = cli_ok(node, "query", "SELECT i64, f64, b FROM types ORDER BY id", "-i", "types=types").decode()
    assert "9007199254740993" in table and "NaN" in table and "AP8Q" in table and "∅" in table


def test_every_type_as_jsonl_csv_and_parquet_on_stdout(node: NodeProcess) -> None:
    lines = cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--format", "jsonl").splitlines()
    objs = [strict_loads(line) for line in lines]
    check_rows_against_input(list(objs[0]), [list(o.values()) for o in objs], TYPES)

    text = cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--format", "csv").decode()
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

    data = cli_ok(node, "query", SELECT_ALL, "-i", "types=types", "--format", "parquet")
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


def test_execution_data_keeps_the_users_names(node: NodeProcess) -> None:
    out = ask(node, "SELECT `first name`, é, `select`, `from` AS `where` FROM odd ORDER BY id", {"odd": "odd"})
    assert out["columns"] == ["first name", "é", "select", "where"]
    assert out["rows"] == [["Ann", "x", "s1", "f1"], ["Bob", "y", "s2", "f2"]]
    csv_text = get_raw(node, f"/api/v0/executions/{out['execution']}/data?format=csv").decode()
    assert csv_text.splitlines()[0] == "first name,é,select,where"
    lines = get_raw(node, f"/api/v0/executions/{out['execution']}/data?format=jsonl").splitlines()
    assert strict_loads(lines[0]) == {"first name": "Ann", "é": "x", "select": "s1", "where": "f1"}


def test_duplicate_output_names_round_trip(node: NodeProcess) -> None:
    sql = "SELECT a.id, b.id, a.u FROM types a JOIN types b ON a.id = b.id ORDER BY a.id"
    out = ask(node, sql)
    assert out["columns"] == ["id", "id", "u"] and [r[:2] for r in out["rows"]] == [[1, 1], [2, 2], [3, 3], [4, 4]]
    text = cli_ok(node, "query", sql, "-i", "types=types", "--format", "csv").decode()
    assert text.splitlines()[:2] == ["id,id,u", "1,1,é漢字🙂"]
    first = strict_loads(cli_ok(node, "query", sql, "-i", "types=types", "--format", "jsonl").splitlines()[0])
    assert first == {"id": 1, "id_2": 1, "u": "é漢字🙂"}


def test_empty_result_on_every_face(node: NodeProcess) -> None:
    sql = "SELECT id, dec, m FROM types WHERE id < 0 ORDER BY id"
    out = ask(node, sql)
    assert out["rows"] == [] and out["row_count"] == 0 and out["columns"] == ["id", "dec", "m"]
    assert cli_ok(node, "query", sql, "-i", "types=types", "--format", "csv") == b"id,dec,m\r\n"
    assert cli_ok(node, "query", sql, "-i", "types=types", "--format", "jsonl") == b""
    back = pq.read_table(io.BytesIO(cli_ok(node, "query", sql, "-i", "types=types", "--format", "parquet")))
    assert back.num_rows == 0 and back.schema.names == ["id", "dec", "m"]
    assert strict_loads(cli_ok(node, "query", sql, "-i", "types=types", "--json"))["rows"] == []


def test_empty_input_dataset_is_an_answer(node: NodeProcess) -> None:
    out = ask(node, "SELECT COUNT(*) AS n, MAX(y) AS top FROM empty", {"empty": "empty"})
    assert out["rows"] == [[0, None]]
    out = ask(node, "SELECT * FROM empty", {"empty": "empty"})
    assert out["rows"] == [] and out["columns"] == ["x", "y"]


def test_spark_values_without_a_file_type(node: NodeProcess) -> None:
    """Values only Spark makes (intervals, literals past 2^53, NaN from a cast): written by the documented
    mapping (docs/queries.md); the expected strings are the mapping's, spelled out by hand."""
    out = ask(
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


def test_query_spark_refuses_is_a_4xx(node: NodeProcess) -> None:
    # Valid for the canonicalizer, refused by Spark's analyzer (a computed map cannot be sorted): the asker's
    # query, so a 422 with Spark's reason on one line, not a 500.
    status, raw = post_raw(
        node, {"sql": "SELECT id, MAP(id, u) AS m FROM types ORDER BY id", "inputs": {"types": "types"}}
    )
    assert status == 422 and "\n" not in strict_loads(raw)["error"]["message"]
    # Spark 4.3 cannot hand year-month intervals over as Arrow: refused with its reason, not a 500.
    status, raw = post_raw(
        node, {"sql": "SELECT id, make_ym_interval(1, 2) AS ym FROM types ORDER BY id", "inputs": {"types": "types"}}
    )
    assert status == 422 and "YearMonthIntervalType" in strict_loads(raw)["error"]["message"]


def test_bad_input_is_a_clear_4xx(node: NodeProcess) -> None:
    status, raw = post_raw(node, {"sql": "SELECT * FROM types", "inputs": {"types": "types"}, "limit": "all"})
    assert status == 400 and b"limit" in raw
    ex = ask(node, SELECT_ALL)["execution"]
    for q in ("format=xml", "names=a,b"):
        try:
            get_raw(node, f"/api/v0/executions/{ex}/data?{q}")
            raise AssertionError("accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 400 and strict_loads(e.read())["error"]["message"]


def test_parquet_refuses_a_terminal(node: NodeProcess, tmp_path: Path) -> None:
    import os
    import pty
    import subprocess

    leader, follower = pty.openpty()
    try:
        r = subprocess.run(
            node.cli_argv("query", SELECT_ALL, "-i", "types=types", "--format", "parquet"),
            stdout=follower,
            stderr=subprocess.PIPE,
            env=node.cli_env(),
            timeout=120,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert r.returncode == 1 and b"terminal" in r.stderr and len(r.stderr.splitlines()) == 1
