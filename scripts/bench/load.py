"""Benchmark: a node under load on loopback. Prints one JSON object on stdout.

1. Writes a deterministic CSV (``--rows`` rows: ``id`` 0…n-1, ``k`` = id % 10, ``v`` = id·2654435761 mod
   1000003, all integers, so sums are exact) and ingests it into a fresh node (temp home, free ports, its own
   managed Kubo, ``CAIRN_SPARK_AUTOSTART=true``) with ``cairn add``. Waits for the Spark worker's warm-up.
2. **hits**: ``--hit-statements`` distinct statements
   ``SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE v > C GROUP BY k ORDER BY k`` are asked once (misses,
   with the token), then ``--clients`` concurrent clients (one keep-alive connection each, no token: answers from
   the index are open) ask them in turn for ``--seconds``.
3. **misses**: ``--miss-clients`` concurrent clients (with the token) each ask the same statement with a constant
   never asked before (a new invocation: a Spark job) for ``--miss-seconds``.
4. **healthz**: ``GET /healthz`` every 50 ms for ``--idle-seconds`` on the idle node (baseline), then every 50 ms
   during one long Spark job (a CROSS JOIN of the first ``--cross-rows`` rows with themselves).
5. RSS and open file descriptors of the node, its Kubo, its Spark worker and the worker's JVM: at the start,
   after each phase, and after ``--settle`` seconds with the node idle.

Every answer is checked against pandas/numpy on the same CSV (the oracle): ``wrong`` counts answers whose rows
differ. Errors are counted apart from refusals: ``non_2xx`` by status (429 excluded), ``exceptions`` by type,
``refused_429``. The functions here are shared with tests/integration/test_load.py (the bounded form).

    .venv/bin/python scripts/bench/load.py [--clients 200] [--seconds 60] [--miss-clients 20] [--miss-seconds 60]
        [--rows 50000] [--cross-rows 30000] [--settle 10] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no pandas-stubs in the venv (a test dependency)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import BenchNode, say
from _procs import children, cpu_seconds, java_version

DATASET = "load"
HIT_SQL = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE v > {c} GROUP BY k ORDER BY k"
CROSS_SQL = "SELECT COUNT(*) AS n FROM t a CROSS JOIN t b WHERE a.id < {n} AND b.id < {n} AND a.v + b.v > {c}"
V_MOD = 1_000_003  # v = id * 2654435761 mod V_MOD: spread over [0, V_MOD), independent of k
HEALTHZ_EVERY = 0.05


def pct(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100), rounded to 0.01 ms."""
    s = sorted(xs)
    return round(s[max(0, min(len(s) - 1, int(-(-len(s) * q // 100)) - 1))], 2) if s else None


# --------------------------------------------------------------------------- data and the oracle


def write_csv(path: Path, rows: int) -> None:
    with open(path, "w") as f:
        f.write("id,k,v\n")
        for i in range(rows):
            f.write(f"{i},{i % 10},{i * 2654435761 % V_MOD}\n")


class Oracle:
    """Expected answers computed by pandas/numpy from the CSV itself (never from the node's output)."""

    def __init__(self, csv: Path) -> None:
        self.df = pd.read_csv(csv)

    def grouped(self, c: int) -> list[list[int]]:
        """``HIT_SQL`` with constant ``c``."""
        kept = self.df[self.df.v > c]
        g = kept.groupby("k").agg(n=("v", "size"), total=("v", "sum")).reset_index().sort_values("k")
        return [[int(a), int(b), int(t)] for a, b, t in zip(g.k, g.n, g.total)]

    def cross_count(self, n: int, c: int) -> int:
        """``CROSS_SQL``: pairs (a, b) of the first ``n`` rows with a.v + b.v > c, by a sorted search (n log n)."""
        v = np.sort(self.df.v[self.df.id < n].to_numpy())
        return int((len(v) - np.searchsorted(v, c - v, side="right")).sum())


def hit_constants(n: int) -> list[int]:
    """n distinct constants for the memoized statements: multiples of 100000 (misses never use one)."""
    return [100_000 * (i + 1) for i in range(n)]


def miss_constants(start: int = 0) -> Iterator[int]:
    """Constants never asked before: 3, 13, 23, … (never a multiple of 100000)."""
    return itertools.count(start * 10 + 3, 10)


# --------------------------------------------------------------------------- process figures


def proc_figures(pid: int | None) -> dict[str, Any] | None:
    """RSS (MB) and open file descriptors of a live process, or None."""
    if pid is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields.get("VmRSS", "0 kB").split()[0])
    cpu = cpu_seconds(pid)
    return {
        "pid": pid,
        "rss_mb": round(rss_kb / 1024, 1),
        "fds": fds,
        "threads": int(fields["Threads"]),
        "cpu_s": round(cpu, 2) if cpu is not None else None,
    }


def node_pids(node_pid: int, info: dict[str, Any]) -> dict[str, int | None]:
    """The node, its Kubo, its Spark worker and that worker's JVM (a ``java`` child of the worker)."""
    worker = (info.get("spark") or {}).get("pid")
    jvm = None
    for child in children(worker) if worker else []:
        with contextlib.suppress(OSError):
            if "java" in Path(f"/proc/{child}/exe").resolve().name:
                jvm = child
    return {"node": node_pid, "kubo": (info.get("kubo") or {}).get("pid"), "spark_worker": worker, "spark_jvm": jvm}


def snapshot(pids: dict[str, int | None]) -> dict[str, Any]:
    """Each process's figures, and this process's CPU (the load's clients run here)."""
    return {**{role: proc_figures(pid) for role, pid in pids.items()}, "bench_cpu_s": round(sum(os.times()[:2]), 2)}


def deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per process: change of RSS (MB) and of open fds (None if either side is missing or the PID changed)."""
    out: dict[str, Any] = {}
    for role, b in before.items():
        a = after.get(role)
        if not isinstance(b, dict):
            continue
        if not a or not b or a["pid"] != b["pid"]:
            out[role] = None
            continue
        out[role] = {"rss_mb": round(a["rss_mb"] - b["rss_mb"], 1), "fds": a["fds"] - b["fds"]}
    return out


# --------------------------------------------------------------------------- load


@dataclass
class Tally:
    """What a phase's requests gave: latencies of 2xx answers, statuses, exceptions, wrong answers."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    exceptions: Counter[str] = field(default_factory=Counter)
    sources: Counter[str] = field(default_factory=Counter)
    wrong: int = 0
    examples: list[str] = field(default_factory=list)  # first few failures, one line each
    wall_s: float = 0.0

    def note(self, text: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(text[:300])

    @property
    def errors(self) -> int:
        """Non-2xx answers other than 429 refusals, plus exceptions."""
        return sum(n for s, n in self.statuses.items() if not 200 <= s < 300 and s != 429) + self.total_exceptions

    @property
    def total_exceptions(self) -> int:
        return sum(self.exceptions.values())

    def report(self) -> dict[str, Any]:
        done = sum(self.statuses.values())
        ok = self.latencies_ms
        return {
            "requests": done,
            "seconds": round(self.wall_s, 2),
            "requests_per_s": round(done / self.wall_s, 1) if self.wall_s else None,
            "ok": len(ok),
            "ok_per_s": round(len(ok) / self.wall_s, 1) if self.wall_s else None,
            "latency_ms": {"p50": pct(ok, 50), "p99": pct(ok, 99), "max": pct(ok, 100), "n": len(ok)},
            "errors": self.errors,
            "non_2xx": {str(s): n for s, n in sorted(self.statuses.items()) if not 200 <= s < 300 and s != 429},
            "exceptions": dict(self.exceptions),
            "refused_429": self.statuses.get(429, 0),
            "wrong_answers": self.wrong,
            "sources": dict(self.sources),
            "examples": self.examples,
        }


Check = Callable[[dict[str, Any]], str | None]  # an answer → None if right, else why it is wrong
NextQuery = Callable[[], tuple[dict[str, Any], Check]]


async def ask(session: aiohttp.ClientSession, url: str, body: dict[str, Any], check: Check, tally: Tally) -> None:
    """One query: its latency (whole answer read and parsed) and outcome go into ``tally``."""
    t0 = time.perf_counter()
    try:
        async with session.post(url, json=body) as resp:
            answer = await resp.json(content_type=None)
            status = resp.status
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:
        tally.exceptions[type(e).__name__] += 1
        tally.note(f"{type(e).__name__}: {e}")
        return
    ms = (time.perf_counter() - t0) * 1000
    tally.statuses[status] += 1
    if status != 200:
        tally.note(f"HTTP {status}: {json.dumps(answer)}")
        return
    tally.latencies_ms.append(ms)
    tally.sources[str(answer.get("source"))] += 1
    why = check(answer)
    if why is not None:
        tally.wrong += 1
        tally.note(why)


async def drive(base: str, clients: int, seconds: float, next_query: NextQuery, token: str | None = None) -> Tally:
    """``clients`` concurrent clients, each on its own keep-alive connection, asking ``next_query()`` one after
    the other until ``seconds`` have passed (a request under way then is finished and counted)."""
    tally = Tally()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(total=600)
    deadline = time.monotonic() + seconds

    async def client() -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(base, connector=connector, headers=headers, timeout=timeout) as session:
            while time.monotonic() < deadline:
                body, check = next_query()
                await ask(session, "/api/v0/query", body, check, tally)

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    tally.wall_s = time.perf_counter() - t0
    return tally


TRIVIAL_PATH = "/api/v0/trust"  # a real route doing almost nothing (one small index read): the server's floor


async def drive_get(base: str, clients: int, seconds: float, path: str = TRIVIAL_PATH) -> Tally:
    """As ``drive``, every client asking ``GET path`` (hits/s are judged against this, same run)."""
    tally = Tally()
    timeout = aiohttp.ClientTimeout(total=600)
    deadline = time.monotonic() + seconds

    async def client() -> None:
        async with aiohttp.ClientSession(base, connector=aiohttp.TCPConnector(limit=1), timeout=timeout) as session:
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                try:
                    async with session.get(path) as resp:
                        await resp.read()
                        tally.statuses[resp.status] += 1
                except (TimeoutError, aiohttp.ClientError) as e:
                    tally.exceptions[type(e).__name__] += 1
                    continue
                if resp.status == 200:
                    tally.latencies_ms.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    tally.wall_s = time.perf_counter() - t0
    return tally


def check_rows(expected: list[list[int]], source: str | None) -> Check:
    def check(answer: dict[str, Any]) -> str | None:
        if answer.get("rows") != expected or answer.get("row_count") != len(expected):
            return f"{answer.get('invocation')}: rows {str(answer.get('rows'))[:120]} != expected {expected[:3]}…"
        if source is not None and answer.get("source") != source:
            return f"{answer.get('invocation')}: source {answer.get('source')!r}, expected {source!r}"
        return None

    return check


def query_body(c: int) -> dict[str, Any]:
    return {"sql": HIT_SQL.format(c=c), "inputs": {"t": DATASET}}


def hit_queries(oracle: Oracle, constants: list[int]) -> NextQuery:
    """The memoized statements in turn; each answer must be the oracle's rows, from the index."""
    expected = {c: oracle.grouped(c) for c in constants}
    turn = itertools.cycle(constants)

    def next_query() -> tuple[dict[str, Any], Check]:
        c = next(turn)
        return query_body(c), check_rows(expected[c], "local")

    return next_query


def miss_queries(oracle: Oracle, fresh: Iterator[int], asked: list[int]) -> NextQuery:
    """A constant never asked before each time (so a Spark job); the oracle runs when the answer is checked."""

    def next_query() -> tuple[dict[str, Any], Check]:
        c = next(fresh)
        asked.append(c)

        def check(answer: dict[str, Any]) -> str | None:
            return check_rows(oracle.grouped(c), "computed")(answer)

        return query_body(c), check

    return next_query


async def warm_hits(base: str, token: str, oracle: Oracle, constants: list[int]) -> Tally:
    """Ask each memoized statement once (a miss each, checked), so that the hit phase only hits."""
    tally = Tally()
    async with aiohttp.ClientSession(base, headers={"Authorization": f"Bearer {token}"}) as session:
        for c in constants:
            await ask(session, "/api/v0/query", query_body(c), check_rows(oracle.grouped(c), None), tally)
    return tally


# --------------------------------------------------------------------------- /healthz during a long job


async def sample_healthz(base: str, until: Callable[[], bool], every: float = HEALTHZ_EVERY) -> Tally:
    """``GET /healthz`` every ``every`` s (a sample starts on the next tick after the previous one ended)."""
    tally = Tally()
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(base, timeout=aiohttp.ClientTimeout(total=60)) as session:
        tick = time.monotonic()
        while not until():
            s0 = time.perf_counter()
            try:
                async with session.get("/healthz") as resp:
                    await resp.read()
                    tally.statuses[resp.status] += 1
                    if resp.status == 200:
                        tally.latencies_ms.append((time.perf_counter() - s0) * 1000)
            except (TimeoutError, aiohttp.ClientError) as e:
                tally.exceptions[type(e).__name__] += 1
            tick += every
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
            tick = max(tick, time.monotonic() - every)  # a slow sample does not cause a burst after it
    tally.wall_s = time.perf_counter() - t0
    return tally


async def healthz_idle(base: str, seconds: float) -> Tally:
    end = time.monotonic() + seconds
    return await sample_healthz(base, lambda: time.monotonic() >= end)


async def healthz_during_job(base: str, token: str, oracle: Oracle, rows: int, c: int) -> dict[str, Any]:
    """One long Spark job (a CROSS JOIN, checked against the oracle) with /healthz sampled while it runs."""
    job = Tally()
    body = {"sql": CROSS_SQL.format(n=rows, c=c), "inputs": {"t": DATASET}}
    expected = [[oracle.cross_count(rows, c)]]

    async def run() -> None:
        t0 = time.perf_counter()
        async with aiohttp.ClientSession(base, headers={"Authorization": f"Bearer {token}"}) as session:
            await ask(session, "/api/v0/query", body, check_rows(expected, "computed"), job)
        job.wall_s = time.perf_counter() - t0

    task = asyncio.ensure_future(run())
    health = await sample_healthz(base, task.done)
    await task
    return {"job": job.report(), "pairs": rows * rows, "healthz": health}


def healthz_report(idle: Tally, busy: Tally) -> dict[str, Any]:
    p99_idle, p99_busy = pct(idle.latencies_ms, 99), pct(busy.latencies_ms, 99)
    return {
        "idle": _health_figures(idle),
        "during_long_job": _health_figures(busy),
        "ratio_p99_during_job_over_idle": round(p99_busy / p99_idle, 2) if p99_idle and p99_busy else None,
    }


def _health_figures(t: Tally) -> dict[str, Any]:
    xs = t.latencies_ms
    return {
        "samples": len(xs),
        "p50_ms": pct(xs, 50),
        "p99_ms": pct(xs, 99),
        "max_ms": pct(xs, 100),
        "mean_ms": round(statistics.fmean(xs), 2) if xs else None,
        "errors": t.errors,
        "statuses": {str(s): n for s, n in t.statuses.items()},
    }


# --------------------------------------------------------------------------- the bench's own node


def node_env(home: Path) -> dict[str, str]:
    """The bench node's environment: the node's defaults (none of the caller's CAIRN_* settings), its Spark worker
    started, JSON logs."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")},
        "CAIRN_HOME": str(home),
        "IPFS_TELEMETRY": "off",
        "CAIRN_SPARK_AUTOSTART": "true",
        "CAIRN_LOG_FORMAT": "json",
    }


async def get_json(base: str, path: str) -> dict[str, Any]:
    async with aiohttp.ClientSession(base) as session, session.get(path) as resp:
        resp.raise_for_status()
        out: dict[str, Any] = await resp.json()
        return out


async def wait_spark_warm(base: str, home: Path, timeout: float = 300.0) -> dict[str, Any]:
    """Until the worker is up and has run its warm-up query (a first job would otherwise wait for it)."""
    log = home / "logs" / "spark.log"
    deadline = time.monotonic() + timeout
    while True:
        info = await get_json(base, "/api/v0/node")
        state = (info.get("spark") or {}).get("state")
        text = log.read_text(errors="replace") if log.exists() else ""
        if state == "up" and ("warm-up query took" in text or "warm-up query failed" in text):
            return info
        if state == "failed" or time.monotonic() > deadline:
            raise RuntimeError(f"the Spark worker is not warm (state {state}); see {log}")
        await asyncio.sleep(0.25)


# --------------------------------------------------------------------------- the run


@dataclass
class Run:
    """What the phases need: the node's address, token, PIDs and the oracle."""

    base: str
    token: str
    node_pid: int
    oracle: Oracle
    pids: dict[str, int | None] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    spark_jobs: dict[str, int] = field(default_factory=dict)

    async def mark(self, label: str) -> None:
        """RSS and fds of every process, and the worker's job count, at this point."""
        info = await get_json(self.base, "/api/v0/node")
        self.pids = node_pids(self.node_pid, info)
        self.resources[label] = snapshot(self.pids)
        self.spark_jobs[label] = int((info.get("spark") or {}).get("jobs") or 0)

    async def phase(self, name: str, seconds: float, load: Awaitable[Tally]) -> Tally:
        """Run ``load`` (``seconds`` long), with a snapshot halfway through (``during_NAME``: while the clients'
        connections are open) and one after it (``after_NAME``)."""
        task = asyncio.ensure_future(load)
        await asyncio.wait([task], timeout=seconds / 2)
        if not task.done():
            await self.mark(f"during_{name}")
        tally = await task
        await self.mark(f"after_{name}")
        return tally

    def costs(self, before: str, after: str, answers: int) -> dict[str, Any]:
        """The worker's job count change, and each process's CPU per answer (ms) between two snapshots."""
        a, b = self.resources[before], self.resources[after]
        cpu = {
            r: b[r]["cpu_s"] - a[r]["cpu_s"] for r in self.pids if a.get(r) and b.get(r) and a[r]["pid"] == b[r]["pid"]
        }
        per = {r: round(c * 1000 / answers, 2) for r, c in cpu.items()} if answers else {}
        per["bench_clients"] = round((b["bench_cpu_s"] - a["bench_cpu_s"]) * 1000 / answers, 2) if answers else None
        return {"spark_jobs_during": self.spark_jobs[after] - self.spark_jobs[before], "cpu_ms_per_answer": per}


async def phases(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    """The bench's load, step by step: hits, misses, /healthz idle and during a long job, settle."""
    constants = hit_constants(args.hit_statements)
    warm = await warm_hits(run.base, run.token, run.oracle, constants)
    if warm.errors or warm.wrong:
        raise RuntimeError(f"the memoized statements failed: {warm.report()}")
    say(f"trivial route: {args.clients} clients for {args.seconds} s on GET {TRIVIAL_PATH}…")
    trivial = await drive_get(run.base, args.clients, args.seconds)
    await run.mark("start")
    say(f"hits: {args.clients} clients for {args.seconds} s…")
    hits = await run.phase(
        "hits", args.seconds, drive(run.base, args.clients, args.seconds, hit_queries(run.oracle, constants))
    )
    say(f"misses: {args.miss_clients} clients for {args.miss_seconds} s…")
    asked: list[int] = []
    fresh = miss_queries(run.oracle, miss_constants(), asked)
    misses = await run.phase(
        "misses", args.miss_seconds, drive(run.base, args.miss_clients, args.miss_seconds, fresh, run.token)
    )
    say(f"/healthz idle for {args.idle_seconds} s, then during a CROSS JOIN of {args.cross_rows}² pairs…")
    idle = await healthz_idle(run.base, args.idle_seconds)
    long_job = await healthz_during_job(run.base, run.token, run.oracle, args.cross_rows, V_MOD)
    await run.mark("after_long_job")
    say(f"settling {args.settle} s…")
    await asyncio.sleep(args.settle)
    await run.mark("after_settle")
    sql = CROSS_SQL.format(n=args.cross_rows, c=V_MOD)
    return {
        "hits": {**hits.report(), **run.costs("start", "after_hits", len(hits.latencies_ms))},
        "trivial_route": {"path": TRIVIAL_PATH, **trivial.report()},
        # the target: hits/s at least half of what the same server answers on a trivial route, same clients
        "ratio_hits_over_trivial": round(
            len(hits.latencies_ms) / hits.wall_s / (len(trivial.latencies_ms) / trivial.wall_s), 3
        )
        if hits.wall_s and trivial.latencies_ms
        else None,
        "target_ratio_hits_over_trivial": ">= 0.5",
        "misses": {**misses.report(), "asked": len(asked), **run.costs("after_hits", "after_misses", len(asked))},
        "healthz": healthz_report(idle, long_job["healthz"]),
        "long_job": {"pairs": long_job["pairs"], "sql": sql, **long_job["job"]},
        "resources": run.resources,
        "resource_deltas": {
            "start_to_after_misses": deltas(run.resources["start"], run.resources["after_misses"]),
            "start_to_after_settle": deltas(run.resources["start"], run.resources["after_settle"]),
        },
    }


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--clients", type=int, default=200, help="concurrent hit clients")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the hit phase")
    p.add_argument("--miss-clients", type=int, default=20, help="concurrent miss clients")
    p.add_argument("--miss-seconds", type=float, default=None, help="length of the miss phase (default: --seconds)")
    p.add_argument("--hit-statements", type=int, default=8, help="distinct memoized statements")
    p.add_argument("--rows", type=int, default=50_000, help="rows of the dataset")
    p.add_argument("--cross-rows", type=int, default=30_000, help="rows of each side of the long CROSS JOIN")
    p.add_argument("--idle-seconds", type=float, default=10.0, help="/healthz baseline on the idle node")
    p.add_argument("--settle", type=float, default=10.0, help="seconds idle before the last RSS/fd reading")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (node home, logs)")
    args = p.parse_args()
    if args.miss_seconds is None:
        args.miss_seconds = args.seconds
    if args.cross_rows > args.rows:
        p.error("--cross-rows must not exceed --rows")
    return args


def _machine(info: dict[str, Any], load_before: tuple[float, ...]) -> dict[str, Any]:
    import pyarrow

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "pandas": pd.__version__,
        "pyarrow": pyarrow.__version__,
        "java": java_version(),
        "kubo": (info.get("kubo") or {}).get("version"),
        "cairn": info.get("version"),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


async def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    csv = work / "load.csv"
    write_csv(csv, args.rows)
    home = work / "home"
    node = BenchNode(home, node_env(home), log_path=work / "node.log")
    try:
        node.start()
        assert node.proc is not None
        pid = node.proc.pid
        say(f"ingesting {args.rows} rows…")
        added = node.add(csv, DATASET)
        info = await wait_spark_warm(node.api, node.home)
        run = Run(node.api, node.token(), pid, Oracle(csv))
        figures = await phases(run, args)
        info = await get_json(node.api, "/api/v0/node")
    finally:
        node.stop()
    settings = {k: v for k, v in vars(args).items() if k != "keep"}
    return {
        "bench": "load",
        "settings": {**settings, "dataset_rows": added.get("rows_added"), "healthz_every_ms": HEALTHZ_EVERY * 1000},
        **figures,
        "machine": _machine(info, load_before),
    }


def main() -> None:
    args = _parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (finally blocks) on SIGTERM too
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-load-"))
    try:
        report = asyncio.run(bench(args, work))
        print(json.dumps(report, indent=2))
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
