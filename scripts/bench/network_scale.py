"""Benchmark: many full nodes on one machine, and how each figure grows with their number.

For each N of ``--sizes`` (default 3, 6, 12; a size the machine cannot hold is reported, not run): N full nodes
(`cairn node start`, each its own home, managed Kubo and free ports; Spark only on the node that computes) in a
**ring** (node i connects to node i+1 and the last to the first: degree 2, diameter N/2). All ingest the same
small Parquet as ``bench``; every node trusts the computing node's key. Then:

1. **Idle**: after ``--settle`` s, each node's RSS (the node process, and its Kubo) and its CPU share over
   ``--idle`` s, node and Kubo together (Spark's worker, on one node only, is left out). With ``--idle-split``,
   also each one's CPU share and wake-ups a second (context switches of all its threads), per node.
2. **Announcement propagation**: node F (the "far" node, the one opposite node 0 on the ring) computes
   ``--announces`` new queries; for each, every other node's claim is polled (10 ms) and its arrival taken as
   the receiver's ``received`` stamp minus the an_0's own ``time`` (same clock): p50 and p99 over all
   (node, announcement) pairs, and the time until the last node had it (p50 over announcements).
3. **A far node's answer**: node 0, N/2 hops from F, asks the last of those queries (``trust: community``):
   a peer hit, the claim heard by gossip, the data fetched from F's Kubo (wall ms, p50 of ``--asks`` fresh
   queries, each first waited for at node 0).

JSON on stdout: per N the figures, and ``growth``: each figure over its value at the smallest N. What grows with
N is read against the model in docs/scaling.md.

    .venv/bin/python scripts/bench/network_scale.py [--sizes 3,6,12] [--announces 5] [--asks 3] [--settle 10]
        [--idle 10] [--idle-split] [--keep] [--env CAIRN_K=V ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import say
from _procs import cpu_seconds, descendants
from network import SMALL, SQL, Constants, PeerNode, announcement_stamp, generate_small

POLL_S = 0.010
MEM_PER_NODE_MB = 700  # node + Kubo, measured here with headroom: a size whose nodes would not fit is not run


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, round(q * (len(xs) - 1)))], 2)


def rss_mb(pid: int | None) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def kubo_pid(node: PeerNode) -> int | None:
    pid = node.info()["kubo"].get("pid")
    return int(pid) if pid else None


def start_ring(n: int, work: Path, data: Path, extra: dict[str, str]) -> tuple[list[PeerNode], int]:
    """N nodes in a ring; the index of the far node (the one that computes). ``extra``: settings of every node."""
    far = n // 2
    nodes: list[PeerNode] = []
    base = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    for i in range(n):
        spark = {"CAIRN_SPARK_AUTOSTART": "true" if i == far else "false", "CAIRN_SPARK_WARMUP_ROWS": "0"}
        nodes.append(PeerNode(work / f"n{i}", {**base, **spark, **extra}, name=f"n{i}").start())
    key = nodes[far].info()["node_key"]
    for i, node in enumerate(nodes):
        node.ingest(data, SMALL)
        if i != far:
            node.cli("trust", "add", key)
    for i, node in enumerate(nodes):
        if n > 2 or i == 0:
            node.cli("connect", nodes[(i + 1) % n].info()["p2p_addrs"][0])
    return nodes, far


def wakeups(pid: int | None) -> int | None:
    """Context switches of a live process so far, all its threads (at idle nearly all voluntary: its wake-ups)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                for line in (task / "status").read_text().splitlines():
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        total += int(line.split()[1])
    except OSError:
        return None
    return total


def idle(nodes: list[PeerNode], settle: float, window: float, split: bool = False) -> dict[str, Any]:
    """RSS and CPU share of each node's process and its Kubo over ``window`` s after ``settle`` s. ``split``: also
    each process's share and wake-ups a second, per node (``per_node``) and as p50 over the nodes."""
    time.sleep(settle)
    pids = {node.name: (node.proc.pid if node.proc else None, kubo_pid(node)) for node in nodes}
    cpu0 = {name: [cpu_seconds(p) or 0.0 for p in ps] for name, ps in pids.items()}
    wake0 = {name: [wakeups(p) or 0 for p in ps] for name, ps in pids.items()}
    t0 = time.monotonic()
    time.sleep(window)
    wall = time.monotonic() - t0
    parts = {  # name -> (node process, Kubo): CPU seconds a second
        name: [((cpu_seconds(p) or 0.0) - c) / wall for p, c in zip(ps, cpu0[name], strict=True)]
        for name, ps in pids.items()
    }
    share = [sum(two) for two in parts.values()]
    node_rss = [r for ps in pids.values() if (r := rss_mb(ps[0])) is not None]
    kubo_rss = [r for ps in pids.values() if (r := rss_mb(ps[1])) is not None]
    out: dict[str, Any] = {
        "node_rss_mb_p50": round(statistics.median(node_rss), 1),
        "node_rss_mb_max": round(max(node_rss), 1),
        "kubo_rss_mb_p50": round(statistics.median(kubo_rss), 1),
        "idle_cpu_percent_per_node_p50": round(statistics.median(share) * 100, 2),
        "idle_cpu_percent_per_node_max": round(max(share) * 100, 2),
    }
    if split:
        per_node = {}
        for name, ps in pids.items():
            # at least 0: a thread that ended in the window took its own count out of /proc/PID/task
            wakes = [max(0, (wakeups(p) or 0) - w) / wall for p, w in zip(ps, wake0[name], strict=True)]
            per_node[name] = {
                "node_pid": ps[0],
                "kubo_pid": ps[1],
                "node_cpu_percent": round(parts[name][0] * 100, 2),
                "kubo_cpu_percent": round(parts[name][1] * 100, 2),
                "node_wakeups_per_s": round(wakes[0], 1),
                "kubo_wakeups_per_s": round(wakes[1], 1),
            }
        out["window_s"] = round(wall, 1)
        out["node_cpu_percent_p50"] = round(statistics.median(v[0] for v in parts.values()) * 100, 2)
        out["kubo_cpu_percent_p50"] = round(statistics.median(v[1] for v in parts.values()) * 100, 2)
        out["per_node"] = per_node
    return out


def wait_everywhere(nodes: list[PeerNode], invocation: str, timeout: float = 30.0) -> list[PeerNode]:
    """Until every node has the claim (or the deadline): the nodes that do not."""
    pending = list(nodes)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        pending = [node for node in pending if node.claim_of(invocation) is None]
        time.sleep(POLL_S)
    return pending


def propagation(nodes: list[PeerNode], far: int, consts: Constants, count: int) -> dict[str, Any]:
    others = [node for i, node in enumerate(nodes) if i != far]
    arrivals: list[float] = []
    to_all: list[float] = []
    missed = 0
    for _ in range(count):
        _, answer = nodes[far].query(SQL.format(c=consts.next()), SMALL, "self", "computed")
        missing = wait_everywhere(others, answer["invocation"])
        missed += len(missing)
        times = []
        for node in others:
            with contextlib.suppress(Exception):
                stamp = announcement_stamp(node, answer["invocation"])
                if stamp:
                    times.append((stamp[1] - stamp[0]) * 1000)
        arrivals += times
        if times and not missing:
            to_all.append(max(times))
        say(f"  announcement: reached {len(others) - len(missing)}/{len(others)}, last at {max(times or [0]):.1f} ms")
    return {
        "ms_p50": pct(arrivals, 0.5),
        "ms_p99": pct(arrivals, 0.99),
        "to_all_ms_p50": pct(to_all, 0.5),
        "missed": missed,
        "samples": len(arrivals),
    }


def far_answers(nodes: list[PeerNode], far: int, consts: Constants, asks: int) -> dict[str, Any]:
    ms: list[float] = []
    for _ in range(asks):
        sql = SQL.format(c=consts.next())
        _, answer = nodes[far].query(sql, SMALL, "self", "computed")
        if wait_everywhere([nodes[0]], answer["invocation"]):
            raise RuntimeError("node 0 never heard the far node's announcement")
        took, _ = nodes[0].query(sql, SMALL, "community", "peer")
        ms.append(took)
        say(f"  node 0 answered from n{far} ({far} hops) in {took:.1f} ms")
    return {"peer_hit_ms_p50": pct(ms, 0.5), "samples": [round(m, 1) for m in ms], "hops": far}


def run_size(n: int, work: Path, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    say(f"N = {n}: starting the ring…")
    nodes: list[PeerNode] = []
    try:
        extra = dict(kv.split("=", 1) for kv in args.env)
        nodes, far = start_ring(n, work / f"ring{n}", data, extra)
        nodes[far].wait_spark(jit=False)  # CAIRN_SPARK_WARMUP_ROWS=0: no JIT warm-up
        consts = Constants()
        nodes[far].query(SQL.format(c=consts.next()), SMALL, "self", "computed")  # Spark's first job: untimed
        out = {"nodes": n, "topology": f"ring (degree 2, diameter {n // 2})", "far_node_hops": far}
        out["idle"] = idle(nodes, args.settle, args.idle, args.idle_split)
        out["announcement"] = propagation(nodes, far, consts, args.announces)
        out["far_answer"] = far_answers(nodes, far, consts, args.asks)
        return out
    finally:
        for node in nodes:
            node.stop()


def growth(runs: list[dict[str, Any]]) -> dict[str, Any]:
    base = runs[0]
    figures = {
        "announcement_ms_p50": lambda r: r["announcement"]["ms_p50"],
        "announcement_to_all_ms_p50": lambda r: r["announcement"]["to_all_ms_p50"],
        "far_peer_hit_ms_p50": lambda r: r["far_answer"]["peer_hit_ms_p50"],
        "node_rss_mb_p50": lambda r: r["idle"]["node_rss_mb_p50"],
        "idle_cpu_percent_per_node_p50": lambda r: r["idle"]["idle_cpu_percent_per_node_p50"],
    }
    out: dict[str, Any] = {}
    for name, get in figures.items():
        b = get(base)
        out[name] = {str(r["nodes"]): (round(get(r) / b, 2) if b and get(r) is not None else None) for r in runs}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="3,6,12")
    ap.add_argument("--announces", type=int, default=5)
    ap.add_argument("--asks", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument(
        "--idle-split", action="store_true", help="idle CPU and wake-ups of each node's process and its Kubo, per node"
    )
    ap.add_argument("--env", action="append", default=[], metavar="CAIRN_K=V", help="a setting of every node")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cairn-scale-"))
    data = work / "bench.parquet"
    generate_small(data, args.rows)
    avail_mb = int(Path("/proc/meminfo").read_text().split("MemAvailable:")[1].split()[0]) // 1024
    runs, skipped = [], {}
    try:
        for n in [int(x) for x in args.sizes.split(",")]:
            if n * MEM_PER_NODE_MB > avail_mb:
                skipped[str(n)] = f"needs about {n * MEM_PER_NODE_MB} MB, {avail_mb} MB available"
                continue
            runs.append(run_size(n, work, data, args))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    leftovers = descendants(os.getpid())
    out = {
        "bench": "network_scale",
        "machine": {"cpus": os.cpu_count(), "mem_available_mb": avail_mb, "loadavg_1m_end": os.getloadavg()[0]},
        "runs": runs,
        "skipped": skipped,
        "growth_over_smallest": growth(runs) if runs else {},
        "leftover_processes": leftovers,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
