"""What a failed job is answered as: the error header, and its kind (``died``, ``cancelled``, ``analysis``,
``refused``, ``disk_full``, ``runtime``; docs/spark.md) decided from the exception and the worker's state. IO-free:
the caller says whether the JVM lives, whether the worker is stopping."""

from __future__ import annotations

import logging
from typing import Any

from node.support.errors import one_line
from spark_worker import guard
from spark_worker.jobs import Cancelled, InputMismatch

log = logging.getLogger("spark_worker")

#: How a full disk reads in a JVM or Python error, anywhere in its chain of causes (py4j's message is only
#: "An error occurred while calling o1.getResult", the cause is in the Java stack trace after it).
DISK_FULL_TEXTS = ("no space left on device", "disk quota exceeded")


def error(message: str, kind: str, *, condition: str | None = None, sqlstate: str | None = None) -> dict[str, Any]:
    return {"ok": False, "error": message, "kind": kind, "condition": condition, "sqlstate": sqlstate}


def failure(
    job_id: str,
    exc: BaseException,
    *,
    cancelled: bool,
    jvm_alive: bool,
    stalled: bool,
    stall_s: float,
    stopping: bool,
) -> dict[str, Any]:
    """The answer to job ``job_id``, which raised ``exc``; ``cancelled``: its cancel flag is set, ``stalled``: the
    watchdog killed the JVM (made no progress for ``stall_s`` seconds)."""
    from pyspark.errors import AnalysisException, PySparkException

    if not jvm_alive:
        # -XX:+ExitOnOutOfMemoryError (session.py) ends the JVM on an OOM, the watchdog kills a stalled
        # one; the worker then exits too, and the node restarts it.
        why = f"made no progress for {stall_s:g} s and was killed" if stalled else "died (out of memory?)"
        return error(f"the Spark JVM {why} during job {job_id}; the worker restarts", "died")
    if stopping:
        return error(f"the worker is stopping (job {job_id} cancelled)", "cancelled")
    if cancelled or isinstance(exc, Cancelled):
        return error(f"job {job_id} was cancelled", "cancelled")
    if isinstance(exc, InputMismatch):
        return error(str(exc), "analysis")
    if isinstance(exc, guard.Refused):
        return error(str(exc), "refused", condition=exc.rule)
    if disk_full(exc):  # the node's disk, not the query: never answered (nor recorded) as the query's failure
        return error(f"no space left on disk for Spark's files during job {job_id}", "disk_full")
    condition = sqlstate = None
    if isinstance(exc, PySparkException):
        try:
            condition, sqlstate = exc.getCondition(), exc.getSqlState()
        except Exception as e:  # noqa: BLE001 - the message alone still makes an answer
            log.debug("no error class on %s: %s", type(exc).__name__, e)
    kind = "analysis" if isinstance(exc, AnalysisException) else "runtime"
    message = one_line(str(exc), first=True) or type(exc).__name__
    return error(message, kind, condition=condition, sqlstate=sqlstate)


def from_java(exc: BaseException) -> bool:
    """True when the JVM itself answered with this error (so it is alive); False for py4j's own network errors."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return isinstance(exc, (Py4JJavaError, PySparkException, InputMismatch, guard.Refused, Cancelled))


def disk_full(exc: BaseException) -> bool:
    """``exc`` says a disk filled: ENOSPC/EDQUOT, or the JVM's IOException text anywhere in its (Java) trace."""
    if isinstance(exc, OSError) and exc.errno in (28, 122):  # ENOSPC, EDQUOT
        return True
    try:
        text = str(exc).lower()
    except Exception:  # noqa: BLE001 - a py4j error whose text cannot be read: not a disk, as far as we know
        return False
    return any(t in text for t in DISK_FULL_TEXTS)
