"""Peers that just work, on real in-process nodes (real Kubo, libp2p, index, resolver): the
address to share, `connect` keeping only Cairn peers, the untrusted-claim hint, pulls by CID between two nodes
with their own Kubo, a prompt 404 from the gateway, and catch-up across a reconnect."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from node.adapters.index import ExecutionRow
from node.adapters.ipfs import ManagedKubo
from node.core import Node
from node.domain.model import block_of, cid_for, cid_str
from node.support import wall_clock as clock
from p2p.host import P2PHost
from tests.fixtures.inprocess import add_csv, cli, inprocess_node, query, wait_for

PEERS = {"peers.enabled": True}
SALES = b"region,amount\nnorth,10\nsouth,7\nnorth,3\n"
SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"


def fake_row(invocation: str, n: int = 0) -> ExecutionRow:
    """An execution row as if computed here: enough for announcing it (lookups, catch-up sign what they hold)."""
    c = [cid_str(cid_for(f"fake-{n}-{p}".encode())) for p in ("q", "ex", "rc", "st")]
    return ExecutionRow(invocation, c[0], c[1], c[2], "f1e2", 2, c[3], (), "computed", clock.now())


async def kubo_swarm_addr(kubo: ManagedKubo) -> str:
    async with kubo.client() as k:
        ident = await k.id()
    return next(a if "/p2p/" in a else f"{a}/p2p/{ident.id}" for a in ident.addresses if "/tcp/" in a)


async def test_status_shows_the_address_to_share(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "n", kubo_session, **PEERS) as (node, _):
        assert node.network is not None
        rc, out, err = await cli(node, "status")
        assert rc == 0, err
        addr = node.network.host.addrs()[0]
        text = out.decode()
        assert f"connect    {addr}" in text, text  # the libp2p address, on a line saying what it is for
        swarm = [line for line in text.splitlines() if line.strip().startswith("swarm")]
        assert swarm and all("not for `cairn connect`" in line for line in swarm), text
        rc, out, err = await cli(node, "status", "--json")
        info = json.loads(out)
        assert info["addresses"]["cairn_connect"] == info["p2p_addrs"] == node.network.host.addrs()
        assert info["addresses"]["kubo_swarm"] == info["kubo"]["swarm"] and info["kubo"]["swarm"]


async def test_connect_refuses_a_kubo_peer_and_does_not_keep_it(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    kubo_addr = await kubo_swarm_addr(kubo_session)
    async with (
        inprocess_node(tmp_path / "a", kubo_session, **PEERS) as (a, client),
        inprocess_node(tmp_path / "b", kubo_session, **PEERS) as (b, _),
    ):
        resp = await client.post("/api/v0/peers/connect", json={"addr": kubo_addr})
        body = await resp.json()
        assert resp.status == 400, body
        assert "does not speak Cairn's protocols" in body["error"]["message"]
        kubo_id = kubo_addr.rsplit("/p2p/", 1)[1]
        assert all(p["peer_id"] != kubo_id for p in a.peers.known())  # not kept, not even as a known peer
        assert kubo_id not in (a.home.path / "peers.json").read_text()  # so not re-dialled at the next start
        rc, _, err = await cli(a, "connect", kubo_addr)
        assert rc == 1 and err.decode().count("\n") == 1 and "Cairn" in err.decode()
        # A Cairn node is kept.
        assert b.network is not None
        resp = await client.post("/api/v0/peers/connect", json={"addr": b.network.host.addrs()[0]})
        assert resp.status == 200, await resp.json()
        assert any(p["peer_id"] == b.identity.peer_id and p["connected"] for p in a.peers.known())


async def test_untrusted_claim_is_named_in_the_answer(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A peer holds the answer, signed by a key B does not trust (default `community`, no trusted key): B
    computes, and says so, naming the key and what to do: in the HTTP answer and in `cairn query`."""
    other = "SELECT region, MAX(amount) AS top FROM sales GROUP BY region ORDER BY region"
    async with (
        inprocess_node(tmp_path / "a", kubo_session, **PEERS) as (a, _),
        inprocess_node(tmp_path / "b", kubo_session, **PEERS) as (b, client),
    ):
        await add_csv(client, "sales", SALES)
        for n, sql in enumerate((SQL, other)):  # A answers lookups for both (it need not hold the data)
            _, _, iv, _ = await b.resolver.prepare(sql, {"sales": "sales"})
            a.index.results.add_execution(fake_row(cid_str(block_of(iv).cid), n))
        assert a.network is not None
        await b.peers.connect(a.network.host.addrs()[0])
        key = a.identity.node_key
        hint = f"a peer has this answer, signed by {key}, not trusted: cairn trust add {key}, or --trust verify"
        status, out = await query(client, {"sql": SQL, "inputs": {"sales": "sales"}})
        assert status == 200 and out["source"] == "computed", out
        assert out["hints"] == [hint]
        rc, _, err = await cli(b, "query", other, "-i", "sales=sales")
        assert rc == 0, err
        assert f"hint        {hint}" in err.decode()
        status, out = await query(client, {"sql": SQL, "inputs": {"sales": "sales"}})
        assert out["source"] == "local" and out["hints"] == []  # a hit asks nobody: nothing to say


async def test_pull_by_cid_connects_the_holders_kubo(kubo_binary: Path, tmp_path: Path) -> None:
    """Two nodes, each with its own Kubo, connected only by `cairn connect`: B pulls A's version by CID. B's Kubo
    was never told where A's Kubo is; B asks its peers who holds the CID and connects to their Kubo first (without
    that, the pull waited out datasets.pull_timeout and failed). The absent CID's 404 says why, from the peers'
    answers. The 120 s bounds are only for a hang."""
    own = {**PEERS, "ipfs.binary": str(kubo_binary)}
    async with (
        inprocess_node(tmp_path / "a", None, **own) as (a, a_client),
        inprocess_node(tmp_path / "b", None, **own) as (b, b_client),
    ):
        head = (await add_csv(a_client, "sales", SALES))["head"]
        assert a.network is not None
        await b.peers.connect(a.network.host.addrs()[0])
        async with asyncio.timeout(120):
            resp = await b_client.post("/api/v0/pull", json={"source": head, "name": "sales"})
            pulled = await resp.json()
        assert resp.status == 200, pulled
        assert pulled["head"] == head and pulled["slices"] == 1 and pulled["blocks"] >= 3  # every one checked
        got = await (await b_client.get("/api/v0/datasets/sales/data", params={"format": "csv"})).read()
        assert got.decode().splitlines()[1:] == SALES.decode().splitlines()[1:]
        a_kubo = (await a.kubo.id()).id
        assert a_kubo in {p.id for p in await b.kubo.swarm_peers()}  # how: B's Kubo was connected to A's

        absent = cid_str(block_of(os.urandom(32), "cbor").cid)  # nobody has it: said so, with a hint
        async with asyncio.timeout(120):
            resp = await b_client.post("/api/v0/pull", json={"source": absent})
            body = await resp.json()
        assert resp.status == 404, body
        assert (
            "none of the 1 connected peers has" in body["error"]["message"]
            and "cairn connect" in body["error"]["message"]
        )


async def test_gateway_answers_an_absent_cid_at_once(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """GET /ipfs/<CID nobody has> was a wait of ipfs.timeout and a 504: the gateway serves what the node holds, so
    it is a 404 saying so, asked offline, as Kubo's own gateway with Gateway.NoFetch (120 s: a bound for a hang)."""
    async with inprocess_node(tmp_path / "n", kubo_session) as (_, client):
        absent = cid_str(block_of(os.urandom(32), "cbor").cid)
        for accept in ("", "application/vnd.ipld.raw", "application/vnd.ipld.car"):
            async with asyncio.timeout(120):
                resp = await client.get(f"/ipfs/{absent}", headers={"Accept": accept} if accept else {})
                body = await resp.json()
            assert resp.status == 404 and "does not hold" in body["error"]["message"], body
        head = (await add_csv(client, "sales", SALES))["head"]
        resp = await client.get(f"/ipfs/{head}", headers={"Accept": "application/vnd.ipld.raw"})
        assert resp.status == 200  # what it holds is still served


async def test_catch_up_reaches_a_peer_that_reconnects_at_once(
    kubo_session: ManagedKubo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """B restarts at once and re-dials A: A sees B's new connection before the old one closes. A caught it up
    only when its table flipped, so B missed what A computed meanwhile (and a stream on the closing connection
    never answered: "catch-up not delivered … no answer within 10 s"). Here A is made to see the old connection
    close only after B's second run is caught up, so the restart is "at once" in every run, however fast A would
    have noticed. Every catch-up A sends is delivered: B leaves each run only once A's catch-ups to it have ended,
    so none is cut short by B's own stop."""
    caplog.set_level(logging.INFO, logger="cairn.network")
    async with inprocess_node(tmp_path / "a", kubo_session, **PEERS) as (a, _):
        assert a.network is not None
        host = a.network.host
        a.index.results.add_execution(fake_row(cid_str(cid_for(b"iv-1")), 1))
        async with inprocess_node(tmp_path / "b", kubo_session, **PEERS) as (b, _):
            await b.peers.connect(host.addrs()[0])
            await wait_for(lambda: asyncio.sleep(0, b.index.peer_claims.claims(limit=10)), 60, "the first catch-up")
            await wait_for(lambda: asyncio.sleep(0, not a.network._tasks), 60, "A's catch-ups to B to end")
            release = _hold_closes(host, b.identity.peer_id)
        assert b.identity.peer_id in host.connected_peers()  # A has not seen B leave
        a.index.results.add_execution(fake_row(cid_str(cid_for(b"iv-2")), 2))  # computed while B was away
        async with inprocess_node(tmp_path / "b", kubo_session, **PEERS) as (b, _):  # re-dials A (peers.json)
            await wait_for(lambda: asyncio.sleep(0, len(b.index.peer_claims.claims(limit=10)) == 2), 60, "the catch-up")
            await release()
            await wait_for(lambda: asyncio.sleep(0, not a.network._tasks), 60, "A's catch-ups to B to end")
            assert b.identity.peer_id in host.connected_peers()  # the old connection's close left the new one
    failed = [str(getattr(r, "error", "")) for r in caplog.records if "catch-up not delivered" in r.getMessage()]
    assert not failed, failed


def _hold_closes(host: P2PHost, peer: str) -> Callable[[], Awaitable[None]]:
    """From now on ``host`` learns that ``peer``'s connections closed only when the function returned is awaited:
    as when a peer restarts faster than the host notices (libp2p trims a dead connection in the background)."""
    held: list[Any] = []
    notice = host._connections.on_conn

    def on_conn(conn: Any, up: bool) -> None:  # the host's connection notifee calls it, in its trio thread
        if not up and conn.muxed_conn.peer_id.to_base58() == peer:
            held.append(conn)
        else:
            notice(conn, up)

    async def release() -> None:
        async def noticed() -> None:
            host._connections.on_conn = notice  # type: ignore[method-assign]
            for conn in held:
                notice(conn, False)

        await host._bridge.run(noticed)

    host._connections.on_conn = on_conn  # type: ignore[method-assign]
    return release


async def test_connect_reaches_a_peer_remembered_at_an_old_address(tmp_path: Path) -> None:
    """A peer remembered at a port it no longer listens on (port 0 gives a new one at each start): libp2p dials
    only the first address its peerstore holds, so `connect` with the new address kept failing."""
    y = P2PHost(os.urandom(32))
    await y.start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    store = tmp_path / "peers.json"
    entry = {"addrs": [f"/ip4/127.0.0.1/tcp/{dead}"], "last_seen": time.time(), "source": "dialed"}
    store.write_text(json.dumps({"version": 1, "peers": {y.peer_id: entry}}))
    x = P2PHost(os.urandom(32), peerstore_path=store)
    await x.start()
    try:
        await wait_for(lambda: asyncio.sleep(0, _dial_failed(x)), 20, "the remembered dial to fail")
        assert await x.connect(y.addrs()[0]) == y.peer_id
    finally:
        await asyncio.gather(x.stop(), y.stop())


def _dial_failed(host: P2PHost) -> bool:
    """The background dial of the remembered address is over (libp2p's negative cache holds the peer)."""
    cache: Any = host._host.get_network()._negative_peer_cache
    return any(cache.is_blocked(p["peer_id"]) for p in host.peers())


async def test_node_forgets_a_remembered_peer_that_is_not_cairn(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A Kubo peer kept in peers.json before `connect` checked that peers speak Cairn: dialled at start, found not
    to speak Cairn's protocols by the catch-up, and forgotten, so it is not tried (and warned about) at every
    start."""
    kubo_addr = await kubo_swarm_addr(kubo_session)
    kubo_id = kubo_addr.rsplit("/p2p/", 1)[1]
    home = tmp_path / "n"
    async with inprocess_node(home, kubo_session, **PEERS) as (node, _):
        pass  # a node with nothing to catch up with still checks a new peer (an empty lookup)
    entry = {"addrs": [kubo_addr.rsplit("/p2p/", 1)[0]], "last_seen": time.time(), "source": "dialed"}
    (home / "peers.json").write_text(json.dumps({"version": 1, "peers": {kubo_id: entry}}))
    async with inprocess_node(home, kubo_session, **PEERS) as (node, _):
        await wait_for(lambda: asyncio.sleep(0, _forgotten(node, kubo_id)), 20, "the Kubo peer to be forgotten")
    assert kubo_id not in (home / "peers.json").read_text()


def _forgotten(node: Node, peer: str) -> bool:
    return all(p["peer_id"] != peer for p in node.peers.known())
