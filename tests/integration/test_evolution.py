"""Schema evolution end to end: two in-process nodes, real Kubo, real Spark workers.

A dataset that gained a column reads its older slices with nulls in that column (ODF "Schema
Evolution": only adding columns is allowed), in queries as in reads, and its identity (version logical
hash, invocation) is the same on every node that ingests the same files in the same order.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, add_file, cli, inprocess_node, query

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the nodes and their workers live for the module

OLD = b"id,city,pop\n1,Paris,2100000\n2,Lyon,520000\n3,Nice,340000\n"
NEW = b"id,city,pop,area,region\n4,Lille,230000,34.8,HDF\n5,Metz,120000,,GE\n6,Brest,140000,49.5,BRE\n"
SQL = "SELECT id, city, pop, area, region FROM cities ORDER BY id"
AGG = "SELECT COUNT(area) AS n, SUM(area) AS s, COUNT(*) AS c, COUNT(region) AS r FROM cities WHERE pop > 200000"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nodes(
    kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[InNode, InNode, Path]]:
    base = tmp_path_factory.mktemp("evo")
    (base / "old.csv").write_bytes(OLD)
    (base / "new.csv").write_bytes(NEW)
    async with inprocess_node(base / "a", kubo_session) as a, inprocess_node(base / "b", kubo_session) as b:
        await asyncio.gather(a[0].spark.ensure(), b[0].spark.ensure())
        # Two independent nodes ingest the same files in the same order.
        for n in (a, b):
            await add_file(n[1], base / "old.csv", name="cities")
            await add_file(n[1], base / "new.csv", to="cities")
        yield a, b, base


async def ask(node: InNode, sql: str, **inputs: str) -> dict[str, Any]:
    status, out = await query(node[1], {"sql": sql, "inputs": inputs})
    assert status == 200, out
    return out


async def info(node: InNode, ref: str) -> dict[str, Any]:
    resp = await node[1].get(f"/api/v0/datasets/{ref}")
    body = await resp.json()
    assert resp.status == 200, body
    return body


def _plain(v: Any) -> Any:
    """pandas' missing values as JSON's null; numpy scalars as Python values."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def oracle() -> pd.DataFrame:
    """pandas on the same CSVs: concat aligns by name, columns an older file lacks are NaN."""
    df = pd.concat([pd.read_csv(io.BytesIO(OLD)), pd.read_csv(io.BytesIO(NEW))], ignore_index=True)
    return df.sort_values("id")


async def test_old_slices_read_with_nulls_in_queries(nodes: Any) -> None:
    a, _, _ = nodes
    out = await ask(a, SQL, cities="cities")
    assert out["columns"] == ["id", "city", "pop", "area", "region"]
    expected = [[_plain(v) for v in row] for row in oracle().itertuples(index=False)]
    assert out["rows"] == expected
    df = oracle()
    big = df[df["pop"] > 200000]  # old rows and new ones
    agg = (await ask(a, AGG, cities="cities"))["rows"][0]
    assert [agg[0], agg[2], agg[3]] == [big["area"].count(), len(big), big["region"].count()]
    assert agg[1] == pytest.approx(big["area"].sum())


async def test_reads_match_queries(nodes: Any) -> None:
    a, _, _ = nodes
    rc, out, err = await cli(a[0], "get", "cities", "--format", "jsonl")  # the CLI face, a real process
    assert rc == 0, err.decode()
    got = [json.loads(line) for line in out.decode().splitlines()]
    rows = [[row[c] for c in ("id", "city", "pop", "area", "region")] for row in got]
    assert rows == (await ask(a, SQL, cities="cities"))["rows"]


async def test_two_nodes_same_version_hash_and_invocation(nodes: Any) -> None:
    a, b, _ = nodes
    ia, ib = await info(a, "cities"), await info(b, "cities")
    assert ia["id"] != ib["id"]  # independent datasets (own keys) ...
    assert ia["logicalHash"] == ib["logicalHash"] and ia["rows"] == ib["rows"] == 6  # ... same rows
    assert ia["abstractStructure"] == ib["abstractStructure"]
    qa, qb = await ask(a, AGG, cities="cities"), await ask(b, AGG, cities="cities")
    assert qa["invocation"] == qb["invocation"] and qa["logicalHash"] == qb["logicalHash"]


async def test_mixed_schema_version_hashes_as_its_rows_with_nulls(nodes: Any) -> None:
    """The version logical hash is the hash of the rows as read (older slices padded with nulls):
    a one-slice dataset holding those same rows, null cells and all, has the same hash, and so a
    query over it has the same invocation and is answered from the cache."""
    a, _, base = nodes
    lines = [json.dumps({k: _plain(v) for k, v in zip(row._fields, row)}) for row in oracle().itertuples(index=False)]
    flat = base / "flat.jsonl"
    flat.write_text("\n".join(lines) + "\n")
    await add_file(a[1], flat, name="flat")
    assert (await info(a, "flat"))["logicalHash"] == (await info(a, "cities"))["logicalHash"]
    first = await ask(a, SQL, cities="cities")
    again = await ask(a, SQL, cities="flat")
    assert again["invocation"] == first["invocation"] and again["source"] == "local"


async def test_a_column_no_row_carries_is_not_added(nodes: Any) -> None:
    a, _, base = nodes
    path = base / "seen.csv"
    path.write_bytes(b"id,city\n1,Paris\n")
    await add_file(a[1], path, name="led", merge="ledger", primary_key="id")
    head = (await info(a, "led"))["head"]
    path.write_bytes(b"id,city,extra\n1,Paris,x\n")  # every key seen: no row added, so no new column
    added = await add_file(a[1], path, to="led", merge="ledger", primary_key="id")
    assert added["rows_added"] == 0 and (await info(a, "led"))["head"] == head
    path.write_bytes(b"id,city,extra\n2,Lyon,y\n")
    added = await add_file(a[1], path, to="led", merge="ledger", primary_key="id")
    assert added["schema_changed"] is True
    assert (await ask(a, "SELECT id, extra FROM led ORDER BY id", led="led"))["rows"] == [[1, None], [2, "y"]]
