"""The Spark worker's decisions, without Spark: a run request parsed (``spark_worker.jobs``), a failed job's answer
(``spark_worker.answers``), when a JVM counts as stalled (``spark_worker.process.StallWatch``), a warm-up stopped by a
real job (``spark_worker.warmup.Warming``), and the job threads' queue, counters and answers
(``spark_worker.scheduler.JobThreads``) over an engine that only records what it is asked."""

from __future__ import annotations

import errno
import threading
import time
from typing import Any

import pytest
from pyspark.errors import AnalysisException, PySparkValueError

from spark_worker import answers, guard
from spark_worker.jobs import Cancelled, InputMismatch, Job, RequestError, parse_job
from spark_worker.process import STALL_CPU_S, StallWatch
from spark_worker.scheduler import JobThreads
from spark_worker.warmup import Warming

RUN = {
    "op": "run",
    "job": "j-1",
    "statement": "SELECT * FROM a",
    "inputs": {"a": {"paths": ["/d/a.parquet"], "columns": ["col_0"]}},
}


# -- the run request ------------------------------------------------------------------------------------------


def test_a_run_request_becomes_a_job() -> None:
    job = parse_job({**RUN, "limits": {"rows": 10}})
    assert (job.id, job.statement, job.inputs) == ("j-1", "SELECT * FROM a", {"a": (["/d/a.parquet"], ["col_0"])})
    assert job.limits.rows == 10 and not job.cancelled.is_set() and not job.future.done()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"job": "no spaces"}, "'job' must be"),
        ({"statement": "  "}, "'statement' must be"),
        ({"inputs": {"a": {"paths": ["relative.parquet"], "columns": ["c"]}}}, "must be absolute"),
        ({"inputs": {"a": {"paths": ["/d/*.parquet"], "columns": ["c"]}}}, "no glob characters"),
        ({"inputs": {"a": {"paths": ["/d/a.parquet"], "columns": ["c", "C"]}}}, "duplicate column names"),
        ({"inputs": {"a": {"paths": ["/x"], "columns": ["c"]}, "A": {"paths": ["/y"], "columns": ["c"]}}}, "twice"),
        ({"inputs": {"a": ["/x"]}}, "must be an object"),
        ({"inputs": {f"t{i}": {"paths": ["/x"], "columns": ["c"]} for i in range(65)}}, "at most 64 inputs"),
        ({"limits": {"rows": -1}}, "limits.rows must be a non-negative integer"),
    ],
)
def test_a_bad_run_request_says_what_is_wrong(change: dict[str, Any], says: str) -> None:
    with pytest.raises(RequestError, match=says):
        parse_job({**RUN, **change})


# -- a failed job's answer ------------------------------------------------------------------------------------


def _answer(exc: BaseException, **state: Any) -> dict[str, Any]:
    flags = {"cancelled": False, "jvm_alive": True, "stalled": False, "stall_s": 60.0, "stopping": False, **state}
    return answers.failure("j-1", exc, **flags)


def test_a_dead_jvm_comes_first_and_says_why() -> None:
    assert _answer(ValueError("x"), jvm_alive=False, stopping=True)["kind"] == "died"
    assert "died (out of memory?)" in _answer(ValueError("x"), jvm_alive=False)["error"]
    stalled = _answer(ValueError("x"), jvm_alive=False, stalled=True)
    assert "made no progress for 60 s and was killed" in stalled["error"] and stalled["kind"] == "died"


def test_cancelled_jobs_and_the_worker_stopping() -> None:
    assert _answer(ValueError("x"), stopping=True) == answers.error(
        "the worker is stopping (job j-1 cancelled)", "cancelled"
    )
    assert _answer(ValueError("x"), cancelled=True)["kind"] == "cancelled"
    assert _answer(Cancelled())["error"] == "job j-1 was cancelled"


def test_the_kinds_of_a_job_s_own_failure() -> None:
    assert _answer(InputMismatch("input a: 2 columns"))["kind"] == "analysis"
    refused = _answer(guard.Refused("clock-value", "now()"))
    assert (refused["kind"], refused["condition"]) == ("refused", "clock-value")
    assert _answer(OSError(errno.ENOSPC, "full"))["kind"] == "disk_full"
    assert _answer(RuntimeError("java.io.IOException: No space left on device"))["kind"] == "disk_full"
    analysis = _answer(AnalysisException(message="[X] no such table\nJVM stacktrace: ..."))
    assert (analysis["kind"], analysis["error"]) == ("analysis", "[X] no such table")
    runtime = _answer(PySparkValueError(errorClass="CANNOT_BE_EMPTY", messageParameters={"item": "x"}))
    assert (runtime["kind"], runtime["condition"]) == ("runtime", "CANNOT_BE_EMPTY")
    assert _answer(KeyError())["error"] == "KeyError"  # no text: the type names it


# -- the stall watch ------------------------------------------------------------------------------------------


def test_a_jvm_is_stalled_only_when_it_burns_no_cpu_while_a_job_runs() -> None:
    watch = StallWatch(10.0, cpu=5.0, now=0.0)
    assert watch.sample(5.0, now=8.0, busy=True) is None  # 8 s without progress: not yet
    assert watch.sample(5.0 + STALL_CPU_S * 2, now=9.0, busy=True) is None  # progress: the clock restarts
    assert watch.sample(5.2, now=19.0, busy=True) is None  # exactly 10 s: not over
    assert watch.sample(5.2, now=19.5, busy=True) == 10.5
    idle = StallWatch(10.0, cpu=5.0, now=0.0)
    assert idle.sample(5.0, now=100.0, busy=False) is None  # no job: an idle JVM is no stall
    assert idle.sample(5.0, now=105.0, busy=True) is None  # counted from the last idle sample
    assert StallWatch(1.0, cpu=None, now=0.0).sample(0.0, now=50.0, busy=True) is None  # a first reading is progress


# -- warm-ups -------------------------------------------------------------------------------------------------


def test_a_real_job_stops_the_warm_up_under_way() -> None:
    warming = Warming(jit_rows=100)
    cancelled: list[str] = []
    warming.stop(lambda job: cancelled.append(job.id))
    assert warming.job_came.is_set() and cancelled == []  # none under way: it never starts
    warming.job = Job("warmup-jit-0", "SELECT 1", {})
    warming.stop(lambda job: cancelled.append(job.id))
    assert warming.job.cancelled.is_set() and cancelled == ["warmup-jit-0"]


# -- the job threads ------------------------------------------------------------------------------------------


class _Engine:
    """Runs nothing: a job whose statement is ``fail`` raises, ``block`` waits until it is cancelled, any other
    succeeds; the JVM dies on request."""

    def __init__(self) -> None:
        self.spark = self
        self.repin = lambda: None
        self.alive = True
        self.cancelled: list[str] = []
        self.released = threading.Event()

    def newSession(self) -> _Engine:  # SparkSession's name
        return self

    def pinner(self, spark: Any) -> Any:
        return self.repin

    def execute(self, job: Job, spark: Any = None, repin: Any = None) -> tuple[dict[str, Any], Any]:
        if job.statement == "fail":
            raise RuntimeError("boom")
        if job.statement == "block":
            self.released.wait(60)
            raise Cancelled()
        return {"ok": True, "job": job.id, "rows": 1, "elapsed_ms": 1.0}, None

    def failure(self, job: Job, exc: BaseException, stopping: threading.Event) -> dict[str, Any]:
        return answers.error(str(exc), "runtime")

    def jvm_alive(self, wait: float = 0.0) -> bool:
        return self.alive

    def cancel(self, job: Job) -> None:
        self.cancelled.append(job.id)
        self.released.set()


def _threads(engine: _Engine, died: list[bool]) -> JobThreads:
    return JobThreads(engine, 1, threading.Event(), lambda: died.append(True), warmup=False, jit_rows=0)  # type: ignore[arg-type]


def test_jobs_are_answered_and_counted() -> None:
    engine, died = _Engine(), []
    threads = _threads(engine, died)
    threads.start()
    ok, bad, gone = Job("ok", "SELECT 1", {}), Job("bad", "fail", {}), Job("gone", "SELECT 1", {})
    gone.cancelled.set()  # cancelled while queued: answered without running
    for job in (ok, bad, gone):
        threads.submit(job)
    assert ok.future.result(timeout=30)[0]["ok"] is True
    assert bad.future.result(timeout=30)[0] == answers.error("boom", "runtime")
    assert gone.future.result(timeout=30)[0] == answers.error("job gone was cancelled", "cancelled")
    assert threads.snapshot() == ({"jobs": 0, "succeeded": 1, "failed": 1, "cancelled": 1}, [])
    assert threads.stop() == 10.0 and died == []  # a stop with nothing running waits the full grace at most
    assert all(not t.is_alive() for t in threads.threads)


def test_a_failure_with_the_jvm_gone_stops_the_worker() -> None:
    engine, died = _Engine(), []
    engine.alive = False
    threads = _threads(engine, died)
    threads.start()
    job = Job("bad", "fail", {})
    threads.submit(job)
    assert job.future.result(timeout=30)[0]["ok"] is False
    threads.threads[0].join(30)
    assert died == [True] and not threads.threads[0].is_alive()  # the thread ended: no job runs on a dead JVM


def test_a_stop_answers_what_is_queued_and_cancels_what_runs() -> None:
    engine, died = _Engine(), []
    threads = _threads(engine, died)
    threads.start()
    running, queued = Job("running", "block", {}), Job("queued", "SELECT 1", {})
    threads.submit(running)
    deadline = time.monotonic() + 30
    while threads.snapshot()[1] != ["running"]:
        assert time.monotonic() < deadline, "the blocking job never started"
        time.sleep(0.01)
    threads.submit(queued)  # behind the running one (one thread)
    threads.stop()
    assert queued.future.result(timeout=1)[0] == answers.error("the worker is stopping", "cancelled")
    assert running.cancelled.is_set() and engine.cancelled == ["running"]
    assert running.future.result(timeout=1)[0]["ok"] is False
    assert not threads.threads[0].is_alive()
