"""SqlEngine contract (node.domain.ports.sql_engine): a real Spark worker and the in-memory twin
(node.services.resolve.memory_engine).

One warm worker for the module (tests/fixtures/spark.py: Spark takes seconds to start), few cases on it. The twin is
given an ``answer`` that knows the suite's slow statement (it waits until released, as a long Spark job runs) and
computes the others as it does by default (node.domain.sql.arrow_eval)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from node.domain.ports.sql_engine import Inputs, SqlEngine
from node.services.resolve.memory_engine import MemoryEngine, arrow_answer
from node.services.resolve.spark import SparkWorker
from node.support.errors import CairnError, SparkError, SparkQueueFull, SparkTimeout

pytestmark = pytest.mark.asyncio(loop_scope="module")

# A non-equi self join over 200 k rows: minutes of work for Spark on 2 cores (tests/integration/test_spark_worker.py).
SLOW = "SELECT count(*) FROM a JOIN b ON a.col_0 < b.col_0"
GROUPED = "SELECT a.col_0 AS _0, SUM(a.col_1) AS _1 FROM a GROUP BY a.col_0"  # as the node writes statements


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("engine-data")
    pq.write_table(
        pa.table({"city": ["paris", "lyon", "paris", "nice"], "amount": pa.array([10, 20, 30, 40])}), d / "s0.parquet"
    )
    pq.write_table(pa.table({"city": ["lyon", "paris", "brest"], "amount": pa.array([1, 2, 3])}), d / "s1.parquet")
    pq.write_table(pa.table({"x": pa.array(range(200_000), pa.int64())}), d / "big.parquet")
    return d


def sales(d: Path) -> Inputs:
    return {"a": ([d / "s0.parquet", d / "s1.parquet"], ["col_0", "col_1"])}


def big(d: Path) -> Inputs:
    return {"a": ([d / "big.parquet"], ["col_0"]), "b": ([d / "big.parquet"], ["col_0"])}


class SlowAnswers:
    """The twin's ``answer``: ``SLOW`` waits until released (or 60 s), anything else as the twin computes it."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, statement: str, tables: Mapping[str, pa.Table]) -> pa.Table | None:
        if statement == SLOW:
            self.release.wait(60)
            return pa.table({"count(1)": pa.array([0], pa.int64())})
        return arrow_answer(statement, tables)


@pytest.fixture(scope="module")
def slow_answers() -> Iterator[SlowAnswers]:
    answers = SlowAnswers()
    yield answers
    answers.release.set()  # no twin thread outlives the module


@pytest.fixture(scope="module", params=["spark", "memory"])
def engine(request: pytest.FixtureRequest, slow_answers: SlowAnswers) -> SqlEngine:
    """The module's worker, then a started twin."""
    if request.param == "spark":
        worker: SparkWorker = request.getfixturevalue("worker")
        return worker
    twin = MemoryEngine(slow_answers)
    asyncio.run(twin.start())  # start() awaits nothing: no loop is bound by it
    return twin


async def _until(what: str, check: Callable[[], Awaitable[bool]], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _idle(engine: SqlEngine) -> bool:
    return (await engine.stats())["running"] is None


async def test_a_statement_over_slices_gives_spark_s_table(engine: SqlEngine, data: Path) -> None:
    result = await engine.run(GROUPED, sales(data))
    table = result.table
    assert table.schema.types == [pa.string(), pa.int64()]
    assert sorted(zip(*(c.to_pylist() for c in table.columns))) == [
        ("brest", 3),
        ("lyon", 21),
        ("nice", 40),
        ("paris", 42),
    ]
    assert result.job and result.elapsed_ms >= 0 and result.profile == engine.profile and engine.profile


async def test_a_large_result_comes_whole_one_chunk_per_column(engine: SqlEngine, data: Path) -> None:
    inputs = {"a": big(data)["a"]}
    table = (await engine.run("SELECT a.col_0 AS _0 FROM a", inputs)).table
    assert table.num_rows == 200_000 and all(c.num_chunks == 1 for c in table.columns)
    assert sorted(table.column(0).to_pylist()) == list(range(200_000))


@pytest.mark.parametrize(
    ("statement", "condition", "sqlstate"),
    [
        ("SELECT nosuch FROM a", "UNRESOLVED_COLUMN.WITH_SUGGESTION", "42703"),
        ("SELECT col_0 FROM elsewhere", "TABLE_OR_VIEW_NOT_FOUND", "42P01"),
    ],
)
async def test_what_spark_cannot_resolve_is_the_askers_to_fix(
    engine: SqlEngine, data: Path, statement: str, condition: str, sqlstate: str
) -> None:
    with pytest.raises(SparkError) as err:
        await engine.run(statement, sales(data))
    e = err.value
    assert isinstance(e, CairnError) and e.status == 422 and e.kind == "analysis"
    assert (e.condition, e.sqlstate) == (condition, sqlstate)
    assert "\n" not in e.message
    assert (await engine.run(GROUPED, sales(data))).table.num_rows == 4  # and the engine still answers


async def test_inputs_the_worker_refuses(engine: SqlEngine, data: Path) -> None:
    with pytest.raises(SparkError) as err:
        await engine.run("SELECT * FROM a", {"a": ([data / "s0.parquet"], ["col_0"])})
    assert err.value.kind == "analysis" and "2 columns" in err.value.message
    with pytest.raises(SparkError) as err:
        await engine.run("SELECT * FROM a", {"a": ([data / "*.parquet"], ["col_0", "col_1"])})
    assert err.value.kind == "request" and "glob" in err.value.message
    with pytest.raises(SparkError) as err:
        await engine.run("SELECT * FROM a", {"a": ([data / "missing.parquet"], ["col_0", "col_1"])})
    assert err.value.kind == "analysis" and err.value.condition == "PATH_NOT_FOUND"


async def test_a_timeout_cancels_the_job(engine: SqlEngine, data: Path, slow_answers: SlowAnswers) -> None:
    slow_answers.release.clear()
    before = await engine.stats()
    with pytest.raises(SparkTimeout) as err:
        await engine.run(SLOW, big(data), timeout=2.0, job_id=f"slow-{id(engine)}")
    assert err.value.status == 504 and "cancelled" in err.value.message
    await _until("the cancelled job to end", lambda: _idle(engine))
    after = await engine.stats()
    assert after["cancelled"] == before["cancelled"] + 1 and after["jobs_sent"] == before["jobs_sent"] + 1
    slow_answers.release.set()
    assert (await engine.run(GROUPED, sales(data))).table.num_rows == 4


async def test_a_cancelled_run_cancels_its_job(engine: SqlEngine, data: Path, slow_answers: SlowAnswers) -> None:
    slow_answers.release.clear()
    before = await engine.stats()
    job = f"cancel-{id(engine)}"
    task = asyncio.ensure_future(engine.run(SLOW, big(data), job_id=job))

    async def running() -> bool:
        return (await engine.progress(job))["running"] is True

    await _until("the job to run", running)
    assert (await engine.stats())["running"] == job
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def counted() -> bool:
        s = await engine.stats()
        return s["running"] is None and s["cancelled"] == before["cancelled"] + 1

    await _until("the cancelled job to be counted", counted)
    slow_answers.release.set()
    assert (await engine.progress(job))["running"] is False
    assert (await engine.run(GROUPED, sales(data))).table.num_rows == 4


async def test_runs_past_the_queue_are_refused_at_once(
    engine: SqlEngine, data: Path, slow_answers: SlowAnswers
) -> None:
    held: Any = engine  # the queue's bounds are each engine's settings, not the port's
    queued = held.max_queued
    held.max_queued = 0
    slow_answers.release.clear()
    jobs = [f"slot{i}-{id(engine)}" for i in range(held.max_jobs)]
    slow = [asyncio.ensure_future(engine.run(SLOW, big(data), timeout=5.0, job_id=j)) for j in jobs]
    try:

        async def all_running() -> bool:
            return all([(await engine.progress(j))["running"] is True for j in jobs])

        await _until("every slot to be taken", all_running)
        with pytest.raises(SparkQueueFull):
            await engine.run(GROUPED, sales(data))
        for s in slow:
            with pytest.raises(SparkTimeout):
                await s
    finally:
        held.max_queued = queued
        slow_answers.release.set()
    await _until("the slow jobs to end", lambda: _idle(engine))


async def test_stats_count_jobs_by_outcome(engine: SqlEngine, data: Path) -> None:
    before = await engine.stats()
    await engine.run(GROUPED, sales(data))
    with pytest.raises(SparkError):
        await engine.run("SELECT nosuch FROM a", sales(data))
    after = await engine.stats()
    for key, more in (("jobs", 2), ("succeeded", 1), ("failed", 1), ("jobs_sent", 2)):
        assert after[key] == before[key] + more, key
    assert after["jobs_sent"] == engine.jobs_sent and after["running"] is None
    assert (await engine.ping())["ok"] is True and engine.alive()
    assert engine.job_times.counts["ok"] >= 1 and engine.job_times.counts["analysis"] >= 1


@pytest.mark.parametrize("kind", ["spark", "memory"])
async def test_an_engine_not_started_or_stopped_runs_nothing(kind: str, tmp_path: Path, data: Path) -> None:
    """Neither needs a JVM: a worker never started, then stopped."""
    fresh: SqlEngine = SparkWorker(tmp_path / "w.sock") if kind == "spark" else MemoryEngine()
    assert not fresh.alive() and not fresh.profile and fresh.deployment == {}
    with pytest.raises(SparkError, match="not started") as err:
        await fresh.run(GROUPED, sales(data))
    assert err.value.kind == "worker"
    await fresh.stop()
    with pytest.raises(SparkError, match="stopped") as err:
        await fresh.run(GROUPED, sales(data))
    assert err.value.kind == "worker"
    await fresh.stop()  # idempotent
