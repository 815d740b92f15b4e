"""The worker process and its JVM: exit codes, the JVM's process and CPU time, when a JVM that makes no progress
counts as stalled (:class:`StallWatch`, IO-free), stopping Spark and making sure the JVM exited, and dying with
the parent (the node) even when a clean stop cannot end."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

log = logging.getLogger("spark_worker")

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_JVM_DIED = 3
EXIT_START_FAILED = 4

STOP_GRACE_S = 10.0
PR_SET_PDEATHSIG = 1

WATCH_EVERY_S = 1.0
# A sample (WATCH_EVERY_S) in which the JVM used more CPU than this is progress: a computing job uses about a
# core; an idle JVM's own threads (heartbeats, a GC) use a few ms.
STALL_CPU_S = 0.1 * WATCH_EVERY_S
ORPHAN_KILL_S = 3 * STOP_GRACE_S + 5  # longer than a clean stop can take (job, spark.stop, JVM exit)


def jvm_proc() -> Any:
    """The JVM's ``Popen`` (PySpark's gateway), None without a local JVM."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    return getattr(gateway, "proc", None) if gateway is not None else None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (threads included), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class StallWatch:
    """Whether the JVM has burnt no CPU for longer than ``stall_s`` while jobs ran, from one CPU sample per
    WATCH_EVERY_S. Only CPU time counts, not finished tasks: a long task that computes is never a stall. IO-free."""

    def __init__(self, stall_s: float, cpu: float | None, now: float) -> None:
        self.stall_s = stall_s
        self._last_cpu = cpu
        self._since = now

    def sample(self, cpu: float, now: float, busy: bool) -> float | None:
        """One sample (``busy``: a job runs); the seconds without progress once they pass ``stall_s``, else None."""
        progress = self._last_cpu is None or cpu - self._last_cpu > STALL_CPU_S
        self._last_cpu = cpu
        if not busy or progress:
            self._since = now
            return None
        idle = now - self._since
        return idle if idle > self.stall_s else None


def stop_spark(spark: Any, grace: float = STOP_GRACE_S) -> None:
    """Stop the session (bounded by ``grace`` seconds, twice), then make sure the JVM has exited."""
    proc = jvm_proc()
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


def set_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except OSError as e:
        log.warning("prctl unavailable: %s", e)


def watch_parent(parent_pid: int) -> None:
    """Backup for PR_SET_PDEATHSIG (which follows the parent *thread*): poll getppid(). An orphan that has
    not stopped cleanly within ORPHAN_KILL_S (a JVM wedged by an OOM, a thread stuck in py4j) kills itself
    and its JVM: without it, an orphaned worker and JVM (780 MB) live on for 10+ minutes."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    log.warning("parent process %d is gone; stopping", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_KILL_S)  # this daemon thread dies with the process when the clean stop ends in time
    log.error("still running %.0f s after the parent died; killing the worker and its JVM", ORPHAN_KILL_S)
    kill_everything()


def kill_everything() -> None:
    """SIGKILL this worker's process group (the node starts it as a group leader; the JVM is in it), or at
    least the JVM and this process."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None:
        proc.kill()
    os.kill(os.getpid(), signal.SIGKILL)
