"""The node's managed Kubo, hardened: it ends with a SIGKILLed node (a real `cairn node start` process), so the
next node on the same home starts and serves the same data; and its RPC API answers only the node's secret,
while the node works end to end (ingest, query checked against DuckDB) with that secret on."""

from __future__ import annotations

import csv
import io
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import duckdb
import pytest

from node.adapters.ipfs import home_kubo_auth
from tests.fixtures.inprocess import add_csv, ask, inprocess_node
from tests.fixtures.kubo import post_status
from tests.fixtures.nodes import NodeProcess, poll

pytestmark = pytest.mark.kubo

SALES = b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\n"


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return data[data.rfind(b")") + 2 :].split()[0] == b"Z"


def _call(node: NodeProcess, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    token = (node.home / "api.token").read_text().strip()
    req = urllib.request.Request(
        node.api + path, data=body, method=method, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def _rows(node: NodeProcess, name: str) -> list[dict[str, Any]]:
    status, body = _call(node, "GET", f"/api/v0/datasets/{name}/data?format=jsonl")
    assert status == 200, body
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]


def test_managed_kubo_ends_with_a_killed_node_and_the_next_node_serves_its_data(tmp_path: Path) -> None:
    """On the old code the Kubo lived on after kill -9 of its node (found at the next start and stopped by its
    PID file, if that was intact): here it ends by itself, within a deadline, with no node started."""
    home = tmp_path / "home"
    first = NodeProcess(home).start()
    try:
        status, body = _call(first, "POST", "/api/v0/datasets?name=sales&filename=sales.csv", SALES)
        assert status == 201, body
        before = _rows(first, "sales")
        kubo_pid = first.get("/api/v0/node")[1]["kubo"]["pid"]
        assert isinstance(kubo_pid, int) and not _gone(kubo_pid)
    finally:
        first.stop(signal.SIGKILL)
    poll(lambda: _gone(kubo_pid), 30, interval=0.1, what=f"the killed node's Kubo (pid {kubo_pid}) to end")

    second = NodeProcess(home).start()
    try:
        kubo = second.get("/api/v0/node")[1]["kubo"]
        assert kubo["managed"] is True and kubo["state"] == "up" and kubo["pid"] != kubo_pid
        expected = [
            {k: int(v) if k == "amount" else v for k, v in r.items()}
            for r in csv.DictReader(io.StringIO(SALES.decode()))
        ]
        assert _rows(second, "sales") == before == expected  # the oracle: the CSV itself, read by the csv module
        assert "left running" not in second.log_path.read_text()  # the start-time backstop had nothing to do
    finally:
        second.stop()


async def _kubo_status(api_url: str, authorization: str | None) -> int:
    return await post_status(api_url, "/api/v0/id", authorization)  # its API is a unix socket


@pytest.mark.asyncio
async def test_node_kubo_needs_the_secret_and_the_node_works_with_it(tmp_path: Path, kubo_binary: Path) -> None:
    """A node with its own managed Kubo: a local process without the secret gets 403 from that Kubo (200 on the
    old code), the secret file in the home opens it (0600), and ingest + query work through the node."""
    async with inprocess_node(tmp_path / "n", None, **{"ipfs.binary": str(kubo_binary)}) as (node, client):
        assert node.managed is not None
        url = node.managed.api_url
        secret_file = node.home.path / "kubo.secret"
        assert secret_file.stat().st_mode & 0o777 == 0o600
        assert await _kubo_status(url, None) == 403
        assert await _kubo_status(url, f"Bearer {node.home.token()}") == 403  # the API token is not Kubo's secret
        auth = home_kubo_auth(node.home.path)
        assert auth is not None and await _kubo_status(url, f"Bearer {auth.removeprefix('bearer:')}") == 200

        await add_csv(client, "sales", SALES)
        sql = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"
        out = await ask(client, sql)
        con = duckdb.connect()
        con.execute("CREATE TABLE sales AS SELECT * FROM read_csv(?)", [str(_write(tmp_path, SALES))])
        assert out["source"] == "computed" and out["rows"] == [list(r) for r in con.sql(sql).fetchall()]
        assert (await node.health())["kubo"]["state"] == "up"


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "sales.csv"
    path.write_bytes(data)
    return path
