"""End to end: the `cairn` command and the daemon, on real Kubo daemons."""

from __future__ import annotations

import json
import os
import signal
import stat
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.nodes import NodeProcess, poll, run_cli


def test_init_creates_home_with_private_secrets(tmp_path: Path) -> None:
    home = tmp_path / "h"
    r = run_cli(home, "init")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "12D3KooW" in out and "did:key:z6Mk" in out
    for name in ("node.key", "api.token"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
    key_before = (home / "node.key").read_bytes()
    assert run_cli(home, "init").returncode == 0
    assert (home / "node.key").read_bytes() == key_before  # never overwritten


def test_node_serves_health_info_and_status(cairn_node: NodeProcess) -> None:
    status, health = cairn_node.get("/healthz")
    assert status == 200 and health["ok"] is True and health["kubo"]["state"] == "up"

    r = cairn_node.cli("status", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["running"] is True
    assert info["api"] == cairn_node.api and info["api"].startswith("http://127.0.0.1:")
    assert info["peer_id"].startswith("12D3KooW")
    assert info["node_key"].startswith("did:key:z6Mk")
    assert info["p2p_addrs"] and all(
        a.startswith("/ip4/127.0.0.1/tcp/") and a.endswith("/p2p/" + info["peer_id"]) for a in info["p2p_addrs"]
    )  # the p2p host uses the node's own key
    assert info["kubo"]["version"] == "0.42.0"
    assert info["kubo"]["api"].startswith("unix:/")  # the managed Kubo's API: a socket in a 0700 directory
    assert Path(info["kubo"]["api"].removeprefix("unix:")).parent.stat().st_mode & 0o777 == 0o700
    assert info["kubo"]["swarm"] and all("/ip4/127.0.0.1/" in a for a in info["kubo"]["swarm"])
    assert info["version"]

    text = cairn_node.cli("status")
    assert text.returncode == 0 and info["peer_id"] in text.stdout.decode()


def test_status_when_not_running(tmp_path: Path) -> None:
    r = run_cli(tmp_path / "nothing", "status", "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["running"] is False


def test_dag_put_get_round_trip_and_pin(cairn_node: NodeProcess) -> None:
    link = b'{"/": "bafir4idbvg7rb4h75xd5y52ytlrkwtfibmagzadomy3oig3aiegnr4f3yq"}'
    doc = b'{"typedVersion": "dt_0", "content": [' + link + b', "main"]}'
    put = cairn_node.cli("dag", "put", input=doc)
    assert put.returncode == 0, put.stderr
    cid = put.stdout.decode().strip()
    assert cid.startswith("bafyr4i")
    local = cairn_node.cli("cid", input=doc)
    assert local.stdout.decode().strip() == cid

    got = cairn_node.cli("dag", "get", cid)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(doc)


def test_write_endpoints_need_the_token(cairn_node: NodeProcess) -> None:
    req = urllib.request.Request(cairn_node.api + "/api/v0/dag", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 401
    req.add_header("Authorization", "Bearer wrong")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 401


@pytest.mark.parametrize(
    "args,stdin,needle",
    [
        (("cid",), b'{"a": ', "invalid DAG-JSON"),
        (("cid",), b'{"typedVersion": "zz_9", "content": []}', "zz_9"),
        (("cid",), b'{"typedVersion": "ex_0", "content": [1, 2]}', "ex_0"),
        (("dag", "get", "not-a-cid"), b"", "not-a-cid"),
        (("dag", "get", "bafyfoo"), b"", "bafyfoo"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(tmp_path: Path, args: tuple[str, ...], stdin: bytes, needle: str) -> None:
    r = run_cli(tmp_path / "h", *args, input=stdin)
    assert r.returncode != 0
    err = r.stderr.decode().strip()
    assert err.startswith("error: ") and "\n" not in err and needle in err, err


def test_dag_put_without_a_node_says_so(tmp_path: Path) -> None:
    r = run_cli(tmp_path / "h", "dag", "put", input=b'{"a": 1}')
    assert r.returncode == 1
    assert "no node is running" in r.stderr.decode()


def test_unreachable_external_kubo_is_a_one_line_error(tmp_path: Path, free_port: int) -> None:
    r = run_cli(
        tmp_path / "h", "node", "start", "--api-port", "0", "--ipfs-api", f"/ip4/127.0.0.1/tcp/{free_port}", timeout=60
    )
    assert r.returncode == 1
    err = r.stderr.decode().strip().splitlines()[-1]
    assert err.startswith("error: ") and str(free_port) in err, r.stderr.decode()
    assert not (tmp_path / "h" / "node.json").exists()


def test_node_on_external_kubo(tmp_path: Path, kubo) -> None:  # type: ignore[no-untyped-def]
    n = NodeProcess(tmp_path / "ext").start("--ipfs-api", kubo.api_url, env={"CAIRN_IPFS_API_AUTH": kubo.auth})
    try:
        _, info = n.get("/api/v0/node")
        assert info["kubo"]["managed"] is False and info["kubo"]["api"] == kubo.api_url.rstrip("/")
        put = n.cli("dag", "put", input=b'{"hello": "world"}')
        assert put.returncode == 0, put.stderr
    finally:
        assert n.stop() == 0
    assert kubo.alive()  # an external Kubo is not ours to stop


def test_two_nodes_side_by_side_and_clean_stop(node_factory) -> None:  # type: ignore[no-untyped-def]
    a, b = node_factory("a"), node_factory("b")
    ia, ib = json.loads(a.cli("status", "--json").stdout), json.loads(b.cli("status", "--json").stdout)
    assert ia["api"] != ib["api"] and ia["peer_id"] != ib["peer_id"]
    assert ia["kubo"]["api"] != ib["kubo"]["api"]
    kubo_pid = ia["kubo"]["pid"]
    assert a.stop(signal.SIGINT) == 0
    assert not (a.home / "node.json").exists()
    poll(lambda: not _alive(kubo_pid), 15, what="managed kubo to stop with its node")
    assert b.get("/healthz")[0] == 200


def test_managed_kubo_killed_is_reported_and_restarted(cairn_node: NodeProcess) -> None:
    info = json.loads(cairn_node.cli("status", "--json").stdout)
    pid = info["kubo"]["pid"]
    os.kill(pid, signal.SIGKILL)
    # The node notices, says so in /healthz, restarts Kubo, and serves again.
    poll(lambda: cairn_node.get("/healthz")[0] == 503, 10, 0.01, what="/healthz to report kubo down")
    poll(lambda: cairn_node.get("/healthz")[0] == 200, 30, what="kubo to be restarted")
    status, health = cairn_node.get("/healthz")
    assert status == 200 and health["kubo"]["restarts"] >= 1
    info2 = json.loads(cairn_node.cli("status", "--json").stdout)
    assert info2["kubo"]["pid"] != pid
    put = cairn_node.cli("dag", "put", input=b'{"after": "restart"}')
    assert put.returncode == 0, put.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_cli_help_lists_the_commands() -> None:
    r = run_cli(Path("/nonexistent"), "--help")
    out = r.stdout.decode()
    for cmd in ("init", "node", "status", "dag", "cid", "holium"):
        assert cmd in out


def test_metrics_count_requests(cairn_node: NodeProcess) -> None:
    cairn_node.get("/healthz")
    with urllib.request.urlopen(cairn_node.api + "/metrics", timeout=10) as r:
        text = r.read().decode()
    assert 'cairn_http_requests_total{route="/healthz",status="200"}' in text
    assert "cairn_kubo_up 1.0" in text
