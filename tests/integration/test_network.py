"""Issue 5 acceptance on real parts: three full nodes (each its own Kubo, Spark worker, home, ports) and a
plain Kubo, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any, Iterator

import pytest

from tests.fixtures.nodes import NodeProcess, poll

SALES = b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\nnorth,apple,1\n"
SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"


def post(node: NodeProcess, path: str, body: dict[str, Any], token: bool = False) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + (node.home / "api.token").read_text().strip()
    req = urllib.request.Request(node.api + path, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(node: NodeProcess, sql: str = SQL, trust: str | None = None) -> dict[str, Any]:
    status, out = post(node, "/api/v0/query", {"sql": sql, "inputs": {"sales": "sales"}, "trust": trust})
    assert status == 200, out
    return out


def status(node: NodeProcess) -> dict[str, Any]:
    return node.get("/api/v0/node")[1]


def fetch(node: NodeProcess, path: str) -> bytes:
    with urllib.request.urlopen(node.api + path, timeout=60) as r:
        return r.read()


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, NodeProcess]]:
    base = tmp_path_factory.mktemp("net")
    csv = base / "sales.csv"
    csv.write_bytes(SALES)
    nodes = {
        "a": NodeProcess(base / "a", env={"CAIRN_SPARK_AUTOSTART": "true"}).start(),
        # B must answer from A without Spark: its worker only starts if a query needs it.
        "b": NodeProcess(base / "b", env={"CAIRN_SPARK_AUTOSTART": "false"}).start(),
        "c": NodeProcess(base / "c", env={"CAIRN_SPARK_AUTOSTART": "true", "CAIRN_PEERS_TRUST": "verify"}).start(),
    }
    for n in nodes.values():
        r = n.cli("add", str(csv), "--name", "sales")
        assert r.returncode == 0, r.stderr.decode()
    a_addr = status(nodes["a"])["p2p_addrs"][0]
    for name in ("b", "c"):
        r = nodes[name].cli("connect", a_addr)
        assert r.returncode == 0, r.stderr.decode()
    r = nodes["b"].cli("trust", "add", status(nodes["a"])["node_key"])
    assert r.returncode == 0, r.stderr.decode()
    yield nodes
    for n in nodes.values():
        n.stop()


def test_peer_hit_without_spark_and_same_bytes(net: dict[str, NodeProcess]) -> None:
    a, b = net["a"], net["b"]
    computed = ask(a)
    assert computed["source"] == "computed"
    answer = ask(b)
    assert answer["source"] == "peer", answer
    assert answer["peer"]["signer"] == status(a)["node_key"] and answer["peer"]["trust"] == "community"
    assert answer["rows"] == computed["rows"] and answer["execution"] == computed["execution"]
    assert status(b)["spark"]["jobs"] == 0 and status(b)["spark"]["state"] == "down"  # Spark never ran on B
    for s in computed["slices"]:
        assert fetch(b, f"/ipfs/{s}") == fetch(a, f"/ipfs/{s}")
    assert ask(b)["source"] == "local"  # now B holds it


def test_verify_mode_recomputes_and_agrees(net: dict[str, NodeProcess]) -> None:
    a, c = net["a"], net["c"]
    sql = "SELECT product, COUNT(*) AS n FROM sales GROUP BY product ORDER BY product"
    ask(a, sql)
    answer = ask(c, sql)
    assert answer["source"] == "peer" and answer["verified"] is True, answer
    assert answer["peer"]["agreement"] and answer["peer"]["agreement"] != answer["peer"]["receipt"]
    assert status(c)["spark"]["jobs"] >= 1  # it did recompute


def test_untrusted_signer_is_refused_under_community(net: dict[str, NodeProcess]) -> None:
    c, b = net["c"], net["b"]
    sql = "SELECT MAX(amount) AS m FROM sales"
    ask(c, sql, trust="self")  # only C has it; B does not trust C
    r = b.cli("connect", status(c)["p2p_addrs"][0])
    assert r.returncode == 0, r.stderr.decode()
    status_b, out = post(b, "/api/v0/query", {"sql": sql, "inputs": {"sales": "sales"}, "trust": "community"})
    # With no usable claim B computes it itself.
    assert status_b == 200 and out["source"] == "computed"
    claims = b.get("/api/v0/announcements")[1]["claims"]
    refused = [c_ for c_ in claims if c_["invocation"] == out["invocation"] and c_["status"] == "refused"]
    assert refused and "trusted" in refused[0]["reason"]


def test_plain_kubo_fetches_the_result_by_cid(net: dict[str, NodeProcess], kubo: Any) -> None:
    a = net["a"]
    result = ask(a)
    from node.ipfs import KuboClient

    async def go() -> bytes:
        async with KuboClient(kubo.api_url) as k:
            await k.swarm_connect(status(a)["kubo"]["swarm"][0])
            return b"".join([c async for c in k.cat(result["slices"][0], timeout=30)])

    assert asyncio.run(go()) == fetch(a, f"/ipfs/{result['slices'][0]}")


def test_restarted_peer_keeps_peers_index_and_catches_up(net: dict[str, NodeProcess]) -> None:
    a, b = net["a"], net["b"]
    before = ask(b)  # held locally
    b.stop()
    missed = ask(a, "SELECT region, MIN(amount) AS low FROM sales GROUP BY region ORDER BY region")
    net["b"] = b = NodeProcess(b.home, env={"CAIRN_SPARK_AUTOSTART": "false"}).start()
    assert ask(b)["source"] == "local" and ask(b)["execution"] == before["execution"]  # index kept
    a_id = status(a)["peer_id"]
    poll(lambda: any(p.get("connected") and a_id in json.dumps(p) for p in b.get("/api/v0/peers")[1]["peers"]),
         30, 0.2, what="B to re-dial A from its peerstore")
    poll(lambda: any(c["invocation"] == missed["invocation"] for c in b.get("/api/v0/announcements")[1]["claims"]),
         30, 0.2, what="the missed announcement to be caught up")
    answer = ask(b, "SELECT region, MIN(amount) AS low FROM sales GROUP BY region ORDER BY region")
    assert answer["source"] == "peer" and status(b)["spark"]["jobs"] == 0


def _invocation_of(node: NodeProcess, sql: str) -> str:
    """What any client can compute on its own: the invocation CID of a query over the node's "sales"."""
    from node.model import InputIdentity, Invocation, Query, block_of, cid_str, parse_cid
    from node.query import canonicalize

    ds = node.get("/api/v0/datasets/sales")[1]
    cq = canonicalize(sql, {"sales": [tuple(c) for c in ds["schema"]]})
    abstract = parse_cid(ds["abstractStructure"])
    qy = block_of(Query(cq.syntax, cq.dialect, cq.canonicalizer, cq.statement, (abstract,)))
    return cid_str(block_of(Invocation(qy.cid, (InputIdentity(abstract, ds["logicalHash"], ds["rows"]),))).cid)


def _forge(a: NodeProcess, answer: dict[str, Any], *, bad_sig: bool, logical_hash: str | None,
           providers: list[str], invocation: str | None = None) -> tuple[bytes, bytes, Any]:
    """A forger's receipt and announcement about A's execution (signed by a key nobody trusts)."""
    from node.identity import generate
    from node.model import Announcement, Receipt, block_of, parse_cid

    forger = generate()
    ex = a.get(f"/api/v0/executions/{answer['execution']}")[1]
    lh = logical_hash or answer["logicalHash"]
    iv = parse_cid(invocation or answer["invocation"])
    rc = Receipt(parse_cid(answer["execution"]), iv, forger.node_key,
                 "2026-01-01T00:00:00Z", {"name": "spark"}, lh, answer["row_count"], parse_cid(ex["structure"]),
                 (), {}).signed(forger.sign)
    rc_block = block_of(rc)
    an = Announcement(iv, parse_cid(answer["execution"]), rc_block.cid, lh,
                      answer["row_count"], {"name": "spark"}, tuple(providers), forger.node_key,
                      "2026-01-01T00:00:00Z").signed(forger.sign)
    if bad_sig:
        an = Announcement(**{**an.__dict__, "sig": bytes(64)})
    return rc_block.data, block_of(an).data, forger


def _gossip(target: NodeProcess, data: bytes) -> None:
    """Publish on the executions topic from a throwaway libp2p host connected to ``target``."""
    import os

    from p2p.host import P2PHost

    async def go() -> None:
        host = P2PHost(os.urandom(32), ["/ip4/127.0.0.1/tcp/0"])
        await host.start()
        try:
            await host.connect(status(target)["p2p_addrs"][0])
            await asyncio.sleep(0)  # let the mesh form: poll below does the waiting
            deadline = asyncio.get_running_loop().time() + 20
            before = len(target.get("/api/v0/announcements")[1]["refused_messages"]) + \
                len(target.get("/api/v0/announcements")[1]["claims"])
            while asyncio.get_running_loop().time() < deadline:
                await host.publish("/cairn/executions/1", data)
                now = target.get("/api/v0/announcements")[1]
                if len(now["refused_messages"]) + len(now["claims"]) > before:
                    return
                await asyncio.sleep(0.3)
            raise AssertionError("the gossiped announcement never arrived")
        finally:
            await host.stop()

    asyncio.run(go())


def test_forged_signature_is_refused(net: dict[str, NodeProcess]) -> None:
    a, b = net["a"], net["b"]
    answer = ask(a, "SELECT COUNT(*) AS n FROM sales WHERE amount > 4")
    _, an, forger = _forge(a, answer, bad_sig=True, logical_hash=None, providers=[])
    _gossip(b, an)
    out = b.get("/api/v0/announcements")[1]
    assert any("signature" in r["reason"] for r in out["refused_messages"])
    assert not any(c["signer"] == forger.node_key for c in out["claims"])  # nothing of it in the index


def test_receipt_not_matching_its_data_is_refused(net: dict[str, NodeProcess], kubo: Any) -> None:
    """A well-signed claim that lies about the logical hash: B fetches, recomputes the hash, refuses it."""
    a, b = net["a"], net["b"]
    answer = ask(a, "SELECT COUNT(*) AS n FROM sales WHERE amount > 6")
    # The forger claims A's real execution answers a question nobody has asked yet, with a made-up hash.
    sql = "SELECT COUNT(*) AS n FROM sales WHERE amount > 8"
    target = _invocation_of(b, sql)
    from node.ipfs import KuboClient

    async def stage() -> list[str]:
        async with KuboClient(kubo.api_url) as k:
            ident = await k.id()
            await k.swarm_connect(status(a)["kubo"]["swarm"][0])
            rc, an, forger = _forge(a, answer, bad_sig=False, logical_hash="f1e20" + "00" * 32, invocation=target,
                                    providers=[f"{x}/p2p/{ident.id}" if "/p2p/" not in x else x for x in ident.addresses])
            await k.block_put(rc, codec="dag-cbor", pin=True)
            stage.an = an  # type: ignore[attr-defined]
            return [forger.node_key]

    asyncio.run(stage())
    _gossip(b, stage.an)  # type: ignore[attr-defined]
    status_b, out = post(b, "/api/v0/query", {"sql": sql, "inputs": {"sales": "sales"}, "trust": "any"})
    assert status_b == 200, out
    assert out["invocation"] == target  # the client-side computation agrees with the node's
    claims = [c for c in b.get("/api/v0/announcements")[1]["claims"] if c["invocation"] == target]
    assert len(claims) == 1 and claims[0]["status"] == "refused", claims
    assert "logical hash" in claims[0]["reason"], claims[0]
    assert out["source"] == "computed" and out["rows"] == [[2]]  # B did not use the lie: it computed the truth
