"""Schema evolution end to end (issue 13 item 4): real nodes, real Kubo, real Spark workers.

A dataset that gained a column reads its older slices with nulls in that column (ODF "Schema
Evolution": only adding columns is allowed), in queries as in reads, and its identity (version logical
hash, invocation) is the same on every node that ingests the same files in the same order.
"""

from __future__ import annotations

import io
import json
import math
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.fixtures.nodes import NodeProcess

OLD = b"id,city,pop\n1,Paris,2100000\n2,Lyon,520000\n3,Nice,340000\n"
NEW = b"id,city,pop,area,region\n4,Lille,230000,34.8,HDF\n5,Metz,120000,,GE\n6,Brest,140000,49.5,BRE\n"
SQL = "SELECT id, city, pop, area, region FROM cities ORDER BY id"
AGG = "SELECT COUNT(area) AS n, SUM(area) AS s, COUNT(*) AS c, COUNT(region) AS r FROM cities WHERE pop > 200000"


def _start(base: Path, name: str) -> NodeProcess:
    return NodeProcess(base / name, env={"CAIRN_SPARK_AUTOSTART": "true"}).start()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, NodeProcess, Path]]:
    base = tmp_path_factory.mktemp("evo")
    (base / "old.csv").write_bytes(OLD)
    (base / "new.csv").write_bytes(NEW)
    a, b = _start(base, "a"), _start(base, "b")
    # Two independent nodes ingest the same files in the same order.
    for n in (a, b):
        for args in (("old.csv", "--name", "cities"), ("new.csv", "--to", "cities")):
            r = n.cli("add", str(base / args[0]), *args[1:])
            assert r.returncode == 0, r.stderr.decode()
    yield a, b, base
    a.stop()
    b.stop()


def ask(node: NodeProcess, sql: str, **inputs: str) -> dict[str, Any]:
    req = urllib.request.Request(
        node.api + "/api/v0/query",
        method="POST",
        data=json.dumps({"sql": sql, "inputs": inputs}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def info(node: NodeProcess, ref: str) -> dict[str, Any]:
    status, body = node.get(f"/api/v0/datasets/{ref}")
    assert status == 200, body
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


def test_old_slices_read_with_nulls_in_queries(nodes: Any) -> None:
    a, _, _ = nodes
    out = ask(a, SQL, cities="cities")
    assert out["columns"] == ["id", "city", "pop", "area", "region"]
    expected = [[_plain(v) for v in row] for row in oracle().itertuples(index=False)]
    assert out["rows"] == expected
    df = oracle()
    big = df[df["pop"] > 200000]  # old rows and new ones
    agg = ask(a, AGG, cities="cities")["rows"][0]
    assert [agg[0], agg[2], agg[3]] == [big["area"].count(), len(big), big["region"].count()]
    assert agg[1] == pytest.approx(big["area"].sum())


def test_reads_match_queries(nodes: Any) -> None:
    a, _, _ = nodes
    r = a.cli("get", "cities", "--format", "jsonl")
    assert r.returncode == 0, r.stderr.decode()
    got = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert [[row[c] for c in ("id", "city", "pop", "area", "region")] for row in got] == ask(a, SQL, cities="cities")[
        "rows"
    ]


def test_two_nodes_same_version_hash_and_invocation(nodes: Any) -> None:
    a, b, _ = nodes
    ia, ib = info(a, "cities"), info(b, "cities")
    assert ia["id"] != ib["id"]  # independent datasets (own keys) ...
    assert ia["logicalHash"] == ib["logicalHash"] and ia["rows"] == ib["rows"] == 6  # ... same rows
    assert ia["abstractStructure"] == ib["abstractStructure"]
    qa, qb = ask(a, AGG, cities="cities"), ask(b, AGG, cities="cities")
    assert qa["invocation"] == qb["invocation"] and qa["logicalHash"] == qb["logicalHash"]


def test_mixed_schema_version_hashes_as_its_rows_with_nulls(nodes: Any) -> None:
    """The version logical hash is the hash of the rows as read (older slices padded with nulls):
    a one-slice dataset holding those same rows, null cells and all, has the same hash, and so a
    query over it has the same invocation and is answered from the cache."""
    a, _, base = nodes
    lines = [json.dumps({k: _plain(v) for k, v in zip(row._fields, row)}) for row in oracle().itertuples(index=False)]
    flat = base / "flat.jsonl"
    flat.write_text("\n".join(lines) + "\n")
    r = a.cli("add", str(flat), "--name", "flat")
    assert r.returncode == 0, r.stderr.decode()
    assert info(a, "flat")["logicalHash"] == info(a, "cities")["logicalHash"]
    first = ask(a, SQL, cities="cities")
    again = ask(a, SQL, cities="flat")
    assert again["invocation"] == first["invocation"] and again["source"] == "local"


def test_a_column_no_row_carries_is_not_added(nodes: Any) -> None:
    a, _, base = nodes
    path = base / "seen.csv"
    path.write_bytes(b"id,city\n1,Paris\n")
    assert a.cli("add", str(path), "--name", "led", "--merge", "ledger", "--primary-key", "id").returncode == 0
    head = info(a, "led")["head"]
    path.write_bytes(b"id,city,extra\n1,Paris,x\n")  # every key seen: no row added, so no new column
    r = a.cli("add", str(path), "--to", "led", "--merge", "ledger", "--primary-key", "id", "--json")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["rows_added"] == 0 and info(a, "led")["head"] == head
    path.write_bytes(b"id,city,extra\n2,Lyon,y\n")
    r = a.cli("add", str(path), "--to", "led", "--merge", "ledger", "--primary-key", "id", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["schema_changed"] is True
    assert ask(a, "SELECT id, extra FROM led ORDER BY id", led="led")["rows"] == [[1, None], [2, "y"]]
