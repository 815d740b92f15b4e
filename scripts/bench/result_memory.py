"""Benchmark: the memory a large query result costs on its way from Spark to the node's slices.

Prints one JSON object on stdout (progress on stderr):

1. Generates ``--rows`` deterministic rows (scripts/bench/query.py's generator: id, k, v, s) and ingests them into a
   fresh node (own temp home, free ports, managed Kubo, Spark worker in local mode). Not measured.
2. Waits until the worker is warm, resets the peak RSS (``VmHWM``, by writing 5 to ``/proc/PID/clear_refs``) of
   the node, the worker's Python process and its JVM, then runs **one miss** whose result is about every row:
   ``SELECT id, k, v, s FROM t WHERE v > C`` (no ORDER BY: the node sorts the whole result into canonical order,
   cuts it into slices, hashes and adds them).
3. Reports per process the peak RSS during the miss (MB) and what it held before it (``rss_before_mb``), the miss's
   wall time on the client, its rows, and the node's parts of it.

``--before FILE`` (a JSON this bench printed on another commit) adds ``ratio``: after / before for each figure.

    .venv/bin/python scripts/bench/result_memory.py [--rows 5000000] [--before before.json] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import query as qb  # the query bench's data generator and ingest
from _harness import Api, BenchNode, role, say
from _procs import tree_pids

MB = 1 << 20
SQL = "SELECT id, k, v, s FROM t WHERE v > {c}"
ROLES = {"node": "node", "worker": "spark worker (python)", "jvm": "spark JVM (node's worker)"}


def _status_kb(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _pids(node: BenchNode) -> dict[str, int]:
    """The node's PID and its Spark worker's (Python) and JVM's, by role."""
    assert node.proc is not None
    found: dict[str, int] = {}
    for pid in tree_pids(node.proc.pid):  # the node itself first
        what = role(pid)
        for name, wanted in ROLES.items():
            if what == wanted and name not in found:
                found[name] = pid
    missing = set(ROLES) - set(found)
    if missing:
        raise RuntimeError(f"process(es) not found under the node: {sorted(missing)}")
    return found


def _reset_peaks(pids: dict[str, int]) -> dict[str, float]:
    """Reset each process's VmHWM to its current RSS; the RSS (MB) each held before the miss."""
    before = {}
    for name, pid in pids.items():
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before[name] = round((_status_kb(pid, "VmRSS") or 0) / 1024, 1)
    return before


def measure(work: Path, rows: int, constant: str) -> dict[str, Any]:
    parquet = work / "bench.parquet"
    say(f"generating {rows} rows…")
    qb.generate_parquet(parquet, rows)
    home = work / "home"
    env = {**os.environ, "IPFS_TELEMETRY": "off", "CAIRN_SPARK_AUTOSTART": "true", "CAIRN_LOG_FORMAT": "json"}
    env.update(CAIRN_HOME=str(home), CAIRN_SPARK_MAX_RESULT_ROWS=str(rows + 1))
    env["CAIRN_SPARK_MAX_RESULT_BYTES"] = str(1 << 40)
    node = BenchNode(home, env)
    try:
        node.start()
        qb.ingest(node, parquet)
        node.wait_spark()
        pids = _pids(node)
        api = Api(node.api, node.token())
        try:
            rss_before = _reset_peaks(pids)
            t0 = time.perf_counter()
            _, status, answer = api.request(
                "POST", "/api/v0/query", {"sql": SQL.format(c=constant), "inputs": {"t": "bench"}}
            )
            ms = (time.perf_counter() - t0) * 1000
            if status != 200 or answer.get("source") != "computed":
                raise RuntimeError(f"the miss failed: HTTP {status}: {str(answer)[:2000]}")
            peaks = {name: round((_status_kb(pid, "VmHWM") or 0) / 1024, 1) for name, pid in pids.items()}
            receipt = api.get(f"/api/v0/executions/{answer['execution']}")
        finally:
            api.close()
    finally:
        node.stop()
    say(f"miss: {ms:.0f} ms, {answer['row_count']} rows; peak RSS MB {peaks}")
    return {
        "rows": rows,
        "result_rows": answer["row_count"],
        "miss_ms": round(ms, 1),
        "receipt_timings": receipt.get("timings"),
        "peak_rss_mb": peaks,
        "rss_before_mb": rss_before,
        "peak_growth_mb": {k: round(peaks[k] - rss_before[k], 1) for k in peaks},
    }


def _ratios(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    def r(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    return {
        "miss_ms": r(after["miss_ms"], before["miss_ms"]),
        "peak_rss_mb": {k: r(v, before["peak_rss_mb"].get(k, 0)) for k, v in after["peak_rss_mb"].items()},
        "peak_growth_mb": {k: r(v, before["peak_growth_mb"].get(k, 0)) for k, v in after["peak_growth_mb"].items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=5_000_000, help="rows of the dataset (default 5 000 000)")
    p.add_argument("--constant", default="0.001", help="the miss's predicate constant (v > C; default 0.001)")
    p.add_argument("--before", type=Path, help="a JSON this bench printed before the change: adds ratios")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (Parquet, home, logs)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cairn-result-memory-"))
    try:
        out = measure(work, args.rows, args.constant)
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    out["git"] = qb.git_state()
    if args.before:
        before = json.loads(args.before.read_text())
        out["before"] = {k: before[k] for k in ("miss_ms", "peak_rss_mb", "peak_growth_mb", "git") if k in before}
        out["ratio"] = _ratios(out, before)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
