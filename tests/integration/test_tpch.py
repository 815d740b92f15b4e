"""All 22 TPC-H queries through Cairn (real Kubo, real Spark) against DuckDB on the same Parquet files.

`tpchgen-cli` writes the eight tables as Parquet (decimal and date columns, NOTES.md); each is
ingested once into one in-process node (`POST /api/v0/datasets?path=`). Each query (tests/data/tpch/qNN.sql: the
TPC-H specification's text with its default substitution parameters, only Q15's view written as a CTE) goes through
`POST /api/v0/query`;
its result is read back as Parquet from `GET /api/v0/executions/{cid}/data` (not from the JSON answer's rows)
and compared with DuckDB's answer to the same SQL over the same files. A second run must be a local hit: same
execution CID, no new Spark job.
"""

from __future__ import annotations

import datetime
import io
import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pytest_asyncio
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, add_file, inprocess_node

# SF 0.02: every query returns at least one row and no NULL (at 0.01 Q17 is NULL), and the module stays short.
SCALE_FACTOR = "0.02"
TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
QUERIES = Path(__file__).parent.parent / "data" / "tpch"
QUERY_IDS = [f"q{i:02d}" for i in range(1, 23)]
# Two doubles (engines that sum in different orders) agree to this relative tolerance.
DOUBLE_RTOL = 1e-9


@dataclass
class Tpch:
    node: InNode
    data: Path
    duck: duckdb.DuckDBPyConnection


def _generate(dest: Path) -> None:
    exe = Path(sys.executable).parent / "tpchgen-cli"  # installed beside the interpreter (test extra)
    cmd = [str(exe), "parquet", "-s", SCALE_FACTOR, "-o", str(dest)]
    r = subprocess.run(cmd, capture_output=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr.decode()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tpch(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Tpch]:
    base = tmp_path_factory.mktemp("tpch")
    data = base / "data"
    data.mkdir()
    _generate(data)
    duck = duckdb.connect()
    for t in TABLES:
        duck.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{data / f'{t}.parquet'}')")
    try:
        async with inprocess_node(base / "node", kubo_session) as node:
            starting = node[0].spark.ensure()  # the JVM warms up while the tables are ingested
            for t in TABLES:
                await add_file(node[1], data / f"{t}.parquet", name=t)
            await starting
            yield Tpch(node, data, duck)
    finally:
        duck.close()


# -- helpers ---------------------------------------------------------------------------------------


async def _post_query(
    node: InNode, sql: str, inputs: dict[str, str], limit: int | None = 0
) -> tuple[int, dict[str, Any]]:
    # limit 0: the answer carries no rows; the result is read as Parquet from the execution instead.
    body: dict[str, Any] = (
        {"sql": sql, "inputs": inputs} if limit is None else {"sql": sql, "inputs": inputs, "limit": limit}
    )
    resp = await node[1].post("/api/v0/query", json=body)
    return resp.status, json.loads(await resp.read(), parse_constant=_no_constant)


def _no_constant(name: str) -> None:
    raise ValueError(f"not strict JSON: {name}")


def _json_cell_is(cell: Any, value: Any) -> bool:
    """A JSON answer's cell against the verified Parquet value, by the documented mapping (docs/queries.md
    "Answers: how values are written"): decimals exact as strings, dates as ISO 8601, numbers as numbers."""
    if value is None:
        return cell is None
    if isinstance(value, Decimal):
        return isinstance(cell, str) and Decimal(cell) == value
    if isinstance(value, datetime.date):
        return isinstance(cell, str) and datetime.date.fromisoformat(cell) == value
    return type(cell) is type(value) and cell == value


async def _get_parquet(node: InNode, path: str) -> pa.Table:
    resp = await node[1].get(path)
    assert resp.status == 200, await resp.text()
    return pq.read_table(io.BytesIO(await resp.read()))


def _spark_jobs(node: InNode) -> int:
    return node[0].worker.jobs_sent


def _tables_read(sql: str) -> set[str]:
    """The TPC-H tables a statement reads (the query's inputs must be exactly those: rule `unused-input`)."""
    return {t.name.lower() for t in sqlglot.parse_one(sql, read="spark").find_all(exp.Table)} & set(TABLES)


def _order_positions(sql: str, columns: list[str]) -> list[int] | None:
    """Output positions of the top-level ORDER BY keys (by name or alias, as TPC-H writes them); None without."""
    tree = sqlglot.parse_one(sql, read="spark")
    order = tree.args.get("order")
    if order is None:
        return None
    names = [c.lower() for c in columns]
    keys = []
    for o in order.expressions:
        assert isinstance(o.this, exp.Column), f"ORDER BY key is not an output name: {o.sql()}"
        keys.append(names.index(o.this.name.lower()))
    return keys


def _same(a: Any, b: Any) -> bool:
    """Cells equal: decimals, integers, strings and dates exactly; a double within the other engine's precision."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        if not all(isinstance(v, (float, int, Decimal)) for v in (a, b)):
            return False
        tol = DOUBLE_RTOL * max(abs(float(a)), abs(float(b)))
        for v in (a, b):  # a decimal is the exact value rounded to its scale: allow that rounding
            if isinstance(v, Decimal):
                tol += 0.5 * 10.0 ** int(v.as_tuple().exponent)
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=tol)
    if isinstance(a, (int, Decimal)) and isinstance(b, (int, Decimal)):
        return not isinstance(a, bool) and not isinstance(b, bool) and Decimal(a) == Decimal(b)
    return type(a) is type(b) and a == b


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        (0, 0.0) if v is None else (1, float(v)) if isinstance(v, (int, float, Decimal)) else (2, str(v)) for v in row
    )


def _same_multiset(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} rows, expected {len(want)}"
    for g, w in zip(sorted(got, key=_sort_key), sorted(want, key=_sort_key)):
        if not all(_same(x, y) for x, y in zip(g, w)):
            return f"row {g!r} differs from expected {w!r}"
    return None


def _groups(rows: list[tuple[Any, ...]], keys: list[int]) -> list[list[tuple[Any, ...]]]:
    """Consecutive rows with the same ORDER BY keys: the order within a group is not fixed by the query."""
    out: list[list[tuple[Any, ...]]] = []
    for r in rows:
        if out and all(_same(r[k], out[-1][0][k]) for k in keys):
            out[-1].append(r)
        else:
            out.append([r])
    return out


def compare(got: pa.Table, want: pa.Table, order: list[int] | None) -> str | None:
    """Why ``got`` is not ``want`` (None when equal): same width, same rows, in the ORDER BY order if there is one."""
    if got.num_columns != want.num_columns:
        return f"{got.num_columns} columns, expected {want.num_columns}"
    g = [tuple(r.values()) for r in got.to_pylist()]
    w = [tuple(r.values()) for r in want.to_pylist()]
    if order is None:
        return _same_multiset(g, w)
    if len(g) != len(w):
        return f"{len(g)} rows, expected {len(w)}"
    gg, wg = _groups(g, order), _groups(w, order)
    if len(gg) != len(wg):
        return f"{len(gg)} distinct ORDER BY keys, expected {len(wg)}"
    for i, (a, b) in enumerate(zip(gg, wg)):
        why = _same_multiset(a, b)
        if why is not None:
            return f"in ORDER BY position {i}: {why}"
    return None


# -- the oracle's own checks (fast, no node) ------------------------------------------------------------


def test_compare_is_strict() -> None:
    """The comparison must see a wrong value, a wrong order, a missing row and a lost decimal digit."""
    dec = pa.decimal128(15, 2)
    want = pa.table({"k": ["a", "b", "c"], "v": pa.array([Decimal("1.10"), Decimal("2.20"), Decimal("3.30")], dec)})
    assert compare(want, want, [0]) is None
    assert compare(want.slice(0, 2), want, [0]) is not None
    assert compare(want.take([1, 0, 2]), want, [0]) is not None
    assert compare(want.take([1, 0, 2]), want, None) is None
    off = want.set_column(1, "v", pa.array([Decimal("1.10"), Decimal("2.21"), Decimal("3.30")], dec))
    assert compare(off, want, [0]) is not None
    # A decimal rounded to scale 6 matches the double it rounds; a digit more off does not.
    d = pa.table({"x": pa.array([Decimal("0.049985")], pa.decimal128(19, 6))})
    assert compare(d, pa.table({"x": [0.04998479]}), None) is None
    assert compare(d, pa.table({"x": [0.0499837]}), None) is not None
    assert compare(pa.table({"x": [1.0]}), pa.table({"x": [1.0 + 1e-6]}), None) is not None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.decimals(-(10**6), 10**6, places=2)), min_size=1, max_size=30), st.data()
)
def test_compare_sees_any_changed_cell(rows: list[tuple[int, Decimal]], data: st.DataObject) -> None:
    """Sorted on the key, any reordering inside ties passes; a cent changed anywhere, or a row moved across keys,
    fails."""
    rows = sorted(rows, key=lambda r: r[0])
    table = pa.table({"k": [k for k, _ in rows], "v": pa.array([v for _, v in rows], pa.decimal128(15, 2))})
    shuffled = data.draw(st.permutations(range(len(rows))))
    within_ties = sorted(shuffled, key=lambda i: rows[i][0])  # a permutation that keeps the key order
    assert compare(table.take(within_ties), table, [0]) is None
    i = data.draw(st.integers(0, len(rows) - 1))
    bumped = [v + (Decimal("0.01") if j == i else 0) for j, (_, v) in enumerate(rows)]
    assert compare(table.set_column(1, "v", pa.array(bumped, pa.decimal128(15, 2))), table, [0]) is not None
    if rows[0][0] != rows[-1][0]:
        assert compare(table.take(list(range(len(rows)))[::-1]), table, [0]) is not None


# -- through Cairn -----------------------------------------------------------------------------------


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.asyncio(loop_scope="module")  # the node and its worker live for the module
async def test_ingest_keeps_every_value(tpch: Tpch, table: str) -> None:
    """What the node stored reads back as the generated file (decimals, dates and strings unchanged)."""
    stored = await _get_parquet(tpch.node, f"/api/v0/datasets/{table}/data?format=parquet")
    source = pq.read_table(tpch.data / f"{table}.parquet")
    assert stored.column_names == source.column_names and stored.num_rows == source.num_rows
    for name in source.column_names:  # exact, in row order; only string views are stored as plain utf8
        kind = source.schema.field(name).type
        assert stored.schema.field(name).type == (pa.string() if kind == pa.string_view() else kind), name
        want = source.column(name).cast(stored.schema.field(name).type)
        assert stored.column(name).combine_chunks().equals(want.combine_chunks()), f"{table}.{name} differs"


@pytest.mark.parametrize("qid", QUERY_IDS)
@pytest.mark.asyncio(loop_scope="module")  # the node and its worker live for the module
async def test_tpch_query_equals_duckdb(tpch: Tpch, qid: str) -> None:
    sql = (QUERIES / f"{qid}.sql").read_text()
    inputs = {t: t for t in sorted(_tables_read(sql))}
    status, first = await _post_query(tpch.node, sql, inputs)
    assert status == 200, first
    assert first["source"] == "computed"

    got = await _get_parquet(tpch.node, f"/api/v0/executions/{first['execution']}/data?format=parquet")
    want = tpch.duck.sql(sql).to_arrow_table()
    assert want.num_rows > 0 and first["row_count"] == got.num_rows
    why = compare(got, want, _order_positions(sql, want.column_names))
    assert why is None, f"{qid}: {why}"

    jobs = _spark_jobs(tpch.node)
    status, again = await _post_query(tpch.node, sql, inputs, limit=None)  # the default answer, rows as strict JSON
    assert status == 200, again
    assert again["source"] == "local" and again["execution"] == first["execution"]
    shown = got.slice(0, len(again["rows"])).to_pylist()
    assert len(again["rows"]) == min(got.num_rows, len(again["rows"])) and again["rows"], qid
    for json_row, parquet_row in zip(again["rows"], shown):
        assert all(_json_cell_is(c, v) for c, v in zip(json_row, parquet_row.values())), (qid, json_row, parquet_row)
    assert _spark_jobs(tpch.node) == jobs  # answered from the index: the worker received no job


@pytest.mark.parametrize("qid", QUERY_IDS)
@pytest.mark.asyncio(loop_scope="module")  # the node and its worker live for the module
async def test_tpch_output_names_equal_duckdb(tpch: Tpch, qid: str) -> None:
    """The answer's column names are the query's: aliases, column names, derived-table and CTE column lists.

    Outputs named after an unaliased expression (`sum(l_quantity)` in Q18) are left out: each engine spells those
    its own way (docs/queries.md, "output display names approximate Spark's").
    """
    sql = (QUERIES / f"{qid}.sql").read_text()
    status, out = await _post_query(tpch.node, sql, {t: t for t in sorted(_tables_read(sql))})
    assert status == 200, out
    want = tpch.duck.sql(sql).columns
    assert len(out["columns"]) == len(want)
    named = [(i, n) for i, n in enumerate(want) if "(" not in n]
    assert [out["columns"][i] for i, _ in named] == [n for _, n in named]
