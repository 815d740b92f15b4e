"""A dataset as of an earlier version ("Time"): ``NAME@-N`` and ``NAME@BLOCKCID`` wherever a dataset
ref is resolved. One in-process node on the session's real Kubo with its real Spark worker: ``sales`` is ingested
(v1), queried, then appended to (v2). Expected rows come from DuckDB and pandas over the v1 CSV bytes, not from
Cairn. ``snap`` is a snapshot dataset (two states): queried as its state "as at" each block (ODF "Projection"),
checked against pandas over each snapshot CSV, and as its raw changelog with ``REF/changelog``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from node.domain.model import block_of, cid_str
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
# The "as at" fold written in SQL over the changelog, an oracle independent of node/services/datasets/projection.py: a
# row is
# in the state when its appends and correct-tos outnumber its retracts and correct-froms (ODF: each of those carries
# the old row's values exactly).
AS_AT = "SELECT id, city FROM t GROUP BY id, city HAVING SUM(CASE WHEN op IN (0, 3) THEN 1 ELSE -1 END) > 0 ORDER BY id"
STATE = "SELECT * FROM t"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def snap(timed: dict[str, Any]) -> dict[str, Any]:
    """``snap``: a snapshot dataset with two versions (SNAP_V1, then SNAP_V2); ``direct``: SNAP_V2 in one ingest
    (another chain, another changelog, the same state); the CSV of each state under ``timed["dir"]``."""
    client = timed["client"]
    for name, csv in (("v1", SNAP_V1), ("v2", SNAP_V2)):
        (timed["dir"] / f"snap-{name}.csv").write_bytes(csv)
    v1 = await add_csv(client, "snap", SNAP_V1, merge="snapshot", primary_key="id")
    params = {"to": "snap", "filename": "v2.csv", "merge": "snapshot", "primary_key": "id"}
    resp = await client.post("/api/v0/datasets", params=params, data=SNAP_V2)
    assert resp.status == 200, await resp.json()
    v2 = await resp.json()
    await add_csv(client, "direct", SNAP_V2, merge="snapshot", primary_key="id")
    return {"v1": v1, "v2": v2}


def pandas_state(timed: dict[str, Any], which: str) -> list[list[Any]]:
    return pd.read_csv(timed["dir"] / f"snap-{which}.csv").sort_values("id").values.tolist()


async def test_a_snapshot_dataset_is_queried_as_its_state_as_at_the_block(
    timed: dict[str, Any], snap: dict[str, Any]
) -> None:
    """``SELECT * FROM t`` over a snapshot dataset gives its state as at the version (ODF "Projection", AS AT):
    no ``op`` column, corrections applied, retractions gone; ``@-1`` and ``@BLOCKCID`` give an earlier state."""
    client = timed["client"]
    for ref, which in (("snap", "v2"), ("snap@-1", "v1"), (f"snap@{snap['v1']['head']}", "v1")):
        out = await ask(client, STATE, t=ref)
        assert out["columns"] == ["id", "city"], ref
        assert sorted(out["rows"]) == pandas_state(timed, which), ref
        assert out["inputs"] == {"t": snap[which]["head"]}, ref  # the receipt names the block it projected
    got, implicit = await query(client, {"sql": "SELECT city FROM snap WHERE id > 1 ORDER BY city", "inputs": {}})
    assert (got, implicit["rows"]) == (200, [["Brest"], ["Lille"]]), implicit  # no --input: the same state


async def test_the_changelog_form_reads_the_raw_odf_changelog(timed: dict[str, Any], snap: dict[str, Any]) -> None:
    """``REF/changelog`` (no dataset name holds '/') is the raw changelog: ``op`` first, all 7 CDC rows; folded in
    SQL it gives the same state as the default form, and it is another input (another invocation)."""
    client = timed["client"]
    raw = await ask(client, "SELECT op, id, city FROM t", t="snap/changelog")
    assert sorted(raw["rows"]) == sorted(
        [[0, 1, "Paris"], [0, 2, "Lyon"], [0, 3, "Nice"], [2, 2, "Lyon"], [3, 2, "Lille"], [0, 4, "Brest"]]
        + [[1, 3, "Nice"]]
    )
    for ref, which in (("snap", "v2"), ("snap@-1", "v1")):
        folded = await ask(client, AS_AT, t=f"{ref}/changelog")
        assert folded["rows"] == pandas_state(timed, which), ref
        assert folded["inputs"] == {"t": snap[which]["head"]}
        state = await ask(client, "SELECT id, city FROM t ORDER BY id", t=ref)
        assert state["rows"] == folded["rows"] and state["invocation"] != folded["invocation"], ref
    rc, text, err = await cli(timed["node"], "query", "SELECT op, id, city FROM t", "--input", "t=snap/changelog")
    assert rc == 0 and len(text.decode().splitlines()) == 2 + 7, err.decode()  # header, rule, the 7 raw rows
    assert err.decode().startswith("7 rows, local"), err.decode()  # the CLI passes the form through: a local hit
    got, out = await query(client, {"sql": STATE, "inputs": {"t": "nope/changelog"}})
    assert got == 404 and "no dataset named 'nope'" in out["error"]["message"], out


async def test_the_state_invocation_binds_content_and_is_reused(timed: dict[str, Any], snap: dict[str, Any]) -> None:
    """The invocation over a state binds the projected content: asked again (the projection recomputed from scratch,
    as another node would) it is the same iv_0 and a local hit; ``direct`` reaches the same state through another
    chain, so its question is the same invocation (reused, no Spark job) while its changelog is another."""
    node, client = timed["node"], timed["client"]
    first = await ask(client, STATE, t="snap")
    node.datasets.projections._kept.clear()  # as after a restart: the remembered file and the slice cache serve it
    assert (await ask(client, STATE, t="snap"))["invocation"] == first["invocation"]
    node.datasets.projections._kept.clear()  # forget the projection: the next query folds the changelog again
    for remembered in node.datasets.projections_dir.iterdir():
        remembered.unlink()
    before = jobs(timed)
    again = await ask(client, STATE, t="snap")
    direct = await ask(client, STATE, t="direct")
    assert again["invocation"] == first["invocation"] == direct["invocation"]
    assert (again["source"], direct["source"], jobs(timed)) == ("local", "local", before)
    assert direct["inputs"]["t"] != again["inputs"]["t"]  # each names its own block
    changelogs = [await ask(client, STATE, t=f"{r}/changelog") for r in ("snap", "direct")]
    assert len({changelogs[0]["invocation"], changelogs[1]["invocation"], first["invocation"]}) == 3
    old, again = await ask(client, STATE, t="snap@-1"), await ask(client, STATE, t="snap@-1")
    assert old["invocation"] == again["invocation"] != first["invocation"] and again["source"] == "local"


async def _verify(client: Any, cid: str) -> dict[str, Any]:
    resp = await client.post("/api/v0/verify", json={"cid": cid, "offline": True})
    assert resp.status == 200
    return dict(await resp.json())


async def test_verify_offline_recomputes_the_projection(timed: dict[str, Any], snap: dict[str, Any]) -> None:
    """Offline verify of a result over a state recomputes the projection from the version's changelog slices and
    compares it with the execution's input list and the invocation's identity; a forged copy of a projected
    slice in the node's cache fails it."""
    node, client = timed["node"], timed["client"]
    answer = await ask(client, "SELECT city FROM t WHERE id < 3 ORDER BY city", t="snap@-1")
    out = await _verify(client, answer["receipt"])
    checks = {c["check"]: c for s in out["executions"] for c in s["checks"]}
    assert out["ok"], out
    assert checks["input 0 is the projection of the version"]["status"] == "ok"
    resp = await client.get(f"/api/v0/lineage/{answer['receipt']}")
    graph = await resp.json()
    roots = [n for n in graph["nodes"] if n["kind"] == "dataset"]
    assert resp.status == 200 and [(n["cid"], n["root"], n["name"]) for n in roots] == [
        (snap["v1"]["head"], True, "snap")
    ], graph  # lineage walks from the projected input to the block it projected
    projected = (await node.datasets.input("snap@-1")).slices[0].cid
    cached = node.datasets.cache_dir / f"{projected}.parquet"
    honest = cached.read_bytes()
    middle = len(honest) // 2
    cached.write_bytes(honest[:middle] + bytes([honest[middle] ^ 1]) + honest[middle + 1 :])  # one flipped bit
    try:
        out = await _verify(client, answer["receipt"])
        failed = {c["check"]: c for s in out["executions"] for c in s["checks"] if c["status"] == "failed"}
        assert not out["ok"] and set(failed) == {"cached copy gives its CID"}, out
        assert failed["cached copy gives its CID"]["subject"] == cid_str(projected)
    finally:
        cached.write_bytes(honest)


async def test_another_node_projects_a_block_to_the_same_invocation(
    timed: dict[str, Any], snap: dict[str, Any], kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    """A second node (its own home, caches and index), given the block CIDs, folds the changelog itself: the same
    projected slice CIDs and the same iv_0 as this node's answers (deterministic projection: reusable anywhere)."""
    async with inprocess_node(tmp_path / "other", kubo_session) as (other, _):
        for which, ref in (("v2", "snap"), ("v1", "snap@-1")):
            asked = await ask(timed["client"], STATE, t=ref)
            _, _, iv, versions = await other.resolver.prepare(STATE, {"t": snap[which]["head"]})
            mine = await timed["node"].datasets.input(ref)
            assert cid_str(block_of(iv).cid) == asked["invocation"], which
            assert [s.cid for s in versions[0].slices] == [s.cid for s in mine.slices], which
            assert versions[0].head == mine.head and not other.worker.jobs_sent
