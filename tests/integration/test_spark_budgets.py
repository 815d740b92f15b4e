"""On a REAL Spark worker: one query cannot occupy or jam it.

- budgets: a 25-way CROSS JOIN of a 3-row input is refused before it runs (the plan-work estimate of
  spark_worker/budget.py), results above the row / byte caps are refused before they are served;
- an OutOfMemoryError ends the JVM (-XX:+ExitOnOutOfMemoryError), the query gets a 503, the worker is
  restarted and the next query works; so does a JVM that makes no progress (the watchdog: its budget on a clock
  of its own in tests/unit/test_spark_watchdog.py);
- jobs run side by side (spark.max_concurrent_jobs): a long job does not hold a short one, and answers run
  concurrently are identical to the same answers run alone (and to pyarrow's own sums);
- a client leaving, or DELETE of its job, cancels the Spark job.

Each test fails on code without these limits (no budgets, one job at a time, an OOM left the job "running").
One worker serves the worker tests (budgets go with each request) and one node the node tests: a JVM start is
seconds of the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import pytest_asyncio

from config import SparkSettings
from node.adapters.ipfs import ManagedKubo
from node.services.resolve.spark import SparkWorker
from node.support.errors import SparkError, SparkQueueFull, SparkRefused, SparkWorkerDied
from tests.fixtures.inprocess import InNode, add_csv, inprocess_node, query

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEFAULTS = SparkSettings()
LIMITS = {"rows": 1000, "bytes": 64 * 1024, "plan_bytes": DEFAULTS.max_plan_bytes}
CROSS_25 = "SELECT count(*) FROM " + ", ".join(f"a t{i}" for i in range(25))
# A non-equi self join over 200 k rows: minutes of work on 2 cores (estimated far below the default budget
# only when no plan budget is set: the long-job tests run on a worker without one).
LONG_ROWS = 200_000
LONG = "SELECT count(*) FROM a JOIN b ON a.col_0 < b.col_0"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("budget-data")
    pq.write_table(pa.table({"x": pa.array([1, 2, 3], pa.int64())}), d / "three.parquet")
    pq.write_table(pa.table({"x": pa.array(range(LONG_ROWS), pa.int64())}), d / "long.parquet")
    keys = [i % 97 for i in range(50_000)]
    values = [(i * 7919 % 10007) / 7.0 for i in range(50_000)]
    pq.write_table(pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(values, pa.float64())}), d / "kv.parquet")
    return d


def three(d: Path) -> dict[str, tuple[list[Path], list[str]]]:
    return {"a": ([d / "three.parquet"], ["col_0"])}


def kv(d: Path) -> dict[str, tuple[list[Path], list[str]]]:
    return {"a": ([d / "kv.parquet"], ["col_0", "col_1"])}


def long_inputs(d: Path) -> dict[str, tuple[list[Path], list[str]]]:
    return {"a": ([d / "long.parquet"], ["col_0"]), "b": ([d / "long.parquet"], ["col_0"])}


STALL_S = 20.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def spark(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SparkWorker]:
    """The module's worker: two jobs at once, and the stall watchdog on."""
    base = tmp_path_factory.mktemp("spark")
    w = SparkWorker(base / "w.sock", log_path=base / "worker.log", max_jobs=2, stall_timeout=STALL_S)
    await w.start()
    try:
        yield w
    finally:
        await w.stop()


@pytest.fixture
def limited(spark: SparkWorker) -> Iterator[SparkWorker]:
    """The worker asked with budgets as a node sends them (the default plan budget, small result caps)."""
    spark.limits = dict(LIMITS)
    try:
        yield spark
    finally:
        spark.limits = {}


@pytest.fixture
def unlimited(spark: SparkWorker) -> SparkWorker:
    """The worker asked with no budget (so that a long non-equi join runs)."""
    spark.limits = {}
    return spark


async def test_cross_join_of_25_is_refused_before_it_runs(limited: SparkWorker, data: Path) -> None:
    before = await limited.stats()
    with pytest.raises(SparkRefused) as err:
        # Without the plan budget this ran (3^25 rows) until the timeout: SparkTimeout, not a refusal.
        await limited.run(CROSS_25, three(data), timeout=120)
    assert err.value.status == 400 and err.value.condition == "plan-too-large"
    assert "spark.max_plan_bytes" in err.value.message and len(err.value.message.splitlines()) == 1
    after = await limited.stats()
    assert after["running"] is None and after["failed"] == before["failed"] + 1
    # The same inputs in a query within budget still run (the refusal is the plan's, not the input's).
    result = await limited.run("SELECT count(*), sum(col_0) FROM a", three(data))
    assert result.table.to_pylist() == [{"count(1)": 3, "sum(col_0)": 6}]


async def test_an_equi_join_is_within_the_plan_budget(limited: SparkWorker, data: Path) -> None:
    # Spark's own estimate of any join is the product of its sides; equal keys must not count as a product.
    inputs = {**kv(data), "b": ([data / "kv.parquet"], ["col_0", "col_1"])}
    result = await limited.run(
        "SELECT a.col_0, count(*) FROM a JOIN b ON a.col_0 = b.col_0 GROUP BY a.col_0 ORDER BY a.col_0", inputs
    )
    table = pq.read_table(data / "kv.parquet")
    per_key = pc.value_counts(table["k"]).to_pylist()  # oracle: n rows of a key pair with n of b
    expected = sorted((c["values"], c["counts"] ** 2) for c in per_key)
    assert [tuple(r.values()) for r in result.table.to_pylist()] == expected


async def test_result_rows_above_the_cap_are_refused(limited: SparkWorker, data: Path) -> None:
    at_cap = await limited.run(f"SELECT col_0 FROM a WHERE col_0 < {LIMITS['rows']}", {"a": long_inputs(data)["a"]})
    assert at_cap.table.num_rows == LIMITS["rows"]  # the cap itself is allowed
    with pytest.raises(SparkRefused) as err:
        await limited.run(f"SELECT col_0 FROM a WHERE col_0 <= {LIMITS['rows']}", {"a": long_inputs(data)["a"]})
    assert err.value.status == 400 and err.value.condition == "result-rows"
    assert str(LIMITS["rows"] + 1) in err.value.message


async def test_result_bytes_above_the_cap_are_refused(limited: SparkWorker, data: Path) -> None:
    # 900 rows (under the row cap) of 100-character strings: about 90 kB of Arrow, above the 64 kB cap.
    with pytest.raises(SparkRefused) as err:
        await limited.run("SELECT repeat('x', 100) AS s FROM a WHERE col_0 < 900", {"a": long_inputs(data)["a"]})
    assert err.value.status == 400 and err.value.condition == "result-bytes"
    small = await limited.run("SELECT repeat('x', 100) AS s FROM a WHERE col_0 < 100", {"a": long_inputs(data)["a"]})
    assert small.table.num_rows == 100


SUMS = "SELECT col_0, sum(col_1) AS s, count(*) AS n FROM a GROUP BY col_0 ORDER BY col_0"


async def test_a_long_job_does_not_hold_a_short_one(unlimited: SparkWorker, data: Path) -> None:
    alone = await unlimited.run(SUMS, kv(data))
    long = asyncio.create_task(unlimited.run(LONG, long_inputs(data), job_id="long-one", timeout=600))
    try:
        deadline = time.monotonic() + 120
        while (await unlimited.stats())["running"] != "long-one":
            assert time.monotonic() < deadline and not long.done(), "the long job did not start"
            await asyncio.sleep(0.1)
        # With one lock and one job thread, these waited behind the long job.
        side = await asyncio.gather(*(unlimited.run(SUMS, kv(data), timeout=120) for _ in range(2)))
        assert not long.done()
        assert "long-one" in (await unlimited.stats())["running_jobs"]
    finally:
        long.cancel()
        await asyncio.gather(long, return_exceptions=True)
    # Byte-identical to the same query run alone, and equal to pyarrow's own per-key sums.
    for r in side:
        assert r.table.equals(alone.table)
    oracle = pq.read_table(data / "kv.parquet").group_by("k").aggregate([("v", "sum"), ("v", "count")])
    expected = {k: (s, n) for k, s, n in zip(*(oracle[c].to_pylist() for c in ("k", "v_sum", "v_count")), strict=True)}
    got = {r["col_0"]: (r["s"], r["n"]) for r in alone.table.to_pylist()}
    assert got.keys() == expected.keys()
    for key, (s, n) in got.items():
        assert n == expected[key][1] and s == pytest.approx(expected[key][0], rel=1e-12)


async def test_callers_beyond_the_queue_bound_are_refused_at_once(unlimited: SparkWorker, data: Path) -> None:
    """With both slots busy and ``max_queued`` callers waiting, one more is refused (429) without waiting; before
    the bound every caller joined an unbounded queue (found by scripts/bench/load.py)."""
    longs = [
        asyncio.create_task(unlimited.run(LONG, long_inputs(data), job_id=f"busy-{i}", timeout=600)) for i in range(2)
    ]
    queued: asyncio.Task[object] | None = None
    unlimited.max_queued = 1
    try:
        deadline = time.monotonic() + 120
        while len((await unlimited.stats())["running_jobs"]) < 2:
            assert time.monotonic() < deadline and not any(t.done() for t in longs), "the long jobs did not start"
            await asyncio.sleep(0.1)
        queued = asyncio.create_task(unlimited.run(SUMS, kv(data), timeout=600))
        while unlimited.waiting < 1:
            assert time.monotonic() < deadline and not queued.done(), "the second caller did not queue"
            await asyncio.sleep(0.05)
        with pytest.raises(SparkQueueFull) as err:
            await unlimited.run(SUMS, kv(data), timeout=600)
        assert err.value.status == 429 and "spark.max_queued_jobs" in err.value.message
        assert not queued.done() and unlimited.waiting == 1  # the one within the bound still waits its turn
    finally:
        unlimited.max_queued = 64
        for t in [*longs, *([queued] if queued else [])]:
            t.cancel()
        await asyncio.gather(*longs, *([queued] if queued else []), return_exceptions=True)
    assert unlimited.waiting == 0
    await _when_up(unlimited, data)


async def test_out_of_memory_restarts_the_worker(unlimited: SparkWorker, data: Path) -> None:
    # The long job the test before cancelled may still be ending beside this one: both die with the JVM.
    restarts, old_pid = unlimited.restarts, unlimited.pid
    with pytest.raises(SparkWorkerDied) as err:
        # Without -XX:+ExitOnOutOfMemoryError the JVM's OOM left this job "running" forever: the timeout fired.
        await unlimited.run("SELECT size(sequence(1, 400000000)) FROM a", three(data), timeout=300)
    assert err.value.status == 503 and "died" in err.value.message
    after = await unlimited.run("SELECT count(*) FROM a", three(data), timeout=300)  # waits for the restart
    assert after.table.column(0).to_pylist() == [3]
    assert unlimited.restarts == restarts + 1 and unlimited.pid != old_pid


async def _when_up(worker: SparkWorker, data: Path) -> None:
    """Poll (deadline 240 s) until the worker answers a query: a restarting worker refuses connections."""
    deadline = time.monotonic() + 240
    while True:
        try:
            await worker.run("SELECT count(*) FROM a", three(data), timeout=300)
            return
        except SparkError:
            assert time.monotonic() < deadline, "the worker did not come back up"
            await asyncio.sleep(0.5)


async def test_a_stalled_jvm_is_killed_and_the_worker_restarted(unlimited: SparkWorker, data: Path) -> None:
    await _when_up(unlimited, data)  # the previous test's restart may still be under way
    restarts = unlimited.restarts
    task = asyncio.create_task(unlimited.run(LONG, long_inputs(data), job_id="stalled", timeout=300))
    deadline = time.monotonic() + 120
    while (stats := await unlimited.stats())["running"] != "stalled":
        assert time.monotonic() < deadline and not task.done(), "the long job did not start"
        await asyncio.sleep(0.1)
    jvm = stats["jvm_pid"]
    assert isinstance(jvm, int)
    os.kill(jvm, signal.SIGSTOP)  # a JVM that makes no progress at all (as one wedged after an OOM did)
    try:
        with pytest.raises(SparkError) as err:
            # With nothing watching a running job, this waited until the timeout (SparkTimeout).
            await task
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(jvm, signal.SIGCONT)
    # The job that stalled is the one answered "no progress" (before the fix the killed JVM's lost connection
    # could reach it first as a 500, and the next job was then answered "died" for it).
    assert err.value.status == 503 and "stalled" in err.value.message
    assert f"made no progress for {STALL_S:g} s" in err.value.message  # the watchdog's kill, at its budget
    after = await unlimited.run("SELECT count(*) FROM a", three(data), timeout=300)
    assert after.table.column(0).to_pylist() == [3] and unlimited.restarts == restarts + 1


# --- end to end through a node -------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[InNode]:
    """The node of every node test: its default budgets but a row cap of 4; a 3-row dataset, and a 200 k-row one
    for the long jobs the cancel tests cancel."""
    base = tmp_path_factory.mktemp("budget-node")
    async with inprocess_node(base / "n", kubo_session, **{"spark.max_result_rows": 4}) as pair:
        await pair[0].spark.ensure()
        await add_csv(pair[1], "tiny", b"x\n1\n2\n3\n")
        await add_csv(pair[1], "big", b"x\n" + b"".join(b"%d\n" % i for i in range(LONG_ROWS)))
        yield pair


async def test_node_refuses_the_cross_join_with_a_400(node: InNode) -> None:
    _, client = node
    sql = "SELECT count(*) AS n FROM " + ", ".join(f"tiny t{i}" for i in range(25))
    status, body = await asyncio.wait_for(query(client, {"sql": sql, "inputs": {"tiny": "tiny"}}), 120)
    assert status == 400, body
    assert "plan-too-large" in str(body) and "spark.max_plan_bytes" in str(body)
    status, body = await query(client, {"sql": "SELECT count(*) AS n FROM tiny", "inputs": {"tiny": "tiny"}})
    assert status == 200 and body["rows"] == [[3]], body


async def test_node_refuses_a_result_over_its_row_cap(node: InNode) -> None:
    _, client = node
    sql = "SELECT a.x, b.x AS y FROM tiny a CROSS JOIN tiny b"  # 9 rows, the node's cap is 4
    status, body = await query(client, {"sql": sql, "inputs": {"tiny": "tiny"}})
    assert status == 400 and "result-rows" in str(body) and "spark.max_result_rows" in str(body), body


# --- cancel: the client leaving, DELETE /api/v0/jobs/{id} ----------------------------------------------


# A long job within the node's plan budget: a join on equal keys (estimated as what it scans, not as a product)
# whose keys pair each row with half of the others, 2·10^10 pairs: minutes of work on 2 cores.
SLOW = {"sql": "SELECT count(*) AS n FROM big a JOIN big b ON a.x % 2 = b.x % 2", "inputs": {"big": "big"}}


async def _running(node: InNode, want: bool, timeout: float) -> dict[str, object]:
    """Poll the worker until a job is (or no job is) running."""
    deadline = time.monotonic() + timeout
    while True:
        stats = await node[0].worker.stats()
        if (stats["running"] is not None) == want:
            return stats
        assert time.monotonic() < deadline, f"worker still {'idle' if want else 'busy'}: {stats}"
        await asyncio.sleep(0.1)


async def test_client_leaving_cancels_its_spark_job(node: InNode) -> None:
    before = await node[0].worker.stats()
    asking = asyncio.create_task(query(node[1], SLOW))
    await _running(node, True, 120)
    asking.cancel()  # the HTTP client goes away (the TestServer cancels the handler, as the daemon now does)
    await asyncio.gather(asking, return_exceptions=True)
    # Uncancelled, the job ran on (minutes) after its client left.
    after = await _running(node, False, 60)
    assert after["cancelled"] == before["cancelled"] + 1 and after["restarts"] == before["restarts"]
    status, body = await query(node[1], {"sql": "SELECT count(*) AS n FROM big", "inputs": {"big": "big"}})
    assert status == 200 and body["rows"] == [[LONG_ROWS]], body


async def test_delete_cancels_a_wait_false_job(node: InNode) -> None:
    _, client = node
    before = await node[0].worker.stats()
    status, started = await query(client, {**SLOW, "wait": False})
    assert status == 202, started
    path = f"/api/v0/jobs/{started['job']}"
    await _running(node, True, 120)
    resp = await client.delete(path, headers={"Authorization": ""})  # no token: refused, nothing cancelled
    assert resp.status == 401
    assert (await node[0].worker.stats())["running"] is not None
    resp = await client.delete(path)
    body = await resp.json()
    assert resp.status == 200 and body["state"] == "failed" and body["error"]["type"] == "Cancelled", body
    after = await _running(node, False, 60)
    assert after["cancelled"] == before["cancelled"] + 1
    resp = await client.get(path)
    assert (await resp.json())["state"] == "failed"
    resp = await client.delete("/api/v0/jobs/job-0-nosuch")
    assert resp.status == 404
