"""The warm-ups job slot 0 runs before its first job: a small query at start, then (``--jit-warmup-rows``) a
larger one twice while no job waits. A real job stops them at once (:class:`Warming`): it never waits for one."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from node.support.errors import one_line
from spark_worker.jobs import Job

log = logging.getLogger("spark_worker")

Execute = Callable[[Job], Any]

# Filter, group, aggregate and order over the common column types: the plan shape of most queries. After the
# small warm-up, the first such query on real data still took 2x a warm one (JIT of the Parquet readers,
# aggregation and sort, code generation); after these two it took as long as a warm one.
JIT_SQL = (
    "SELECT col_2, col_0 % 97 AS b, COUNT(*) AS n, SUM(col_1) AS s, MIN(col_0) AS m FROM a "
    "WHERE col_1 > {c} GROUP BY col_2, col_0 % 97 ORDER BY col_2, b"
)


class Warming:
    """The warm-ups' state, shared by slot 0's thread (which runs them) and the connection threads (whose real job
    stops them)."""

    def __init__(self, jit_rows: int) -> None:
        self.jit_rows = jit_rows  # rows of the idle JIT warm-up (0: none)
        self.job: Job | None = None  # the idle warm-up's job while it runs: a real job cancels it
        self.job_came = threading.Event()  # a real job was asked for: the idle warm-up stops, or never starts
        self.under_way = threading.Event()  # slot 0 is in its warm-ups: a stop need not wait for them

    def stop(self, cancel_spark: Callable[[Job], None]) -> None:
        """A real job came: the idle warm-up gives the JVM back at once (a real job never waits for it)."""
        self.job_came.set()
        warming = self.job
        if warming is not None:
            warming.cancelled.set()
            try:
                cancel_spark(warming)
            except Exception as e:  # noqa: BLE001
                log.warning("could not stop the warm-up: %s", one_line(str(e), first=True))


def run_warm_ups(execute: Execute, warming: Warming, stopping: threading.Event) -> None:
    """Slot 0's warm-ups (its thread, before its first job): a failed one only costs the first job time."""
    warming.under_way.set()
    t0 = time.perf_counter()
    try:
        warm_up(execute)
        log.info("warm-up query took %.0f ms", (time.perf_counter() - t0) * 1000)
    except Exception as e:  # noqa: BLE001 - a failed warm-up only costs the first job time
        if not stopping.is_set():
            log.warning("warm-up query failed: %s", one_line(str(e), first=True))
    if warming.jit_rows and not stopping.is_set():
        jit_warm_up(execute, warming)
    warming.under_way.clear()


def warm_up(execute: Execute) -> None:
    """A small GROUP BY over Parquet, so that the first real job does not pay for class loading,
    code generation and the first shuffle (measured: a first 2 M-row GROUP BY takes 5-8 s on a
    cold session, 0.9-1.1 s after this 3-4 s warm-up; a join and ORDER BY in the warm-up cost
    more than they save)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="cairn-warmup-") as tmp:
        path = os.path.join(tmp, "warmup.parquet")
        n = 1000
        pq.write_table(pa.table({"k": [i % 7 for i in range(n)], "v": [i * 0.5 for i in range(n)]}), path)
        execute(
            Job(
                "warmup",
                "SELECT col_0, count(*), sum(col_1) FROM a GROUP BY col_0",
                {"a": ([path], ["col_0", "col_1"])},
            )
        )


def jit_warm_up(execute: Execute, warming: Warming) -> None:
    """Run ``JIT_SQL`` twice over ``warming.jit_rows`` generated rows while no job waits; a job that arrives
    cancels it (:meth:`Warming.stop`)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cairn-jit-") as tmp:
        paths = _jit_files(tmp, warming.jit_rows)
        for i, c in enumerate((0.25, 0.5)):
            job = Job(f"warmup-jit-{i}", JIT_SQL.format(c=c), {"a": (paths, ["col_0", "col_1", "col_2"])})
            warming.job = job
            if warming.job_came.is_set():  # checked after ``job`` is set: a later job cancels the job itself
                warming.job = None
                log.info("JIT warm-up stopped after %.0f ms: a job came", (time.perf_counter() - t0) * 1000)
                return
            try:
                execute(job)
            except Exception as e:  # noqa: BLE001 - stopped by a job, or failed: either way only time is lost
                why = "a job came" if job.cancelled.is_set() else one_line(str(e), first=True)
                log.info("JIT warm-up stopped after %.0f ms: %s", (time.perf_counter() - t0) * 1000, why)
                return
            finally:
                warming.job = None
    log.info("JIT warm-up took %.0f ms", (time.perf_counter() - t0) * 1000)


def _jit_files(tmp: str, rows: int) -> list[str]:
    """``rows`` generated rows in two files (the multi-file scan of a dataset's slices)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    paths = []
    for part in range(2):  # two files: the multi-file scan of a dataset's slices
        ids = pa.array(range(part, rows, 2), pa.int64())
        v = pc.divide(pc.cast(pc.bit_wise_and(pc.multiply(ids, 2654435761), 0xFFFFF), pa.float64()), 1048576.0)
        s = pc.cast(pc.bit_wise_and(ids, 7), pa.string())
        paths.append(os.path.join(tmp, f"jit-{part}.parquet"))
        pq.write_table(pa.table({"i": ids, "v": v, "s": s}), paths[-1], compression="zstd")
    return paths
