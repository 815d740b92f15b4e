"""The node's life cycle as a user drives it.

- Ctrl-C during a long query (a real Spark job) says what the node waits for; a second Ctrl-C cancels the query
  (its Spark job group too) and the node is gone within 5 s, with nothing half-written;
- `cairn node start --detach` / `cairn node stop`, exactly as the README shows them;
- ``/healthz`` says Spark is not ready until the worker takes a query.

Each failed on the code before (the second signal was ignored while queries drained, there was no
--detach and no `node stop`, and /healthz said nothing of Spark).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from node.adapters.ipfs import ManagedKubo
from node.services.resolve.spark import group_members
from tests.fixtures.inprocess import add_csv, inprocess_node, wait_for
from tests.fixtures.nodes import NodeProcess, poll, run_cli

LONG_ROWS = 200_000
# A non-equi self join of 200 k rows: minutes on 2 cores (the plan budget is off so that it runs at all).
LONG = "SELECT count(*) AS n FROM big a JOIN big b ON a.x < b.x"


JSON = "application/json"


def _post(node: NodeProcess, path: str, body: bytes, content_type: str) -> Any:
    token = (node.home / "api.token").read_text().strip()
    req = urllib.request.Request(
        node.api + path,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _log(node: NodeProcess) -> str:
    return node.log_path.read_text(errors="replace")


def test_a_second_sigint_cancels_a_long_query_and_the_node_is_gone_within_5_s(tmp_path: Path) -> None:
    node = NodeProcess(
        tmp_path / "node", env={"CAIRN_SPARK_AUTOSTART": "true", "CAIRN_SPARK_MAX_PLAN_BYTES": "0"}
    ).start()
    assert node.proc is not None
    try:
        csv = b"x\n" + b"".join(b"%d\n" % i for i in range(LONG_ROWS))
        _post(node, "/api/v0/datasets?name=big&filename=big.csv", csv, "application/octet-stream")
        body = json.dumps({"sql": LONG, "inputs": {"big": "big"}, "wait": False}).encode()
        job = _post(node, "/api/v0/query", body, JSON)["job"]
        wait_body = json.dumps({"sql": LONG, "inputs": {"big": "big"}}).encode()
        # The same question asked and waited for over HTTP: a second query on the same (single-flight) Spark job.
        waiting = concurrent.futures.ThreadPoolExecutor(1).submit(_post, node, "/api/v0/query", wait_body, JSON)
        info = poll(lambda: (i := node.get("/api/v0/node")[1])["spark"]["jobs"] >= 1 and i, 180, 0.1, what="Spark job")
        poll(lambda: node.get("/healthz")[1]["queries"] == 2, 30, 0.1, what="both queries to run")
        worker = info["spark"]["pid"]

        node.proc.send_signal(signal.SIGINT)
        said = "waiting for 2 running queries; press Ctrl-C again to cancel them"
        poll(lambda: said in _log(node), 10, what="the node to say what it waits for")
        assert node.proc.poll() is None  # it drains: the queries run on
        assert node.get(f"/api/v0/jobs/{job}")[1]["state"] == "running"
        status, health = node.get("/healthz")
        assert status == 200 and health["stopping"] is True and health["ready"] is False, health
        with pytest.raises(urllib.error.HTTPError) as refused:  # no new query while it stops
            _post(node, "/api/v0/query", body, "application/json")
        assert refused.value.code == 503 and "the node is stopping" in refused.value.read().decode()

        node.proc.send_signal(signal.SIGINT)
        exited = lambda: node.proc is not None and node.proc.poll() is not None  # noqa: E731
        poll(exited, 5, what="the node to exit")  # the 5 s promised above
        assert node.proc.returncode == 0, _log(node)
        with pytest.raises(OSError):  # the waiting client's connection ends without an answer
            waiting.result(30)
    finally:
        node.stop()
    assert "cancelling 2 running queries" in _log(node)
    spark_log = (node.home / "logs" / "spark.log").read_text(errors="replace")
    assert "client went away, cancelling" in spark_log  # the worker cancelled the job's Spark job group
    assert group_members(worker) == []  # no JVM left computing
    assert not (node.home / "node.pid").exists() and not (node.home / "node.json").exists()
    with sqlite3.connect(node.home / "index.sqlite") as db:  # nothing half-written
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM executions").fetchone() == (0,)  # the cancelled query's is absent


def test_detach_and_stop_with_the_readme_commands(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # The README's lines, as typed; the environment picks a free port and leaves Spark off (no query runs here).
    env = {"CAIRN_API_PORT": "0", "CAIRN_SPARK_AUTOSTART": "false"}
    started = run_cli(home, "node", "start", "--detach", env=env)
    assert started.returncode == 0, started.stderr.decode()
    pid = int((home / "node.pid").read_text())
    try:
        assert f"(pid {pid})" in started.stdout.decode() and "cairn node stop" in started.stdout.decode()
        assert os.getsid(pid) == pid  # its own session: no terminal, Ctrl-C in ours does not reach it
        assert json.loads((home / "node.json").read_text())["pid"] == pid
        status = run_cli(home, "status", "--home", str(home))  # --home after the subcommand too
        assert status.returncode == 0 and status.stdout.decode().startswith("running"), status
        assert "listening on" in (home / "logs" / "node.log").read_text()

        stopped = run_cli(home, "node", "stop", env=env)
        assert stopped.returncode == 0 and f"(pid {pid})" in stopped.stdout.decode(), stopped
        poll(lambda: not Path(f"/proc/{pid}").exists(), 10, what="the detached node to be gone")
        assert not (home / "node.pid").exists() and not (home / "node.json").exists()
    finally:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
    again = run_cli(home, "node", "stop")
    assert again.returncode == 1 and again.stderr.decode() == f"error: no node is running for {home}\n"


def test_detach_reports_a_node_that_cannot_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = run_cli(home, "node", "start", "--detach", env={"CAIRN_API_PORT": "0", "CAIRN_IPFS_API": "127.0.0.1:9"})
    assert out.returncode == 1 and out.stderr.decode().startswith("error: the node exited during its start ("), out
    assert not (home / "node.pid").exists()


@pytest.mark.asyncio
async def test_healthz_says_spark_is_not_ready_until_the_worker_takes_a_query(
    kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    async with inprocess_node(tmp_path / "n", kubo_session) as (node, client):
        await add_csv(client, "t", b"x\n1\n2\n")

        async def health() -> dict[str, Any]:
            resp = await client.get("/healthz")
            assert resp.status == 200  # Kubo serves: ok, whatever Spark does (clients rely on it)
            return await resp.json()

        before = await health()
        assert before["ok"] and not before["ready"] and before["spark"] == {"state": "down", "ready": False}
        assert before["p2p"] == {"state": "disabled", "ready": True}
        starting = node.spark.ensure()
        seen: list[bool] = []

        async def ready() -> dict[str, Any] | None:
            h = await health()
            seen.append(h["spark"]["ready"])
            if not h["spark"]["ready"]:
                assert not node.worker.alive() or not starting.done()  # not ready: the worker cannot take a job
                return None
            return h

        h = await wait_for(ready, 180, "Spark to be ready")
        assert h["ready"] and h["spark"]["state"] == "up" and seen[0] is False
        events: list[str] = []
        await node.query("SELECT sum(x) AS s FROM t", {"t": "t"}, on_event=lambda k, d: events.append(k))
        assert "computing" in events and "waiting" not in events  # ready meant ready: no wait for Spark
