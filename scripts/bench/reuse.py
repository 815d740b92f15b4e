"""Benchmark: a question answered from a cached superset vs the same question computed from the
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

Appends, in each phase after the rules: ``--warm`` + ``--asks`` rounds of *append 1 % new rows*
(``--rows`` / 100, new ids) then ``APPEND_SQL`` (the rollup's cached aggregate) over the new version, timed. With
supersets on each answer must be brought forward from the previous version's (``cairn_answers_forwarded`` moves
by one): Spark reads the new slice and the old result only; off, Spark reads the whole dataset.
``append.ratio_full_over_incremental`` = p50 full / p50 incremental (target ≥ 10). The dataset grows 1 % a round
in both phases alike.

    .venv/bin/python scripts/bench/reuse.py [--rows 10000000] [--asks 5] [--warm 2] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Api, BenchNode, say
from _procs import cairn_argv
from query import DATASET, STRINGS, generate_parquet, git_state, ingest, p50

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

APPEND_SQL = CASES["rollup"][0]  # GROUP BY k, s with COUNT, SUM, MAX: decomposable (node.domain.sql.rewrite.forward)


def derived_count(api: Api, metric: str = "cairn_answers_derived") -> float:
    """The node's ``metric`` (Prometheus text, so not through ``Api``'s JSON)."""
    with urllib.request.urlopen(f"http://{api.host}:{api.port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f"{metric} "):
                return float(line.split()[1])
    return 0.0


def append_rows(node: BenchNode, work: Path, start: int, rows: int) -> None:
    """Append ``rows`` new rows (ids from ``start``; k, v, s as query.py's generator makes them) to the dataset."""
    ids = range(start, start + rows)
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([i % 1000 for i in ids], pa.int64()),
            "v": pa.array([((i * 2654435761) & 0xFFFFFFFF) / 2**32 for i in ids], pa.float64()),
            "s": pa.array([STRINGS[i % len(STRINGS)] for i in ids], pa.string()),
        }
    )
    path = work / f"append-{start}.parquet"
    pq.write_table(table, path)
    argv = [*cairn_argv(), "--home", str(node.home), "add", str(path), "--to", DATASET, "--json"]
    out = subprocess.run(argv, env=node.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(
            f"cairn add --to exited with {out.returncode}: {out.stderr.decode(errors='replace')[-2000:]}"
        )
    path.unlink()


def append_phase(
    node: BenchNode, work: Path, start: int, rows: int, rounds: int, warm: int, on: bool
) -> dict[str, Any]:
    """Per round: append ``rows`` rows, then ``APPEND_SQL`` over the new version, timed (the first ``warm`` not)."""
    api = Api(node.api, node.token())
    times = []
    try:
        for i in range(rounds):
            append_rows(node, work, start + i * rows, rows)
            before = derived_count(api, "cairn_answers_forwarded")
            ms, answer = ask(api, APPEND_SQL)
            moved = derived_count(api, "cairn_answers_forwarded") - before
            if moved != (1 if on else 0):
                raise RuntimeError(f"append round {i}: forwarded moved by {moved}, expected forwarded={on}")
            say(f"append round {i}: {ms:.0f} ms ({answer['row_count']} rows, {'incremental' if on else 'full'})")
            if i >= warm:
                times.append(round(ms, 1))
    finally:
        api.close()
    return {"ms": times, "p50_ms": p50(times)}


def ask(api: Api, sql: str) -> tuple[float, dict[str, Any]]:
    ms, status, answer = api.request("POST", "/api/v0/query", {"sql": sql, "inputs": {"t": DATASET}})
    if status != 200 or answer.get("source") != "computed":
        raise RuntimeError(f"{sql}: HTTP {status}: {answer}")
    return ms, answer


def phase(node: BenchNode, consts: list[int], warm: int, derived: bool) -> dict[str, Any]:
    """Per rule: the timed asks' client ms (the first ``warm`` constants untimed), derived or not as expected."""
    node.wait_spark()
    api = Api(node.api, node.token())
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


def make_report(
    args: argparse.Namespace, on: dict[str, Any], off: dict[str, Any], append: dict[str, Any], step: int
) -> dict[str, Any]:
    """The JSON printed: per rule and for the appends, the timings, ratios, targets and whether they are met."""
    ratios = {rule: round(off[rule]["p50_ms"] / on[rule]["p50_ms"], 2) for rule in CASES}
    incremental = round(append["full"]["p50_ms"] / append["incremental"]["p50_ms"], 2)
    return {
        "rows": args.rows,
        "asks": args.asks,
        "superset": on,
        "base_data": off,
        "ratio_miss_over_superset": ratios,
        "targets": {
            "ratio_miss_over_superset": TARGET_SUPERSET_RATIO,
            "ratio_full_over_incremental": TARGET_INCREMENTAL_RATIO,
        },
        "meets": {
            **{rule: r >= TARGET_SUPERSET_RATIO for rule, r in ratios.items()},
            "append": incremental >= TARGET_INCREMENTAL_RATIO,
        },
        "append": {
            "rows_per_append": step,
            "statement": APPEND_SQL,
            **append,
            "ratio_full_over_incremental": incremental,
        },
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "git": git_state(),
    }


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
    step = max(1, args.rows // 100)  # 1 % new rows per append
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
            on_append = append_phase(node, work, args.rows, step, n, args.warm, on=True)
        finally:
            node.stop()
        node = BenchNode(home, {**env, "CAIRN_QUERY_ANSWER_FROM_SUPERSETS": "false"})
        try:
            node.start()
            off = phase(node, off_consts, args.warm, derived=False)
            off_append = append_phase(node, work, args.rows + n * step, step, n, args.warm, on=False)
        finally:
            node.stop()
        report = make_report(args, on, off, {"incremental": on_append, "full": off_append}, step)
        print(json.dumps(report, indent=2))
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
