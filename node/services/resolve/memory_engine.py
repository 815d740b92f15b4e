"""The engine's in-memory twin (``node.domain.ports.sql_engine.SqlEngine``), for tests and simulations: no JVM, no
process.

``MemoryEngine`` reads each input's slices with pyarrow, names their columns as the request does, refuses what the
worker refuses before Spark runs (a relative or glob path, a column count that does not match, a table that is not
an input, a column no input has: the same kinds, conditions and SQLSTATEs), and then asks ``answer(statement,
tables)`` for the result. The default ``answer`` computes the subset of statements the node itself evaluates as
Spark would (``node.domain.sql.arrow_eval``: projections, integer filters, GROUP BY with SUM/MIN/MAX/COUNT over one
input
``a``); a test or a simulation gives its own for anything else (a table per statement, or an engine of its own).
What ``answer`` cannot compute (it returns None) is a ``SparkError`` of kind "worker". It runs in a thread, so a
``timeout`` or a cancellation ends the ``run`` at once, as the real worker's closed connection does.

Also as the worker: at most ``max_jobs`` runs at once and ``max_queued`` waiting (``SparkQueueFull`` past that), the
result one chunk per column, ``stats`` counting jobs by outcome. No progress is sampled (``on_progress`` is never
called: the twin's jobs end before the worker's first sample would). ``tests/contract/test_sql_engine.py`` runs one
suite against the twin and a real worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from node.domain.ports.sql_engine import Inputs, RunResult, SqlEngine
from node.domain.sql import arrow_eval
from node.services.resolve.spark import REMOTE_SCHEMES
from node.support.errors import SparkError, SparkQueueFull, SparkTimeout
from node.support.tally import Timings

Answer = Callable[[str, Mapping[str, pa.Table]], pa.Table | None]
GLOB_CHARS = frozenset("*?[]{}")
PROFILE: Mapping[str, Any] = MappingProxyType({"engine": "memory", "versions": {"pyarrow": pa.__version__}})
_ids = itertools.count(1)


def arrow_answer(statement: str, tables: Mapping[str, pa.Table]) -> pa.Table | None:
    """The default ``answer``: ``node.domain.sql.arrow_eval`` over the one input ``a`` (None outside its subset)."""
    return arrow_eval.evaluate(statement, tables["a"]) if list(tables) == ["a"] else None


class MemoryEngine:
    def __init__(
        self,
        answer: Answer = arrow_answer,
        *,
        profile: Mapping[str, Any] = PROFILE,
        max_jobs: int = 2,
        max_queued: int = 64,
        stop_timeout: float = 15.0,
    ) -> None:
        self.answer = answer
        self._profile = MappingProxyType(dict(profile))
        self.max_jobs, self.max_queued, self.stop_timeout = max_jobs, max_queued, stop_timeout
        self.waiting = 0
        self.jobs_sent = 0
        self.restarts = 0
        self.job_times = Timings()
        self._counters: Counter[str] = Counter(jobs=0, succeeded=0, failed=0, cancelled=0)
        self._running: list[str] = []
        self._started = False
        self._stopping = asyncio.Event()
        self._slots: asyncio.Semaphore | None = None

    @property
    def profile(self) -> Mapping[str, Any]:
        return self._profile if self._started else MappingProxyType({})

    @property
    def deployment(self) -> dict[str, str]:
        return {}

    @property
    def pid(self) -> int | None:
        return os.getpid() if self.alive() else None

    def alive(self) -> bool:
        return self._started and not self._stopping.is_set()

    async def start(self) -> None:
        self._started = True
        self._stopping.clear()

    async def stop(self) -> None:
        self._stopping.set()

    async def ping(self) -> dict[str, Any]:
        self._answering()
        return {"ok": True, "engine": "memory", "jobs": self._counters["jobs"], "pid": self.pid}

    async def stats(self) -> dict[str, Any]:
        self._answering()
        running = self._running[0] if self._running else None
        return {**self._counters, "running": running, "restarts": self.restarts, "jobs_sent": self.jobs_sent}

    async def progress(self, job: str) -> dict[str, Any]:
        self._answering()
        return {"ok": True, "job": job, "running": job in self._running}

    def _answering(self) -> None:
        if not self.alive():
            raise SparkError("the Spark worker does not answer: it is not running", kind="worker")

    async def run(
        self,
        statement: str,
        inputs: Inputs,
        *,
        timeout: float | None = None,
        job_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunResult:
        t0 = time.perf_counter()
        try:
            result = await self._run(statement, inputs, timeout, job_id or f"memory-{next(_ids)}")
        except SparkError as e:
            self.job_times.observe(type(e).__name__ if type(e) is not SparkError else e.kind, time.perf_counter() - t0)
            raise
        self.job_times.observe("ok", time.perf_counter() - t0)
        return result

    async def _run(self, statement: str, inputs: Inputs, timeout: float | None, job: str) -> RunResult:
        if self._stopping.is_set() or not self._started:
            raise SparkError(
                f"the Spark worker is {'stopped' if self._stopping.is_set() else 'not started'}", kind="worker"
            )
        async with self._slot():
            self.jobs_sent += 1
            self._counters["jobs"] += 1
            self._running.append(job)
            t0 = time.perf_counter()
            try:
                table = await self._compute(statement, inputs, timeout, job)
            except SparkError as e:
                self._counters["cancelled" if isinstance(e, SparkTimeout) or e.kind == "cancelled" else "failed"] += 1
                raise
            except asyncio.CancelledError:
                self._counters["cancelled"] += 1
                raise
            finally:
                self._running.remove(job)
            self._counters["succeeded"] += 1
            ms = (time.perf_counter() - t0) * 1000
            return RunResult(table=table, elapsed_ms=ms, total_ms=ms, job=job, profile=self.profile)

    async def _compute(self, statement: str, inputs: Inputs, timeout: float | None, job: str) -> pa.Table:
        """The answer, computed in a thread; a timeout or a stop ends the wait at once (the thread is left to end)."""
        compute = asyncio.ensure_future(asyncio.to_thread(self._answer, statement, inputs))
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            async with asyncio.timeout(timeout):
                await asyncio.wait({compute, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            raise SparkTimeout(f"the Spark job {job} did not finish within {timeout:g} s; it was cancelled") from None
        finally:
            stopped.cancel()
            if not compute.done():
                compute.cancel()
        if not compute.done():
            raise SparkError(f"the Spark worker was stopped during job {job}", kind="cancelled")
        return compute.result()

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_jobs)
        if self._slots.locked() and self.waiting >= self.max_queued:
            raise SparkQueueFull(
                f"{self.waiting} queries already wait for one of the {self.max_jobs} Spark slots "
                f"(spark.max_queued_jobs {self.max_queued}): try again when one ends"
            )
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._slots.release()

    def _answer(self, statement: str, inputs: Inputs) -> pa.Table:
        tables = {name: _read_input(name, paths, columns) for name, (paths, columns) in inputs.items()}
        _check_references(statement, tables)
        try:
            table = self.answer(statement, tables)
        except SparkError:
            raise
        except Exception as e:  # noqa: BLE001  a given answer's failure reaches the asker as the job's
            raise SparkError(f"the in-memory engine failed: {e}", kind="runtime") from None
        if table is None:
            raise SparkError(f"the in-memory engine cannot compute {statement!r}", kind="worker")
        return table.combine_chunks()


def _read_input(name: str, paths: Sequence[Path | str], columns: list[str]) -> pa.Table:
    """An input as the worker reads it: its slices one after another, columns renamed in file order."""
    parts = []
    for p in paths:
        text = str(p)
        if text.startswith(REMOTE_SCHEMES):
            raise SparkError(f"run: input {name!r}: the in-memory engine reads local files only", kind="request")
        if not text.startswith("/") or GLOB_CHARS.intersection(text):
            raise SparkError(
                f"run: input {name!r}: path {text!r} must be absolute (or hdfs://, s3a://) with no glob characters",
                kind="request",
            )
        try:
            parts.append(pq.read_table(text))
        except FileNotFoundError:
            raise SparkError(
                f"[PATH_NOT_FOUND] Path does not exist: file:{text}.",
                kind="analysis",
                condition="PATH_NOT_FOUND",
                sqlstate="42K03",
            ) from None
    table = pa.concat_tables(parts)
    if table.num_columns != len(columns):
        raise SparkError(
            f"input {name}: its Parquet files have {table.num_columns} columns, the request names {len(columns)}",
            kind="analysis",
        )
    return table.rename_columns(columns)


def _check_references(statement: str, tables: Mapping[str, pa.Table]) -> None:
    """Spark's analysis errors for a table that is not an input and a column no input or alias has."""
    try:
        tree = sqlglot.parse_one(statement, read="spark")
    except SqlglotError as e:
        raise SparkError(
            f"[PARSE_SYNTAX_ERROR] {e}", kind="analysis", condition="PARSE_SYNTAX_ERROR", sqlstate="42601"
        ) from None
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = {n.lower() for n in tables}
    for t in tree.find_all(exp.Table):
        if t.name.lower() not in names | ctes:
            raise SparkError(
                f"[TABLE_OR_VIEW_NOT_FOUND] The table or view `{t.name}` cannot be found.",
                kind="analysis",
                condition="TABLE_OR_VIEW_NOT_FOUND",
                sqlstate="42P01",
            )
    known = {c.lower() for t in tables.values() for c in t.column_names}
    known |= {a.alias.lower() for a in tree.find_all(exp.Alias)}
    known |= {c.name.lower() for ta in tree.find_all(exp.TableAlias) for c in ta.columns}
    for col in tree.find_all(exp.Column):
        if col.name.lower() not in known:
            raise SparkError(
                f"[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name "
                f"`{col.name}` cannot be resolved.",
                kind="analysis",
                condition="UNRESOLVED_COLUMN.WITH_SUGGESTION",
                sqlstate="42703",
            )


def _conforms(engine: MemoryEngine) -> SqlEngine:
    """Checked by mypy: the twin is a SqlEngine (the worker's check: node/services/resolve/spark.py)."""
    return engine
