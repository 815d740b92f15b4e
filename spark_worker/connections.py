"""The worker's Unix socket and the node's connections to it: the socket bound mode 0600 (a stale one replaced,
ours alone unlinked), connections from this user only and at most MAX_CONNECTIONS, frames read and sent
(``spark_worker/protocol.py``), and each connection's requests answered by its own thread: ``ping``, ``stats`` and
``progress`` at once, even while a job runs; ``run`` queued, its client watched while it waits (a client that
goes away cancels its job), its result sent."""

from __future__ import annotations

import functools
import logging
import os
import select
import socket
import stat
import struct
import threading
import time
from pathlib import Path
from typing import Any

from spark_worker.answers import error
from spark_worker.engine import Engine
from spark_worker.jobs import Job, RequestError, parse_job
from spark_worker.process import jvm_proc
from spark_worker.protocol import PREFIX, PROTOCOL_VERSION, ProtocolError, decode_header, decode_prefix, encode_frame
from spark_worker.scheduler import JobThreads

log = logging.getLogger("spark_worker")

MAX_CONNECTIONS = 32
CANCEL_REPEAT_S = 0.5  # a cancel sent before the job's Spark job exists is repeated until the job ends


def bind(path: Path) -> tuple[socket.socket, int]:
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


def unlink_socket(path: Path, ino: int) -> None:
    """Remove our socket file, not one a successor bound at the same path."""
    try:
        if os.stat(path).st_ino == ino:
            os.unlink(path)
    except OSError:
        pass


def same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        log.warning("refused a connection from uid %d", uid)
        return False
    return True


def recv_exact(conn: socket.socket, n: int) -> bytes | None:
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


def read_request(conn: socket.socket) -> dict[str, Any] | None:
    prefix = recv_exact(conn, PREFIX.size)
    if prefix is None:
        return None
    header_len, payload_len = decode_prefix(prefix)
    if payload_len:
        raise ProtocolError("requests carry no payload")
    body = recv_exact(conn, header_len)
    if body is None:
        raise ProtocolError("connection closed inside a frame")
    return decode_header(body)


def send(conn: socket.socket, header: dict[str, Any], payload: Any = None) -> None:
    size = payload.size if payload is not None else 0
    conn.sendall(encode_frame(header, size))
    if size:
        conn.sendall(payload)


class Connections:
    """The node's connections: admitted, each served by its own thread until it closes or the worker stops."""

    def __init__(self, engine: Engine, jobs: JobThreads, stopping: threading.Event) -> None:
        self.engine = engine
        self.jobs = jobs
        self.stopping = stopping
        self.started = time.time()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def admit(self, conn: socket.socket) -> None:
        """Serve ``conn`` on a thread of its own, or close it: another user's, or one too many."""
        conn.setblocking(True)
        if not same_user(conn) or not self.slots.acquire(blocking=False):
            conn.close()
            return
        threading.Thread(target=self._handle, args=(conn,), name="spark-conn", daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                while not self.stopping.is_set():
                    try:
                        req = read_request(conn)
                    except ProtocolError as e:
                        send(conn, error(f"protocol error: {e}", "request"))
                        return
                    if req is None or not self._answer(conn, req):
                        return
        except OSError as e:
            log.debug("connection ended: %s", e)
        finally:
            self.slots.release()

    def _answer(self, conn: socket.socket, req: dict[str, Any]) -> bool:
        """Answer one request; False when the connection is gone."""
        op = req.get("op")
        if op == "ping":
            send(conn, self.ping())
        elif op == "stats":
            send(conn, self.stats())
        elif op == "progress":
            send(conn, self.progress(req.get("job")))
        elif op == "run":
            return self._run(conn, req)
        else:
            send(conn, error(f"unknown op {op!r}", "request"))
        return True

    def ping(self) -> dict[str, Any]:
        counters, _running = self.jobs.snapshot()
        return {
            "ok": True,
            "spark": self.engine.version,
            "jobs": counters["jobs"],
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "jvm_pid": getattr(jvm_proc(), "pid", None),
            "profile": self.engine.profile,
        }

    def stats(self) -> dict[str, Any]:
        counters, running = self.jobs.snapshot()
        return {
            "ok": True,
            **counters,
            "running": running[0] if running else None,  # the oldest running job
            "running_jobs": running,
            "max_jobs": self.jobs.max_jobs,
            "queued": self.jobs.queue.qsize(),
            "spark": self.engine.version,
            "master": self.engine.master,
            "uptime_s": round(time.time() - self.started, 3),
            "pid": os.getpid(),
            "jvm_pid": getattr(jvm_proc(), "pid", None),
        }

    def progress(self, job_id: object) -> dict[str, Any]:
        """Spark's stages and tasks so far for a running job: what a client shows while it waits."""
        if not isinstance(job_id, str) or not self.jobs.is_running(job_id):
            return {"ok": True, "job": job_id, "running": False}
        return self.engine.progress(job_id)

    def _run(self, conn: socket.socket, req: dict[str, Any]) -> bool:
        """Serve one run request; False when the connection is gone."""
        self.jobs.count("jobs")
        try:
            job = parse_job(req)
        except RequestError as e:
            self.jobs.count("failed")
            log.info("refused a run request: %s", e)
            send(conn, error(str(e), "request"))
            return True
        job.send = functools.partial(send, conn)  # the result's batches go from the job thread
        client_gone, header, buf = self._wait(conn, job)
        if client_gone:
            return False
        send(conn, header, buf)
        return True

    def _wait(self, conn: socket.socket, job: Job) -> tuple[bool, dict[str, Any], Any]:
        """Queue ``job`` and wait for its answer, watching the client: (whether it went away, header, payload)."""
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

        try:
            job.future.add_done_callback(wake)
            self.jobs.submit(job)
            client_gone = False
            while not job.future.done():
                if client_gone:
                    # Repeat the cancel until the job ends: one sent before its Spark job existed
                    # (while the views were being made) cancelled nothing.
                    ready, _, _ = select.select([done_r], [], [], CANCEL_REPEAT_S)
                    if not ready:
                        self.jobs.cancel(job)
                    continue
                ready, _, _ = select.select([conn.fileno(), done_r], [], [])  # fds: one type for select's list
                if conn.fileno() in ready and not job.future.done():
                    # The client sends nothing while it waits: readable means it closed (or broke
                    # the protocol). Either way the job has nobody to answer to: cancel it.
                    log.info("job %s: client went away, cancelling", job.id)
                    client_gone = True
                    self.jobs.cancel(job)
            header, buf = job.future.result()
        finally:
            os.close(done_r)
        return client_gone, header, buf
