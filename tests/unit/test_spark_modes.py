"""The worker's mode arguments and token handling (docs/spark.md "Modes"); the real servers are in
tests/integration/test_spark_modes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.services.resolve.spark import SparkWorker
from spark_worker.protocol import TOKEN_ENV
from spark_worker.server import _check_mode, parse_args
from spark_worker.session import _grpc_why, remote_url


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--mode", "connect"], "--mode connect needs --remote sc://HOST:PORT"),
        (["--mode", "connect", "--remote", "sc://localhost:1/;token=x"], "no ;parameters"),
        (["--mode", "connect", "--remote", "sc://localhost:1", "--conf", "spark.log.level=WARN"], "takes no --conf"),
        (["--mode", "standalone"], "--mode standalone needs a spark://, yarn or k8s:// master"),
        (["--master", "spark://127.0.0.1:7077"], "--mode local needs a local[N] master"),
    ],
)
def test_mode_needs_its_master(argv: list[str], needle: str) -> None:
    with pytest.raises(ValueError) as err:
        _check_mode(parse_args(["--socket", "/tmp/x.sock", *argv]))
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--mode", "standalone", "--master", "spark://127.0.0.1:7077"],
        ["--mode", "standalone", "--master", "yarn"],
        ["--mode", "connect", "--remote", "sc://localhost:15002"],
    ],
)
def test_mode_accepted(argv: list[str]) -> None:
    _check_mode(parse_args(["--socket", "/tmp/x.sock", *argv]))


def test_token_is_a_url_parameter_and_never_in_a_reason() -> None:
    assert remote_url("sc://localhost:15002", "t0k") == "sc://localhost:15002/;token=t0k"
    assert remote_url("sc://localhost:15002/", None) == "sc://localhost:15002"
    grpc = 'RPC failed:\n\tstatus = StatusCode.UNAUTHENTICATED\n\tdetails = "Invalid authentication token"\n'
    assert _grpc_why(Exception(grpc), "t0k") == "Invalid authentication token"
    assert _grpc_why(Exception("cannot reach sc://localhost:1/;token=t0k"), "t0k") == (
        "cannot reach sc://localhost:1/;token=***"
    )


def test_node_side_hands_the_token_over_in_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "tok-" + "9f3e1a" * 4
    w = SparkWorker(tmp_path / "w.sock", mode="connect", remote="sc://localhost:15002", token=token)
    cmd = w._command()
    assert cmd[cmd.index("--mode") + 1] == "connect" and cmd[cmd.index("--remote") + 1] == "sc://localhost:15002"
    assert not any(token in part for part in cmd) and "--conf" not in cmd  # argv is world-readable in /proc
    assert w._env()[TOKEN_ENV] == token
    assert w.deployment == {"mode": "connect", "master": "connect"}
    monkeypatch.setenv(TOKEN_ENV, token)  # a token in the node's own environment reaches no other mode's worker
    local = SparkWorker(tmp_path / "l.sock")
    assert TOKEN_ENV not in local._env() and local.deployment == {}
    standalone = SparkWorker(tmp_path / "s.sock", mode="standalone", master="spark://127.0.0.1:7077")
    assert standalone.deployment == {"mode": "standalone", "master": "spark"}
    assert TOKEN_ENV not in standalone._env()
