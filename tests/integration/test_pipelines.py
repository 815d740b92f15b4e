"""Pipelines (docs/provenance.md "Pipelines") on real in-process nodes: real Kubo, real Spark, real
libp2p between two nodes. Spark jobs are counted by the resolver (``resolver.computed``); results are checked
against pandas on the same CSVs."""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from node.domain.model import MetadataBlock, Pipeline, PipelineRun, decode, decode_object, parse_cid
from tests.fixtures.inprocess import add_csv, cli, inprocess_node

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
ORDERS = (
    b"id,person,amount,status\n1,ann,12,paid\n2,bob,5,paid\n3,ann,7,void\n4,cat,30,paid\n5,bob,9,paid\n6,dan,4,paid\n"
)
PEOPLE = b"person,city\nann,Paris\nbob,Lyon\ncat,Paris\ndan,Nice\n"
CLEAN = "SELECT id, person, amount FROM o WHERE status = 'paid'"
BY_CITY = "SELECT p.city, SUM(c.amount) AS total FROM c JOIN p ON c.person = p.person GROUP BY p.city"
TOP = "SELECT city, total FROM b WHERE total > 10"


def pipeline(by_city: str = BY_CITY) -> dict[str, Any]:
    return {
        "name": "sales",
        "steps": [
            {"name": "top", "sql": TOP, "inputs": {"b": "by_city"}},  # listed first: run last (it reads by_city)
            {"name": "clean", "sql": CLEAN, "inputs": {"o": "orders"}},
            {"name": "by_city", "sql": by_city, "inputs": {"c": "clean", "p": "people"}},
        ],
    }


def oracle(factor: int = 1) -> dict[str, int]:
    """The final step by pandas on the same CSVs."""
    o, p = pd.read_csv(io.BytesIO(ORDERS)), pd.read_csv(io.BytesIO(PEOPLE))
    clean = o[o.status == "paid"][["id", "person", "amount"]]
    by_city = clean.merge(p, on="person").groupby("city").amount.sum() * factor
    return {c: int(t) for c, t in by_city.items() if t > 10}


async def run(client: Any, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    resp = await client.post("/api/v0/pipelines", json=body)
    out = await resp.json()
    assert resp.status == status, out
    return dict(out)


async def final_rows(client: Any, out: dict[str, Any]) -> dict[str, int]:
    ex = {s["name"]: s for s in out["steps"]}["top"]["execution"]
    resp = await client.get(f"/api/v0/executions/{ex}/data", params={"format": "jsonl"})
    assert resp.status == 200
    rows = [json.loads(line) for line in (await resp.text()).splitlines()]
    return {r["city"]: r["total"] for r in rows}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair(
    kubo_session: ManagedKubo, kubo_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, Any]]:
    """Two nodes with peers on, each with its own Kubo, connected only by `cairn connect`; each added the same two
    CSVs (its own datasets: other ids, the same content)."""
    home = tmp_path_factory.mktemp("pipelines")
    peers = {"peers.enabled": True, "query.lineage_fetch_timeout": 3.0}
    async with (
        inprocess_node(home / "a", kubo_session, **peers) as (a, a_client),
        inprocess_node(home / "b", None, **peers, **{"ipfs.binary": str(kubo_binary)}) as (b, b_client),
    ):
        await a.spark.ensure()
        ids: dict[str, set[str]] = {}  # node → its root dataset ids
        for side, client in (("a", a_client), ("b", b_client)):
            ids[side] = {
                (await add_csv(client, name, data))["id"] for name, data in (("orders", ORDERS), ("people", PEOPLE))
            }
        assert a.network is not None
        await b.peers.connect(a.network.host.addrs()[0])
        yield {"a": a, "a_client": a_client, "b": b, "b_client": b_client, "ids": ids}


def steps(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in out["steps"]}


async def test_a_three_step_pipeline_runs_in_order_and_matches_pandas(pair: dict[str, Any]) -> None:
    a, client = pair["a"], pair["a_client"]
    before = a.resolver.computed
    out = await run(client, {"pipeline": pipeline()})
    assert out["status"] == "ok" and out["failed"] is None and out["previous"] is None
    assert [s["name"] for s in out["steps"]] == ["clean", "by_city", "top"]  # dependency order
    assert a.resolver.computed - before == 3 and out["computed"] == 3
    assert await final_rows(client, out) == oracle()
    run_obj = decode_object(decode(await a.kubo.block_get(parse_cid(out["run"]))))
    assert isinstance(run_obj, PipelineRun) and run_obj.signer == a.identity.node_key
    run_obj.verify(a.identity.private_key.public_key())
    pl = decode_object(decode(await a.kubo.block_get(parse_cid(out["pipeline"]))))
    assert isinstance(pl, Pipeline)
    assert [sorted(v) for v in pl.vertices] == [["dataset"], ["dataset"], ["query"], ["query"], ["query"]]
    # orders → clean, clean → by_city, people → by_city, by_city → top
    assert sorted((e.tail_index, e.head_index) for e in pl.edges) == [(0, 2), (1, 3), (2, 3), (3, 4)]
    version = steps(out)["by_city"]["version"]
    seed = (await a.data.version(version)).blocks[-1][1]
    assert isinstance(seed, MetadataBlock) and seed.event["datasetKind"] == "derivative"
    pair["first"] = out


async def test_a_rerun_computes_nothing_and_links_the_previous_run(pair: dict[str, Any]) -> None:
    a, client, first = pair["a"], pair["a_client"], pair["first"]
    before = a.resolver.computed
    out = await run(client, {"pipeline": pipeline()})
    assert a.resolver.computed == before and out["computed"] == 0
    assert {s["source"] for s in out["steps"]} == {"local"} and out["previous"] == first["run"]
    # Same executions, same derivative versions: the pipeline as run is the same object.
    assert out["pipeline"] == first["pipeline"]
    assert [s["version"] for s in out["steps"]] == [s["version"] for s in first["steps"]]
    pair["second"] = out


async def test_changing_one_step_recomputes_it_and_its_dependants_only(pair: dict[str, Any]) -> None:
    a, client = pair["a"], pair["a_client"]
    before = a.resolver.computed
    changed = BY_CITY.replace("SUM(c.amount) AS total", "SUM(c.amount) * 2 AS total")
    out = await run(client, {"pipeline": pipeline(changed)})
    assert a.resolver.computed - before == 2  # by_city and top: exactly two Spark jobs
    assert {n: s["source"] for n, s in steps(out).items()} == {
        "clean": "local",
        "by_city": "computed",
        "top": "computed",
    }
    assert await final_rows(client, out) == oracle(factor=2)
    resp = await client.get("/api/v0/pipelines/sales")
    log = await resp.json()
    assert resp.status == 200 and [r["run"] for r in log["runs"]] == [
        out["run"],
        pair["second"]["run"],
        pair["first"]["run"],
    ]


async def test_another_node_gets_every_step_from_its_peer(pair: dict[str, Any]) -> None:
    b, client, first = pair["b"], pair["b_client"], pair["first"]
    before = b.resolver.computed
    out = await run(client, {"pipeline": pipeline(), "trust": "any"})
    assert b.resolver.computed == before  # no Spark job on B
    assert {s["source"] for s in out["steps"]} == {"peer"} and out["status"] == "ok", out["failed"]
    assert [s["invocation"] for s in out["steps"]] == [s["invocation"] for s in first["steps"]]
    assert await final_rows(client, out) == oracle()
    pair["b_run"] = out


@pytest.mark.parametrize("side", ["a", "b"])
async def test_the_final_result_has_complete_lineage_from_either_node(pair: dict[str, Any], side: str) -> None:
    client = pair[f"{side}_client"]
    out = pair["first"] if side == "a" else pair["b_run"]
    receipt = steps(out)["top"]["receipt"]
    resp = await client.get(f"/api/v0/lineage/{receipt}")
    graph = await resp.json()
    assert resp.status == 200 and graph["complete"], graph
    receipts = {n["id"] for n in graph["nodes"] if n["kind"] == "receipt"}
    assert receipts == {s["receipt"] for s in pair["first"]["steps"]}  # every step of the run, on either node
    roots = [n for n in graph["nodes"] if n["kind"] == "dataset" and n.get("root")]
    # The receipts B reused are A's: they name A's versions of the two roots (same content as B's own), which B
    # fetched by CID and checked (chain and signatures); A knows them by name.
    assert {n["signer"] for n in roots} == pair["ids"]["a"]
    assert all(n["datasetKind"] == "root" and n["checks"]["chain"] == "ok" for n in roots)
    if side == "a":
        assert {n["name"] for n in roots} == {"orders", "people"}


async def test_a_failing_step_stops_its_dependants_and_is_recorded(pair: dict[str, Any]) -> None:
    a, client = pair["a"], pair["a_client"]
    bad = pipeline("SELECT p.city, SUM(c.nope) AS total FROM c JOIN p ON c.person = p.person GROUP BY p.city")
    bad["name"] = "broken"
    out = await run(client, {"pipeline": bad})
    assert out["status"] == "failed" and out["failed"]["step"] == "by_city" and "nope" in out["failed"]["error"]
    assert {n: s["source"] for n, s in steps(out).items()} == {"clean": "local", "by_city": "failed", "top": "skipped"}
    assert steps(out)["clean"]["version"] is not None  # the step before stays recorded
    assert a.pipelines.latest("broken") == parse_cid(out["run"])
    pl = decode_object(decode(await a.kubo.block_get(parse_cid(out["pipeline"]))))
    assert isinstance(pl, Pipeline)  # steps that never got a query hold the dt_0 of their SQL as written
    assert [sorted(v) for v in pl.vertices[2:]] == [["query"], ["transformation"], ["transformation"]]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"pipeline": {"name": "x", "steps": [{"name": "s", "sql": "SELECT 1 FROM t", "inputs": {"t": "nope"}}]}},
            404,
            "step \"s\": no dataset named 'nope'",
        ),
        (
            {"text": "name: x\nsteps:\n  - {name: s, sql: SELECT 1 FROM t, inputs: {t: s}}\n"},
            400,
            "reads the step itself",
        ),
        ({"text": "{", "pipeline": {}}, 400, "not both"),
    ],
)
async def test_bad_pipelines_are_one_line_4xx(
    pair: dict[str, Any], body: dict[str, Any], status: int, message: str
) -> None:
    before = pair["a"].resolver.computed
    out = await run(pair["a_client"], body, status)
    assert message in out["error"]["message"] and "\n" not in out["error"]["message"]
    assert pair["a"].resolver.computed == before


async def test_a_steps_derivative_version_chains_to_the_receipt_that_wrote_it(pair: dict[str, Any]) -> None:
    """The version a later step reads names its producer in the object (AddData ``transform``), not only in the
    index: lineage from it goes through that receipt to the roots, and it is not itself a root."""
    client, first = pair["a_client"], pair["first"]
    clean = steps(first)["clean"]
    resp = await client.get(f"/api/v0/lineage/{clean['version']}")
    graph = await resp.json()
    assert resp.status == 200 and graph["complete"], graph
    edges = {(e["from"], e["to"], e["label"], e["via"]) for e in graph["edges"]}
    assert (clean["version"], clean["receipt"], "output of", "object") in edges
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert nodes[clean["version"]]["datasetKind"] == "derivative" and not nodes[clean["version"]]["root"]
    assert {n["name"] for n in graph["nodes"] if n["kind"] == "dataset" and n["root"]} == {"orders"}


def _doc_section() -> str:
    text = (ROOT / "docs" / "provenance.md").read_text()
    section = re.search(r"^## Pipelines\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "docs/provenance.md has no '## Pipelines' section"
    return section.group(1)


async def test_documented_walkthrough(pair: dict[str, Any], tmp_path: Path) -> None:
    """The section's YAML file is this module's pipeline; every `cairn pipeline` and `cairn lineage` line of it runs
    through the real CLI (the `add` lines are the fixture's: the same two CSVs)."""
    a = pair["a"]
    section = _doc_section()
    yaml_text = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert yaml_text
    (tmp_path / "sales.yaml").write_text(yaml_text.group(1))
    ran: list[str] = []
    last: dict[str, Any] = {}
    for line in re.findall(r"^\$ cairn (.+?)(?:\s+#.*)?$", section, re.M):
        words = line.split()
        if words[0] == "add":
            assert words[1] in ("orders.csv", "people.csv") and words[3] in ("orders", "people")
            continue
        if words[:2] == ["pipeline", "run"]:
            rc, out, err = await cli(a, "pipeline", "run", str(tmp_path / "sales.yaml"), "--json")
            assert rc == 0, err
            last = json.loads(out)
            first = {s["name"]: s["invocation"] for s in pair["first"]["steps"]}
            assert {s["name"]: s["invocation"] for s in last["steps"]} == first  # the file is this module's pipeline
            rc, out, err = await cli(a, "pipeline", "run", str(tmp_path / "sales.yaml"))  # as a user sees it
            assert rc == 0 and out.decode().startswith("run       ") and "ok: 3 steps, 0 computed" in out.decode()
        elif words[:2] == ["pipeline", "log"]:
            rc, out, err = await cli(a, *words)
            assert rc == 0 and len(out.decode().splitlines()) >= 2, err
        else:
            assert words[0] == "lineage" and words[1] == "RECEIPT…"
            rc, out, err = await cli(a, "lineage", steps(last)["top"]["receipt"])
            text = out.decode()
            assert rc == 0 and "orders version" in text and "people version" in text, err
        ran.append(" ".join(words[:2]))
    assert ran == ["pipeline run", "pipeline run", "pipeline log", "lineage RECEIPT…"]


async def test_a_failed_step_is_one_error_line_from_the_cli(pair: dict[str, Any], tmp_path: Path) -> None:
    bad = pipeline("SELECT city FROM nowhere")
    bad["name"] = "broken-cli"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    rc, out, err = await cli(pair["a"], "pipeline", "run", str(tmp_path / "bad.json"))
    assert rc == 1 and err.decode().count("\n") == 1 and err.decode().startswith("error: step 'by_city' failed:")
    assert "failed" in out.decode() and "skipped" in out.decode()
    rc, out, err = await cli(pair["a"], "pipeline", "run", str(tmp_path / "missing.yaml"))
    assert rc == 1 and err.decode().startswith("error: cannot read the pipeline file") and not out


async def test_a_run_as_a_job_reports_each_step(pair: dict[str, Any]) -> None:
    """``wait: false``: a job whose events say each step's state in order (with its query's stages), then the run."""
    client = pair["a_client"]
    started = await run(client, {"pipeline": pipeline(), "wait": False}, 202)
    resp = await client.get(started["events"])
    text = await resp.text()
    events = [(m.group(1), json.loads(m.group(2))) for m in re.finditer(r"event: (\S+)\ndata: (.*)\n\n", text)]
    states = [(d["step"], d["state"]) for k, d in events if k == "step"]
    assert states == [(n, s) for n in ("clean", "by_city", "top") for s in ("running", "done")]
    assert any(k == "prepared" and d["step"] == "clean" for k, d in events)  # the step's own query stages
    assert events[-1][0] == "result" and events[-1][1]["status"] == "ok" and events[-1][1]["computed"] == 0


async def test_an_empty_step_result_is_read_by_the_next_step(pair: dict[str, Any]) -> None:
    """A step with no rows is a derivative version with a schema and no data; the next step reads it as a table of
    0 rows (pandas: COUNT over nothing is 0)."""
    a, client = pair["a"], pair["a_client"]
    spec = {
        "name": "nothing",
        "steps": [
            {"name": "big", "sql": "SELECT id, amount FROM o WHERE amount > 1000", "inputs": {"o": "orders"}},
            {"name": "count", "sql": "SELECT COUNT(*) AS n FROM b", "inputs": {"b": "big"}},
        ],
    }
    out = await run(client, {"pipeline": spec})
    assert out["status"] == "ok" and [s["rows"] for s in out["steps"]] == [0, 1]
    o = pd.read_csv(io.BytesIO(ORDERS))
    resp = await client.get(f"/api/v0/executions/{steps(out)['count']['execution']}/data", params={"format": "jsonl"})
    assert [json.loads(line)["n"] for line in (await resp.text()).splitlines()] == [len(o[o.amount > 1000])]
    version = await a.data.version(steps(out)["big"]["version"])
    assert version.rows == 0 and version.structure is not None and version.structure.names == ["id", "amount"]


async def test_every_step_verifies_offline(pair: dict[str, Any]) -> None:
    """`verify --offline --recursive` of the last step checks each step's receipt, execution and data: a step's
    input is a derivative version whose slices are the earlier step's own output."""
    resp = await pair["a_client"].post(
        "/api/v0/verify", json={"cid": steps(pair["first"])["top"]["receipt"], "offline": True, "recursive": True}
    )
    out = await resp.json()
    assert resp.status == 200, out
    assert {e["receipt"] for e in out["executions"]} == {s["receipt"] for s in pair["first"]["steps"]}
    assert out["ok"] and out["summary"]["failed"] == 0, [
        c for e in out["executions"] for c in e["checks"] if c["status"] != "ok"
    ]


async def test_every_step_is_reproduced_by_recomputing(pair: dict[str, Any]) -> None:
    """`verify --recursive` (recompute) from node B, which took every step from A: each step's statement runs again
    on B's Spark over the derivative versions the receipts name, and gives A's logical hash, rows and ex_0."""
    top = steps(pair["first"])["top"]["receipt"]
    resp = await pair["b_client"].post("/api/v0/verify", json={"cid": top, "recursive": True, "wait": True})
    out = await resp.json()
    assert resp.status == 200, out
    assert {e["receipt"] for e in out["executions"]} == {s["receipt"] for s in pair["first"]["steps"]}
    assert out["ok"] and out["summary"]["reproduced"] == 3, [(e["status"], e.get("reason")) for e in out["executions"]]
    assert all(e["same_execution"] for e in out["executions"])


async def test_the_log_of_a_pipeline_never_run_is_a_404(pair: dict[str, Any]) -> None:
    client = pair["a_client"]
    resp = await client.get("/api/v0/pipelines/never")
    body = await resp.json()
    assert resp.status == 404 and "no run of pipeline" in body["error"]["message"]
    resp = await client.get("/api/v0/pipelines/sales", params={"limit": "x"})
    assert resp.status == 400
    resp = await client.get("/api/v0/pipelines/sales", params={"limit": "1"})
    assert resp.status == 200 and len((await resp.json())["runs"]) == 1
    rc, _, err = await cli(pair["a"], "pipeline", "log", "never")
    assert rc == 1 and err.decode().startswith("error: no run of pipeline") and err.decode().count("\n") == 1
