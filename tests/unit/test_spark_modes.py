"""The worker's mode arguments and token handling (docs/spark.md "Modes"); the real servers are in
tests/integration/test_spark_modes.py."""

from __future__ import annotations

import pytest

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
