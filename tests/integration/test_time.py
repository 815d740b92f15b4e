"""A dataset as of an earlier version (issue 17 item 6, "Time"): ``NAME@-N`` and ``NAME@BLOCKCID`` wherever a dataset
ref is resolved. One in-process node on the session's real Kubo with its real Spark worker: ``sales`` is ingested
(v1), queried, then appended to (v2). Expected rows come from DuckDB and pandas over the v1 CSV bytes, not from
Cairn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
import pytest_asyncio

from node.ipfs import ManagedKubo
from tests.fixtures.inprocess import add_csv, ask, cli, inprocess_node, query

pytestmark = pytest.mark.asyncio(loop_scope="module")

V1 = b"region,amount\nnorth,10\nsouth,7\nnorth,3\neast,12\n"
V2 = b"region,amount\nsouth,100\nwest,1\n"
SQL = "SELECT region, SUM(amount) AS total FROM t GROUP BY region ORDER BY region"


def duck(csv: Path, sql: str) -> list[list[Any]]:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_csv('{csv}')")
    return [list(r) for r in con.sql(sql).fetchall()]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def timed(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    """The node after v1 was queried and v2 appended: v1's head, v1's answer, the CSV files of v1 and v1+v2."""
    base = tmp_path_factory.mktemp("time")
    (base / "v1.csv").write_bytes(V1)
    (base / "all.csv").write_bytes(V1 + V2.split(b"\n", 1)[1])
    async with inprocess_node(base / "n", kubo_session) as (node, client):
        await node.spark.ensure()
        v1 = await add_csv(client, "sales", V1)
        other = await add_csv(client, "other", b"x\n1\n")
        asked_at_v1 = await ask(client, SQL, t="sales")
        assert asked_at_v1["source"] == "computed"
        resp = await client.post("/api/v0/datasets", params={"to": "sales", "filename": "v2.csv"}, data=V2)
        assert resp.status == 200, await resp.json()
        yield {"node": node, "client": client, "v1": v1, "other": other, "at_v1": asked_at_v1, "dir": base}


def jobs(timed: dict[str, Any]) -> int:
    return int(timed["node"].worker.jobs_sent)


async def test_previous_version_is_the_old_invocation_and_a_local_hit(timed: dict[str, Any]) -> None:
    client, at_v1 = timed["client"], timed["at_v1"]
    now = await ask(client, SQL, t="sales")
    assert now["invocation"] != at_v1["invocation"]
    assert now["rows"] == duck(timed["dir"] / "all.csv", SQL)
    before = jobs(timed)
    for ref in ("sales@-1", f"sales@{timed['v1']['head']}"):
        old = await ask(client, SQL, t=ref)
        assert (old["query"], old["invocation"], old["execution"]) == (
            at_v1["query"],
            at_v1["invocation"],
            at_v1["execution"],
        ), ref
        assert old["source"] == "local" and jobs(timed) == before, ref  # the old answer, reused: no Spark job
        assert old["rows"] == duck(timed["dir"] / "v1.csv", SQL), ref


async def test_an_old_version_computes_from_its_own_rows(timed: dict[str, Any]) -> None:
    sql = "SELECT region, amount FROM t WHERE amount > 5 ORDER BY amount"
    out = await ask(timed["client"], sql, t="sales@-1")
    assert out["source"] == "computed" and out["inputs"] == {"t": timed["v1"]["head"]}  # the version it read
    v1 = pd.read_csv(timed["dir"] / "v1.csv")
    expected = v1[v1.amount > 5].sort_values("amount")
    assert out["rows"] == expected.values.tolist()


async def test_get_and_log_as_of_a_version(timed: dict[str, Any]) -> None:
    client, v1 = timed["client"], timed["v1"]
    head = await (await client.get("/api/v0/datasets/sales")).json()
    old = await (await client.get("/api/v0/datasets/sales@-1")).json()
    assert (old["head"], old["rows"], old["name"]) == (v1["head"], 4, "sales")
    assert head["rows"] == 6 and head["head"] != v1["head"]
    old_log = (await (await client.get(f"/api/v0/datasets/sales@{v1['head']}/log")).json())["blocks"]
    log = (await (await client.get("/api/v0/datasets/sales/log")).json())["blocks"]
    assert old_log[0]["cid"] == v1["head"] and old_log == log[1:]  # v2 added one AddData block
    data = await client.get("/api/v0/datasets/sales@-1/data")
    assert data.status == 200 and len((await data.text()).splitlines()) == 4


async def test_cli_query_get_and_log_take_the_at_forms(timed: dict[str, Any]) -> None:
    node, before = timed["node"], jobs(timed)
    rc, out, err = await cli(node, "query", SQL, "--input", "t=sales@-1", "--format", "csv")
    assert rc == 0 and jobs(timed) == before, err.decode()
    assert out.decode().splitlines()[1:] == [f"{r},{t}" for r, t in duck(timed["dir"] / "v1.csv", SQL)]
    rc, out, err = await cli(node, "get", f"sales@{timed['v1']['head']}", "--format", "csv")
    assert rc == 0 and len(out.decode().splitlines()) == 1 + 4, err.decode()
    rc, out, err = await cli(node, "log", "sales@-1")
    assert rc == 0 and out.decode().split()[1].startswith(timed["v1"]["head"][:12]), out.decode()
    rc, out, err = await cli(node, "query", SQL, "--input", "t=sales@-9")
    assert (rc, out) == (1, b"") and err.decode().startswith('error: "sales@-9" goes back before')


@pytest.mark.parametrize(
    ("suffix", "status", "says"),
    [
        ("-9", 404, '"sales@-9" goes back before the first version of "sales" (2 versions)'),
        ("OTHER", 404, 'is not in the chain of dataset "sales"'),
        ("garbage", 400, "after '@' give a block CID of the dataset's chain or -N"),
        ("-x", 400, "after '@' give a block CID"),
        ("-" + "9" * 5000, 404, 'goes back before the first version of "sales" (2 versions)'),
    ],
)
async def test_a_bad_version_is_a_clear_4xx_without_spark(
    timed: dict[str, Any], suffix: str, status: int, says: str
) -> None:
    suffix = timed["other"]["head"] if suffix == "OTHER" else suffix
    before = jobs(timed)
    got, out = await query(timed["client"], {"sql": SQL, "inputs": {"t": f"sales@{suffix}"}})
    assert got == status, out
    assert says in out["error"]["message"] and "\n" not in out["error"]["message"], out
    assert jobs(timed) == before
    resp = await timed["client"].get(f"/api/v0/datasets/sales@{suffix}")
    assert resp.status == status


SNAP_V1 = b"id,city\n1,Paris\n2,Lyon\n3,Nice\n"
SNAP_V2 = b"id,city\n1,Paris\n2,Lille\n4,Brest\n"  # 2 corrected, 3 retracted, 4 appended
# The "as at" projection written in SQL over the changelog: a row is in the state when its appends and correct-tos
# outnumber its retracts and correct-froms (each of those carries the old row's values exactly).
AS_AT = "SELECT id, city FROM t GROUP BY id, city HAVING SUM(CASE WHEN op IN (0, 3) THEN 1 ELSE -1 END) > 0 ORDER BY id"


async def test_a_snapshot_dataset_is_queried_as_its_changelog(timed: dict[str, Any]) -> None:
    """Today a query over a snapshot dataset sees the raw ODF changelog (``op`` first, every CDC row of the
    version), not the state "as at" it; the projection is the statement's to write (docs/datasets.md)."""
    client = timed["client"]
    await add_csv(client, "snap", SNAP_V1, merge="snapshot", primary_key="id")
    params = {"to": "snap", "filename": "v2.csv", "merge": "snapshot", "primary_key": "id"}
    resp = await client.post("/api/v0/datasets", params=params, data=SNAP_V2)
    assert resp.status == 200, await resp.json()
    raw = await ask(client, "SELECT op, id, city FROM t", t="snap")
    assert sorted(raw["rows"]) == sorted(
        [[0, 1, "Paris"], [0, 2, "Lyon"], [0, 3, "Nice"], [2, 2, "Lyon"], [3, 2, "Lille"], [0, 4, "Brest"]]
        + [[1, 3, "Nice"]]
    )
    for ref, csv in (("snap", SNAP_V2), ("snap@-1", SNAP_V1)):
        (timed["dir"] / "state.csv").write_bytes(csv)
        state = pd.read_csv(timed["dir"] / "state.csv").sort_values("id")
        assert (await ask(client, AS_AT, t=ref))["rows"] == state.values.tolist(), ref
