"""The harness the node benchmarks share (query.py, network.py, ingest.py, load.py and the benches built on them).

- ``BenchNode``: a Cairn node process in a temp home (``cairn node start --api-port 0``: free ports, its own managed
  Kubo, its Spark worker if the environment autostarts one), waited for, and stopped by PID;
- ``Api``: one keep-alive HTTP/1.1 connection to a node's API, timed on the client;
- ``Phase``, ``OtherCpu``, ``wait_machine_quiet``: the CPU this process and all it started used, against the rest
  of the machine (other work on a shared machine lands on one side of a ratio only);
- ``say``: progress on stderr.

Process-level helpers (/proc, process trees, ``wait_tree_quiet``) are in _procs.py. Only the standard library here:
ingest.py's baseline runs that script again in a process that must not import pyarrow or Cairn.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import IO, Any, Self

from _procs import cairn_argv, cpu_seconds, descendants, pid_alive, start_time, wait_gone


def say(msg: str) -> None:
    """Progress on stderr, tagged with the bench being run (the script's name), helpers' lines included."""
    print(f"[{Path(sys.argv[0]).stem} bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --------------------------------------------------------------------------- CPU: ours against the machine's


def machine_busy_seconds() -> float:
    """CPU seconds spent by the whole machine (all CPUs, not idle or iowait) since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def our_cpu() -> dict[int, float]:
    """CPU seconds so far of this process and every live process it started; key -1: its children that exited and
    were waited for (their CPU no longer shows under a PID)."""
    ours = {p: c for p in [os.getpid(), *descendants(os.getpid())] if (c := cpu_seconds(p)) is not None}
    ours[-1] = sum(os.times()[2:4])
    return ours


def _ours_since(ours0: dict[int, float], ours1: dict[int, float]) -> float:
    """Our CPU seconds between two ``our_cpu()`` readings (a process started since counts from 0)."""
    return sum(c - ours0.get(p, 0.0) for p, c in ours1.items())


class OtherCpu:
    """Other work's share of all CPUs between ``start()`` and ``share()`` (busy CPU time of the machine minus
    that of this process and its descendants); the snapshots are taken outside the timed code."""

    def start(self) -> None:
        self.busy0, self.ours0, self.t0 = machine_busy_seconds(), our_cpu(), time.monotonic()

    def share(self) -> float:
        wall = time.monotonic() - self.t0
        ours = _ours_since(self.ours0, our_cpu())
        other = max(0.0, machine_busy_seconds() - self.busy0 - ours)
        return round(other / (wall * (os.cpu_count() or 1)), 3) if wall > 0 else 0.0


QUIET: dict[str, Any] = {"max_wait_s": 0.0, "waits": {}}  # --quiet-wait S (set by the bench), and each wait


def wait_machine_quiet(label: str, threshold: float = 0.1, window: float = 2.0, windows: int = 3) -> None:
    """With ``--quiet-wait S`` (``QUIET["max_wait_s"]``): before a timed step, wait (at most S seconds) until other
    work on the machine used less than ``threshold`` of all CPUs for ``windows`` windows in a row; our own
    processes do not count (unlike _procs.wait_tree_quiet, which waits for one process tree). Records each wait
    in ``QUIET["waits"][label]``."""
    if QUIET["max_wait_s"] <= 0:
        return
    t0 = time.monotonic()
    calm, share = 0, None
    other = OtherCpu()
    while calm < windows and time.monotonic() - t0 < QUIET["max_wait_s"]:
        other.start()
        time.sleep(window)
        share = other.share()
        calm = calm + 1 if share < threshold else 0
    waited = round(time.monotonic() - t0, 1)
    QUIET["waits"][label] = {"waited_s": waited, "quiet": calm >= windows, "last_other_cpu_share": share}
    if calm < windows:
        say(f"{label}: the machine is still busy after {waited} s (other work {share or 0:.0%} of the CPUs); going on")
    elif waited > windows * window + 1:
        say(f"{label}: waited {waited} s for the machine to be quiet")


def role(pid: int) -> str:
    """What one of our processes is, from its command line (``our_cpu``'s keys)."""
    if pid == -1:
        return "exited children"
    if pid == os.getpid():
        return "bench"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = b" ".join(argv).decode(errors="replace")
    program = Path(argv[0].decode(errors="replace")).name
    if "spark_worker" in text:
        return "spark worker (python)"
    if "node start" in text:
        return "node"
    if program == "ipfs":
        return "kubo"
    if "java" in program:
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            parent = 0
        return "spark JVM (bench)" if parent == os.getpid() else "spark JVM (node's worker)"
    return program or "other"


class Phase:
    """Wall time, load average and CPU of one phase, into ``phases[name]``: ours (this process and all it started,
    in all and by ``role``) vs the rest of the machine (``other_cpu_share``: other work's share of all CPUs during
    the phase; above ~0.1 it skewed the phase)."""

    def __init__(self, name: str, phases: dict[str, Any]) -> None:
        self.name, self.phases = name, phases

    def __enter__(self) -> Self:
        self.t0, self.busy0, self.ours0 = time.perf_counter(), machine_busy_seconds(), our_cpu()
        self.load0 = os.getloadavg()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        busy = machine_busy_seconds() - self.busy0
        ours1 = our_cpu()
        ours = _ours_since(self.ours0, ours1)  # processes alive at the end
        other = max(0.0, busy - ours)
        by_role: dict[str, float] = {}
        for p, c in ours1.items():
            r = role(p)
            by_role[r] = by_role.get(r, 0.0) + c - self.ours0.get(p, 0.0)
        self.phases[self.name] = {
            "seconds": round(wall, 2),
            "loadavg_1m_before": round(self.load0, 2),
            "loadavg_1m_after": round(os.getloadavg()[0], 2),
            "cpu_seconds_ours": round(ours, 2),
            "cpu_seconds_ours_by_process": {k: round(v, 2) for k, v in sorted(by_role.items()) if round(v, 2)},
            "cpu_seconds_other": round(other, 2),
            "other_cpu_share": round(other / (wall * (os.cpu_count() or 1)), 3) if wall > 0 else None,
        }


# --------------------------------------------------------------------------- a node and its API


class Api:
    """One keep-alive HTTP/1.1 connection to a node's API: a request's time is the client's wall time until the
    whole answer is read, without a new connection's setup in it."""

    def __init__(self, base: str, token: str | None = None) -> None:
        self.token = token  # the node's api.token: a query miss computes only with it (docs/api.md)
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=3600)

    def request(self, method: str, path: str, body: Any = None) -> tuple[float, int, Any]:
        """(wall ms until the whole answer is read, status, the answer: parsed JSON, text if it is not JSON (an
        event stream), None if empty)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in (0, 1):
            try:
                t0 = time.perf_counter()
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                ms = (time.perf_counter() - t0) * 1000
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # the server closed an idle keep-alive connection: reconnect once (not timed twice)
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=3600)
                if attempt:
                    raise
        if not raw:
            return ms, resp.status, None
        if "json" in (resp.getheader("Content-Type") or ""):
            return ms, resp.status, json.loads(raw)
        return ms, resp.status, raw.decode("utf-8", "replace")

    def get(self, path: str) -> Any:
        _, status, obj = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {obj}")
        return obj

    def close(self) -> None:
        self.conn.close()


def stop_pid(pid: int, started: int | None, what: str, timeout: float = 15.0) -> None:
    """SIGTERM this process if it is still the one we started (same start time), SIGKILL it if it lingers."""
    if started is None or not pid_alive(pid, started):
        return
    say(f"{what} pid {pid} still running: SIGTERM")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout, started):
        say(f"{what} pid {pid} ignored SIGTERM: SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 5.0, started)


class BenchNode:
    """A `cairn node start` process with its own home, as tests/fixtures/nodes.py runs one: its API on a free port
    (``--api-port 0``), its managed Kubo (which the node starts on loopback), its Spark worker if ``env`` autostarts
    one. Its output goes to ``log_path``. ``stop()`` stops it by PID, then whatever it started that outlived it."""

    def __init__(self, home: Path, env: dict[str, str], name: str = "", log_path: Path | None = None) -> None:
        self.home, self.env, self.name = home, env, name
        self.label = f"node {name}" if name else "node"  # in messages: several nodes may run at once
        self.log_path = log_path or home.parent / f"{home.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.api = ""  # the API's base URL, once the node listens
        self.kubo_pid: int | None = None
        self.kubo_api: str | None = None
        # pid → start time of the node's Kubo, Spark worker, JVM…: to make sure at the end that each is gone,
        # without ever signalling a PID reused since
        self.children: dict[int, int | None] = {}
        self._http: Api | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = 120.0) -> Self:
        self.home.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 -- closed in stop()
        self.proc = subprocess.Popen(
            [*cairn_argv(), "--home", str(self.home), "node", "start", "--api-port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        self.api = self._wait_listening(self.proc, timeout)
        self._http = Api(self.api, self.token())
        kubo = self.info().get("kubo") or {}
        self.kubo_pid, self.kubo_api = kubo.get("pid"), kubo.get("api")
        if self.kubo_pid is not None:  # noted apart too, in case it is not (or no longer) below the node
            self.children[self.kubo_pid] = start_time(self.kubo_pid)
        self.note_children()
        say(f"{self.label}: pid {self.proc.pid} at {self.api}; managed Kubo pid {self.kubo_pid}")
        return self

    def _wait_listening(self, proc: subprocess.Popen[bytes], timeout: float) -> str:
        """The API's URL, once the node's runtime file names it with this process's PID (not a previous run's)."""
        runtime = self.home / "node.json"
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log = self.log_path.read_text(errors="replace")[-4000:]
                raise RuntimeError(f"{self.label} exited with {proc.returncode}:\n{log}")
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(runtime.read_text())
                if info.get("pid") == proc.pid and info.get("api"):
                    return str(info["api"])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label} did not listen within {timeout}s")
            time.sleep(0.05)

    @property
    def http(self) -> Api:
        """The node's API over one keep-alive connection, with its token (once started)."""
        if self._http is None:
            raise RuntimeError(f"{self.label} is not started")
        return self._http

    def token(self) -> str:
        return (self.home / "api.token").read_text().strip()

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.http.get("/api/v0/node")
        return info

    def note_children(self) -> None:
        """Remember the node's descendants (Kubo, Spark worker, its JVM) to make sure they are gone at the end."""
        if self.proc is not None and self.proc.poll() is None:
            for pid in descendants(self.proc.pid):
                self.children.setdefault(pid, start_time(pid))

    def cli(self, *args: str, timeout: float = 3600) -> str:
        """``cairn --home HOME ARGS…`` against this node: its stdout; RuntimeError if it fails."""
        out = subprocess.run(
            [*cairn_argv(), "--home", str(self.home), *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"cairn {' '.join(args[:2])} on {self.label} exited with {out.returncode}: "
                f"{out.stderr.decode(errors='replace')[-2000:]}"
            )
        return out.stdout.decode()

    def add(self, path: Path, name: str) -> dict[str, Any]:
        """``cairn add PATH --name NAME --json``: the ingest's answer."""
        result: dict[str, Any] = json.loads(self.cli("add", str(path), "--name", name, "--json"))
        return result

    def wait_spark(self, timeout: float = 300.0, jit: bool = True) -> dict[str, Any]:
        """Until the worker is up and its warm-up query is done (a first job would wait for it); with ``jit``, also
        its idle JIT warm-up (``spark.warmup_rows``, which follows the first one: a first miss measured before its
        end would stop it and pay the JIT it was doing; a node with ``warmup_rows`` 0 never logs
        one). The worker's state, with ``warmup_ms`` and ``jit_warmup_ms`` from spark.log."""
        log = self.home / "logs" / "spark.log"
        deadline = time.monotonic() + timeout
        while True:
            spark: dict[str, Any] = self.info()["spark"]
            if spark.get("state") == "failed":
                raise RuntimeError(f"{self.label}: the Spark worker failed to start; see {log}")
            text = log.read_text(errors="replace") if log.exists() else ""
            warm = "warm-up query took" in text or "warm-up query failed" in text
            if spark.get("state") == "up" and warm and (not jit or "JIT warm-up " in text):
                self.note_children()  # the worker and its JVM are up now
                m = re.search(r"warm-up query took (\d+) ms", text)
                j = re.search(r"JIT warm-up took (\d+) ms", text)
                return {
                    **spark,
                    "warmup_ms": int(m.group(1)) if m else None,
                    "jit_warmup_ms": int(j.group(1)) if j else None,
                }
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: Spark not warm within {timeout}s (state {spark.get('state')})")
            time.sleep(0.25)

    def stop(self, timeout: float = 60.0, grace: float = 15.0) -> None:
        """SIGTERM (the node stops its Kubo and its Spark worker, which stops its JVM), SIGKILL if it ignores that
        for ``timeout`` s; then each process it started that is still there ``grace`` s later, by PID and start
        time."""
        self.note_children()
        if self._http is not None:
            self._http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                say(f"{self.label} pid {self.proc.pid} ignored SIGTERM for {timeout}s: SIGKILL")
                self.proc.kill()
                self.proc.wait(10)
        for pid, started in self.children.items():
            # no start time: it was gone when noted, and its PID may be another process's by now
            if started is not None and not wait_gone(pid, grace, started):
                stop_pid(pid, started, f"{self.label}'s child")
        if self._log is not None:
            self._log.close()
            self._log = None
