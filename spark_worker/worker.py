"""The worker: one warm SparkSession serving jobs over a Unix domain socket.

Threads:
- the main thread accepts connections (:meth:`Worker.serve`) and stops on a signal or the parent's death;
- one handler thread per connection reads requests and answers them (``spark_worker/connections.py``);
- ``--max-jobs`` job threads run the jobs (``spark_worker/scheduler.py``) on the engine (``spark_worker/engine.py``);
- a watchdog kills a JVM that makes no progress while a job runs (``Engine.watch``).
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
from pathlib import Path
from typing import Any

from spark_worker.connections import Connections, unlink_socket
from spark_worker.engine import Engine
from spark_worker.jobs import Job
from spark_worker.process import EXIT_JVM_DIED, EXIT_OK, stop_spark
from spark_worker.scheduler import JobThreads

log = logging.getLogger("spark_worker")


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
        self.engine = Engine(spark, remote, stall_s)
        self.listener = listener
        self.socket_path = socket_path
        self.socket_ino = socket_ino
        self.parent_pid = parent_pid
        self.exit_code = EXIT_OK
        self.stopping = threading.Event()
        self.jobs = JobThreads(
            self.engine,
            max_jobs,
            self.stopping,
            lambda: self.stop(EXIT_JVM_DIED),
            warmup=warmup,
            jit_rows=jit_rows,
        )
        self.connections = Connections(self.engine, self.jobs, self.stopping)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def execute(self, job: Job, spark: Any = None, repin: Any = None) -> tuple[dict[str, Any], Any]:
        """Run one job in this thread (``Engine.execute``): what the job threads do, for tools driving a worker
        in process."""
        return self.engine.execute(job, spark, repin)

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
        self.jobs.start()
        threading.Thread(
            target=self.engine.watch, args=(self.jobs.busy, self.stopping), name="spark-watchdog", daemon=True
        ).start()
        self.listener.setblocking(False)
        log.info("ready on %s (Spark %s, master %s)", self.socket_path, self.engine.version, self.engine.master)
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
            self.connections.admit(conn)
        self.shutdown()
        return self.exit_code

    def shutdown(self) -> None:
        log.info("stopping")
        self.listener.close()
        unlink_socket(self.socket_path, self.socket_ino)
        grace = self.jobs.stop()
        stop_spark(self.engine.spark, grace)
