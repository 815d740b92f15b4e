"""The node's handle on its co-located Spark worker (``python -m spark_worker``, see docs/spark.md).

The worker is a separate process holding one warm SparkSession; the node talks to it over a
Unix domain socket (mode 0600) with the frames of ``spark_worker.protocol``, one connection per
call. Closing a connection while a job runs makes the worker cancel that job, so a timed-out or
cancelled ``run`` does not leave Spark busy.

The process is a plain ``subprocess.Popen`` (in its own session and process group, with the JVM
Spark starts in that same group), so a SparkWorker is bound to no event loop between calls.
``start`` must be called from the event loop's thread: the worker asks the kernel for SIGTERM
when the thread that spawned it exits (PR_SET_PDEATHSIG), and also polls its parent's pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from config import spark_master_kind
from node.errors import (
    InsufficientStorage,
    SparkError,
    SparkQueueFull,
    SparkRefused,
    SparkStartError,
    SparkTimeout,
    SparkWorkerDied,
    one_line,
)
from node.tally import Timings
from spark_worker.protocol import (
    PREFIX,
    TOKEN_ENV,
    ProtocolError,
    decode_header,
    decode_prefix,
    encode_frame,
)

log = logging.getLogger(__name__)

_EMPTY: Mapping[str, str] = MappingProxyType({})
_NO_LIMITS: Mapping[str, int] = MappingProxyType({})
_job_ids = itertools.count(1)
REMOTE_SCHEMES = ("hdfs://", "s3a://")  # spark.staging locations Spark reads under their own scheme
PROGRESS_EVERY_S = 0.5
_PROGRESS_KEYS = ("running", "stages", "stages_done", "tasks", "tasks_done", "tasks_running")


@dataclass(frozen=True)
class RunResult:
    table: pa.Table
    elapsed_ms: float  # in the worker: temp views + Spark + collecting the result as Arrow
    total_ms: float = 0.0  # seen by the node: the above + serialising, transfer, decoding
    job: str = ""
    profile: Mapping[str, Any] = field(default_factory=dict)  # the engine profile of the worker that ran it


def _package_root() -> str:
    spec = importlib.util.find_spec("spark_worker")
    if spec is None or spec.origin is None:
        raise SparkStartError("the spark_worker package is not importable")
    return str(Path(spec.origin).resolve().parent.parent)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, read from /proc."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()  # after "pid (comm) "
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class SparkWorker:
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
        self.socket_path = Path(socket_path).absolute()
        self.master, self.mode, self.remote, self._token = master, mode, remote, token  # see the class's docstring
        self.conf = dict(conf)
        stem = self.socket_path.stem
        self.log_path = Path(log_path) if log_path else self.socket_path.with_name(stem + ".log")
        self.scratch = Path(scratch).absolute() if scratch else self.socket_path.with_name(stem + "-scratch")
        self.python = python
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.warmup = warmup
        self.max_jobs = max_jobs
        self.max_queued = max_queued
        self.waiting = 0  # calls waiting for a slot
        self.stall_timeout = stall_timeout
        self.jit_rows = jit_rows  # the worker's idle JIT warm-up (spark.warmup_rows)
        self.job_times = Timings()  # each run's wall time by outcome: ok, or the SparkError's kind (/metrics)
        self.limits = dict(limits)
        self.restarts = 0
        self.jobs_sent = 0
        self.last_exit: int | None = None
        self.spark_version: str | None = None
        # What the running worker reported as its engine profile (versions, JVM pins, settings; see
        # spark_worker.session.engine_profile); the node writes it as an ep_0 that receipts link.
        self.profile: Mapping[str, Any] = _EMPTY
        self._proc: subprocess.Popen[bytes] | None = None
        self._slots: asyncio.Semaphore | None = None  # jobs in flight, at most max_jobs
        self._restart_lock: asyncio.Lock | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._log_offset = 0

    # --- state -----------------------------------------------------------------------------

    @property
    def deployment(self) -> dict[str, str]:
        """Where Spark runs, for receipts (rc_0 ``engine``): empty in local mode, so local receipts keep their
        bytes; ``{"mode": "standalone", "master": "spark"|"yarn"|"k8s"}`` or ``{"mode": "connect", "master":
        "connect"}`` otherwise. The kind only: never a host, port or token."""
        if self.mode == "local":
            return {}
        if self.mode == "connect":
            return {"mode": "connect", "master": "connect"}
        return {"mode": self.mode, "master": spark_master_kind(self.master) or "other"}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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

    def _get_restart_lock(self) -> asyncio.Lock:
        if self._restart_lock is None:
            self._restart_lock = asyncio.Lock()
        return self._restart_lock

    # --- start / stop ----------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the worker and wait (up to ``start_timeout``) until it answers a ping."""
        self._stopping = False
        if self._restart_task is not None and not self._restart_task.done():
            await asyncio.shield(self._restart_task)
        if self.alive():
            return
        if self._proc is not None:  # an earlier worker that died: make sure its JVM is gone too
            await self._kill_group(self._proc)
            self.last_exit = self._proc.returncode
        await self._launch()

    def _command(self) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "spark_worker",
            "--socket",
            str(self.socket_path),
            "--master",
            self.master,
            "--mode",
            self.mode,
            *(("--remote", self.remote) if self.mode == "connect" else ()),
            "--log",
            str(self.log_path),
            "--parent-pid",
            str(os.getpid()),
        ]
        conf = dict(self.conf)
        if self.mode != "connect":  # a Connect server's settings are its own (the worker checks them)
            conf.setdefault("spark.local.dir", str(self.scratch / "local"))
            conf.setdefault("spark.sql.warehouse.dir", str(self.scratch / "warehouse"))
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        if not self.warmup:
            cmd.append("--no-warmup")
        cmd += ["--max-jobs", str(self.max_jobs), "--stall-timeout", str(self.stall_timeout)]
        cmd += ["--jit-warmup-rows", str(self.jit_rows)]
        return cmd

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        root = _package_root()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        # Temporary files of Python (TMPDIR) and of the JVM (java.io.tmpdir: spark-submit makes a
        # spark-<uuid> dir there) go to the scratch directory too: a SIGKILLed JVM leaves them behind.
        tmp = str(self.scratch / "tmp")
        env["TMPDIR"] = tmp
        env["SPARK_SUBMIT_OPTS"] = " ".join(p for p in (env.get("SPARK_SUBMIT_OPTS"), f"-Djava.io.tmpdir={tmp}") if p)
        if self.master.strip().startswith("local"):
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.pop(TOKEN_ENV, None)
        if self.mode == "connect" and self._token:
            env[TOKEN_ENV] = self._token  # the environment, not argv: /proc/PID/cmdline is world-readable
        return env

    async def _launch(self) -> None:
        if len(os.fsencode(self.socket_path)) > 107:
            raise SparkStartError(f"the worker's socket path is {len(os.fsencode(self.socket_path))} bytes, over 107")
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                os.unlink(self.socket_path)  # stale; the old worker is gone (we reaped it or never had it)
        self._clean_scratch()
        (self.scratch / "tmp").mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # Blocking but instant; Popen runs in the loop's thread on purpose (PR_SET_PDEATHSIG follows
        # the spawning thread, and a worker thread of a pool may exit).
        with open(self.log_path, "ab") as logf:  # noqa: ASYNC230
            self._log_offset = logf.tell()
            t0 = time.monotonic()
            # Own session and process group (the JVM joins it): a Ctrl-C meant for the node does
            # not reach Spark, and the whole group can be killed if the worker dies.
            self._proc = subprocess.Popen(  # noqa: ASYNC220
                self._command(),
                cwd=self.scratch,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.info("Spark worker starting (pid %d, master %s)", self._proc.pid, self.master)
        try:
            pong = await self._wait_ready(self._proc, t0 + self.start_timeout)
        except BaseException:
            await self._kill_group(self._proc)
            raise
        self.spark_version = pong.get("spark")
        profile = pong.get("profile")
        if not isinstance(profile, dict):
            await self._kill_group(self._proc)
            raise SparkStartError("the Spark worker reported no engine profile (an older worker?)")
        self.profile = MappingProxyType(profile)
        log.info(
            "Spark worker ready (pid %d, Spark %s) in %.1f s", self._proc.pid, self.spark_version, time.monotonic() - t0
        )

    def _clean_scratch(self) -> None:
        """Empty the temporary parts of the scratch directory (only once no worker runs)."""
        for part in ("local", "tmp"):
            shutil.rmtree(self.scratch / part, ignore_errors=True)

    async def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
        while True:
            if proc.poll() is not None:
                self.last_exit = proc.returncode
                raise SparkStartError(
                    f"the Spark worker exited while starting ({_describe_exit(proc.returncode)}): {self._log_tail()}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise SparkStartError(
                    f"the Spark worker did not answer within {self.start_timeout:.0f} s: {self._log_tail()}"
                )
            if os.path.exists(self.socket_path):  # noqa: ASYNC240  one stat of a local socket path
                # The worker binds its socket before Spark starts and accepts once the session is
                # up: this ping simply waits for it (or fails when the process exits).
                try:
                    async with asyncio.timeout(left):
                        header, _ = await self._exchange({"op": "ping"})
                    if header.get("ok"):
                        return header
                except (OSError, ProtocolError, TimeoutError):
                    pass
            await asyncio.sleep(0.05)  # polling for the socket file / the process; not a fixed wait

    def _log_tail(self, lines: int = 4) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(self._log_offset, f.seek(0, os.SEEK_END) - 16384))
                text = f.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        kept = [
            ln.strip()
            for ln in text.splitlines()
            if ln.strip() and not ln.lstrip().startswith("at ") and "WARN" not in ln
        ]
        tail = " | ".join(kept[-lines:])
        # Answered to API clients: the node's directories are named, never shown (they tell how the host is laid out).
        for folder, shown in (
            (self.scratch, "<scratch>"),
            (self.log_path.parent, "<logs>"),
            (self.socket_path.parent, "<home>"),
        ):
            tail = tail.replace(str(folder), shown)
        if self._token:
            tail = tail.replace(self._token, "***")
        return (tail[-1500:] or "(log empty)") + f" (log: {self.log_path.name} in the node's logs)"

    async def stop(self) -> None:
        """SIGTERM the worker (by pid), SIGKILL its process group after ``stop_timeout``; idempotent."""
        self._stopping = True
        task, self._restart_task = self._restart_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            if not await self._wait_exit(proc, self.stop_timeout):
                log.warning("Spark worker %d ignored SIGTERM for %.0f s; killing it", proc.pid, self.stop_timeout)
        await self._kill_group(proc)
        self.last_exit = proc.returncode
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                os.unlink(self.socket_path)
        self._clean_scratch()
        log.info("Spark worker %d stopped (%s)", proc.pid, _describe_exit(proc.returncode))

    @staticmethod
    async def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def _kill_group(self, proc: subprocess.Popen[bytes]) -> None:
        """Make sure the worker and everything in its process group (the JVM) are gone.

        After a clean exit the group is already empty (the worker waits for its JVM). If the
        worker died or hung, what is left gets SIGKILL at once: an orphaned JVM would otherwise
        keep computing the abandoned job on the cores the next worker needs (its temporary files
        are in the scratch directory, which the next start empties).
        """
        pgid = proc.pid  # start_new_session: the worker leads its own group
        for _ in range(3):
            if proc.poll() is None or group_members(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            await self._wait_exit(proc, 5.0)
            deadline = time.monotonic() + 5.0
            while group_members(pgid) and time.monotonic() < deadline:  # noqa: ASYNC110  no event tells a group ended
                await asyncio.sleep(0.02)
            if proc.poll() is not None and not group_members(pgid):
                return
        log.error("Spark worker group %d survived SIGKILL: %s", pgid, group_members(pgid))

    # --- restarts --------------------------------------------------------------------------

    def _schedule_restart(self) -> None:
        if self._stopping or (self._restart_task is not None and not self._restart_task.done()):
            return
        self._restart_task = asyncio.get_running_loop().create_task(self._restart(), name="spark-worker-restart")
        self._restart_task.add_done_callback(self._restart_done)

    @staticmethod
    def _restart_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("Spark worker restart failed: %s", task.exception())

    async def _restart(self) -> None:
        old = self._proc
        if old is not None:
            await self._kill_group(old)
            self.last_exit = old.returncode
        self.restarts += 1
        log.warning(
            "restarting the Spark worker (restart %d; the last one %s)", self.restarts, _describe_exit(self.last_exit)
        )
        await self._launch()

    async def _ensure_running(self) -> subprocess.Popen[bytes]:
        """The worker's process, restarted first if it died."""
        if self._stopping:
            raise SparkError("the Spark worker is stopped", kind="worker")
        task = self._restart_task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
        if self._proc is None:
            raise SparkError("the Spark worker is not started", kind="worker")
        async with self._get_restart_lock():  # concurrent runs restart a dead worker once
            if not self.alive():
                self._restart_task = None
                await self._restart()  # raises SparkStartError if it cannot come back
        proc = self._proc
        if proc is None:  # stopped while it restarted
            raise SparkError("the Spark worker is stopped", kind="worker")
        return proc

    # --- calls -----------------------------------------------------------------------------

    async def _exchange(
        self, header: dict[str, Any], *, on_sent: Any = None, batches: list[pa.RecordBatch] | None = None
    ) -> tuple[dict[str, Any], pa.Buffer | None]:
        """One request/answer on a fresh connection (closed on return, error or cancellation). ``batches``: a run's
        result batches, received before its answer (spark_worker.protocol), are appended there."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, str(self.socket_path))
            await loop.sock_sendall(sock, encode_frame(header))
            if on_sent is not None:
                on_sent()
            while True:
                prefix = await self._recv_exact(loop, sock, PREFIX.size)
                header_len, payload_len = decode_prefix(bytes(prefix))
                answer = decode_header(bytes(await self._recv_exact(loop, sock, header_len)))
                payload = pa.py_buffer(await self._recv_exact(loop, sock, payload_len)) if payload_len else None
                if batches is None or "batch" not in answer:
                    return answer, payload
                if answer["batch"] != len(batches) or payload is None:
                    raise ProtocolError(
                        f"batch frame {answer['batch']!r} with {payload_len} bytes, expected {len(batches)}"
                    )
                batches.append(_own_batch(payload))
        finally:
            sock.close()

    @staticmethod
    async def _recv_exact(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = await loop.sock_recv_into(sock, view[got:])
            if k == 0:
                raise ConnectionResetError("the worker closed the connection")  # an OSError: callers catch those
            got += k
        return buf

    async def ping(self) -> dict[str, Any]:
        try:
            header, _ = await self._exchange({"op": "ping"})
        except (OSError, ProtocolError) as e:
            raise SparkError(f"the Spark worker does not answer: {e or 'connection closed'}", kind="worker") from None
        return header

    async def stats(self) -> dict[str, Any]:
        """The worker's counters (jobs, succeeded, failed, cancelled, running…) plus ``restarts``
        and ``jobs_sent`` from this side. Answered at once, even while a job runs."""
        try:
            header, _ = await self._exchange({"op": "stats"})
        except (OSError, ProtocolError) as e:
            raise SparkError(f"the Spark worker does not answer: {e or 'connection closed'}", kind="worker") from None
        header.pop("ok", None)
        return {**header, "restarts": self.restarts, "jobs_sent": self.jobs_sent}

    async def progress(self, job: str) -> dict[str, Any]:
        """Spark's stages and tasks so far for ``job`` (``running`` False once it ended or before it started)."""
        try:
            header, _ = await self._exchange({"op": "progress", "job": job})
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
                    header, _ = await self._exchange(request, on_sent=mark_sent, batches=batches)
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
                f"({_describe_exit(proc.returncode)}); it is being restarted"
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
    """A local file as an absolute path; a staged one on ``hdfs://`` or ``s3a://`` (node/resolve/staging.py) as is."""
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


def _own_batch(payload: pa.Buffer) -> pa.RecordBatch:
    """The one record batch of a batch frame, each column copied into its own memory: the frame's buffer is freed at
    once, and the columns can later be made one chunk each while freeing the batches column by column
    (``_one_chunk_columns``: the result held about once, not twice)."""
    try:
        batch = pa.ipc.open_stream(payload).read_next_batch()
    except (pa.ArrowInvalid, StopIteration) as e:
        raise ProtocolError(f"a batch frame is not one Arrow record batch: {e}") from None
    return pa.RecordBatch.from_arrays([pa.concat_arrays([c]) for c in batch.columns], schema=batch.schema)


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
