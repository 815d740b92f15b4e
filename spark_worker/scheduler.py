"""The job threads: ``--max-jobs`` threads (default 2) take jobs in arrival order, each with its own SparkSession
(``spark.newSession()``: its own temp views and SQL settings, one SparkContext), so that one long job does not
hold every other behind it. A thread owns its job's job group, so a job whose client went away is cancelled.
Each job's answer depends only on its plan and the pinned settings, not on what runs beside it (shuffle partitions
and input splits are fixed: session.py). Slot 0 runs on the main session and warms it up first."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from node.support.errors import one_line
from spark_worker.answers import error
from spark_worker.engine import Engine
from spark_worker.jobs import Job
from spark_worker.process import STOP_GRACE_S
from spark_worker.warmup import Warming, run_warm_ups

log = logging.getLogger("spark_worker")

WARMUP_STOP_GRACE_S = 1.0  # per step of a stop that finds only a warm-up running


class JobThreads:
    """The queue, the threads taking from it, the jobs running and the counters ``stats`` reports."""

    def __init__(
        self,
        engine: Engine,
        max_jobs: int,
        stopping: threading.Event,
        on_jvm_died: Callable[[], None],
        *,
        warmup: bool,
        jit_rows: int,
    ) -> None:
        self.engine = engine
        self.max_jobs = max_jobs
        self.stopping = stopping
        self._on_jvm_died = on_jvm_died
        self.warmup = warmup
        self.warming = Warming(jit_rows)
        self.counters = {"jobs": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
        self.lock = threading.Lock()
        self.running: dict[str, Job] = {}  # by job id, in start order
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.threads = [
            threading.Thread(target=self._job_loop, args=(i,), name=f"spark-jobs-{i}", daemon=True)
            for i in range(max_jobs)
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def submit(self, job: Job) -> None:
        """Queue ``job``; a warm-up under way stops for it."""
        self.queue.put(job)
        self.stop_warming()

    def count(self, key: str) -> None:
        with self.lock:
            self.counters[key] += 1

    def busy(self) -> bool:
        with self.lock:
            return bool(self.running)

    def snapshot(self) -> tuple[dict[str, int], list[str]]:
        """The counters and the running jobs' ids, oldest first."""
        with self.lock:
            return dict(self.counters), list(self.running)

    def is_running(self, job_id: object) -> bool:
        with self.lock:
            return isinstance(job_id, str) and job_id in self.running

    def stop_warming(self) -> None:
        """A real job came: the idle warm-up gives the JVM back at once (a real job never waits for it)."""
        self.warming.stop(self.engine.cancel)

    def cancel(self, job: Job) -> None:
        job.cancelled.set()
        with self.lock:
            running = self.running.get(job.id) is job
        if running:
            try:
                self.engine.cancel(job)
            except Exception as e:  # noqa: BLE001
                log.warning("job %s: cancel failed: %s", job.id, one_line(str(e), first=True))

    def stop(self) -> float:
        """Nothing queued runs, running jobs are cancelled, the threads end (each joined within the grace);
        returns the grace, which Spark's own stop is given too."""
        with self.lock:
            running = list(self.running.values())
        while True:  # nothing queued will run
            try:
                job = self.queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancelled.set()
                job.future.set_result((error("the worker is stopping", "cancelled"), None))
        for job in running:
            self.cancel(job)
        self.stop_warming()
        # Only a warm-up running: nothing of value is lost by not waiting for it (a cold first query's planning
        # cannot be cancelled, and a stop waited 10 s for it: every short-lived worker paid that).
        warming = self.warming.under_way.is_set() and not running
        grace = WARMUP_STOP_GRACE_S if warming else STOP_GRACE_S
        deadline = time.monotonic() + grace
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return grace

    def _job_loop(self, slot: int) -> None:
        """One job thread: slot 0 uses the main session (and warms it up), the others a new session each."""
        spark, repin = self.engine.spark, self.engine.repin
        if slot:
            spark = self.engine.spark.newSession()
            repin = self.engine.pinner(spark)
        elif self.warmup:
            run_warm_ups(self.engine.execute, self.warming, self.stopping)
        while True:
            job = self.queue.get()
            if job is None:
                return
            if job.cancelled.is_set():
                job.future.set_result((error(f"job {job.id} was cancelled", "cancelled"), None))
                self.count("cancelled")
                continue
            if not self._run_one(job, spark, repin):
                return

    def _run_one(self, job: Job, spark: Any, repin: Any) -> bool:
        """Run ``job`` and answer it; False when the JVM is gone (the worker is stopping)."""
        with self.lock:
            self.running[job.id] = job
        t0 = time.perf_counter()
        try:
            header, buf = self.engine.execute(job, spark, repin)
        except Exception as e:  # noqa: BLE001 - every failure becomes an answer
            header, buf = self.engine.failure(job, e, self.stopping), None
        finally:
            with self.lock:
                self.running.pop(job.id, None)
        self.count("succeeded" if header["ok"] else "cancelled" if header["kind"] == "cancelled" else "failed")
        if header["ok"]:
            log.info("job %s: %d rows in %.0f ms", job.id, header["rows"], header["elapsed_ms"])
        else:
            ms = (time.perf_counter() - t0) * 1000
            log.info("job %s failed (%s, %.0f ms): %s", job.id, header["kind"], ms, header["error"])
        job.future.set_result((header, buf))
        if not header["ok"] and not self.engine.jvm_alive():
            log.error("the JVM died; exiting so that the node restarts the worker")
            self._on_jvm_died()
            return False
        return True
