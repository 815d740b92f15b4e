"""End to end, on real nodes (real Kubo, real libp2p host): what a user or a peer can get wrong is a 4xx over HTTP
and ``error: <one line>`` from the CLI; a peer that cannot be reached is the node's PeerError, never a 500; a broken
config stops ``cairn node start`` with one line, not a traceback."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from node.adapters.identity import generate
from tests.fixtures.nodes import NodeProcess, run_cli


def _post(node: NodeProcess, path: str, body: object) -> tuple[int, Any]:
    token = (node.home / "api.token").read_text().strip()
    req = urllib.request.Request(
        node.api + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _one_error(status: int, body: Any, kind: str, code: int) -> str:
    assert (status, body["error"]["type"]) == (code, kind), body
    message = body["error"]["message"]
    assert message and "\n" not in message
    return str(message)


def _cli_error(r: Any) -> str:
    """The CLI's failure: non-zero, no traceback, the last stderr line is ``error: …`` (log lines may precede it)."""
    err = r.stderr.decode()
    assert r.returncode != 0 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: "), err
    return str(last)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_user_and_peer_errors_are_4xx_or_peer_errors(cairn_node: NodeProcess) -> None:
    status, body = _post(cairn_node, "/api/v0/trust", {"key": "did:key:zNotAKey"})
    assert "did:key:zNotAKey" in _one_error(status, body, "InvalidInput", 400)  # was a 500 ConfigError
    assert "did:key:zNotAKey" in _cli_error(cairn_node.cli("trust", "add", "did:key:zNotAKey"))
    assert _post(cairn_node, "/api/v0/trust", {"key": generate().node_key})[0] == 200  # a good key still goes in

    for addr in ("/ip4/127.0.0.1/tcp/1/nope", "/ip4/127.0.0.1/tcp/4001"):  # malformed; no /p2p/<peer id>
        status, body = _post(cairn_node, "/api/v0/peers/connect", {"addr": addr})
        assert addr in _one_error(status, body, "InvalidInput", 400)
        assert addr in _cli_error(cairn_node.cli("connect", addr))

    # A well-formed address where no peer listens: the peer's failure, mapped at the boundary (not a 500).
    stranger = generate().peer_id
    addr = f"/ip4/127.0.0.1/tcp/{_closed_port()}/p2p/{stranger}"
    status, body = _post(cairn_node, "/api/v0/peers/connect", {"addr": addr})
    kind = body["error"]["type"]
    assert kind in ("PeerError", "PeerTimeout"), body
    assert stranger in _one_error(status, body, kind, {"PeerError": 502, "PeerTimeout": 504}[kind])
    assert stranger in _cli_error(cairn_node.cli("connect", addr))


def test_p2p_off_is_409_not_500(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "nop2p", env={"CAIRN_SPARK_AUTOSTART": "false", "CAIRN_PEERS_ENABLED": "false"})
    try:
        node.start()
        addr = f"/ip4/127.0.0.1/tcp/{_closed_port()}/p2p/{generate().peer_id}"
        status, body = _post(node, "/api/v0/peers/connect", {"addr": addr})
        assert "peers.enabled" in _one_error(status, body, "PeersDisabled", 409)
    finally:
        assert node.stop() == 0


@pytest.mark.parametrize(
    "flags,needle",
    [
        (("--api-port", "70000"), "flag api.port: api.port must be a port number"),
        (("--log-level", "loud"), "flag log.level: log.level must be one of"),
        (("--api-port", "x"), "argument --api-port: invalid int value"),
    ],
)
def test_bad_flags_stop_node_start_with_one_line(tmp_path: Path, flags: tuple[str, ...], needle: str) -> None:
    r = run_cli(tmp_path / "h", "node", "start", *flags, timeout=60)
    assert needle in _cli_error(r)
    assert not (tmp_path / "h" / "node.json").exists()


@pytest.mark.parametrize(
    "toml,env,needle",
    [
        ("[log]\nlevel = 3\n", {}, "config.toml: log.level must be str"),
        ("not toml [", {}, "config.toml: not valid TOML"),
        ("", {"CAIRN_LOG_FORMAT": "xml"}, "environment CAIRN_LOG_FORMAT: log.format must be text or json"),
        ('[peers]\nlisten = ["/ip4/127.0.0.1/tcp/notaport"]\n', {}, "p2p host: bad listen multiaddr"),
    ],
)
def test_broken_config_stops_node_start_with_one_line(
    tmp_path: Path, toml: str, env: dict[str, str], needle: str
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text(toml)
    env = {"CAIRN_SPARK_AUTOSTART": "false", **env}
    r = run_cli(home, "node", "start", "--api-port", "0", timeout=120, env=env)
    assert needle in _cli_error(r)
    assert not (home / "node.json").exists()
    assert not _kubo_running(home / "kubo"), "a failed start left its managed Kubo running"


def _kubo_running(repo: Path) -> bool:
    """Whether a process runs with IPFS_PATH = ``repo`` (the managed Kubo of that home)."""
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # not a process, or gone, or not ours to read
            continue
        if f"IPFS_PATH={repo}".encode() in environ:
            return True
    return False
