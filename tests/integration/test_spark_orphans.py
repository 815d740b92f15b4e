"""Nothing outlives the node. After kill -9 of a node (a real `cairn node start` process) its Spark
worker and the worker's JVM end within a deadline; what a killed node left in ``$CAIRN_HOME/tmp`` is swept when
the next node starts on that home."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from node.adapters.ipfs import ManagedKubo
from node.services.resolve.spark import SparkWorker, group_members
from node.support.errors import SparkError
from tests.fixtures.inprocess import inprocess_node
from tests.fixtures.nodes import NodeProcess


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return data[data.rfind(b")") + 2 :].split()[0] == b"Z"


def _worker_of(node_pid: int) -> int | None:
    """The node's `python -m spark_worker` child, if it has one."""
    try:
        children = Path(f"/proc/{node_pid}/task/{node_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"spark_worker" in cmdline:
            return int(child)
    return None


async def _ping(sock: Path, deadline: float, log: Path) -> dict[str, object]:
    probe = SparkWorker(sock)  # only to speak the protocol to the node's worker
    while True:
        try:
            return await probe.ping()
        except SparkError:
            assert time.monotonic() < deadline, log.read_text()[-3000:]  # noqa: ASYNC240  only on failure
            await asyncio.sleep(0.2)


ROWS = 200_000
LONG = "SELECT count(*) AS n FROM big a JOIN big b ON a.x < b.x"  # 2·10^10 comparisons: minutes on 2 cores


def _post(node: NodeProcess, path: str, body: bytes, content_type: str, timeout: float) -> int:
    token = (node.home / "api.token").read_text().strip()
    req = urllib.request.Request(
        node.api + path,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0  # the node died under the request (this test kills it)


async def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    # Polling the OS process table: there is no event to await.
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)


@pytest.mark.asyncio
async def test_worker_and_jvm_end_when_the_node_is_killed_mid_query(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    # The session's Kubo, to spare a start (a managed one ends with a SIGKILLed node too: test_kubo_node.py).
    env = {"CAIRN_SPARK_AUTOSTART": "true", "CAIRN_PEERS_ENABLED": "false", "CAIRN_SPARK_MAX_PLAN_BYTES": "0"}
    node = NodeProcess(tmp_path / "home", env=env)
    node.start("--ipfs-api", kubo_session.api_url, timeout=120, env={"CAIRN_IPFS_API_AUTH": kubo_session.auth})
    assert node.proc is not None
    worker: int | None = None
    try:
        log = node.log_path
        pong = await _ping(node.home / "spark.sock", time.monotonic() + 240, log)
        worker, jvm = _worker_of(node.proc.pid), pong["jvm_pid"]
        assert worker == pong["pid"] and isinstance(jvm, int) and not _gone(jvm)
        csv = b"x\n" + b"".join(b"%d\n" % i for i in range(ROWS))
        status = await asyncio.to_thread(
            _post, node, "/api/v0/datasets?name=big&filename=big.csv", csv, "text/csv", 120
        )
        assert status == 201
        body = json.dumps({"sql": LONG, "inputs": {"big": "big"}}).encode()
        asking = asyncio.create_task(asyncio.to_thread(_post, node, "/api/v0/query", body, "application/json", 600))
        probe, deadline = SparkWorker(node.home / "spark.sock"), time.monotonic() + 120
        while (await probe.stats())["running"] is None:  # the long job is in Spark
            assert time.monotonic() < deadline and not asking.done(), log.read_text()[-3000:]
            await asyncio.sleep(0.1)
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(30)
        await asking
        await _wait_gone([worker, jvm], 90)
        assert _gone(worker) and _gone(jvm) and group_members(worker) == [], log.read_text()[-3000:]
    finally:
        node.stop()
        if worker is not None and group_members(worker):
            os.killpg(worker, signal.SIGKILL)  # the test's own worker group (its pgid is its pid)


@pytest.mark.asyncio
async def test_tmp_is_swept_at_start(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    home = tmp_path / "home"
    tmp = home / "tmp"
    left = [tmp / "ingest-abc", tmp / "pull-def", tmp / "inputs-ghi", tmp / "result-jkl"]
    for d in left:
        (d / "inner").mkdir(parents=True)
        (d / "inner" / "part.parquet").write_bytes(b"x" * 1000)
    (tmp / "pull-file.part").write_bytes(b"half a download")
    (tmp / "keep.txt").write_bytes(b"not ours")
    async with inprocess_node(home, kubo_session):
        assert sorted(p.name for p in tmp.iterdir()) == ["keep.txt"]
