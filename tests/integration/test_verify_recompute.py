"""Verify by recomputing (docs/provenance.md "Verify (recompute)").

One in-process node P on the session's real Kubo with its real Spark worker answers one query over two datasets
(module-scoped: every recompute is a real Spark job, so they are few). Receipts a peer would send are made the
ways a peer would: the honest execution signed by another key; a receipt over altered output data signed by
another key; one naming a dataset version nobody holds. The trust path runs on three nodes: P computes, V
recomputes P's receipt and announces its verification, C (which trusts V, not P) asks under ``community`` and
gets the answer from V, saying V verified it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import pytest_asyncio

from node.adapters.identity import generate, public_key_from_did
from node.adapters.index import ExecutionRow
from node.adapters.ipfs import ManagedKubo
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
from node.services.datasets import LogicalHasher
from node.services.datasets.slices import read_slice, write_parquet_slice
from node.services.resolve.claim_checks import structure_of
from node.services.resolve.execution import execution_blocks
from tests.fixtures.inprocess import add_csv, cli, inprocess_node, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
CITIES = b"city,pop\nParis,2100000\nLyon,520000\n"
TOWNS = b"town,people\nArles,50000\n"
SQL = "SELECT city AS place, pop FROM c UNION ALL SELECT town, people FROM t"
INPUTS = {"c": "cities", "t": "towns"}
FAST = {"query.lineage_fetch_timeout": 3.0}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def p(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    async with inprocess_node(tmp_path_factory.mktemp("recompute") / "p", kubo_session, **FAST) as (node, client):
        await node.spark.ensure()
        for name, data in (("cities", CITIES), ("towns", TOWNS)):
            await add_csv(client, name, data)
        resp = await client.post("/api/v0/query", json={"sql": SQL, "inputs": INPUTS})
        answer = await resp.json()
        assert resp.status == 200 and answer["source"] == "computed", answer
        yield {"node": node, "client": client, "answer": answer}


async def _receipt(node: Any, cid: str) -> Receipt:
    rc = decode_object(decode(await node.kubo.block_get(parse_cid(cid))))
    assert isinstance(rc, Receipt)
    return rc


async def _put(node: Any, *blocks: Any) -> None:
    for blk in blocks:
        await node.kubo.block_put(blk.data, codec=blk.cid.codec.name)


async def _peer_receipt(node: Any, answer: dict[str, Any], *, altered: bool = False, **changes: Any) -> str:
    """The honest receipt's claim as a peer would sign it with its own key: over the same execution, or
    (``altered``) over output data with every population one higher; ``changes`` replace receipt fields."""
    rc = await _receipt(node, answer["receipt"])
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
        await _put(node, out_list, env, forged_ex)
        changes["execution"] = forged_ex.cid
        changes["logical_hash"] = _hash(read_slice(path))  # a consistent lie: offline checks all pass
    peer = generate()
    blk = block_of(replace(rc, signer=peer.node_key, **changes).signed(peer.sign))
    await _put(node, blk)
    return cid_str(blk.cid)


def _hash(table: pa.Table) -> str:
    hasher = LogicalHasher(table.schema)
    hasher.update(table)
    return str(hasher.finish())


async def _verify(client: Any, cid: str, **flags: Any) -> tuple[int, dict[str, Any]]:
    resp = await client.post("/api/v0/verify", json={"cid": cid, "wait": True, **flags})
    return resp.status, await resp.json()


async def _events(client: Any, path: str) -> list[tuple[str, Any]]:
    """A job's server-sent events, read to the end (the stream closes when the job ends)."""
    resp = await client.get(path)
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    out, kind = [], "message"
    for line in (await resp.text()).splitlines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            out.append((kind, json.loads(line[6:])))
    return out


async def test_an_honest_peer_receipt_is_reproduced_signed_and_recorded(p: dict[str, Any]) -> None:
    """As a job (202) whose events follow the step; the report says reproduced with the same ex_0 CID (canonical
    Parquet: the same bytes, so the same slices and execution); this node's verification receipt exists, is
    signed by it and ``verifies`` the peer's; the peer's signer is scored up."""
    node, client, answer = p["node"], p["client"], p["answer"]
    theirs = await _peer_receipt(node, answer)
    resp = await client.post("/api/v0/verify", json={"cid": theirs})
    started = await resp.json()
    assert resp.status == 202 and set(started) == {"job", "events"}, started
    events = await _events(client, started["events"])
    kinds = [k for k, _ in events]
    assert kinds[0] == "started" and kinds[-2:] == ["done", "result"], kinds
    assert kinds.index("step") < kinds.index("computing") < kinds.index("publishing") < kinds.index("step-done")
    assert events[kinds.index("step")][1] | {"t": 0} == {"receipt": theirs, "step": 1, "of": 1, "t": 0}
    report = events[-1][1]
    assert report["ok"] and not report["offline"] and report["summary"]["reproduced"] == 1, report
    step = report["executions"][0]
    assert step["status"] == "reproduced" and step["same_execution"] is True, step
    assert step["recomputed"]["execution"] == answer["execution"] == step["claimed"]["execution"]
    assert step["recomputed"]["logicalHash"] == answer["logicalHash"] == step["claimed"]["logicalHash"]
    assert step["recomputed"]["engine"]["name"] == "spark" and step["recomputed"]["profile"] == answer["profile"]
    ours = await _receipt(node, step["verification"])
    assert ours.signer == node.identity.node_key and cid_str(ours.verifies) == theirs  # type: ignore[arg-type]
    ours.verify(public_key_from_did(ours.signer))
    assert cid_str(ours.execution) == answer["execution"] and cid_str(ours.invocation) == answer["invocation"]
    for cid in (step["verification"], theirs):  # kept: the verification, and the receipt it names
        assert await node.kubo.pin_ls(cid), cid
    assert node.index.trust.signer_score((await _receipt(node, theirs)).signer) == (1, 0)
    # This node's own computed row stays its answer (computed here is as strong as recomputed-agreed).
    assert node.index.results.execution(answer["invocation"]).receipt == answer["receipt"]  # type: ignore[union-attr]
    job = await (await client.get(f"/api/v0/jobs/{started['job']}")).json()
    assert job["state"] == "done" and job["result"] == report


async def test_a_receipt_over_altered_data_diverges(p: dict[str, Any]) -> None:
    """Through the CLI (exit 1): both logical hashes; the signer is refused, the divergence recorded, the local
    answer kept."""
    node, client, answer = p["node"], p["client"], p["answer"]
    forged = await _peer_receipt(node, answer, altered=True)
    claim = await _receipt(node, forged)
    signer = claim.signer
    status, offline = await _verify(client, forged, offline=True)
    assert status == 200 and offline["summary"]["failed"] == 0, offline  # consistent: only recomputing tells
    code, out, err = await cli(node, "verify", forged)
    text = out.decode()
    assert code == 1, (text, err.decode())
    assert f"receipt {forged}: diverged" in text and "0 reproduced, 1 diverged, 0 could not run" in text
    assert f"claimed    logical hash {claim.logical_hash}, 3 rows" in text and f"signed by {signer}" in text
    assert f"recomputed logical hash {answer['logicalHash']}, 3 rows" in text
    assert node.index.trust.signer_score(signer) == (0, 1)
    assert node.index.results.execution(answer["invocation"]).receipt == answer["receipt"]  # type: ignore[union-attr]
    divergences = (await (await p["client"].get(f"/api/v0/executions/{answer['execution']}")).json())["divergences"]
    assert {d["receipt"]: d["logicalHash"] for d in divergences}[forged] == claim.logical_hash
    code, out, _ = await cli(node, "verify", forged, "--json")
    step = json.loads(out)["executions"][0]
    assert code == 1 and step["status"] == "diverged" and step["claimed"]["logicalHash"] == claim.logical_hash
    assert step["recomputed"]["logicalHash"] == answer["logicalHash"] and "verification" not in step


async def test_a_diverged_peer_row_in_the_index_is_replaced_by_ours(p: dict[str, Any]) -> None:
    """The node holds a peer's answer (unverified) for a question it never computed, over altered data with a
    consistent receipt: recomputing diverges, and the index then answers with this node's computed result."""
    node, client = p["node"], p["client"]
    sql = "SELECT town AS place, people FROM t"
    cq, objects, iv, versions = await node.resolver.prepare(sql, {"t": "towns"})
    assert node.index.results.execution(cid_str(block_of(iv).cid)) is None
    altered = pa.table({"_0": ["Arles"], "_1": pa.array([50001], pa.int64())})
    path = node.datasets.tmp_dir / "peer-row.parquet"
    write_parquet_slice(altered, str(path))
    added = await node.kubo.add(path, pin=True)
    ex_blocks = execution_blocks(cq, versions, [added.cid])
    st = block_of(structure_of(altered.schema))
    peer = generate()
    engine = {"name": "spark"}
    rc = Receipt(
        ex_blocks[-1].cid, block_of(iv).cid, peer.node_key, "2026-01-01T00:00:00Z", engine, _hash(altered), 1,
        st.cid, tuple(v.head for v in versions), {},
    ).signed(peer.sign)  # fmt: skip
    await _put(node, *objects, block_of(iv), st, *ex_blocks, block_of(rc))
    row = ExecutionRow(
        cid_str(block_of(iv).cid), cid_str(objects[-1].cid), cid_str(ex_blocks[-1].cid), cid_str(block_of(rc).cid),
        rc.logical_hash, 1, cid_str(st.cid), (cid_str(added.cid),), "peer", 0.0, trust="unverified",
    )  # fmt: skip
    node.index.results.add_execution(row)  # as a peer's answer taken under `any` is stored
    status, out = await _verify(client, row.receipt)
    step = out["executions"][0]
    assert status == 200 and step["status"] == "diverged", out
    assert step["recomputed"]["logicalHash"] != rc.logical_hash and step["recomputed"]["rows"] == 1
    held = node.index.results.execution(row.invocation)
    assert held is not None and held.trust == "computed" and held.receipt == step["recomputed"]["receipt"]
    assert held.execution != row.execution and held.logical_hash == step["recomputed"]["logicalHash"]


async def test_an_input_this_node_cannot_get_could_not_run(p: dict[str, Any]) -> None:
    node, client, answer = p["node"], p["client"], p["answer"]
    rc = await _receipt(node, answer["receipt"])
    nowhere = block_of({"typedVersion": "mb_0", "content": {"nobody": "has this"}}).cid
    forged = await _peer_receipt(node, answer, versions=(nowhere, rc.versions[1]))
    computed = node.resolver.computed
    status, out = await _verify(client, forged)
    step = out["executions"][0]
    assert status == 200 and not out["ok"] and step["status"] == "could not run", out
    assert step["reason"].startswith(f"input 0: dataset version {cid_str(nowhere)}: ") and "3 s" in step["reason"]
    assert node.resolver.computed == computed  # nothing ran
    code, text, _ = await cli(node, "verify", forged)
    assert code == 2 and "0 reproduced, 0 diverged, 1 could not run" in text.decode()
    # A question whose statement is not canonical here (a lax or hostile peer's): never given to Spark as is.
    iv = decode_object(decode(await node.kubo.block_get(rc.invocation)))
    qy = decode_object(decode(await node.kubo.block_get(iv.query)))  # type: ignore[attr-defined]
    qy2 = block_of(replace(qy, statement="select a.col_0 as _0 from a union all select b.col_0 as _0 from b"))
    iv2 = block_of(replace(iv, query=qy2.cid))
    await _put(node, qy2, iv2)
    status, out = await _verify(client, await _peer_receipt(node, answer, invocation=iv2.cid))
    step = out["executions"][0]
    assert step["status"] == "could not run" and "not canonical for this node's canonicalizer" in step["reason"], out
    unsigned = block_of(replace(rc, rows=rc.rows + 1))  # changed after signing: its signer never said this
    await _put(node, unsigned)
    status, out = await _verify(client, cid_str(unsigned.cid))
    step = out["executions"][0]
    assert step["status"] == "could not run" and "signature does not verify" in step["reason"], out
    assert node.resolver.computed == computed  # nothing ran


async def test_recursive_recomputes_each_step_upstream(p: dict[str, Any]) -> None:
    """A later step (as a pipeline runs) reading this result's output: it names no dataset version, so it could
    not run here, and says why; --recursive reaches the upstream step, which is reproduced."""
    node, client, answer = p["node"], p["client"], p["answer"]
    rc = await _receipt(node, answer["receipt"])
    ex = decode_object(decode(await node.kubo.block_get(rc.execution)))
    assert isinstance(ex, Execution)
    in_list = block_of([parse_cid(s) for s in answer["slices"]])
    in_root = block_of([in_list.cid])
    in_env = block_of(RecursiveDataEnvelope(in_root.cid))
    step = block_of(replace(ex, input=in_env.cid))
    await _put(node, in_list, in_root, in_env, step)
    later = await _peer_receipt(node, answer, execution=step.cid, versions=())
    status, out = await _verify(client, later, recursive=True)
    steps = {s["receipt"]: s for s in out["executions"]}
    assert status == 200 and out["recursive"] and set(steps) == {later, answer["receipt"]}, out
    assert steps[later]["status"] == "could not run" and "another result's output" in steps[later]["reason"]
    assert steps[answer["receipt"]]["status"] == "reproduced", steps[answer["receipt"]].get("reason")
    assert steps[answer["receipt"]]["same_execution"]
    assert out["summary"] == {"reproduced": 1, "diverged": 0, "could not run": 1} and not out["ok"]
    status, out = await _verify(client, later)  # without --recursive: that step only
    assert status == 200 and [s["receipt"] for s in out["executions"]] == [later]


async def test_bad_requests_are_clear_and_computing_needs_the_token(p: dict[str, Any]) -> None:
    client, answer = p["client"], p["answer"]
    unknown = cid_str(block_of({"nobody": "has this"}).cid)
    for body, status in (
        ({"cid": "not a cid"}, 400),
        ({"cid": unknown}, 404),  # found out before any job starts
        ({"cid": answer["receipt"], "wait": "yes"}, 400),
    ):
        resp = await client.post("/api/v0/verify", json=body)
        out = await resp.json()
        assert resp.status == status and "\n" not in out["error"]["message"], (body, out)
    resp = await client.post("/api/v0/verify", json={"cid": answer["receipt"]}, headers={"Authorization": ""})
    assert resp.status == 401


async def test_a_verification_makes_the_result_usable_under_community(
    p: dict[str, Any], kubo_binary: Path, tmp_path: Path
) -> None:
    """P computes; V recomputes P's receipt and announces its verification; C trusts V only, asks in community
    mode, and gets V's answer, whose peer info says V verified P's receipt. Each has a Kubo of its own: V fetches
    P's receipt, question and dataset versions by CID from P's; C fetches the answer from V's (the providers V's
    announcement names)."""
    answer = p["answer"]
    peers = {**FAST, "peers.enabled": True, "ipfs.binary": str(kubo_binary)}
    async with (
        inprocess_node(tmp_path / "v", None, **peers) as (v, v_client),
        inprocess_node(tmp_path / "c", None, **peers) as (c, c_client),
    ):
        swarm = (await p["node"].info())["kubo"]["swarm"]
        await v.kubo.swarm_connect(next(s for s in swarm if "/127.0.0.1/" in s), timeout=10)
        status, out = await _verify(v_client, answer["receipt"])
        step = out["executions"][0]
        assert status == 200 and step["status"] == "reproduced" and step["signer"] == p["node"].identity.node_key
        row = v.index.results.execution(answer["invocation"])
        assert row is not None and row.trust == "recomputed-agreed" and row.receipt == step["verification"]
        for name, data in (("cities", CITIES), ("towns", TOWNS)):
            await add_csv(c_client, name, data)
        c.peers.trust_add(v.identity.node_key, "default")
        await c.peers.connect(v.network.host.addrs()[0])  # type: ignore[union-attr]
        resp = await c_client.post("/api/v0/query", json={"sql": SQL, "inputs": INPUTS, "trust": "community"})
        got = await resp.json()
        assert resp.status == 200 and got["source"] == "peer", got
        assert got["trust"] == "trusted-signer" and got["execution"] == answer["execution"]
        assert got["peer"]["signer"] == v.identity.node_key and got["peer"]["receipt"] == step["verification"]
        assert got["peer"]["verifies"] == answer["receipt"]
        assert got["rows"] == answer["rows"] and c.resolver.computed == 0
        claims = await wait_for(lambda: _claims(c_client, answer["invocation"]), 10, "V's claim on C")
        assert claims[v.identity.node_key]["status"] == "accepted"
        assert c.index.results.execution(answer["invocation"]).trust == "trusted-signer"  # type: ignore[union-attr]
        # C verifies what it holds (V's receipt): its index row for the execution becomes its own, recomputed-agreed,
        # and a `verify`-mode request is then a local hit.
        status, out = await _verify(c_client, got["receipt"])
        mine = out["executions"][0]
        assert status == 200 and mine["status"] == "reproduced" and mine["signer"] == v.identity.node_key, out
        row = c.index.results.execution(answer["invocation"])
        assert row is not None and row.trust == "recomputed-agreed" and row.receipt == mine["verification"]
        assert row.execution == answer["execution"]
        body = {"sql": SQL, "inputs": INPUTS, "trust": "verify"}
        again = await (await c_client.post("/api/v0/query", json=body)).json()
        assert again["source"] == "local" and again["trust"] == "recomputed-agreed" and again["verified"], again


async def _claims(client: Any, invocation: str) -> dict[str, dict[str, Any]] | None:
    claims = (await (await client.get("/api/v0/announcements")).json())["claims"]
    return {c["signer"]: c for c in claims if c["invocation"] == invocation} or None
