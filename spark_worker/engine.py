"""The Spark side of a job: its inputs registered as temp views, its statement checked against the plan guard and
budget, its result sent batch by batch; its Spark jobs tagged so that it can be cancelled; its failure classified
(``spark_worker/answers.py``); Spark's progress for it; the JVM watched for stalls.

Classic mode runs on the driver's JVM (py4j): a job thread's Spark jobs form a job group. Spark Connect
(``spark.mode = connect``) has no local JVM or SparkContext: jobs are tagged, not grouped, and the plan checks that
need the driver's JVM (guard, plan budget) cannot run (docs/spark.md "Modes").
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from node.support.errors import one_line
from spark_worker import answers, budget, guard, nodelay, results
from spark_worker.jobs import Cancelled, InputMismatch, Job
from spark_worker.process import WATCH_EVERY_S, StallWatch, cpu_seconds, jvm_proc
from spark_worker.session import engine_profile, remote_pinner, remote_profile, session_pinner

log = logging.getLogger("spark_worker")

JVM_EXIT_WAIT_S = 5.0  # how long a lost py4j connection waits for the JVM's exit to show


def read_input(spark: Any, paths: list[str]) -> Any:
    """An input's files as one DataFrame. A dataset's schema only grows by columns appended at the
    end (ODF "Schema Evolution", docs/datasets.md), so its last file has every column: all files are
    read under that file's schema, and older files' missing columns read as nulls of its type."""
    if len(paths) < 2:
        return spark.read.parquet(*paths)
    return spark.read.schema(spark.read.parquet(paths[-1]).schema).parquet(*paths)


class Engine:
    """The warm session (and its JVM) the job threads run on."""

    def __init__(self, spark: Any, remote: str | None, stall_s: float) -> None:
        self.spark = spark
        self.remote = remote
        self.sc = None if remote else spark.sparkContext
        self.version = spark.version
        self.master = remote or spark.sparkContext.master  # cached: handler threads must not make py4j calls
        # answer-relevant versions and settings, sent with every ping
        self.profile = remote_profile(spark) if remote else engine_profile(spark)
        self.repin = self.pinner(spark)
        self.stall_s = stall_s  # 0: no watchdog
        self.stalled = False

    def pinner(self, spark: Any) -> Any:
        return remote_pinner(spark) if self.remote else session_pinner(spark)

    # --- the JVM -----------------------------------------------------------------------------

    def jvm_alive(self, wait: float = 0.0) -> bool:
        """False once the JVM exited or the watchdog killed it. ``wait``: how long to wait for an exit already
        under way (a dying JVM closes its sockets before the kernel reports its exit)."""
        if self.stalled:
            return False
        proc = jvm_proc()
        if proc is None:
            return True
        try:
            proc.wait(timeout=wait) if wait else None
        except subprocess.TimeoutExpired:
            return True
        return proc.poll() is None

    def watch(self, busy: Callable[[], bool], stopping: threading.Event) -> None:
        """Kill a JVM that burns no CPU for ``stall_s`` while a job runs (``busy``): after an OOM in its Arrow
        thread a job sat "running" at 0 % CPU forever. The job thread then answers "died" and the worker exits."""
        proc = jvm_proc()
        if proc is None or not self.stall_s:
            return
        watch = StallWatch(self.stall_s, cpu_seconds(proc.pid), time.monotonic())
        while not stopping.wait(WATCH_EVERY_S):
            cpu, now = cpu_seconds(proc.pid), time.monotonic()
            is_busy = busy()
            if cpu is None:
                return  # the JVM is gone
            idle = watch.sample(cpu, now, is_busy)
            if idle is not None:
                log.error("the JVM used no CPU for %.0f s while jobs ran; killing it", idle)
                self.stalled = True
                proc.kill()
                return

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
        sender = results.Batches(job)
        try:
            _register_inputs(spark, job, created)
            result = spark.sql(job.statement)
            if not self.remote:  # both read the driver JVM's plan objects, which a Connect client has not
                guard.check(spark, result)  # the second wall: Spark's own plan (spark_worker/guard.py)
                budget.check_plan(spark, result, job.limits)  # refused before it runs (spark_worker/budget.py)
            if job.cancelled.is_set():
                raise Cancelled()
            order = results.send_result(result, sender, remote=bool(self.remote), cancel=lambda: self.cancel(job))
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
        if self.sc is None:
            spark.addTag(job_id)
        else:
            self.sc.setJobGroup(job_id, f"cairn job {job_id}", interruptOnCancel=True)

    def _untag(self, spark: Any, job_id: str) -> None:
        if self.sc is None:
            spark.removeTag(job_id)
        else:
            self.sc.setLocalProperty("spark.jobGroup.id", None)

    def cancel(self, job: Job) -> None:
        """Cancel the Spark jobs ``job`` started (those it starts later are not: callers repeat it)."""
        if self.sc is None:
            if job.spark is not None:
                job.spark.interruptTag(job.id)
        else:
            self.sc.cancelJobGroup(job.id)

    def failure(self, job: Job, exc: BaseException, stopping: threading.Event) -> dict[str, Any]:
        """The answer to ``job``, which raised ``exc`` (the flags are read once the JVM's fate is known)."""
        # An error that did not come from Java (py4j's lost connection) may be the JVM dying: wait for its exit,
        # so the job is answered "died" and not as a runtime error of its own (a race seen in CI).
        alive = self.jvm_alive(wait=0.0 if answers.from_java(exc) else JVM_EXIT_WAIT_S)
        return answers.failure(
            job.id,
            exc,
            cancelled=job.cancelled.is_set(),
            jvm_alive=alive,
            stalled=self.stalled,
            stall_s=self.stall_s,
            stopping=stopping.is_set(),
        )

    def progress(self, job_id: str) -> dict[str, Any]:
        """Spark's stages and tasks so far for running job ``job_id`` (its job group), from the status tracker."""
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
            return answers.error(f"no progress for job {job_id}: {one_line(str(e), first=True)}", "request")
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


def _register_inputs(spark: Any, job: Job, created: list[str]) -> None:
    """Each input's files as a temp view of the input's name and columns (its name appended to ``created``)."""
    for name, (paths, columns) in job.inputs.items():
        df = read_input(spark, paths)
        if len(df.columns) != len(columns):
            raise InputMismatch(
                f"input {name}: its Parquet files have {len(df.columns)} columns, the request names {len(columns)}"
            )
        df.toDF(*columns).createOrReplaceTempView(name)
        created.append(name)
        if job.cancelled.is_set():
            raise Cancelled()
