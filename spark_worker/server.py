"""The worker process: one warm SparkSession serving jobs over a Unix domain socket.

Threads:
- the main thread starts Spark, accepts connections, and handles signals and parent death;
- one handler thread per connection reads requests and answers them (``ping`` and ``stats``
  at once, even while a job runs);
- ``--max-jobs`` job threads (default 2) take jobs in arrival order, each with its own SparkSession
  (``spark.newSession()``: its own temp views and SQL settings, one SparkContext), so that one long job
  does not hold every other behind it. A thread owns its job's job group, so a job whose
  client went away is cancelled. Each job's answer depends only on its plan and the pinned settings,
  not on what runs beside it (shuffle partitions and input splits are fixed: session.py).

It imports nothing from the node: the protocol (spark_worker.protocol) is the whole interface.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import functools
import logging
import os
import queue
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.errors import one_line
from spark_worker import budget, guard, nodelay, results
from spark_worker.protocol import (
    GLOB_CHARS,
    INPUT_NAME,
    JOB_ID,
    PREFIX,
    PROTOCOL_VERSION,
    TOKEN_ENV,
    ProtocolError,
    decode_header,
    decode_prefix,
    encode_frame,
)
from spark_worker.session import (
    build_remote_session,
    build_session,
    check_conf,
    engine_profile,
    remote_pinner,
    remote_profile,
    session_pinner,
)

log = logging.getLogger("spark_worker")

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_JVM_DIED = 3
EXIT_START_FAILED = 4

MAX_CONNECTIONS = 32
MAX_INPUTS = 64
CANCEL_REPEAT_S = 0.5  # a cancel sent before the job's Spark job exists is repeated until the job ends
STOP_GRACE_S = 10.0
WARMUP_STOP_GRACE_S = 1.0  # per step of a stop that finds only a warm-up running

PR_SET_PDEATHSIG = 1

WATCH_EVERY_S = 1.0
#: How a full disk reads in a JVM or Python error, anywhere in its chain of causes (py4j's message is only
#: "An error occurred while calling o1.getResult", the cause is in the Java stack trace after it).
DISK_FULL_TEXTS = ("no space left on device", "disk quota exceeded")
# A sample (WATCH_EVERY_S) in which the JVM used more CPU than this is progress: a computing job uses about a
# core; an idle JVM's own threads (heartbeats, a GC) use a few ms.
STALL_CPU_S = 0.1 * WATCH_EVERY_S
JVM_EXIT_WAIT_S = 5.0  # how long a lost py4j connection waits for the JVM's exit to show


class RequestError(Exception):
    """The request is malformed (kind "request")."""


class InputMismatch(Exception):
    """An input's files do not have the declared number of columns (kind "analysis")."""


class Cancelled(Exception):
    pass


class ClientGone(Cancelled):
    """Sending the result failed: the client went away (its job is cancelled)."""


def _read_input(spark: Any, paths: list[str]) -> Any:
    """An input's files as one DataFrame. A dataset's schema only grows by columns appended at the
    end (ODF "Schema Evolution", docs/datasets.md), so its last file has every column: all files are
    read under that file's schema, and older files' missing columns read as nulls of its type."""
    if len(paths) < 2:
        return spark.read.parquet(*paths)
    return spark.read.schema(spark.read.parquet(paths[-1]).schema).parquet(*paths)


@dataclass
class Job:
    id: str
    statement: str
    inputs: dict[str, tuple[list[str], list[str]]]
    future: concurrent.futures.Future[tuple[dict[str, Any], Any]] = field(default_factory=concurrent.futures.Future)
    cancelled: threading.Event = field(default_factory=threading.Event)
    limits: budget.Limits = field(default_factory=budget.Limits)
    spark: Any = None  # the session running it (a Connect job is cancelled through its own session's tag)
    # Sends one frame to the client (header, payload), from the job thread while the result streams; None: the
    # result is dropped (a warm-up)
    send: Callable[[dict[str, Any], Any], None] | None = None


class _Batches:
    """Sends a job's result batch by batch (an Arrow IPC stream of one batch per frame), within its budgets."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.rows = self.bytes = self.frames = 0
        self.seconds = 0.0  # serialising and sending

    def __call__(self, batch: Any) -> None:
        import pyarrow as pa

        t0 = time.perf_counter()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        buf = sink.getvalue()
        self.rows += batch.num_rows
        self.bytes += buf.size
        budget.check_result(self.rows, self.bytes, self.job.limits)  # before this batch is served
        if self.job.cancelled.is_set():
            raise Cancelled()
        if self.job.send is not None:
            try:
                self.job.send({"batch": self.frames}, buf)
            except OSError as e:
                raise ClientGone(f"job {self.job.id}: the client went away") from e
        self.frames += 1
        self.seconds += time.perf_counter() - t0


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None on a clean EOF before the first byte."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = conn.recv_into(view[got:])
        if k == 0:
            if got == 0:
                return None
            raise ProtocolError("connection closed inside a frame")
        got += k
    return bytes(buf)


def _read_request(conn: socket.socket) -> dict[str, Any] | None:
    prefix = _recv_exact(conn, PREFIX.size)
    if prefix is None:
        return None
    header_len, payload_len = decode_prefix(prefix)
    if payload_len:
        raise ProtocolError("requests carry no payload")
    body = _recv_exact(conn, header_len)
    if body is None:
        raise ProtocolError("connection closed inside a frame")
    return decode_header(body)


def _error(message: str, kind: str, *, condition: str | None = None, sqlstate: str | None = None) -> dict[str, Any]:
    return {"ok": False, "error": message, "kind": kind, "condition": condition, "sqlstate": sqlstate}


def _parse_job(req: dict[str, Any]) -> Job:
    job_id = req.get("job")
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        raise RequestError("run: 'job' must be 1-128 characters of [A-Za-z0-9_.:-]")
    statement = req.get("statement")
    if not isinstance(statement, str) or not statement.strip():
        raise RequestError("run: 'statement' must be a non-empty string")
    raw = req.get("inputs", {})
    if not isinstance(raw, dict) or len(raw) > MAX_INPUTS:
        raise RequestError(f"run: 'inputs' must be an object of at most {MAX_INPUTS} inputs")
    inputs: dict[str, tuple[list[str], list[str]]] = {}
    seen: set[str] = set()
    for name, spec in raw.items():
        if not INPUT_NAME.fullmatch(name):
            raise RequestError(f"run: bad input name {name!r}")
        if name.lower() in seen:  # Spark's names are case-insensitive
            raise RequestError(f"run: input {name!r} given twice")
        seen.add(name.lower())
        if not isinstance(spec, dict):
            raise RequestError(f"run: input {name!r} must be an object with 'paths' and 'columns'")
        paths, columns = spec.get("paths"), spec.get("columns")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise RequestError(f"run: input {name!r} needs a non-empty list of Parquet file paths")
        for p in paths:
            # A local file, or a slice staged on HDFS or S3 (spark.staging, node/resolve/staging.py).
            if not p.startswith(("/", "hdfs://", "s3a://")) or GLOB_CHARS.intersection(p) or "\0" in p:
                raise RequestError(
                    f"run: input {name!r}: path {p!r} must be absolute (or hdfs://, s3a://) with no glob characters"
                )
        if not isinstance(columns, list) or not columns or not all(isinstance(c, str) and c for c in columns):
            raise RequestError(f"run: input {name!r} needs a non-empty list of column names")
        if len({c.lower() for c in columns}) != len(columns):
            raise RequestError(f"run: input {name!r} has duplicate column names")
        inputs[name] = (list(paths), list(columns))
    try:
        limits = budget.Limits.parse(req.get("limits"))
    except ValueError as e:
        raise RequestError(str(e)) from None
    return Job(job_id, statement, inputs, limits=limits)


class Worker:
    def __init__(
        self,
        spark: Any,
        listener: socket.socket,
        socket_path: Path,
        socket_ino: int,
        parent_pid: int | None,
        *,
        warmup: bool = True,
        max_jobs: int = 1,
        stall_s: float = 0.0,
        jit_rows: int = 0,
        remote: str | None = None,
    ) -> None:
        self.spark = spark
        # Spark Connect (spark.mode = connect): no local JVM or SparkContext; jobs are tagged, not grouped, and the
        # plan checks that need the driver's JVM (guard, plan budget) cannot run here (docs/spark.md "Modes").
        self.remote = remote
        self.sc = None if remote else spark.sparkContext
        self.version = spark.version
        self.master = (
            remote or spark.sparkContext.master
        )  # cached: handler threads must not make py4j calls for ping/stats
        # answer-relevant versions and settings, sent with every ping
        self.profile = remote_profile(spark) if remote else engine_profile(spark)
        self.repin = self._pinner(spark)
        self.max_jobs = max_jobs
        self.stall_s = stall_s  # 0: no watchdog
        self.stalled = False
        self.listener = listener
        self.socket_path = socket_path
        self.socket_ino = socket_ino
        self.parent_pid = parent_pid
        self.started = time.time()
        self.warmup = warmup
        self.jit_rows = jit_rows  # rows of the idle JIT warm-up (0: none)
        self.warming: Job | None = None  # the idle warm-up's job while it runs: a real job cancels it
        self.job_came = threading.Event()  # a real job was asked for: the idle warm-up stops, or never starts
        self.warming_up = threading.Event()  # slot 0 is in its warm-ups: a stop need not wait for them
        self.exit_code = EXIT_OK
        self.stopping = threading.Event()
        self.counters = {"jobs": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
        self.lock = threading.Lock()
        self.running: dict[str, Job] = {}  # by job id, in start order
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.job_threads = [
            threading.Thread(target=self._job_loop, args=(i,), name=f"spark-jobs-{i}", daemon=True)
            for i in range(max_jobs)
        ]

    def _pinner(self, spark: Any) -> Any:
        return remote_pinner(spark) if self.remote else session_pinner(spark)

    # --- the JVM -----------------------------------------------------------------------------

    def jvm_proc(self) -> Any:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        return getattr(gateway, "proc", None) if gateway is not None else None

    def jvm_alive(self, wait: float = 0.0) -> bool:
        """False once the JVM exited or the watchdog killed it. ``wait``: how long to wait for an exit already
        under way (a dying JVM closes its sockets before the kernel reports its exit)."""
        if self.stalled:
            return False
        proc = self.jvm_proc()
        if proc is None:
            return True
        try:
            proc.wait(timeout=wait) if wait else None
        except subprocess.TimeoutExpired:
            return True
        return proc.poll() is None

    # --- jobs ----------------------------------------------------------------------------------

    def execute(self, job: Job, spark: Any = None, repin: Any = None) -> tuple[dict[str, Any], Any]:
        """Run one job in this thread (on ``spark``, a session of this thread's own), sending its result batch by
        batch (``job.send``, spark_worker/results.py); returns the answer header (and None: the payload went)."""
        spark = spark or self.spark
        job.spark = spark
        t0 = time.perf_counter()
        if not self.remote:  # a Connect client has no py4j connection
            nodelay.no_delay(spark._jvm)  # once per thread: py4j answers over 8 KiB waited 40 ms (nodelay.py)
        self._tag(spark, job.id)
        (repin or self.repin)()  # a statement could have SET a forced setting
        created: list[str] = []
        sender = _Batches(job)
        try:
            for name, (paths, columns) in job.inputs.items():
                df = _read_input(spark, paths)
                if len(df.columns) != len(columns):
                    raise InputMismatch(
                        f"input {name}: its Parquet files have {len(df.columns)} columns, "
                        f"the request names {len(columns)}"
                    )
                df.toDF(*columns).createOrReplaceTempView(name)
                created.append(name)
                if job.cancelled.is_set():
                    raise Cancelled()
            result = spark.sql(job.statement)
            if not self.remote:  # both read the driver JVM's plan objects, which a Connect client has not
                guard.check(spark, result)  # the second wall: Spark's own plan (spark_worker/guard.py)
                budget.check_plan(spark, result, job.limits)  # refused before it runs (spark_worker/budget.py)
            if job.cancelled.is_set():
                raise Cancelled()
            order = results.send_result(
                result, sender, remote=bool(self.remote), cancel=lambda: self._cancel_spark(job)
            )
            elapsed_ms = (time.perf_counter() - t0) * 1000
            if job.cancelled.is_set():
                raise Cancelled()
        finally:
            for name in created:
                try:
                    spark.catalog.dropTempView(name)
                except Exception as e:  # noqa: BLE001 - a failed drop must not hide the job's own error
                    log.warning("job %s: could not drop temp view %s: %s", job.id, name, one_line(str(e), first=True))
            self._untag(spark, job.id)
        header = {
            "ok": True,
            "job": job.id,
            "rows": sender.rows,
            "elapsed_ms": round(elapsed_ms, 3),
            "ipc_ms": round(sender.seconds * 1000, 3),
            "ipc_bytes": sender.bytes,
            "batches": sender.frames,
        }
        if order is not None:
            header["order"] = order
        return header, None

    def _tag(self, spark: Any, job_id: str) -> None:
        """Mark the Spark jobs this thread starts as ``job_id``'s: a job group, or a Connect operation tag."""
        if self.remote:
            spark.addTag(job_id)
        else:
            assert self.sc is not None
            self.sc.setJobGroup(job_id, f"cairn job {job_id}", interruptOnCancel=True)

    def _untag(self, spark: Any, job_id: str) -> None:
        if self.remote:
            spark.removeTag(job_id)
        else:
            assert self.sc is not None
            self.sc.setLocalProperty("spark.jobGroup.id", None)

    def _cancel_spark(self, job: Job) -> None:
        if self.remote:
            if job.spark is not None:
                job.spark.interruptTag(job.id)
        else:
            assert self.sc is not None
            self.sc.cancelJobGroup(job.id)

    def _classify(self, job: Job, exc: BaseException) -> dict[str, Any]:
        from pyspark.errors import AnalysisException, PySparkException

        # An error that did not come from Java (py4j's lost connection) may be the JVM dying: wait for its exit,
        # so the job is answered "died" and not as a runtime error of its own (a race seen in CI).
        if not self.jvm_alive(wait=0.0 if _from_java(exc) else JVM_EXIT_WAIT_S):
            # -XX:+ExitOnOutOfMemoryError (session.py) ends the JVM on an OOM, the watchdog kills a stalled
            # one; the worker then exits too, and the node restarts it.
            why = f"made no progress for {self.stall_s:g} s and was killed" if self.stalled else "died (out of memory?)"
            return _error(f"the Spark JVM {why} during job {job.id}; the worker restarts", "died")
        if self.stopping.is_set():
            return _error(f"the worker is stopping (job {job.id} cancelled)", "cancelled")
        if job.cancelled.is_set() or isinstance(exc, Cancelled):
            return _error(f"job {job.id} was cancelled", "cancelled")
        if isinstance(exc, InputMismatch):
            return _error(str(exc), "analysis")
        if isinstance(exc, guard.Refused):
            return _error(str(exc), "refused", condition=exc.rule)
        if _disk_full(exc):  # the node's disk, not the query: never answered (nor recorded) as the query's failure
            return _error(f"no space left on disk for Spark's files during job {job.id}", "disk_full")
        condition = sqlstate = None
        if isinstance(exc, PySparkException):
            try:
                condition, sqlstate = exc.getCondition(), exc.getSqlState()
            except Exception as e:  # noqa: BLE001 - the message alone still makes an answer
                log.debug("no error class on %s: %s", type(exc).__name__, e)
        kind = "analysis" if isinstance(exc, AnalysisException) else "runtime"
        message = one_line(str(exc), first=True) or type(exc).__name__
        return _error(message, kind, condition=condition, sqlstate=sqlstate)

    def _job_loop(self, slot: int) -> None:
        """One job thread: slot 0 uses the main session (and warms it up), the others a new session each."""
        spark, repin = self.spark, self.repin
        if slot:
            spark = self.spark.newSession()
            repin = self._pinner(spark)
        elif self.warmup:
            self.warming_up.set()
            t0 = time.perf_counter()
            try:
                _warm_up(self)
                log.info("warm-up query took %.0f ms", (time.perf_counter() - t0) * 1000)
            except Exception as e:  # noqa: BLE001 - a failed warm-up only costs the first job time
                if not self.stopping.is_set():
                    log.warning("warm-up query failed: %s", one_line(str(e), first=True))
            if self.jit_rows and not self.stopping.is_set():
                _jit_warm_up(self)
            self.warming_up.clear()
        while True:
            job = self.jobs.get()
            if job is None:
                return
            if job.cancelled.is_set():
                job.future.set_result((_error(f"job {job.id} was cancelled", "cancelled"), None))
                self._count("cancelled")
                continue
            if not self._run_one(job, spark, repin):
                return

    def _count(self, key: str) -> None:
        with self.lock:
            self.counters[key] += 1

    def _run_one(self, job: Job, spark: Any, repin: Any) -> bool:
        """Run ``job`` and answer it; False when the JVM is gone (the worker is stopping)."""
        with self.lock:
            self.running[job.id] = job
        t0 = time.perf_counter()
        try:
            header, buf = self.execute(job, spark, repin)
        except Exception as e:  # noqa: BLE001 - every failure becomes an answer
            header, buf = self._classify(job, e), None
        finally:
            with self.lock:
                self.running.pop(job.id, None)
        self._count("succeeded" if header["ok"] else "cancelled" if header["kind"] == "cancelled" else "failed")
        if header["ok"]:
            log.info("job %s: %d rows in %.0f ms", job.id, header["rows"], header["elapsed_ms"])
        else:
            ms = (time.perf_counter() - t0) * 1000
            log.info("job %s failed (%s, %.0f ms): %s", job.id, header["kind"], ms, header["error"])
        job.future.set_result((header, buf))
        if not header["ok"] and not self.jvm_alive():
            log.error("the JVM died; exiting so that the node restarts the worker")
            self.stop(EXIT_JVM_DIED)
            return False
        return True

    def _watchdog(self) -> None:
        """Kill a JVM that burns no CPU for ``stall_s`` while a job runs (after an OOM in its Arrow
        thread a job sat "running" at 0 % CPU forever). A long task that computes is never touched: only
        CPU time counts, not finished tasks. The job thread then answers "died" and the worker exits."""
        proc = self.jvm_proc()
        if proc is None or not self.stall_s:
            return
        last_cpu, since = _cpu_seconds(proc.pid), time.monotonic()
        while not self.stopping.wait(WATCH_EVERY_S):
            cpu, now = _cpu_seconds(proc.pid), time.monotonic()
            with self.lock:
                busy = bool(self.running)
            if cpu is None:
                return  # the JVM is gone
            progress = last_cpu is None or cpu - last_cpu > STALL_CPU_S
            last_cpu = cpu
            if not busy or progress:
                since = now
            elif now - since > self.stall_s:
                log.error("the JVM used no CPU for %.0f s while jobs ran; killing it", now - since)
                self.stalled = True
                proc.kill()
                return

    def stop_warming(self) -> None:
        """A real job came: the idle warm-up gives the JVM back at once (a real job never waits for it)."""
        self.job_came.set()
        warming = self.warming
        if warming is not None:
            warming.cancelled.set()
            try:
                self._cancel_spark(warming)
            except Exception as e:  # noqa: BLE001
                log.warning("could not stop the warm-up: %s", one_line(str(e), first=True))

    def cancel(self, job: Job) -> None:
        job.cancelled.set()
        with self.lock:
            running = self.running.get(job.id) is job
        if running:
            try:
                self._cancel_spark(job)
            except Exception as e:  # noqa: BLE001
                log.warning("job %s: cancel failed: %s", job.id, one_line(str(e), first=True))

    # --- connections ---------------------------------------------------------------------------

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                while not self.stopping.is_set():
                    try:
                        req = _read_request(conn)
                    except ProtocolError as e:
                        self._send(conn, _error(f"protocol error: {e}", "request"))
                        return
                    if req is None:
                        return
                    op = req.get("op")
                    if op == "ping":
                        with self.lock:
                            jobs = self.counters["jobs"]
                        self._send(
                            conn,
                            {
                                "ok": True,
                                "spark": self.version,
                                "jobs": jobs,
                                "protocol": PROTOCOL_VERSION,
                                "pid": os.getpid(),
                                "jvm_pid": getattr(self.jvm_proc(), "pid", None),
                                "profile": self.profile,
                            },
                        )
                    elif op == "stats":
                        self._send(conn, self.stats())
                    elif op == "progress":
                        self._send(conn, self.progress(req.get("job")))
                    elif op == "run":
                        if not self._run(conn, req):
                            return
                    else:
                        self._send(conn, _error(f"unknown op {op!r}", "request"))
        except OSError as e:
            log.debug("connection ended: %s", e)
        finally:
            self.connections.release()

    def stats(self) -> dict[str, Any]:
        with self.lock:
            counters = dict(self.counters)
            running = list(self.running)
        return {
            "ok": True,
            **counters,
            "running": running[0] if running else None,  # the oldest running job
            "running_jobs": running,
            "max_jobs": self.max_jobs,
            "queued": self.jobs.qsize(),
            "spark": self.version,
            "master": self.master,
            "uptime_s": round(time.time() - self.started, 3),
            "pid": os.getpid(),
            "jvm_pid": getattr(self.jvm_proc(), "pid", None),
        }

    def progress(self, job_id: object) -> dict[str, Any]:
        """Spark's stages and tasks so far for a running job (its job group), from the status tracker: what a
        client shows while it waits."""
        with self.lock:
            running = isinstance(job_id, str) and job_id in self.running
        if not running:
            return {"ok": True, "job": job_id, "running": False}
        if self.sc is None:  # Connect: the server's status tracker is not reachable from a client
            return {"ok": True, "job": job_id, "running": True}
        try:
            tracker = self.sc.statusTracker()
            stages = []
            for spark_job in tracker.getJobIdsForGroup(job_id):
                info = tracker.getJobInfo(spark_job)
                for stage in info.stageIds if info is not None else []:
                    if (st := tracker.getStageInfo(stage)) is not None:
                        stages.append(st)
        except Exception as e:  # noqa: BLE001  progress is best effort: the job itself is not affected
            return _error(f"no progress for job {job_id}: {one_line(str(e), first=True)}", "request")
        return {
            "ok": True,
            "job": job_id,
            "running": True,
            "stages": len(stages),
            "stages_done": sum(1 for s in stages if s.numTasks and s.numCompletedTasks >= s.numTasks),
            "tasks": sum(s.numTasks for s in stages),
            "tasks_done": sum(s.numCompletedTasks for s in stages),
            "tasks_running": sum(s.numActiveTasks for s in stages),
        }

    def _run(self, conn: socket.socket, req: dict[str, Any]) -> bool:
        """Serve one run request; False when the connection is gone."""
        with self.lock:
            self.counters["jobs"] += 1
        try:
            job = _parse_job(req)
        except RequestError as e:
            with self.lock:
                self.counters["failed"] += 1
            log.info("refused a run request: %s", e)
            self._send(conn, _error(str(e), "request"))
            return True
        done_r, done_w = os.pipe()

        def wake(_f: object) -> None:
            # Runs in the job thread, possibly after this handler already saw done() and left:
            # the callback owns (and closes) the write end.
            try:
                os.write(done_w, b"x")
            except OSError:
                pass
            finally:
                os.close(done_w)

        job.send = functools.partial(self._send, conn)  # the result's batches go from the job thread
        try:
            job.future.add_done_callback(wake)
            self.jobs.put(job)
            self.stop_warming()
            client_gone = False
            while not job.future.done():
                if client_gone:
                    # Repeat the cancel until the job ends: one sent before its Spark job existed
                    # (while the views were being made) cancelled nothing.
                    ready, _, _ = select.select([done_r], [], [], CANCEL_REPEAT_S)
                    if not ready:
                        self.cancel(job)
                    continue
                ready, _, _ = select.select([conn.fileno(), done_r], [], [])  # fds: one type for select's list
                if conn.fileno() in ready and not job.future.done():
                    # The client sends nothing while it waits: readable means it closed (or broke
                    # the protocol). Either way the job has nobody to answer to: cancel it.
                    log.info("job %s: client went away, cancelling", job.id)
                    client_gone = True
                    self.cancel(job)
            header, buf = job.future.result()
        finally:
            os.close(done_r)
        if client_gone:
            return False
        self._send(conn, header, buf)
        return True

    @staticmethod
    def _send(conn: socket.socket, header: dict[str, Any], payload: Any = None) -> None:
        size = payload.size if payload is not None else 0
        conn.sendall(encode_frame(header, size))
        if size:
            conn.sendall(payload)

    # --- lifecycle -----------------------------------------------------------------------------

    def stop(self, code: int = EXIT_OK) -> None:
        """Ask the main loop to stop (from any thread or a signal handler)."""
        if not self.stopping.is_set():
            self.exit_code = code
            self.stopping.set()
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass

    def _parent_gone(self) -> bool:
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    def serve(self) -> int:
        for t in self.job_threads:
            t.start()
        threading.Thread(target=self._watchdog, name="spark-watchdog", daemon=True).start()
        self.listener.setblocking(False)
        log.info("ready on %s (Spark %s, master %s)", self.socket_path, self.version, self.master)
        while not self.stopping.is_set():
            if self._parent_gone():
                log.warning("parent process %s is gone; stopping", self.parent_pid)
                self.stop()
                break
            ready, _, _ = select.select([self.listener.fileno(), self.wake_r], [], [], 1.0)
            if self.listener.fileno() not in ready:
                continue
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            conn.setblocking(True)
            if not self._same_user(conn) or not self.connections.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._handle, args=(conn,), name="spark-conn", daemon=True).start()
        self.shutdown()
        return self.exit_code

    @staticmethod
    def _same_user(conn: socket.socket) -> bool:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            log.warning("refused a connection from uid %d", uid)
            return False
        return True

    def shutdown(self) -> None:
        log.info("stopping")
        self.listener.close()
        _unlink_socket(self.socket_path, self.socket_ino)
        with self.lock:
            running = list(self.running.values())
        while True:  # nothing queued will run
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancelled.set()
                job.future.set_result((_error("the worker is stopping", "cancelled"), None))
        for job in running:
            self.cancel(job)
        self.stop_warming()
        # Only a warm-up running: nothing of value is lost by not waiting for it (a cold first query's planning
        # cannot be cancelled, and a stop waited 10 s for it: every short-lived worker paid that).
        warming = self.warming_up.is_set() and not running
        grace = WARMUP_STOP_GRACE_S if warming else STOP_GRACE_S
        deadline = time.monotonic() + grace
        for _ in self.job_threads:
            self.jobs.put(None)
        for t in self.job_threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stop_spark(self.spark, grace)


def _unlink_socket(path: Path, ino: int) -> None:
    """Remove our socket file, not one a successor bound at the same path."""
    try:
        if os.stat(path).st_ino == ino:
            os.unlink(path)
    except OSError:
        pass


def stop_spark(spark: Any, grace: float = STOP_GRACE_S) -> None:
    """Stop the session (bounded by ``grace`` seconds, twice), then make sure the JVM has exited."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    if spark is not None:
        t = threading.Thread(target=spark.stop, name="spark-stop", daemon=True)
        t.start()
        t.join(grace)
        if t.is_alive():
            log.warning("spark.stop() did not return in %.0f s", grace)
    if proc is not None and proc.poll() is None:
        # The gateway JVM exits by itself when its stdin closes (PySpark's design).
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(grace)
        except Exception:  # noqa: BLE001 - TimeoutExpired or a broken pipe
            log.warning("the JVM (pid %d) did not exit; killing it", proc.pid)
            proc.kill()
            proc.wait()


def _from_java(exc: BaseException) -> bool:
    """True when the JVM itself answered with this error (so it is alive); False for py4j's own network errors."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return isinstance(exc, (Py4JJavaError, PySparkException, InputMismatch, guard.Refused, Cancelled))


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (threads included), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _set_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except OSError as e:
        log.warning("prctl unavailable: %s", e)


ORPHAN_KILL_S = 3 * STOP_GRACE_S + 5  # longer than a clean stop can take (job, spark.stop, JVM exit)


def _watch_parent(parent_pid: int) -> None:
    """Backup for PR_SET_PDEATHSIG (which follows the parent *thread*): poll getppid(). An orphan that has
    not stopped cleanly within ORPHAN_KILL_S (a JVM wedged by an OOM, a thread stuck in py4j) kills itself
    and its JVM: without it, an orphaned worker and JVM (780 MB) live on for 10+ minutes."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    log.warning("parent process %d is gone; stopping", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_KILL_S)  # this daemon thread dies with the process when the clean stop ends in time
    log.error("still running %.0f s after the parent died; killing the worker and its JVM", ORPHAN_KILL_S)
    _kill_everything()


def _kill_everything() -> None:
    """SIGKILL this worker's process group (the node starts it as a group leader; the JVM is in it), or at
    least the JVM and this process."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None:
        proc.kill()
    os.kill(os.getpid(), signal.SIGKILL)


def _bind(path: Path) -> tuple[socket.socket, int]:
    if len(os.fsencode(path)) > 107:
        raise ValueError(f"socket path too long for a Unix socket (max 107 bytes): {path}")
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # a stale socket from a worker that did not clean up
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(os.fspath(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock, os.stat(path).st_ino


def _warm_up(worker: Worker) -> None:
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
        worker.execute(
            Job(
                "warmup",
                "SELECT col_0, count(*), sum(col_1) FROM a GROUP BY col_0",
                {"a": ([path], ["col_0", "col_1"])},
            )
        )


# Filter, group, aggregate and order over the common column types: the plan shape of most queries. After the
# small warm-up, the first such query on real data still took 2x a warm one (JIT of the Parquet readers,
# aggregation and sort, code generation); after these two it took as long as a warm one.
JIT_SQL = (
    "SELECT col_2, col_0 % 97 AS b, COUNT(*) AS n, SUM(col_1) AS s, MIN(col_0) AS m FROM a "
    "WHERE col_1 > {c} GROUP BY col_2, col_0 % 97 ORDER BY col_2, b"
)


def _jit_warm_up(worker: Worker) -> None:
    """Run ``JIT_SQL`` twice over ``worker.jit_rows`` generated rows while no job waits; a job that arrives
    cancels it (``Worker.stop_warming``)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cairn-jit-") as tmp:
        paths = []
        for part in range(2):  # two files: the multi-file scan of a dataset's slices
            ids = pa.array(range(part, worker.jit_rows, 2), pa.int64())
            v = pc.divide(pc.cast(pc.bit_wise_and(pc.multiply(ids, 2654435761), 0xFFFFF), pa.float64()), 1048576.0)
            s = pc.cast(pc.bit_wise_and(ids, 7), pa.string())
            paths.append(os.path.join(tmp, f"jit-{part}.parquet"))
            pq.write_table(pa.table({"i": ids, "v": v, "s": s}), paths[-1], compression="zstd")
        for i, c in enumerate((0.25, 0.5)):
            job = Job(f"warmup-jit-{i}", JIT_SQL.format(c=c), {"a": (paths, ["col_0", "col_1", "col_2"])})
            worker.warming = job
            if worker.job_came.is_set():  # checked after ``warming`` is set: a later job cancels the job itself
                worker.warming = None
                log.info("JIT warm-up stopped after %.0f ms: a job came", (time.perf_counter() - t0) * 1000)
                return
            try:
                worker.execute(job)
            except Exception as e:  # noqa: BLE001 - stopped by a job, or failed: either way only time is lost
                why = "a job came" if job.cancelled.is_set() else one_line(str(e), first=True)
                log.info("JIT warm-up stopped after %.0f ms: %s", (time.perf_counter() - t0) * 1000, why)
                return
            finally:
                worker.warming = None
    log.info("JIT warm-up took %.0f ms", (time.perf_counter() - t0) * 1000)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m spark_worker", description="Cairn's co-located Spark worker")
    p.add_argument("--socket", required=True, type=Path, help="Unix socket path to serve on (created mode 0600)")
    p.add_argument("--master", default="local[2]", help="spark.master (default local[2])")
    p.add_argument(
        "--mode", choices=("local", "standalone", "connect"), default="local", help="where Spark runs (default local)"
    )
    p.add_argument("--remote", default="", help=f"connect: the server, sc://HOST:PORT (token: ${TOKEN_ENV})")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting (repeatable)")
    p.add_argument("--log", type=Path, help="append stdout/stderr (the worker's and the JVM's) to this file")
    p.add_argument("--parent-pid", type=int, help="exit when the parent is no longer this process")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up query before serving")
    p.add_argument(
        "--jit-warmup-rows", type=int, default=0, help="rows of the idle JIT warm-up after the first one (0: none)"
    )
    p.add_argument("--max-jobs", type=int, default=2, help="Spark jobs run at the same time (default 2)")
    p.add_argument(
        "--stall-timeout", type=float, default=0.0, help="kill a JVM idle this many s while a job runs (0: never)"
    )
    return p.parse_args(argv)


def _log_to(path: Path | None) -> None:
    """Log to stderr; with a path, stdout and stderr (the JVM's too) go to that file."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)  # the JVM inherits these
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _check_mode(args: argparse.Namespace) -> None:
    """The master or remote the mode needs; ValueError says what is wrong (docs/spark.md "Modes")."""
    master = args.master.strip()
    if args.mode == "connect":
        if not args.remote.startswith("sc://") or ";" in args.remote:
            raise ValueError("--mode connect needs --remote sc://HOST:PORT (no ;parameters: the token is in the env)")
        if args.conf:
            raise ValueError("--mode connect takes no --conf: settings are the Connect server's own (checked at start)")
    elif args.mode == "standalone" and not master.startswith(("spark://", "k8s://")) and master != "yarn":
        raise ValueError(f"--mode standalone needs a spark://, yarn or k8s:// master, got {master!r}")
    elif args.mode == "local" and not (master == "local" or master.startswith("local[")):
        raise ValueError(f"--mode local needs a local[N] master, got {master!r}")


def _spark_conf(items: list[str], master: str) -> dict[str, str]:
    """The --conf KEY=VALUE settings, checked; ValueError says what is wrong."""
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf wants KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    check_conf(conf)
    if master.strip().startswith("sc://"):
        raise ValueError("Spark Connect masters (sc://) are not supported by this worker; use spark://… or local[N]")
    return conf


def _exit_on_signals() -> None:
    # Until Spark is up, SIGTERM (also sent on parent death) just ends the process; the JVM
    # follows when its stdin pipe closes.
    def early_exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, early_exit)
    signal.signal(signal.SIGINT, early_exit)
    _set_parent_death_signal()


def _start_worker(args: argparse.Namespace, conf: dict[str, str], listener: socket.socket, ino: int) -> Worker | None:
    """Spark started and a worker on the listening socket; None if Spark did not start (logged)."""
    spark = None
    token = os.environ.pop(TOKEN_ENV, None) or None  # read once, then gone from the environment
    try:
        t0 = time.perf_counter()
        spark = build_remote_session(args.remote, token) if args.mode == "connect" else build_session(args.master, conf)
        from pyspark.logger import PySparkLogger

        # PySpark logs every SQL error with its Java stack trace as JSON; the worker logs one line per job.
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
        started_ms = (time.perf_counter() - t0) * 1000
        # The warm-up runs as the job thread's first task: ping answers at once, a first job waits for it.
        worker = Worker(
            spark,
            listener,
            args.socket,
            ino,
            args.parent_pid,
            warmup=not args.no_warmup,
            max_jobs=args.max_jobs,
            stall_s=args.stall_timeout,
            jit_rows=0 if args.no_warmup else args.jit_warmup_rows,
            remote=args.remote if args.mode == "connect" else None,
        )
        log.info("SparkSession %s started in %.0f ms", spark.version, started_ms)
        return worker
    except SystemExit:
        _unlink_socket(args.socket, ino)
        stop_spark(spark)
        raise
    except Exception as e:  # noqa: BLE001
        _unlink_socket(args.socket, ino)
        stop_spark(spark)
        # Logged last: py4j logs noise while the JVM goes, and the node quotes the log's last lines.
        why = one_line(str(e), first=True) or type(e).__name__
        log.error("Spark did not start: %s", why.replace(token, "***") if token else why)
        return None


def _serve(worker: Worker) -> int:
    def on_signal(signum: int, _frame: Any) -> None:
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        code = worker.serve()
    finally:
        os.close(worker.wake_r)
        os.close(worker.wake_w)
        log.info("exited")
    # Spark and its JVM are stopped: end now, so that no thread or atexit hook left by PySpark/py4j can hold
    # the process at interpreter shutdown (an orphan must end).
    logging.shutdown()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _log_to(args.log)
    if args.max_jobs < 1:
        log.error("--max-jobs must be 1 or more, got %d", args.max_jobs)
        return EXIT_USAGE
    try:
        _check_mode(args)
        conf = _spark_conf(args.conf, args.master)
    except ValueError as e:
        log.error("%s", e)
        return EXIT_USAGE
    _exit_on_signals()
    if args.parent_pid is not None:
        if os.getppid() != args.parent_pid:
            log.error("parent %d already gone", args.parent_pid)
            return EXIT_OK
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), name="parent-watch", daemon=True).start()
    try:
        listener, ino = _bind(args.socket)
    except (OSError, ValueError) as e:
        log.error("cannot serve on %s: %s", args.socket, e)
        return EXIT_USAGE
    worker = _start_worker(args, conf, listener, ino)
    if worker is None:
        return EXIT_START_FAILED
    return _serve(worker)


def _disk_full(exc: BaseException) -> bool:
    """``exc`` says a disk filled: ENOSPC/EDQUOT, or the JVM's IOException text anywhere in its (Java) trace."""
    if isinstance(exc, OSError) and exc.errno in (28, 122):  # ENOSPC, EDQUOT
        return True
    try:
        text = str(exc).lower()
    except Exception:  # noqa: BLE001 - a py4j error whose text cannot be read: not a disk, as far as we know
        return False
    return any(t in text for t in DISK_FULL_TEXTS)
