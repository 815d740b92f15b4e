"""Two nodes on two hosts that share no loopback: each in its own network namespace, joined only
by a veth pair. Their p2p hosts and Kubo swarms listen on the hosts' addresses (`peers.listen`,
`ipfs.swarm_host`), `cairn connect` uses the address `cairn status` prints, and node B answers a query from node
A's result, fetched over the pair, with no Spark job of its own."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.netns import Host, HostNode

SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"


def _api(node: HostNode, path: str) -> dict[str, object]:
    """The node's HTTP API, on the loopback of its own host only."""
    api = json.loads((node.home / "node.json").read_text())["api"]
    r = node.host.run("curl", "-sS", "--max-time", "10", api + path)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_a_peer_hit_between_hosts_that_share_no_loopback(two_hosts: tuple[Host, Host], tmp_path: Path) -> None:
    host_a, host_b = two_hosts
    # A listens everywhere (its loopback too) and says where to reach it: only its host's address.
    a = HostNode(host_a, tmp_path / "a").start(
        CAIRN_PEERS_LISTEN="/ip4/0.0.0.0/tcp/4002",
        CAIRN_PEERS_ANNOUNCE=f"/ip4/{host_a.address}/tcp/4002",
        CAIRN_IPFS_SWARM_HOST="0.0.0.0",
        CAIRN_IPFS_SWARM_PORT="4001",
        CAIRN_IPFS_SWARM_ANNOUNCE=f"/ip4/{host_a.address}/tcp/4001",
    )
    b = HostNode(host_b, tmp_path / "b").start()
    status_a = a.status()
    addresses = status_a["addresses"]
    assert isinstance(addresses, dict)
    [connect] = addresses["cairn_connect"]
    assert connect == f"/ip4/{host_a.address}/tcp/4002/p2p/{status_a['peer_id']}", addresses
    assert [s.split("/p2p/")[0] for s in addresses["kubo_swarm"]] == [f"/ip4/{host_a.address}/tcp/4001"], addresses
    # B cannot reach what A has on its loopback: the hosts share none.
    api_a = json.loads((a.home / "node.json").read_text())["api"]
    assert host_b.run("curl", "-sS", "--max-time", "5", api_a + "/healthz").returncode != 0

    csv = tmp_path / "sales.csv"
    csv.write_text("region,amount\nnorth,10\nsouth,7\nnorth,3\n")
    for node in (a, b):
        assert node.cli("add", str(csv), "--name", "sales", "--upload").returncode == 0
    assert b.cli("trust", "add", str(status_a["node_key"])).returncode == 0
    r = b.cli("connect", connect)
    assert r.returncode == 0 and "connected to" in r.stdout, r.stdout + r.stderr

    computed = a.cli("query", SQL, "-i", "sales=sales", "--json")
    assert computed.returncode == 0, computed.stderr
    first = json.loads(computed.stdout)
    assert first["source"] == "computed"
    fetched = b.cli("query", SQL, "-i", "sales=sales", "--json")
    assert fetched.returncode == 0, fetched.stderr
    second = json.loads(fetched.stdout)
    assert second["source"] == "peer", second
    assert second["execution"] == first["execution"] and second["rows"] == first["rows"]
    assert second["peer"]["signer"] == status_a["node_key"]
    spark = _api(b, "/api/v0/node")["spark"]
    assert isinstance(spark, dict) and spark["jobs"] == 0, spark  # B computed nothing
