"""The clock rule end to end: an in-process node (real Kubo, real Spark worker) answers HTTP 400 with
the rule id for every clock spelling of tests/unit/test_query_clock.py and runs nothing, and fixed-format dates
still work, with the rows DuckDB computes from the same CSV."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, add_file, inprocess_node, query
from tests.unit.test_query_clock import CLOCK_QUERIES

pytestmark = pytest.mark.asyncio(loop_scope="module")  # one node and its worker for the module

# The shape of test_query_clock's `t`: k int64, s utf8, d date32, ts timestamp with a zone, n without.
T = (
    b"k,s,d,ts,n\n3,paris,2024-01-05,2024-01-05T10:00:00Z,2024-01-05 10:00:00\n"
    b"0,lyon,2024-02-29,2024-02-29T23:59:59Z,2024-02-29 23:59:59\n"
    b"7,paris,2023-12-31,2023-12-31T00:00:00Z,2023-12-31 00:00:00\n"
    b"12,nice,2024-03-01,2024-03-01T12:30:00Z,2024-03-01 12:30:00\n"
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(
    kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[InNode, Path]]:
    base = tmp_path_factory.mktemp("clock")
    csv = base / "t.csv"
    csv.write_bytes(T)
    async with inprocess_node(base / "n", kubo_session) as n:
        await n[0].spark.ensure()
        await add_file(n[1], csv, name="t")
        yield n, csv


async def post(node: InNode, sql: str) -> tuple[int, dict[str, Any]]:
    return await query(node[1], {"sql": sql, "inputs": {"t": "t"}})


def spark_jobs(node: InNode) -> int:
    return node[0].worker.jobs_sent


@pytest.mark.parametrize("sql", CLOCK_QUERIES)
async def test_clock_queries_get_400(node: tuple[InNode, Path], sql: str) -> None:
    n, _ = node
    jobs = spark_jobs(n)
    status, out = await post(n, sql)
    assert status == 400, out
    assert out["error"]["type"] == "QueryRefused"
    assert out["error"]["message"].startswith("query refused (clock-value): ")
    assert spark_jobs(n) == jobs  # nothing reached Spark


async def test_fixed_format_date_still_works(node: tuple[InNode, Path]) -> None:
    n, csv = node
    # Dates go out as text: the node's JSON answer cannot hold date values yet (a 500).
    sql = (
        "SELECT s, CAST(d AS STRING), CAST(date_add(d, CAST(k AS INT)) AS STRING) AS due FROM t "
        "WHERE d >= '2024-01-01' AND d < DATE '2024-03-01' AND ts < '2024-02-29T23:59:59Z' ORDER BY d"
    )
    status, out = await post(n, sql)
    assert status == 200, out
    expected = duckdb.sql(
        f"SELECT s, CAST(d AS DATE), CAST(d AS DATE) + CAST(k AS INTEGER) FROM read_csv('{csv}') "
        f"WHERE d >= DATE '2024-01-01' AND d < DATE '2024-03-01' AND ts < TIMESTAMPTZ '2024-02-29 23:59:59+00' "
        f"ORDER BY d"
    ).fetchall()
    assert out["rows"] == [[c, d.isoformat(), e.isoformat()] for c, d, e in expected]
