"""Reusing what the network knows, beyond results: recorded failures and quorum across two nodes.

Two in-process nodes with peers on, each with a managed Kubo of its own (as test_verify_recompute's V and C):
A computes on its real Spark worker; B trusts A's key and never starts Spark. A deterministic failure (ANSI
DIVIDE_BY_ZERO over the data) is recorded by A as a failed ex_0 with a signed receipt; asked again, A and B answer
it at once from the record (B from A's claim, checked); ``retry`` computes it again. A timeout is not recorded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from node.adapters.identity import generate, public_key_from_did
from node.domain.model import Execution, Receipt, block_of, cid_str, decode, decode_object, parse_cid
from node.services.resolve.claim_checks import check_announcement
from tests.fixtures.inprocess import add_csv, cli, inprocess_node, query, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")
NUMS = b"a,b\n6,3\n5,0\n8,2\n"
DIVIDE = "SELECT a / b AS q FROM nums"
INPUTS = {"nums": "nums"}
SUMS = sorted(int(a) + int(b) for a, b in (line.split(",") for line in NUMS.decode().splitlines()[1:]))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair(kubo_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("reuse")
    peers = {"peers.enabled": True, "ipfs.binary": str(kubo_binary)}
    async with (
        inprocess_node(base / "a", None, **peers) as (a, a_client),
        inprocess_node(base / "b", None, **peers) as (b, b_client),
    ):
        await a.spark.ensure()
        for client in (a_client, b_client):
            await add_csv(client, "nums", NUMS)
        b.peers.trust_add(a.identity.node_key, "default")
        await b.peers.connect(a.network.host.addrs()[0])  # type: ignore[union-attr]
        yield {"a": a, "a_client": a_client, "b": b, "b_client": b_client}


async def _failed(client: Any, **body: Any) -> str:
    """A query that must be refused as a failure: its one-line message."""
    status, out = await query(client, {"sql": DIVIDE, "inputs": INPUTS, **body})
    assert status == 422 and out["error"]["type"] == "RecordedFailure", out
    message = out["error"]["message"]
    assert "\n" not in message and "DIVIDE_BY_ZERO (22012)" in message and "--retry" in message, message
    return message


async def test_a_deterministic_failure_is_recorded_reused_by_a_peer_and_retried(pair: dict[str, Any]) -> None:
    a, b = pair["a"], pair["b"]
    first = await _failed(pair["a_client"])
    assert first.startswith("failed here: DIVIDE_BY_ZERO") and a.resolver.computed == 1, first
    _, iv, _ = await _invocation(a)
    row = a.index.results.execution(iv)
    assert row is not None and row.failure is not None and row.failure.error_class == "DIVIDE_BY_ZERO"
    assert row.slices == () and row.rows == 0 and row.trust == "computed" and row.execution in first
    # What A stored is Holium's failed execution (exitStatus true, no output) and a receipt signed by A.
    ex = decode_object(decode(await a.kubo.block_get(parse_cid(row.execution))))
    assert isinstance(ex, Execution) and ex.exit_status is True and ex.output is None
    rc = decode_object(decode(await a.kubo.block_get(parse_cid(row.receipt))))
    assert isinstance(rc, Receipt) and rc.failure is not None and rc.failure.sqlstate == "22012"
    rc.verify(public_key_from_did(a.identity.node_key))
    assert cid_str(rc.execution) == row.execution and rc.signer == a.identity.node_key
    resp = await pair["a_client"].get(f"/api/v0/executions/{row.execution}")
    shown = await resp.json()
    assert resp.status == 200 and shown["failure"]["class"] == "DIVIDE_BY_ZERO" and shown["slices"] == [], shown
    resp = await pair["a_client"].post("/api/v0/verify", json={"cid": row.receipt, "offline": True})
    checked = await resp.json()
    assert resp.status == 200 and checked["ok"], checked  # offline verify: the execution failed, as recorded
    # Asked again on A: the record, at once, without Spark.
    again = await _failed(pair["a_client"])
    assert again.startswith("recorded failure: DIVIDE_BY_ZERO") and a.resolver.computed == 1  # no second Spark job
    assert row.execution in again and row.receipt in again
    # B (trusts A) gets A's recorded failure, checked, and keeps it: Spark never starts on B.
    from_peer = await _failed(pair["b_client"])
    assert from_peer.startswith(f"recorded by peer signer {a.identity.node_key}"), from_peer
    assert row.execution in from_peer and b.resolver.computed == 0 and not b.spark.worker.alive()
    kept = b.index.results.execution(iv)
    assert kept is not None and kept.failure == row.failure and kept.trust == "trusted-signer"
    rc_, out, err = await cli(b, "query", DIVIDE, "--input", "nums=nums")  # the CLI: one line, exit 1
    assert rc_ == 1 and err.decode().startswith("error: recorded failure: DIVIDE_BY_ZERO"), err
    assert len(err.decode().strip().splitlines()) == 1 and b.resolver.computed == 0
    # retry computes again (Spark runs; it fails the same way), on A through the API.
    retried = await _failed(pair["a_client"], retry=True)
    assert retried.startswith("failed here: DIVIDE_BY_ZERO") and a.resolver.computed == 2
    status, out = await query(pair["a_client"], {"sql": DIVIDE, "inputs": INPUTS, "retry": "yes"})
    assert status == 400 and '"retry"' in out["error"]["message"]


async def test_a_timeout_is_not_recorded(pair: dict[str, Any]) -> None:
    """A timeout says nothing of the question: nothing is recorded, and the next ask computes the answer."""
    a, client = pair["a"], pair["a_client"]
    sql = "SELECT a + b AS s FROM nums"
    before = a.resolver.query_timeout
    a.resolver.query_timeout = 0.001
    try:
        status, out = await query(client, {"sql": sql, "inputs": INPUTS})
    finally:
        a.resolver.query_timeout = before
    assert status == 504 and out["error"]["type"] == "SparkTimeout", out
    _, iv, _ = await _invocation(a, sql)
    assert a.index.results.execution(iv) is None
    status, out = await query(client, {"sql": sql, "inputs": INPUTS})
    assert status == 200 and out["source"] == "computed" and out["rows"] == [[s] for s in SUMS], out


async def _invocation(node: Any, sql: str = DIVIDE) -> tuple[Any, str, Any]:
    cq, _, iv, versions = await node.resolver.prepare(sql, INPUTS)
    return cq, cid_str(block_of(iv).cid), versions


async def test_quorum_needs_k_signers_and_outvotes_the_others(pair: dict[str, Any]) -> None:
    """quorum:K on B: A's claim and a second signer's (the same execution, its own signed receipt, blocks in A's
    Kubo, as a node that verified A's answer announces it) make 2; a third signer announcing another output is
    outvoted: refused and scored down. quorum:3 and quorum:2:communities (both signers in one community) fall short
    (B, asked without the token, may not compute, and says why), until the second signer's community is trusted."""
    a, b, b_client = pair["a"], pair["b"], pair["b_client"]
    sql = "SELECT b, a FROM nums"
    status, computed = await query(pair["a_client"], {"sql": sql, "inputs": INPUTS})
    assert status == 200 and computed["source"] == "computed", computed
    iv = computed["invocation"]
    seen = await wait_for(lambda: _claim_of(b, iv, a.identity.node_key), 30, "A's announcement on B")
    honest = check_announcement(seen.announcement)
    rc = decode_object(decode(await a.kubo.block_get(parse_cid(computed["receipt"]))))
    assert isinstance(rc, Receipt)
    second, third = generate(), generate()
    rc2 = block_of(replace(rc, signer=second.node_key).signed(second.sign))
    await a.kubo.block_put(rc2.data, codec=rc2.cid.codec.name)
    for key, receipt, logical in ((second, rc2.cid, rc.logical_hash), (third, rc2.cid, "another-hash")):
        an = replace(honest, receipt=receipt, logical_hash=logical, signer=key.node_key, sig=b"").signed(key.sign)
        b.resolver.record_claim(seen.peer, an, block_of(an).data)  # as gossip records it on arrival
    no_token = {"Authorization": ""}
    for mode in ("quorum:3", "quorum:2:communities"):
        resp = await b_client.post(
            "/api/v0/query", json={"sql": sql, "inputs": INPUTS, "trust": mode}, headers=no_token
        )
        out = await resp.json()
        assert resp.status == 401 and f"{mode}: " in out["error"]["message"] and "agree" in out["error"]["message"]
    b.peers.trust_add(second.node_key, "other")
    # The outvoted claim is refused once for what it said (then it is no longer counted: dissent empty).
    for mode, dissent in (("quorum:2", [third.node_key]), ("quorum:2:communities", [])):
        status, got = await query(b_client, {"sql": sql, "inputs": INPUTS, "trust": mode})
        assert status == 200 and got["source"] == "peer" and got["rows"] == computed["rows"], got
        assert got["quorum"]["agree"] == 2 and got["quorum"]["dissent"] == dissent, got
        assert set(got["quorum"]["signers"]) == {a.identity.node_key, second.node_key}
    assert b.resolver.computed == 0 and b.index.trust.signer_score(third.node_key)[1] >= 1  # outvoted: scored down
    refused = [c for c in b.index.peer_claims.claims(iv) if c.signer == third.node_key]
    assert refused and refused[0].status == "refused" and "outvoted" in refused[0].reason


async def _claim_of(node: Any, invocation: str, signer: str) -> Any:
    return next((c for c in node.index.peer_claims.claims(invocation) if c.signer == signer), None)
