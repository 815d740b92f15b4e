"""The co-located Spark worker, for real: one warm worker for the module (Spark takes seconds to start).

The tests run in file order on that worker; the last one stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pytest_asyncio

from node.services.resolve.spark import SparkWorker, group_members
from node.support.errors import CairnError, SparkError, SparkStartError, SparkTimeout, SparkWorkerDied
from spark_worker.server import EXIT_USAGE

pytestmark = pytest.mark.asyncio(loop_scope="module")

# A non-equi self join over 200 k rows: 4·10^10 comparisons, minutes of work on 2 cores.
CROSS_ROWS = 200_000
CROSS = "SELECT count(*) FROM a JOIN b ON a.col_0 < b.col_0"


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rfind(b")") + 2 :].split()[0] == b"Z"


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("spark-data")
    # Two slices of one input; the file's own column names differ from the ones the job gives.
    pq.write_table(
        pa.table({"city": ["paris", "lyon", "paris", "nice"], "amount": pa.array([10, 20, 30, 40], pa.int64())}),
        d / "sales-0.parquet",
    )
    pq.write_table(
        pa.table({"city": ["lyon", "paris", "brest"], "amount": pa.array([1, 2, 3], pa.int64())}), d / "sales-1.parquet"
    )
    pq.write_table(
        pa.table({"name": ["paris", "lyon", "nice", "lille"], "region": ["IDF", "ARA", "PACA", "HDF"]}),
        d / "cities.parquet",
    )
    pq.write_table(pa.table({"x": pa.array(range(CROSS_ROWS), pa.int64())}), d / "cross.parquet")
    return d


def sales(d: Path) -> dict[str, tuple[list[Path], list[str]]]:
    return {"a": ([d / "sales-0.parquet", d / "sales-1.parquet"], ["col_0", "col_1"])}


def cross(d: Path) -> dict[str, tuple[list[Path], list[str]]]:
    return {"a": ([d / "cross.parquet"], ["col_0"]), "b": ([d / "cross.parquet"], ["col_0"])}


async def _wait_for(worker: SparkWorker, predicate, what: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = await worker.stats()
        if predicate(stats):
            return stats
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {stats}"
        await asyncio.sleep(0.05)


async def _log_says(w: SparkWorker, *lines: str, timeout: float = 180.0) -> str:
    """The worker's log once it holds one of ``lines`` (polled, with a deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        text = w.log_path.read_text(errors="replace") if w.log_path.exists() else ""
        if any(line in text for line in lines):
            return text
        assert time.monotonic() < deadline, f"timed out waiting for {lines} in the worker's log:\n{text[-2000:]}"
        await asyncio.sleep(0.1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worker(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SparkWorker]:
    """The module's worker, with the idle JIT warm-up on (as a daemon node runs it; the first test waits for its
    end, so later tests meet a worker no warm-up disturbs): one JVM for both, instead of one more JVM."""
    base = tmp_path_factory.mktemp("spark-worker")
    w = SparkWorker(base / "w.sock", log_path=base / "worker.log", jit_rows=200_000)
    await w.start()
    try:
        yield w
    finally:
        await w.stop()


async def test_idle_jit_warm_up_runs_then_serves(worker: SparkWorker, data: Path) -> None:
    """After the first warm-up, an idle worker runs the JIT warm-up to its end (first in file order: no job has
    come yet to stop it), so that the first real jobs find Spark's code compiled."""
    text = await _log_says(worker, "JIT warm-up took", "JIT warm-up stopped")
    assert "JIT warm-up took" in text, text[-2000:]
    result = await worker.run("SELECT count(*) AS n, sum(col_1) AS s FROM a", sales(data))
    assert result.table.to_pylist() == [{"n": 7, "s": 106}]


async def test_ping_and_socket_mode(worker: SparkWorker) -> None:
    pong = await worker.ping()
    assert pong["ok"] and pong["spark"] == "4.3.0" and pong["pid"] == worker.pid
    assert worker.alive()
    assert (worker.socket_path.stat().st_mode & 0o777) == 0o600
    assert pong["jvm_pid"] in _children(worker.pid)


async def test_group_by_over_two_parquet_files(worker: SparkWorker, data: Path) -> None:
    result = await worker.run(
        "SELECT col_0 AS city, count(*) AS n, sum(col_1) AS total FROM a GROUP BY col_0 ORDER BY col_0", sales(data)
    )
    expected: dict[str, list[int]] = defaultdict(list)
    for path in sales(data)["a"][0]:
        for row in pq.read_table(path).to_pylist():
            expected[row["city"]].append(row["amount"])
    assert result.table.to_pylist() == [{"city": c, "n": len(v), "total": sum(v)} for c, v in sorted(expected.items())]
    assert result.table.schema.field("city").type == pa.string()
    assert result.table.schema.field("n").type == pa.int64()
    assert result.table.schema.field("total").type == pa.int64()
    assert result.elapsed_ms > 0 and result.total_ms >= result.elapsed_ms


async def test_join_of_two_inputs(worker: SparkWorker, data: Path) -> None:
    inputs = {**sales(data), "b": ([data / "cities.parquet"], ["col_0", "col_1"])}
    result = await worker.run(
        "SELECT b.col_1, sum(a.col_1) FROM a JOIN b ON a.col_0 = b.col_0 GROUP BY b.col_1 ORDER BY b.col_1", inputs
    )
    assert result.table.num_columns == 2
    assert [tuple(r.values()) for r in result.table.to_pylist()] == [("ARA", 21), ("IDF", 42), ("PACA", 40)]


async def test_empty_result_keeps_its_schema(worker: SparkWorker, data: Path) -> None:
    result = await worker.run("SELECT col_0, col_1 * 2 FROM a WHERE col_1 > 1000", sales(data))
    assert result.table.num_rows == 0
    assert result.table.schema.types == [pa.string(), pa.int64()]


async def test_analysis_error_then_worker_still_works(worker: SparkWorker, data: Path) -> None:
    pid = worker.pid
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT nosuch FROM a", sales(data))
    e = err.value
    # The asker's query is what Spark refused: a 4xx, never a 500 (docs/queries.md, "Answers").
    assert isinstance(e, CairnError) and e.status == 422 and not isinstance(e, SparkWorkerDied)
    assert e.kind == "analysis" and e.condition == "UNRESOLVED_COLUMN.WITH_SUGGESTION"
    assert "`nosuch`" in e.message and "\n" not in e.message
    result = await worker.run("SELECT count(*) FROM a", sales(data))
    assert result.table.column(0).to_pylist() == [7]
    assert worker.pid == pid and worker.alive()


async def test_runtime_error_is_ansi(worker: SparkWorker, data: Path) -> None:
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT col_1 / 0 FROM a", sales(data))
    assert err.value.kind == "runtime" and err.value.condition == "DIVIDE_BY_ZERO"
    assert err.value.status == 422  # SQLSTATE 22012: the query's data, not a fault of the node


@pytest.mark.parametrize(
    "statement, blocked",
    [
        ("SELECT reflect('java.lang.System', 'exit', '0')", "`reflect`"),
        ("SELECT java_method('java.lang.System', 'exit', '0')", "`java_method`"),
        ("SELECT try_reflect('java.lang.System', 'exit', '0')", "`try_reflect`"),
        ("SELECT TRANSFORM(col_0) USING 'cat' FROM a", "TRANSFORM"),
    ],
)
async def test_restricted_mode_blocks(worker: SparkWorker, data: Path, statement: str, blocked: str) -> None:
    # Cairn never sends these (the canonicalizer refuses them first): this is the second wall.
    pid = worker.pid
    with pytest.raises(SparkError) as err:
        await worker.run(statement, sales(data))
    assert err.value.condition == "UNSUPPORTED_FEATURE.SQL_RESTRICTED_MODE", err.value.message
    assert blocked in err.value.message and "spark.sql.restrictedMode.enabled" in err.value.message
    assert worker.alive() and worker.pid == pid
    assert (await worker.ping())["ok"]
    assert (await worker.run("SELECT count(*) FROM a", sales(data))).table.column(0).to_pylist() == [7]


async def test_files_cannot_be_read_as_tables(worker: SparkWorker, data: Path) -> None:
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT * FROM text.`/etc/hostname`", {})
    assert err.value.condition == "TABLE_OR_VIEW_NOT_FOUND"
    # runSQLOnFiles is a session setting a statement can SET back on: the worker re-applies it per job.
    await worker.run("SET spark.sql.runSQLOnFiles=true", {})
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT * FROM text.`/etc/hostname`", {})
    assert err.value.condition == "TABLE_OR_VIEW_NOT_FOUND"


async def test_temp_views_are_dropped_after_each_job(worker: SparkWorker, data: Path) -> None:
    await worker.run("SELECT count(*) FROM a", sales(data))
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT count(*) FROM a", {})
    assert err.value.condition == "TABLE_OR_VIEW_NOT_FOUND"


async def test_bad_requests_are_refused(worker: SparkWorker, data: Path) -> None:
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT * FROM a", {"a": ([data / "sales-0.parquet"], ["col_0"])})
    assert err.value.kind == "analysis" and "2 columns" in err.value.message
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT * FROM a", {"a": ([data / "*.parquet"], ["col_0", "col_1"])})
    assert err.value.kind == "request" and "glob" in err.value.message
    with pytest.raises(SparkError) as err:
        await worker.run("SELECT * FROM a", {"a": ([data / "missing.parquet"], ["col_0", "col_1"])})
    assert err.value.kind == "analysis" and err.value.condition == "PATH_NOT_FOUND"


async def test_concurrent_runs_are_serialized(worker: SparkWorker, data: Path) -> None:
    results = await asyncio.gather(*(worker.run(f"SELECT {i} + count(*) FROM a", sales(data)) for i in range(4)))
    assert [r.table.column(0).to_pylist() for r in results] == [[7], [8], [9], [10]]


async def test_stats_count_jobs(worker: SparkWorker, data: Path) -> None:
    before = await worker.stats()
    await worker.run("SELECT count(*) FROM a", sales(data))
    with pytest.raises(SparkError):
        await worker.run("SELECT nosuch FROM a", sales(data))
    after = await worker.stats()
    assert after["jobs"] == before["jobs"] + 2
    assert after["succeeded"] == before["succeeded"] + 1
    assert after["failed"] == before["failed"] + 1
    assert after["jobs_sent"] == before["jobs_sent"] + 2 == worker.jobs_sent
    assert after["running"] is None and after["pid"] == worker.pid


async def test_timeout_cancels_the_spark_job(worker: SparkWorker, data: Path) -> None:
    """The call ends at its own timeout, the job unfinished (not answered when it ends), then cancelled."""
    before = await worker.stats()
    with pytest.raises(SparkTimeout) as err:
        await worker.run(CROSS, cross(data), timeout=2.0, job_id="slow-timeout")
    assert err.value.status == 504 and "slow-timeout did not finish within 2 s" in err.value.message
    at_timeout = await worker.stats()
    assert at_timeout["succeeded"] == before["succeeded"] and at_timeout["failed"] == before["failed"], at_timeout
    # The closed connection made the worker cancel the job group: it is free again in seconds.
    await _wait_for(
        worker,
        lambda s: s["running"] is None and s["cancelled"] == before["cancelled"] + 1,
        "the cancelled job to end",
        timeout=30,
    )
    assert (await worker.run("SELECT count(*) FROM a", sales(data))).table.column(0).to_pylist() == [7]
    assert worker.restarts == before["restarts"]


async def test_worker_killed_mid_query_is_restarted(worker: SparkWorker, data: Path) -> None:
    restarts = worker.restarts
    task = asyncio.create_task(worker.run(CROSS, cross(data), job_id="doomed"))
    stats = await _wait_for(worker, lambda s: s["running"] == "doomed", "the long job to start")
    old_pid, old_jvm = worker.pid, stats["jvm_pid"]
    assert old_pid is not None and old_jvm is not None
    deadline = time.monotonic() + 120
    while not (await worker.progress("doomed")).get("tasks_running"):  # Spark is in the join
        assert time.monotonic() < deadline and not task.done(), "the long job ran no Spark task"
        await asyncio.sleep(0.05)
    os.kill(old_pid, signal.SIGKILL)
    with pytest.raises(SparkWorkerDied) as err:
        await task
    assert err.value.status == 503 and "SIGKILL" in err.value.message and "restarted" in err.value.message

    result = await worker.run("SELECT count(*) FROM a", sales(data))  # waits for the restart
    assert result.table.column(0).to_pylist() == [7]
    assert worker.restarts == restarts + 1
    assert worker.pid != old_pid and worker.alive()
    assert _gone(old_pid) and _gone(old_jvm) and group_members(old_pid) == []


async def test_a_job_stops_the_jit_warm_up(tmp_path: Path, data: Path) -> None:
    """A job arriving while the JIT warm-up runs never waits for it: the warm-up is cancelled (or never starts, if
    the job came before it started), and the job's answer is right."""
    w = SparkWorker(tmp_path / "jit2.sock", jit_rows=4_000_000)
    try:
        await w.start()
        await _log_says(w, "warm-up query took")  # the JIT warm-up starts right after this line
        result = await w.run("SELECT count(*) AS n, sum(col_1) AS s FROM a", sales(data))
        assert result.table.to_pylist() == [{"n": 7, "s": 106}]
        text = await _log_says(w, "JIT warm-up took", "JIT warm-up stopped")
        assert "JIT warm-up took" not in text, text[-2000:]
        assert (await w.stats())["succeeded"] >= 1
    finally:
        await w.stop()


async def test_a_stop_does_not_wait_for_the_warm_up(tmp_path: Path) -> None:
    """A worker stopped while it warms up exits without finishing the warm-ups (a stop used to wait up to 10 s
    for a cold first query's planning: every short-lived worker paid it). A warm-up that ended before the stop is
    fine; none ends after it."""
    w = SparkWorker(tmp_path / "cold.sock", jit_rows=4_000_000)
    await w.start()
    await w.stop()
    text = w.log_path.read_text(errors="replace")
    assert "stopping" in text and "exited" in text, text[-2000:]
    after = text[text.index("stopping") :]
    assert "warm-up query took" not in after and "JIT warm-up took" not in after, after[-2000:]
    assert w.last_exit == 0 and w.pid is not None and _gone(w.pid)


async def test_forced_settings_cannot_be_overridden(tmp_path: Path) -> None:
    """Refused before Spark starts: the worker exits with its usage code before it even binds its socket."""
    w = SparkWorker(tmp_path / "bad.sock", conf={"spark.sql.restrictedMode.enabled": "false"})
    with pytest.raises(SparkStartError) as err:
        await w.start()
    assert "spark.sql.restrictedMode.enabled is fixed to true" in err.value.message
    assert w.last_exit == EXIT_USAGE and not w.socket_path.exists()
    assert not w.alive() and w.pid is not None and _gone(w.pid)
    await w.stop()


async def test_worker_exits_when_its_parent_dies(tmp_path: Path) -> None:
    # An intermediate parent spawns the worker, then is SIGKILLed once the worker serves.
    sock = tmp_path / "orphan.sock"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'spark_worker', '--socket', sys.argv[1], '--log', sys.argv[2],"
        " '--parent-pid', str(os.getpid()), '--no-warmup', '--conf', 'spark.local.dir=' + sys.argv[3]],"
        " start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n",
        str(sock),
        str(tmp_path / "orphan.log"),
        str(tmp_path / "local"),
        stdout=asyncio.subprocess.PIPE,
        env={
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "TMPDIR": str(tmp),
            "SPARK_SUBMIT_OPTS": f"-Djava.io.tmpdir={tmp}",
        },
    )
    assert parent.stdout is not None
    worker_pid = int(await parent.stdout.readline())
    try:
        probe = SparkWorker(sock)  # only to speak the protocol to the orphan-to-be
        deadline = time.monotonic() + 120
        while True:
            try:
                pong = await probe.ping()
                break
            except SparkError:
                assert time.monotonic() < deadline and not _gone(worker_pid), (tmp_path / "orphan.log").read_text()[
                    -2000:
                ]
                await asyncio.sleep(0.1)
        jvm = pong["jvm_pid"]
        assert jvm is not None and not _gone(jvm)
    finally:
        parent.kill()
        await parent.wait()
    deadline = time.monotonic() + 30
    # Polling the OS process table: there is no event to await.
    while group_members(worker_pid) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    assert group_members(worker_pid) == [] and _gone(worker_pid) and _gone(jvm)
    assert not sock.exists()
    assert "parent process" in (tmp_path / "orphan.log").read_text()


async def test_stop_leaves_no_process(worker: SparkWorker, data: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Last test of the module: it stops the shared worker (the fixture's stop is then a no-op) while a long job
    runs. The worker ends on SIGTERM (exit 0): a stop that waited for the job would have been escalated to a
    SIGKILL after ``stop_timeout``."""
    pid = worker.pid
    assert pid is not None
    task = asyncio.create_task(worker.run(CROSS, cross(data), job_id="interrupted"))
    stats = await _wait_for(worker, lambda s: s["running"] == "interrupted", "the long job to start")
    jvm = stats["jvm_pid"]
    children = _children(pid)
    assert jvm in children
    await worker.stop()
    assert "ignored SIGTERM" not in caplog.text
    with pytest.raises(SparkError) as err:
        await task
    assert "stop" in err.value.message and not isinstance(err.value, SparkWorkerDied)
    assert not worker.alive()
    assert worker.last_exit == 0  # SIGTERM: a clean exit
    for p in [pid, *children]:
        assert _gone(p), f"process {p} survived stop()"
    assert group_members(pid) == []
    assert not worker.socket_path.exists()
    with pytest.raises(SparkError):
        await worker.run("SELECT 1", {})
