"""Benchmark (issue 22 item 5): a question answered from a cached superset vs the same question computed from the
base data, on one node, in the same run.

Prints one JSON object on stdout (progress goes to stderr):

1. Generates ``--rows`` rows (query.py's generator: id, k = id % 1000, v, s of 7 values) and ingests them into a
   fresh node (own temp home, free ports, managed Kubo, Spark started at once). Not timed.
2. **Supersets on** (the default, ``query.answer_from_supersets``): asks each *cached* statement once (a miss:
   Spark over the base data), then ``--asks`` new statements per rule, each a restriction of it with a constant
   not asked before (a new invocation each time), timed on the client until the whole answer is read. Every
   such answer must be ``computed`` and derived (``cairn_answers_derived`` moves by one each time).
3. **Supersets off**: the node is restarted on the same home with ``CAIRN_QUERY_ANSWER_FROM_SUPERSETS=false``
   and the same number of new restrictions (new constants again) is timed: Spark over the base data.
   Both phases first run ``--warm`` untimed asks, so both JVMs have compiled the statements' shapes.
4. Stops the node by PID (it stops its Kubo and Spark worker) and removes the temp dir (unless ``--keep``).

``ratio_miss_over_superset`` = p50 from the base data / p50 from the superset, per rule (target ≥ 20).
Appends brought forward without a recompute (issue 22 item 4) are not built yet: ``append`` is ``null``.

    .venv/bin/python scripts/bench/reuse.py [--rows 10000000] [--asks 5] [--warm 2] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from query import DATASET, Api, BenchNode, generate_parquet, git_state, ingest, p50

TARGET_SUPERSET_RATIO = 20
TARGET_INCREMENTAL_RATIO = 10
# rule → (the cached statement, a restriction of it with a constant {c}: a new invocation for each c)
CASES = {
    "rollup": (
        "SELECT k, s, COUNT(*) AS n, SUM(id) AS total, MAX(id) AS top FROM t GROUP BY k, s",
        "SELECT s, COUNT(*) AS n, SUM(id) AS total, MAX(id) AS top FROM t WHERE k < {c} GROUP BY s",
    ),
    "select-project": (
        "SELECT id, k, s FROM t WHERE id < 200000",
        "SELECT id, s FROM t WHERE id < {c} AND k = 7",
    ),
}


def say(msg: str) -> None:
    print(f"[reuse bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def derived_count(api: Api) -> float:
    """The node's ``cairn_answers_derived`` (Prometheus text, so not through ``Api``'s JSON)."""
    with urllib.request.urlopen(f"http://{api.host}:{api.port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("cairn_answers_derived "):
                return float(line.split()[1])
    return 0.0


def ask(api: Api, sql: str) -> tuple[float, dict[str, Any]]:
    ms, status, answer = api.request("POST", "/api/v0/query", {"sql": sql, "inputs": {"t": DATASET}})
    if status != 200 or answer.get("source") != "computed":
        raise RuntimeError(f"{sql}: HTTP {status}: {answer}")
    return ms, answer


def phase(node: BenchNode, consts: list[int], warm: int, derived: bool) -> dict[str, Any]:
    """Per rule: the timed asks' client ms (the first ``warm`` constants untimed), derived or not as expected."""
    node.wait_spark()
    api = Api(node.api, (node.home / "api.token").read_text().strip())
    out: dict[str, Any] = {}
    try:
        for rule, (cached, restricted) in CASES.items():
            if derived:
                ms, _ = ask(api, cached)
                say(f"{rule}: cached statement computed from the base data in {ms:.0f} ms")
            times = []
            for i, c in enumerate(consts):
                before = derived_count(api)
                ms, answer = ask(api, restricted.format(c=c))
                moved = derived_count(api) - before
                if moved != (1 if derived else 0):
                    raise RuntimeError(f"{rule} c={c}: derived moved by {moved}, expected derived={derived}")
                say(f"{rule} c={c}: {ms:.0f} ms ({answer['row_count']} rows, {'superset' if derived else 'base'})")
                if i >= warm:
                    times.append(round(ms, 1))
            out[rule] = {"ms": times, "p50_ms": p50(times)}
    finally:
        api.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--asks", type=int, default=5, help="timed asks per rule and phase")
    ap.add_argument("--warm", type=int, default=2, help="untimed asks first, per rule and phase")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    n = args.warm + args.asks
    on_consts, off_consts = list(range(10, 10 + n)), list(range(10 + n, 10 + 2 * n))  # new invocations each
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-reuse-"))
    home = work / "home"
    env = {**os.environ, "IPFS_TELEMETRY": "off", "CAIRN_SPARK_AUTOSTART": "true", "CAIRN_HOME": str(home)}
    try:
        parquet = work / "input.parquet"
        say(f"generating {args.rows} rows in {work}…")
        generate_parquet(parquet, args.rows)
        node = BenchNode(home, env)
        try:
            node.start()
            ingest(node, parquet)
            on = phase(node, on_consts, args.warm, derived=True)
        finally:
            node.stop()
        node = BenchNode(home, {**env, "CAIRN_QUERY_ANSWER_FROM_SUPERSETS": "false"})
        try:
            node.start()
            off = phase(node, off_consts, args.warm, derived=False)
        finally:
            node.stop()
        ratios = {rule: round(off[rule]["p50_ms"] / on[rule]["p50_ms"], 2) for rule in CASES}
        report = {
            "rows": args.rows,
            "asks": args.asks,
            "superset": on,
            "base_data": off,
            "ratio_miss_over_superset": ratios,
            "targets": {"ratio_miss_over_superset": TARGET_SUPERSET_RATIO, "ratio_full_over_incremental": None},
            "meets": {rule: r >= TARGET_SUPERSET_RATIO for rule, r in ratios.items()},
            "append": None,  # issue 22 item 4: not built yet
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
            "git": git_state(),
        }
        print(json.dumps(report, indent=2))
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
