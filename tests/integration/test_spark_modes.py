"""Spark modes (docs/spark.md "Modes"): the same miss answered in ``local``, ``standalone`` and
``connect`` mode gives the same result slice CIDs, logical hash and ``ex_0`` CID.

Real components only: a standalone master and one worker, and a Spark Connect server with a token, all started from
the installed pyspark package on 127.0.0.1 (tests/fixtures/spark_cluster.py, stopped by PID); in-process nodes with
a real Kubo. The receipt names the mode and the master kind, and only outside local mode (local receipts keep their
bytes). A wrong or a missing Connect token fails the worker's start with Spark's one-line reason, at once (no wait
for the start deadline), and the token shows nowhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from node.services.resolve.spark import SparkWorker
from node.support.errors import SparkStartError
from tests.fixtures.inprocess import InNode, add_csv, ask, inprocess_node
from tests.fixtures.spark_cluster import Proc, alive, start_connect

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.asyncio(loop_scope="module")

SALES = (
    b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\nnorth,apple,1\n"
)
# A shuffle (GROUP BY) and a sort: the plan shapes whose partitioning the forced settings pin.
SQL = "SELECT region, SUM(amount) AS total, COUNT(*) AS n FROM sales GROUP BY region ORDER BY region"
TOKEN = secrets.token_hex(16)
OTHER_SETTINGS_TEST = "test_connect_server_with_other_settings_is_refused"  # its server is begun with the module


async def _answer(node: InNode) -> dict[str, Any]:
    """The miss's identities: result slices, logical hash, ex_0, and the receipt's ``engine`` map."""
    from node.domain.model import Receipt, decode, decode_object

    answer = await ask(node[1], SQL)
    assert answer["source"] == "computed", answer
    resp = await node[1].get(f"/api/v0/executions/{answer['execution']}")
    ex = await resp.json()
    assert resp.status == 200, ex
    block = await node[1].get(f"/ipfs/{answer['receipt']}", headers={"Accept": "application/vnd.ipld.raw"})
    receipt = decode_object(decode(await block.read()))
    assert isinstance(receipt, Receipt)
    return {
        "slices": ex["slices"],
        "logicalHash": answer["logicalHash"],
        "execution": answer["execution"],
        "rows": answer["rows"],
        "engine": receipt.engine,
    }


async def _miss(base: Path, kubo: ManagedKubo, staging: Path, **settings: Any) -> dict[str, Any]:
    """A miss on a fresh node whose Spark reads its inputs from ``staging`` (spark.staging, shared by every node of
    the module, so a later node finds the slices the first one staged under their CIDs and reuses them), over 3 input
    slices of 2 rows."""
    settings = {"spark.staging": f"file://{staging}", "datasets.rows_per_slice": 2, **settings}
    async with inprocess_node(base, kubo, **settings) as node:
        await node[0].spark.ensure()
        await add_csv(node[1], "sales", SALES)
        got = await _answer(node)
        assert node[0].resolver.staging is not None
        got["staged"] = dict(node[0].resolver.staging.counts)
        resp = await node[1].get("/metrics")
        got["metrics"] = [ln for ln in (await resp.text()).splitlines() if ln.startswith("cairn_spark_staged_total")]
        return got


def _files(staging: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in staging.iterdir()}


@pytest.fixture(scope="module")
def staging(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("staging")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def local(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory, staging: Path) -> dict[str, Any]:
    got = await _miss(tmp_path_factory.mktemp("local") / "node", kubo_session, staging)
    got["files"] = _files(staging)
    return got


def _script(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """scripts/spark_cluster.py's command line, as a user runs it (docs/scaling.md "Real clusters")."""
    return _Script(*args, env=env).result()


class _Script:
    """scripts/spark_cluster.py's command line run in the background: ``result()`` waits for its JSON."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "spark_cluster.py"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )

    def result(self) -> dict[str, Any]:
        try:
            out, err = self.proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert self.proc.returncode == 0, err.decode()[-2000:]
        answer: dict[str, Any] = json.loads(out)
        return answer


@dataclass
class _Starting:
    """What this module's later tests need, begun with the module: JVM starts are most of its time, so the cluster
    and the two Connect servers come up side by side with the local node's worker instead of one after another.
    Each is stopped by the fixture or test that uses it, as before; the module's end stops what none used."""

    standalone: tuple[Path, _Script] | None = None
    connect: tuple[Path, _Script] | None = None
    other: Future[tuple[Proc, int]] | None = None
    used: set[str] = field(default_factory=set)


def _module_uses(request: pytest.FixtureRequest, fixture: str) -> bool:
    return any(
        item.module is request.module and fixture in getattr(item, "fixturenames", ()) for item in request.session.items
    )


@pytest.fixture(scope="module", autouse=True)
def starting(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Starting]:
    begun = _Starting()
    pool = ThreadPoolExecutor(1, thread_name_prefix="connect-other")
    if _module_uses(request, "cluster"):
        state = tmp_path_factory.mktemp("standalone")
        begun.standalone = (state, _Script("start", "--state", str(state), "--workers", "1"))
    if _module_uses(request, "connect_port"):
        state = tmp_path_factory.mktemp("connect")
        begun.connect = (state, _Script("start", "--state", str(state), "--connect", env={"CAIRN_SPARK_TOKEN": TOKEN}))
    if any(
        getattr(i, "originalname", "") == OTHER_SETTINGS_TEST
        for i in request.session.items
        if i.module is request.module
    ):
        work = tmp_path_factory.mktemp("connect-other")
        begun.other = pool.submit(start_connect, work, TOKEN, {"spark.sql.ansi.enabled": "false"})
    try:
        yield begun
    finally:
        for name in ("standalone", "connect"):
            started = getattr(begun, name)
            if started is not None and name not in begun.used:
                with contextlib.suppress(Exception):
                    started[1].result()
                _script("stop", "--state", str(started[0]))
        if begun.other is not None and "other" not in begun.used:
            with contextlib.suppress(Exception):
                begun.other.result()[0].stop()
        pool.shutdown()


@pytest.fixture(scope="module")
def cluster(starting: _Starting) -> Iterator[str]:
    """The standalone cluster started by the script's CLI (the processes outlive it: PID files), stopped by it."""
    assert starting.standalone is not None
    starting.used.add("standalone")
    state, start = starting.standalone
    started = start.result()
    try:
        assert started["spark.mode"] == "standalone" and started["spark.master"].startswith("spark://127.0.0.1:")
        status = _script("status", "--state", str(state))
        assert set(status["processes"]) == {"master", "worker-0"}, status
        assert all(p["alive"] for p in status["processes"].values()), status
        yield started["spark.master"]
    finally:
        stopped = _script("stop", "--state", str(state))["stopped"]
        assert set(stopped) == {"master", "worker-0"}
        assert not any(alive(pid) for pid in stopped.values())  # gone, or a zombie left for its reaper


@pytest.fixture(scope="module")
def connect_port(starting: _Starting) -> Iterator[int]:
    """The Connect server started by the script's CLI (``start --connect``, the token in its environment, never on
    its command line), checked with ``status``, stopped with ``stop``: the one server this module's tests share."""
    assert starting.connect is not None
    starting.used.add("connect")
    state, start = starting.connect
    started = start.result()
    try:
        assert started["spark.mode"] == "connect" and started["spark.remote"].startswith("sc://localhost:"), started
        assert TOKEN not in json.dumps(started)  # the settings it prints name the token, never show it
        status = _script("status", "--state", str(state))
        assert len(status["processes"]) == 1 and all(p["alive"] for p in status["processes"].values()), status
        yield int(started["spark.remote"].rsplit(":", 1)[1])
    finally:
        stopped = _script("stop", "--state", str(state))["stopped"]
        assert len(stopped) == 1 and not any(alive(pid) for pid in stopped.values())


async def test_local_receipt_names_no_mode(local: dict[str, Any]) -> None:
    assert local["rows"] == [["east", 12, 1], ["north", 14, 3], ["south", 12, 2]]
    assert "mode" not in local["engine"] and "master" not in local["engine"]  # local receipts keep their bytes
    # The first node wrote each of the 3 input slices to the staging directory, once, under its CID.
    assert local["staged"] == {"written": 3}, local["staged"]
    assert len(local["files"]) == 3 and all(n.startswith("baf") and n.endswith(".parquet") for n in local["files"])
    assert 'cairn_spark_staged_total{outcome="written"} 3.0' in local["metrics"], local["metrics"]


async def test_standalone_answers_as_local(
    local: dict[str, Any], cluster: str, kubo_session: ManagedKubo, tmp_path: Path, staging: Path
) -> None:
    """A second node, the same staging directory, the same dataset: the cluster's executor (a process of its own)
    reads the slices the first node staged; none is written again (same inode and mtime; the counter)."""
    got = await _miss(tmp_path / "node", kubo_session, staging, **{"spark.mode": "standalone", "spark.master": cluster})
    for key in ("slices", "logicalHash", "execution", "rows"):
        assert got[key] == local[key], key
    assert got["staged"] == {"reused": 3}, got["staged"]
    assert 'cairn_spark_staged_total{outcome="written"} 0.0' in got["metrics"], got["metrics"]
    assert _files(staging) == local["files"]
    assert got["engine"] == {**local["engine"], "mode": "standalone", "master": "spark"}


async def test_connect_answers_as_local(
    local: dict[str, Any], connect_port: int, kubo_session: ManagedKubo, tmp_path: Path, staging: Path
) -> None:
    remote = f"sc://localhost:{connect_port}"
    settings = {"spark.mode": "connect", "spark.remote": remote, "spark.token": TOKEN}
    got = await _miss(tmp_path / "node", kubo_session, staging, **settings)
    for key in ("slices", "logicalHash", "execution", "rows"):
        assert got[key] == local[key], key
    assert got["staged"] == {"reused": 3} and _files(staging) == local["files"]  # the server read the staged files
    assert got["engine"] == {**local["engine"], "mode": "connect", "master": "connect"}
    assert TOKEN not in (tmp_path / "node" / "logs" / "spark.log").read_text()


@pytest_asyncio.fixture(loop_scope="module")
async def worker_for(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[SparkWorker] = []

    def make(port: int, token: str) -> SparkWorker:
        w = SparkWorker(tmp_path / "w.sock", mode="connect", remote=f"sc://localhost:{port}", token=token, warmup=False)
        made.append(w)
        return w

    yield make
    for w in made:
        await w.stop()


@pytest.mark.parametrize(
    ("token", "why"),
    [("not-" + TOKEN, "Invalid authentication token"), ("", "No authentication token provided")],
    ids=["wrong", "missing"],
)
async def test_connect_bad_token_is_a_clear_error(connect_port: int, worker_for: Any, token: str, why: str) -> None:
    worker = worker_for(connect_port, token)
    with pytest.raises(SparkStartError) as err:
        await worker.start()
    message = str(err.value)
    assert why in message and "no session on the Spark Connect server" in message, message
    assert "did not answer within" not in message  # it failed at once, not at the start deadline
    assert TOKEN not in message and (not token or token not in message)
    assert TOKEN not in worker.log_path.read_text()


async def test_connect_server_with_other_settings_is_refused(starting: _Starting, worker_for: Any) -> None:
    """A server whose answer-relevant setting differs (here ANSI off: quiet NULLs instead of errors) is refused at
    start, naming the key: its answers would not be the ones every other peer computes."""
    assert starting.other is not None
    starting.used.add("other")
    server, port = starting.other.result()  # begun with the module (connect_server's start, with ANSI off)
    try:
        worker = worker_for(port, TOKEN)
        with pytest.raises(SparkStartError) as err:
            await worker.start()
    finally:
        server.stop()
    message = str(err.value)
    assert "spark.sql.ansi.enabled='false', not 'true'" in message, message
    assert TOKEN not in message


async def test_connect_timeout_interrupts_the_server_job(connect_port: int, worker_for: Any, tmp_path: Path) -> None:
    """A Connect job is cancelled through its operation tag (``interruptTag``): after a timeout the worker is free
    again, long before the 4·10^10-comparison join could end, and answers the next job on the same server."""
    import asyncio
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq

    from node.support.errors import SparkTimeout

    path = tmp_path / "cross.parquet"
    pq.write_table(pa.table({"v": pa.array(range(200_000), pa.int64())}), path)
    worker = worker_for(connect_port, TOKEN)
    await worker.start()
    inputs = {"a": ([path], ["col_0"]), "b": ([path], ["col_0"])}
    with pytest.raises(SparkTimeout):
        await worker.run("SELECT count(*) FROM a JOIN b ON a.col_0 < b.col_0", inputs, timeout=3.0, job_id="slow")
    deadline = time.monotonic() + 60
    while (stats := await worker.stats())["running"] is not None or stats["cancelled"] != 1:
        assert time.monotonic() < deadline, f"the interrupted job did not end: {stats}"
        await asyncio.sleep(0.1)
    done = await worker.run("SELECT count(*) AS n FROM a", {"a": ([path], ["col_0"])})
    assert done.table.column(0).to_pylist() == [200_000]


async def test_connect_server_unreachable_fails_the_start_in_seconds(worker_for: Any) -> None:
    """No server on the port: the start gives up after a few retries (not the client's 10-minute default, not the
    start deadline), with gRPC's reason."""
    from tests.fixtures.spark_cluster import free_port

    worker = worker_for(free_port(), TOKEN)
    with pytest.raises(SparkStartError) as err:
        await worker.start()
    message = str(err.value)
    assert "no session on the Spark Connect server" in message and "Connection refused" in message, message
    assert "did not answer within" not in message and TOKEN not in message
