"""``python -m spark_worker``: the command line checked, Spark started, the worker served until a signal.

Until Spark is up, a signal just ends the process; then the worker stops cleanly (running jobs cancelled, Spark
and its JVM stopped) and the process ends at once, so that nothing PySpark or py4j left behind can hold it.
The worker itself is ``spark_worker/worker.py``.

It imports nothing from the node: the protocol (spark_worker.protocol) is the whole interface.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from node.support.errors import one_line
from spark_worker.connections import bind, unlink_socket
from spark_worker.process import (
    EXIT_OK,
    EXIT_START_FAILED,
    EXIT_USAGE,
    set_parent_death_signal,
    stop_spark,
    watch_parent,
)
from spark_worker.protocol import TOKEN_ENV
from spark_worker.session import build_remote_session, build_session, check_conf
from spark_worker.worker import Worker

log = logging.getLogger("spark_worker")


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
    set_parent_death_signal()


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
        unlink_socket(args.socket, ino)
        stop_spark(spark)
        raise
    except Exception as e:  # noqa: BLE001
        unlink_socket(args.socket, ino)
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
        threading.Thread(target=watch_parent, args=(args.parent_pid,), name="parent-watch", daemon=True).start()
    try:
        listener, ino = bind(args.socket)
    except (OSError, ValueError) as e:
        log.error("cannot serve on %s: %s", args.socket, e)
        return EXIT_USAGE
    worker = _start_worker(args, conf, listener, ino)
    if worker is None:
        return EXIT_START_FAILED
    return _serve(worker)
