"""The Spark worker's process (``python -m spark_worker``, docs/spark.md): started and waited for, stopped, restarted
when it dies; the JVM Spark starts in its process group is killed with it.

The process is a plain ``subprocess.Popen`` (in its own session and process group, with the JVM
Spark starts in that same group), so a worker is bound to no event loop between calls.
``start`` must be called from the event loop's thread: the worker asks the kernel for SIGTERM
when the thread that spawned it exits (PR_SET_PDEATHSIG), and also polls its parent's pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from config import spark_master_kind
from node.services.resolve.spark_wire import exchange
from node.support.errors import SparkError, SparkStartError
from spark_worker.protocol import TOKEN_ENV, ProtocolError

log = logging.getLogger("node.services.resolve.spark")  # one logger for the worker's process and its calls

_EMPTY: Mapping[str, str] = MappingProxyType({})


def _package_root() -> str:
    spec = importlib.util.find_spec("spark_worker")
    if spec is None or spec.origin is None:
        raise SparkStartError("the spark_worker package is not importable")
    return str(Path(spec.origin).resolve().parent.parent)


def describe_exit(code: int | None) -> str:
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


class WorkerProcess:
    """One worker process and its restarts; ``SparkWorker`` makes the calls."""

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
        stall_timeout: float = 0.0,
        jit_rows: int = 0,
        mode: str = "local",
        remote: str = "",
        token: str = "",
        scratch: Path | None = None,
    ) -> None:
        """The parameters: ``SparkWorker``'s."""
        self.socket_path = Path(socket_path).absolute()
        self.master, self.mode, self.remote, self._token = master, mode, remote, token  # see SparkWorker's docstring
        self.conf = dict(conf)
        stem = self.socket_path.stem
        self.log_path = Path(log_path) if log_path else self.socket_path.with_name(stem + ".log")
        self.scratch = Path(scratch).absolute() if scratch else self.socket_path.with_name(stem + "-scratch")
        self.python = python
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.warmup = warmup
        self.max_jobs = max_jobs
        self.stall_timeout = stall_timeout
        self.jit_rows = jit_rows  # the worker's idle JIT warm-up (spark.warmup_rows)
        self.restarts = 0
        self.last_exit: int | None = None
        self.spark_version: str | None = None
        # What the running worker reported as its engine profile (versions, JVM pins, settings; see
        # spark_worker.session.engine_profile); the node writes it as an ep_0 that receipts link.
        self.profile: Mapping[str, Any] = _EMPTY
        self._proc: subprocess.Popen[bytes] | None = None
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
                    f"the Spark worker exited while starting ({describe_exit(proc.returncode)}): {self._log_tail()}"
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
                        header, _ = await exchange(self.socket_path, {"op": "ping"})
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
        log.info("Spark worker %d stopped (%s)", proc.pid, describe_exit(proc.returncode))

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
            "restarting the Spark worker (restart %d; the last one %s)", self.restarts, describe_exit(self.last_exit)
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
