"""The node's handle on its co-located Spark worker (``python -m spark_worker``, see docs/spark.md).

The worker is a separate process holding one warm SparkSession (its start, stop and restarts:
node/services/resolve/spark_process.py); the node talks to it over a Unix domain socket (mode 0600) with the
frames of ``spark_worker.protocol``, one connection per call (node/services/resolve/spark_wire.py). Closing a
connection while a job runs makes the worker cancel that job, so a timed-out or cancelled ``run``
does not leave Spark busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from node.domain.ports.sql_engine import RunResult, SqlEngine
from node.services.resolve.spark_process import WorkerProcess, describe_exit
from node.services.resolve.spark_process import group_members as group_members  # where callers have found it
from node.services.resolve.spark_wire import exchange
from node.support.errors import (
    InsufficientStorage,
    SparkError,
    SparkQueueFull,
    SparkRefused,
    SparkTimeout,
    SparkWorkerDied,
    one_line,
)
from node.support.tally import Timings
from spark_worker.protocol import ProtocolError

log = logging.getLogger(__name__)  # "node.services.resolve.spark", as spark_process's

_EMPTY: Mapping[str, str] = MappingProxyType({})
_NO_LIMITS: Mapping[str, int] = MappingProxyType({})
_job_ids = itertools.count(1)
REMOTE_SCHEMES = ("hdfs://", "s3a://")  # spark.staging locations Spark reads under their own scheme
PROGRESS_EVERY_S = 0.5
_PROGRESS_KEYS = ("running", "stages", "stages_done", "tasks", "tasks_done", "tasks_running")


class SparkWorker(WorkerProcess):
    """The node's side of one worker process. ``mode`` (docs/spark.md "Modes"): ``local``, ``standalone``
    (``master`` a cluster's) or ``connect`` (``remote`` an ``sc://`` server, ``token`` its token, handed over in the
    environment and never shown)."""

    def __init__(
        self,
        socket_path: Path,
        *,
        master: str = "local[2]",
        conf: Mapping[str, str] = _EMPTY,
        log_path: Path | None = None,
        python: str = sys.executable,
        start_timeout: float = 120.0,
        stop_timeout: float = 15.0,
        warmup: bool = True,
        max_jobs: int = 2,
        max_queued: int = 64,
        limits: Mapping[str, int] = _NO_LIMITS,
        stall_timeout: float = 0.0,
        jit_rows: int = 0,
        mode: str = "local",
        remote: str = "",
        token: str = "",
        scratch: Path | None = None,
    ) -> None:
        """``conf``: extra Spark settings (``spark.driver.memory``, cluster ``spark.driver.host``…).
        ``max_jobs``: jobs the worker runs at once (and this side lets in flight); ``limits``: the
        budgets sent with every run (``rows``, ``bytes``, ``plan_bytes``; spark_worker/budget.py);
        ``stall_timeout``: the worker kills (and so restarts) a JVM that uses no CPU this long while a job
        runs (0: never). ``max_queued``: calls that may wait for a slot; more are refused (SparkQueueFull).

        Next to ``socket_path`` the worker gets ``<stem>.log`` (unless ``log_path``) and a scratch directory
        ``<stem>-scratch/`` (unless ``scratch``; its cwd and ``spark.local.dir``), emptied at every (re)start and stop.
        """
        super().__init__(
            socket_path,
            master=master,
            conf=conf,
            log_path=log_path,
            python=python,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
            warmup=warmup,
            max_jobs=max_jobs,
            stall_timeout=stall_timeout,
            jit_rows=jit_rows,
            mode=mode,
            remote=remote,
            token=token,
            scratch=scratch,
        )
        self.max_queued = max_queued
        self.waiting = 0  # calls waiting for a slot
        self.job_times = Timings()  # each run's wall time by outcome: ok, or the SparkError's kind (/metrics)
        self.limits = dict(limits)
        self.jobs_sent = 0
        self._slots: asyncio.Semaphore | None = None  # jobs in flight, at most max_jobs

    def _get_slots(self) -> asyncio.Semaphore:
        if self._slots is None:  # made lazily: bound to the loop of the first call
            self._slots = asyncio.Semaphore(self.max_jobs)
        return self._slots

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the ``max_jobs`` slots; at most ``max_queued`` callers wait for one, more are refused at once."""
        slots = self._get_slots()
        if slots.locked() and self.waiting >= self.max_queued:
            raise SparkQueueFull(
                f"{self.waiting} queries already wait for one of the {self.max_jobs} Spark slots "
                f"(spark.max_queued_jobs {self.max_queued}): try again when one ends"
            )
        self.waiting += 1
        try:
            await slots.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            slots.release()

    # --- calls -----------------------------------------------------------------------------

    async def ping(self) -> dict[str, Any]:
        try:
            header, _ = await exchange(self.socket_path, {"op": "ping"})
        except (OSError, ProtocolError) as e:
            raise SparkError(f"the Spark worker does not answer: {e or 'connection closed'}", kind="worker") from None
        return header

    async def stats(self) -> dict[str, Any]:
        """The worker's counters (jobs, succeeded, failed, cancelled, running…) plus ``restarts``
        and ``jobs_sent`` from this side. Answered at once, even while a job runs."""
        try:
            header, _ = await exchange(self.socket_path, {"op": "stats"})
        except (OSError, ProtocolError) as e:
            raise SparkError(f"the Spark worker does not answer: {e or 'connection closed'}", kind="worker") from None
        header.pop("ok", None)
        return {**header, "restarts": self.restarts, "jobs_sent": self.jobs_sent}

    async def progress(self, job: str) -> dict[str, Any]:
        """Spark's stages and tasks so far for ``job`` (``running`` False once it ended or before it started)."""
        try:
            header, _ = await exchange(self.socket_path, {"op": "progress", "job": job})
        except (OSError, ProtocolError) as e:
            raise SparkError(f"the Spark worker does not answer: {e or 'connection closed'}", kind="worker") from None
        return header

    async def _report_progress(self, job: str, on_progress: Callable[[dict[str, Any]], None]) -> None:
        """Sample the job's progress twice a second and pass on each change, until cancelled (the job ended)."""
        last: dict[str, Any] = {}
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)  # a sampling period, not a wait for an event
            try:
                async with asyncio.timeout(2.0):
                    now = await self.progress(job)
            except (SparkError, TimeoutError):
                continue  # best effort: a busy JVM answers the next sample
            now = {k: v for k, v in now.items() if k in _PROGRESS_KEYS}
            if now.get("running") is True and now != last:
                last = now
                on_progress({k: v for k, v in now.items() if k != "running"})

    async def run(
        self,
        statement: str,
        inputs: Mapping[str, tuple[Sequence[Path | str], list[str]]],
        *,
        timeout: float | None = None,
        job_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunResult:
        """Run ``statement`` with each input registered as a temp view over its Parquet files.

        ``inputs``: view name → (Parquet files, column names in file order). Up to ``max_jobs``
        calls run at once; more wait here. The budgets in ``limits`` go with the request.
        Raises SparkError (Spark refused or failed the query), SparkTimeout, SparkWorkerDied
        (the worker died during the job: it is restarted in the background) or SparkStartError.
        ``on_progress`` gets Spark's stages and tasks (``stages``, ``stages_done``, ``tasks``, ``tasks_done``,
        ``tasks_running``) as they change while the job runs.
        """
        t0 = time.perf_counter()
        try:
            result = await self._run(statement, inputs, timeout, job_id, on_progress)
        except SparkError as e:
            self.job_times.observe(type(e).__name__ if type(e) is not SparkError else e.kind, time.perf_counter() - t0)
            raise
        self.job_times.observe("ok", time.perf_counter() - t0)
        return result

    async def _run(
        self,
        statement: str,
        inputs: Mapping[str, tuple[Sequence[Path | str], list[str]]],
        timeout: float | None,
        job_id: str | None,
        on_progress: Callable[[dict[str, Any]], None] | None,
    ) -> RunResult:
        job = job_id or f"{os.getpid()}-{next(_job_ids)}"
        request = _run_request(job, statement, inputs)
        if self.limits:
            request["limits"] = self.limits
        async with self._slot():
            proc = await self._ensure_running()
            sent = False

            def mark_sent() -> None:
                nonlocal sent
                sent = True
                self.jobs_sent += 1

            t0 = time.perf_counter()
            watch = asyncio.ensure_future(self._report_progress(job, on_progress)) if on_progress else None
            batches: list[pa.RecordBatch] = []
            try:
                async with asyncio.timeout(timeout):
                    header, _ = await exchange(self.socket_path, request, on_sent=mark_sent, batches=batches)
            except TimeoutError:
                # Our closed connection tells the worker to cancel the job.
                raise SparkTimeout(
                    f"the Spark job {job} did not finish within {timeout:g} s; it was cancelled"
                ) from None
            except (OSError, ProtocolError) as e:
                raise await self._connection_lost(proc, job, sent, e) from None
            finally:
                if watch is not None:
                    watch.cancel()
            if header.get("kind") == "died":
                raise await self._jvm_died(proc, header)
            try:
                table = _answer_table(header, batches, job)
            except SparkError as e:  # Spark names the files it failed on: the node's cache, never shown
                e.args = (_hide_paths(e.message, inputs), *e.args[1:])
                raise
            return RunResult(
                table=table,
                elapsed_ms=float(header.get("elapsed_ms", 0.0)),
                total_ms=(time.perf_counter() - t0) * 1000,
                job=job,
                profile=self.profile,
            )

    async def _jvm_died(self, proc: subprocess.Popen[bytes], header: dict[str, Any]) -> SparkError:
        """The worker's JVM died during the job (an OOM ends it): the worker exits; wait, restart it."""
        if await self._wait_exit(proc, self.stop_timeout):
            self.last_exit = proc.returncode
        self._schedule_restart()  # _restart kills what is left of the group first
        return SparkWorkerDied(str(header.get("error") or "the Spark JVM died; the worker restarts"))

    async def _connection_lost(
        self, proc: subprocess.Popen[bytes], job: str, sent: bool, e: BaseException
    ) -> SparkError:
        """Why the connection broke during `job`: a stop, the worker's death (it is restarted), or the socket."""
        if self._stopping:
            return SparkError(f"the Spark worker was stopped during job {job}", kind="cancelled")
        if await self._wait_exit(proc, 3.0):
            self.last_exit = proc.returncode
            self._schedule_restart()
            when = "during" if sent else "before"
            return SparkWorkerDied(
                f"the Spark worker (pid {proc.pid}) died {when} job {job} "
                f"({describe_exit(proc.returncode)}); it is being restarted"
            )
        return SparkError(
            f"lost the connection to the Spark worker during job {job}: {one_line(str(e)) or type(e).__name__}",
            kind="worker",
        )


def _hide_paths(message: str, inputs: Mapping[str, tuple[Sequence[Path | str], list[str]]]) -> str:
    """``message`` with the folders of the input slices (and their file: URLs) replaced by ``<slices>``."""
    folders = {_spark_path(p).rsplit("/", 1)[0] for paths, _ in inputs.values() for p in paths}
    for folder in sorted(folders, key=len, reverse=True):
        message = message.replace("file://" + folder, "<slices>").replace("file:" + folder, "<slices>")
        message = message.replace(folder, "<slices>")
    return message


def _spark_path(p: Path | str) -> str:
    """A local file as an absolute path; a staged one on ``hdfs://`` or ``s3a://`` (node/services/resolve/staging.py) as
    is."""
    return p if isinstance(p, str) and p.startswith(REMOTE_SCHEMES) else os.path.abspath(p)


def _run_request(
    job: str, statement: str, inputs: Mapping[str, tuple[Sequence[Path | str], list[str]]]
) -> dict[str, Any]:
    return {
        "op": "run",
        "job": job,
        "statement": statement,
        "inputs": {
            name: {"paths": [_spark_path(p) for p in paths], "columns": list(columns)}
            for name, (paths, columns) in inputs.items()
        },
    }


def _one_chunk_columns(holder: list[list[pa.RecordBatch]], schema: pa.Schema) -> pa.Table:
    """The batches in ``holder`` (its only item, taken out) as a table of one chunk per column, each column's chunks
    freed as soon as its one-chunk copy exists (sorting and taking from one chunk is the fast path)."""
    batches = holder.pop()
    pending: list[list[pa.Array]] = [[b.column(i) for b in batches] for i in range(len(schema))]
    del batches
    columns = []
    for i in range(len(pending)):
        chunks, pending[i] = pending[i], []  # the list's only reference now: freed with it
        try:
            columns.append(chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks))
        except (pa.ArrowInvalid, pa.ArrowCapacityError):  # over 2 GiB of values in a 32-bit-offset column
            columns.append(pa.chunked_array(chunks, schema.field(i).type))
        del chunks
    return pa.Table.from_arrays(columns, schema=schema)


def _answer_table(header: dict[str, Any], batches: list[pa.RecordBatch], job: str) -> pa.Table:
    """The result table of a worker's answer (its batches, in the answer's ``order``), or the error it reports."""
    if not header.get("ok"):
        batches.clear()
        if header.get("kind") == "disk_full":  # Spark's scratch (shuffle, spill) on a full disk: 507, not the query's
            raise InsufficientStorage("the query's Spark work", "its scratch files under $CAIRN_HOME")
        if header.get("kind") == "refused":
            raise SparkRefused(str(header.get("error") or "query refused"), condition=header.get("condition"))
        raise SparkError(
            str(header.get("error") or "the Spark job failed"),
            kind=str(header.get("kind") or "runtime"),
            condition=header.get("condition"),
            sqlstate=header.get("sqlstate"),
        )
    order = header.get("order")
    if not batches or header.get("batches") != len(batches):
        raise SparkError(f"the Spark worker sent {len(batches)} of the result's batches for job {job}", kind="worker")
    if order is not None:
        if not isinstance(order, list) or sorted(order) != list(range(len(batches))):
            raise SparkError(f"the Spark worker sent a bad batch order for job {job}", kind="worker")
        batches[:] = [batches[i] for i in order]
    schema = batches[0].schema
    if any(not b.schema.equals(schema) for b in batches):
        raise SparkError(f"the Spark worker sent batches of different schemas for job {job}", kind="worker")
    holder = [batches[:]]
    batches.clear()
    return _one_chunk_columns(holder, schema)


def _conforms(worker: SparkWorker) -> SqlEngine:
    """Checked by mypy: the worker's handle is a SqlEngine (the twin's check:
    node/services/resolve/memory_engine.py)."""
    return worker
