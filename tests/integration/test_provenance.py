"""Lineage and offline verification (docs/provenance.md "Lineage", "Verify (offline)").

One in-process node on the session's real Kubo with its real Spark worker (one query for the module, over two
datasets); a second node with its own managed Kubo, connected to the first's swarm, holds nothing but a receipt
CID and walks the lineage by fetching the rest. Tampering is done the ways a peer or a disk would: a receipt
signed by another key over altered data, a receipt whose signature does not cover its content, a forged copy in
the slice cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import xml.etree.ElementTree as ET
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import pytest_asyncio

from node.adapters.identity import generate
from node.adapters.ipfs import ManagedKubo, read_car
from node.domain.model import (
    Execution,
    Receipt,
    RecursiveDataEnvelope,
    block_of,
    cid_str,
    decode,
    decode_object,
    parse_cid,
)
from node.services.datasets.slices import read_slice, write_parquet_slice
from node.services.provenance.lineage import LineageWalk
from tests.fixtures.inprocess import add_csv, cli, inprocess_node

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
CITIES = b"city,pop\nParis,2100000\nLyon,520000\n"
TOWNS = b"town,people\nArles,50000\n"
SQL = "SELECT city AS place, pop FROM c UNION ALL SELECT town, people FROM t"
FAST = {"query.lineage_fetch_timeout": 3.0}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prov(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    gateway = {"ipfs.gateway": kubo_session.gateway_url or ""}  # /ipfs/ relays a Kubo gateway (docs/gateway.md)
    async with inprocess_node(tmp_path_factory.mktemp("prov") / "a", kubo_session, **FAST, **gateway) as (node, client):
        await node.spark.ensure()
        ids = {name: (await add_csv(client, name, data))["id"] for name, data in (("cities", CITIES), ("towns", TOWNS))}
        resp = await client.post("/api/v0/query", json={"sql": SQL, "inputs": {"c": "cities", "t": "towns"}})
        answer = await resp.json()
        assert resp.status == 200, answer
        yield {"node": node, "client": client, "ids": ids, "answer": answer}


async def _lineage(client: Any, ref: str) -> dict[str, Any]:
    resp = await client.get(f"/api/v0/lineage/{ref}")
    body = await resp.json()
    assert resp.status == 200, body
    return body


def _roots(graph: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["signer"]: n for n in graph["nodes"] if n["kind"] == "dataset"}


async def test_a_two_dataset_result_has_lineage_to_both_roots_with_signers(prov: dict[str, Any]) -> None:
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    graph = await _lineage(client, answer["receipt"])
    assert graph["complete"] and graph["cut"] is None and graph["start"] == answer["receipt"]
    nodes = {n["id"]: n for n in graph["nodes"]}
    receipt = nodes[answer["receipt"]]
    assert receipt["kind"] == "receipt" and receipt["signer"] == node.identity.node_key
    assert receipt["checks"] == {"hash": "ok", "signature": "ok"}
    roots = _roots(graph)
    assert set(roots) == set(prov["ids"].values())
    assert all(r["checks"]["chain"] == "ok" and r["source"] == "local" for r in roots.values())
    edges = {(e["from"], e["to"], e["label"]) for e in graph["edges"]}
    assert (answer["receipt"], answer["execution"], "attests") in edges
    heads = {r["name"]: r["id"] for r in roots.values()}
    assert (answer["execution"], heads["cities"], "input 0: read") in edges
    assert (answer["execution"], heads["towns"], "input 1: read") in edges


async def test_every_starting_kind_reaches_the_roots(prov: dict[str, Any]) -> None:
    client, answer = prov["client"], prov["answer"]
    for ref in (answer["execution"], answer["slices"][0], answer["invocation"]):
        graph = await _lineage(client, ref)
        assert graph["start"] == ref and set(_roots(graph)) == set(prov["ids"].values()), ref
    code, out, _ = await cli(prov["node"], "lineage", answer["execution"])  # drawn from its receipt
    assert code == 0 and out.decode().startswith("receipt: ") and "└── attests execution: " in out.decode()
    via = {e["via"] for e in (await _lineage(client, answer["slices"][0]))["edges"]}
    assert "index" in via  # a slice names nothing: the way back is the index's, and the answer says so
    graph = await _lineage(client, "cities")
    assert [n["kind"] for n in graph["nodes"]] == ["dataset"] and graph["nodes"][0]["name"] == "cities"


def _dot_edges(text: str) -> list[tuple[str, str]]:
    assert text.startswith("digraph lineage {") and text.rstrip().endswith("}")
    return re.findall(r'^  "([^"]+)" -> "([^"]+)" \[label="[^"]*"\];$', text, re.M)


def _mermaid_ok(text: str) -> int:
    """A small grammar: a `flowchart TD` header, then node lines `nN["…"]` and edge lines `nA -->|"…"| nB`."""
    lines = text.rstrip("\n").split("\n")
    assert lines[0] == "flowchart TD"
    node, edge = re.compile(r'^  n\d+\["[^"]*"\]$'), re.compile(r'^  n\d+ -->\|"[^"]*"\| n\d+$')
    bad = [ln for ln in lines[1:] if not (node.match(ln) or edge.match(ln))]
    assert not bad, bad
    return sum(1 for ln in lines if edge.match(ln))


async def test_formats_parse_back(prov: dict[str, Any]) -> None:
    node, client, rc = prov["node"], prov["client"], prov["answer"]["receipt"]
    graph = await _lineage(client, rc)
    code, out, err = await cli(node, "lineage", rc, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["edges"] == graph["edges"]
    code, out, _ = await cli(node, "lineage", rc, "--format", "dot")
    assert sorted(_dot_edges(out.decode())) == sorted((e["from"], e["to"]) for e in graph["edges"])
    code, out, _ = await cli(node, "lineage", rc, "--format", "mermaid")
    assert _mermaid_ok(out.decode()) == len(graph["edges"])
    code, out, _ = await cli(node, "lineage", rc)
    text = out.decode()
    assert code == 0 and text.startswith(f"receipt: 3 rows, logical hash {prov['answer']['logicalHash'][:16]}")
    assert "input 0: read dataset: cities version 2: 2 rows | " in text
    assert f"signed by {prov['ids']['towns']}" in text and "checked: hash ok, signature ok" in text
    resp = await client.get(f"/api/v0/lineage/{rc}", headers={"Accept": "image/svg+xml"})
    assert resp.status == 200 and resp.content_type == "image/svg+xml"
    svg = ET.fromstring(await resp.text())
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(svg.findall("{http://www.w3.org/2000/svg}g")) == len(graph["nodes"])


async def _verify(client: Any, cid: str, **flags: bool) -> tuple[int, dict[str, Any]]:
    resp = await client.post("/api/v0/verify", json={"cid": cid, "offline": True, **flags})
    return resp.status, await resp.json()


def _failed(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for s in answer["executions"] for c in s["checks"] if c["status"] == "failed"}


async def test_verify_offline_says_ok_for_an_honest_result(prov: dict[str, Any]) -> None:
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    for ref in (answer["receipt"], answer["execution"]):
        status, out = await _verify(client, ref, recursive=True)
        assert status == 200 and out["ok"] and out["summary"]["failed"] == 0, out
    names = {c["check"] for c in out["executions"][0]["checks"]}
    for want in ("receipt signature", "output logical hash", "output rows", "input 1 logical hash", "input 0 rows"):
        assert want in names
    code, text, err = await cli(node, "verify", answer["receipt"], "--offline")
    assert code == 0, (text, err)
    assert "0 failed, 0 could not be checked" in text.decode()


async def _forge(node: Any, answer: dict[str, Any], *, altered: bool, resign: bool) -> str:
    """A receipt for the honest execution's question: over altered output data signed by another key, or the
    honest receipt with a changed row count and its old signature. Stored in Kubo as a peer's blocks would be."""
    rc = decode_object(decode(await node.kubo.block_get(parse_cid(answer["receipt"]))))
    assert isinstance(rc, Receipt)
    execution = rc.execution
    if altered:
        ex = decode_object(decode(await node.kubo.block_get(rc.execution)))
        assert isinstance(ex, Execution)
        table = read_slice(node.datasets.cache_dir / f"{answer['slices'][0]}.parquet")
        pop = pa.array([v + 1 for v in table.column(1).to_pylist()], table.schema.field(1).type)
        path = node.datasets.tmp_dir / "altered.parquet"
        write_parquet_slice(table.set_column(1, table.schema.field(1), pop), str(path))
        added = await node.kubo.add(path, pin=False)
        out_list = block_of([added.cid])
        env = block_of(RecursiveDataEnvelope(out_list.cid))
        forged_ex = block_of(replace(ex, output=env.cid))
        for blk in (out_list, env, forged_ex):
            await node.kubo.block_put(blk.data, codec=blk.cid.codec.name)
        execution = forged_ex.cid
    peer = generate()
    forged = replace(
        rc, execution=execution, signer=peer.node_key if resign else rc.signer, rows=rc.rows + (not resign)
    )
    blk = block_of(forged.signed(peer.sign) if resign else forged)
    await node.kubo.block_put(blk.data, codec=blk.cid.codec.name)
    return cid_str(blk.cid)


async def test_verify_offline_fails_a_receipt_over_altered_data(prov: dict[str, Any]) -> None:
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    forged = await _forge(node, answer, altered=True, resign=True)
    status, out = await _verify(client, forged)
    assert status == 200 and not out["ok"], out
    failed = _failed(out)
    assert set(failed) == {"output logical hash"}, failed  # the signature is good: the key signed a false claim
    assert failed["output logical hash"]["expected"] == answer["logicalHash"]
    assert failed["output logical hash"]["got"] != answer["logicalHash"]
    code, text, _ = await cli(node, "verify", forged, "--offline")
    assert code == 1 and "failed    output logical hash" in text.decode()


async def test_verify_offline_fails_a_receipt_whose_signature_does_not_verify(prov: dict[str, Any]) -> None:
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    forged = await _forge(node, answer, altered=False, resign=False)
    status, out = await _verify(client, forged)
    failed = _failed(out)
    assert status == 200 and not out["ok"] and "receipt signature" in failed, out
    assert failed["output rows"]["expected"] == answer["row_count"] + 1 and failed["output rows"]["got"] == 3


async def test_verify_offline_fails_an_output_that_is_not_parquet_without_naming_local_paths(
    prov: dict[str, Any], tmp_path: Path
) -> None:
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    rc = decode_object(decode(await node.kubo.block_get(parse_cid(answer["receipt"]))))
    assert isinstance(rc, Receipt)
    ex = decode_object(decode(await node.kubo.block_get(rc.execution)))
    assert isinstance(ex, Execution)
    (tmp_path / "rows.csv").write_bytes(CITIES)
    added = await node.kubo.add(tmp_path / "rows.csv", pin=False)
    out_list = block_of([added.cid])
    env = block_of(RecursiveDataEnvelope(out_list.cid))
    step = block_of(replace(ex, output=env.cid))
    peer = generate()
    forged = block_of(replace(rc, execution=step.cid, signer=peer.node_key).signed(peer.sign))
    for blk in (out_list, env, step, forged):
        await node.kubo.block_put(blk.data, codec=blk.cid.codec.name)
    status, out = await _verify(client, cid_str(forged.cid))
    failed = _failed(out)
    assert status == 200 and not out["ok"] and "slice reads as Parquet" in failed, out
    assert str(node.home.path) not in json.dumps(out) and "/tmp" not in json.dumps(out)


async def test_verify_offline_fails_a_forged_cache_copy(prov: dict[str, Any]) -> None:
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    cached = node.datasets.cache_dir / f"{answer['slices'][0]}.parquet"
    honest = cached.read_bytes()
    middle = len(honest) // 2
    cached.write_bytes(honest[:middle] + bytes([honest[middle] ^ 1]) + honest[middle + 1 :])  # one flipped bit
    try:
        status, out = await _verify(client, answer["receipt"])
        failed = _failed(out)
        assert status == 200 and not out["ok"] and set(failed) == {"cached copy gives its CID"}, out
        assert failed["cached copy gives its CID"]["expected"] == answer["slices"][0]
    finally:
        cached.write_bytes(honest)


async def test_bad_input_is_a_clear_4xx(prov: dict[str, Any]) -> None:
    node, client = prov["node"], prov["client"]
    unknown = cid_str(block_of({"nobody": "has this"}).cid)
    for body, status in (
        ({"cid": "not a cid", "offline": True}, 400),
        ({"cid": unknown, "offline": True}, 404),
        ({"cid": prov["answer"]["receipt"], "offline": "yes"}, 400),
    ):
        resp = await client.post("/api/v0/verify", json=body)
        out = await resp.json()
        assert resp.status == status and "\n" not in out["error"]["message"], (body, out)
    resp = await client.get(f"/api/v0/lineage/{unknown}")
    out = await resp.json()
    assert resp.status == 404 and "not found within 3 s" in out["error"]["message"], out
    assert (await client.get("/api/v0/lineage/no-such-dataset")).status == 404
    resp = await client.post("/api/v0/verify", json={"cid": unknown, "offline": True}, headers={"Authorization": ""})
    assert resp.status == 401
    code, _, err = await cli(node, "verify", "not-a-cid", "--offline")
    assert code == 1 and err.decode().startswith("error: not a CID")


async def test_lineage_on_another_node_fetches_what_it_lacks(
    prov: dict[str, Any], kubo_binary: Path, tmp_path: Path
) -> None:
    a, answer = prov["node"], prov["answer"]
    swarm = (await a.info())["kubo"]["swarm"]
    settings = {"ipfs.binary": str(kubo_binary), "query.lineage_fetch_timeout": 20.0}
    async with inprocess_node(tmp_path / "b", None, **settings) as (b, client_b):
        await b.kubo.swarm_connect(next(s for s in swarm if "/127.0.0.1/" in s), timeout=10)
        offline = await b.provenance.lineage(answer["receipt"], offline=False)
        assert offline["start"] == answer["receipt"]
        nodes = {n["id"]: n for n in offline["nodes"]}
        assert nodes[answer["receipt"]]["source"] == "network"
        assert nodes[answer["receipt"]]["signer"] == a.identity.node_key
        assert set(_roots(offline)) == set(prov["ids"].values()) and offline["complete"]
        # B's index knows nothing of these datasets: the roots say who signed them, not a local name
        assert all(r["name"] is None and r["checks"]["chain"] == "ok" for r in _roots(offline).values())
        resp = await client_b.get(f"/api/v0/lineage/{answer['receipt']}")
        assert resp.status == 200 and (await resp.json())["complete"]
        # B now holds what the walk read (receipt, execution, chains), not the invocation nor the slices: offline,
        # it checks what it holds and says what it could not check and why (exit 2); it fails nothing
        status, out = await _verify(client_b, answer["receipt"])
        checks = out["executions"][0]["checks"]
        assert status == 200 and not out["ok"] and out["summary"]["failed"] == 0, out
        assert {c["check"] for c in checks if c["status"] == "ok"} >= {"receipt signature", "execution succeeded"}
        unchecked = {c["subject"]: c for c in checks if c["status"] == "unchecked"}
        assert answer["invocation"] in unchecked and len(unchecked) >= 2, unchecked  # the question, the output
        assert all("not held by this node" in c["detail"] for c in unchecked.values()), unchecked
        code, text, _ = await cli(b, "verify", answer["receipt"], "--offline")
        assert code == 2 and ", 0 failed, " in text.decode()


async def test_a_block_nobody_has_is_a_missing_node_and_the_rest_stands(prov: dict[str, Any]) -> None:
    """A receipt (a peer's: another key) naming a dataset version no one holds: that node is ``missing``, the
    answer is not complete, the other input still reaches its root."""
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    rc = decode_object(decode(await node.kubo.block_get(parse_cid(answer["receipt"]))))
    assert isinstance(rc, Receipt)
    nowhere = block_of({"typedVersion": "mb_0", "content": {"nobody": "has this"}}).cid
    peer = generate()
    forged = replace(rc, signer=peer.node_key, versions=(nowhere, rc.versions[1])).signed(peer.sign)
    blk = block_of(forged)
    await node.kubo.block_put(blk.data, codec=blk.cid.codec.name)
    graph = await _lineage(client, cid_str(blk.cid))
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert not graph["complete"] and graph["cut"] is None
    assert nodes[cid_str(nowhere)]["kind"] == "missing"
    assert "not found within 3 s" in nodes[cid_str(nowhere)]["label"]
    assert set(_roots(graph)) == {prov["ids"]["towns"]}
    code, out, _ = await cli(node, "lineage", cid_str(blk.cid))
    assert code == 0 and "missing: dataset chain not found within 3 s" in out.decode()


async def test_a_result_read_by_a_later_step_chains_to_the_roots(prov: dict[str, Any]) -> None:
    """A later step (as a pipeline would run) whose one input is this result's output: no receipt names a dataset
    for it, the index knows the execution that wrote that slice list, and the walk goes on through it."""
    node, client, answer = prov["node"], prov["client"], prov["answer"]
    rc = decode_object(decode(await node.kubo.block_get(parse_cid(answer["receipt"]))))
    assert isinstance(rc, Receipt)
    ex = decode_object(decode(await node.kubo.block_get(rc.execution)))
    assert isinstance(ex, Execution)
    in_list = block_of([parse_cid(s) for s in answer["slices"]])
    in_root = block_of([in_list.cid])
    in_env = block_of(RecursiveDataEnvelope(in_root.cid))
    step = block_of(replace(ex, input=in_env.cid))
    peer = generate()
    later = block_of(replace(rc, execution=step.cid, signer=peer.node_key, versions=()).signed(peer.sign))
    for blk in (in_list, in_root, in_env, step, later):
        await node.kubo.block_put(blk.data, codec=blk.cid.codec.name)
    graph = await _lineage(client, cid_str(later.cid))
    edges = {(e["from"], e["to"], e["label"], e["via"]) for e in graph["edges"]}
    assert (cid_str(step.cid), answer["receipt"], "input 0: output of", "index") in edges
    assert graph["complete"] and set(_roots(graph)) == set(prov["ids"].values())
    signers = {n["signer"] for n in graph["nodes"] if n["kind"] == "receipt"}
    assert signers == {peer.node_key, node.identity.node_key}
    status, out = await _verify(client, cid_str(later.cid), recursive=True)  # --recursive: every step upstream
    steps = {s["receipt"]: s for s in out["executions"]}
    assert status == 200 and set(steps) == {cid_str(later.cid), answer["receipt"]} and not out["ok"]
    assert steps[answer["receipt"]]["summary"]["failed"] == 0  # the honest upstream step checks out
    failed = {c["check"] for c in steps[cid_str(later.cid)]["checks"] if c["status"] == "failed"}
    assert failed == {"input count"}  # the later step's invocation names two inputs, its execution read one


async def test_the_walk_is_cut_at_max_nodes(prov: dict[str, Any]) -> None:
    node, answer = prov["node"], prov["answer"]
    walk = LineageWalk(node.kubo, node.datasets, node.index, max_nodes=2, timeout=30.0, fetch_timeout=3.0)
    graph = await walk.walk(answer["receipt"])
    kinds = [n["kind"] for n in graph["nodes"]]
    assert graph["cut"] == "max nodes (2) reached" and not graph["complete"]
    assert kinds == ["receipt", "execution", "cut"]
    assert {(e["from"], e["to"]) for e in graph["edges"]} >= {(answer["execution"], "cut")}
    walk = LineageWalk(node.kubo, node.datasets, node.index, max_nodes=50, timeout=0.0, fetch_timeout=3.0)
    graph = await walk.walk(answer["receipt"])
    assert graph["cut"] == "deadline (0 s) reached" and [n["kind"] for n in graph["nodes"]] == ["receipt", "cut"]


async def test_a_result_is_a_verifiable_car_for_a_browser_and_a_plain_kubo(
    prov: dict[str, Any], kubo_binary: Path, tmp_path: Path
) -> None:
    """A page's `fetch` of `?format=car` (another origin, CORS) and a plain Kubo's `dag import` both get
    a CAR of a Cairn result that checks out, block by block."""
    answer, client = prov["answer"], prov["client"]
    browser = {"Origin": "https://example.org", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "cross-site"}
    for ref in (answer["receipt"], answer["execution"]):
        resp = await client.get(f"/ipfs/{ref}?format=car", headers=browser)
        car = await resp.read()
        assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == "*", car[:300]
        roots, blocks = read_car(car)  # every block hashed, every linked block there
        assert [cid_str(r) for r in roots] == [ref] and len(blocks) > 1
        path = tmp_path / f"{ref}.car"
        path.write_bytes(car)
        env = {**os.environ, "IPFS_PATH": str(tmp_path / "plain"), "IPFS_TELEMETRY": "off"}
        for args in (["init", "--profile=test"], ["dag", "import", str(path)]):
            if args[0] == "init" and (tmp_path / "plain").exists():
                continue
            proc = await asyncio.create_subprocess_exec(str(kubo_binary), *args, env=env, stdout=PIPE, stderr=PIPE)
            out, err = await proc.communicate()
            assert proc.returncode == 0, (args, err)
        assert f"Pinned root\t{ref}\tsuccess" in out.decode() or ref in out.decode(), out
