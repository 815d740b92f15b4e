"""Benchmark: TPC-H Q1 and Q6 over lineitem, answered by Cairn (hit, miss) vs warm Spark and DuckDB, in one run.

Prints one JSON object on stdout (progress on stderr).

1. ``tpchgen-cli parquet -s SF --tables lineitem`` (PyPI, test extra) writes lineitem (SF 1: 6 M rows, decimal
   and date columns) into a temp dir; a fresh node (own home, free ports, managed Kubo, Spark autostart) ingests it
   with ``cairn add``. Not timed.
2. Per query, over HTTP (one keep-alive connection, wall time until the whole answer is read), the same sequence
   as ``query.py``: the specification's default substitution parameters first (``first_miss_ms``: the plan's
   first run in the worker's JVM), then ``--warm-misses`` untimed misses and ``--misses`` timed ones, each with
   substitution parameters never used before (a new invocation each time), then ``--hits`` timed hits of the
   first statement (every one must say ``source: local``; the node's Spark job count must not move).
3. With the node stopped: a SparkSession in this process with the worker's own settings
   (``spark_worker.session.effective_conf``, ``local[2]``) over the node's slice files, running the same
   statements in the same order (first, warm, timed: ``warm_spark_ms``); then DuckDB over the same files, the
   timed statements (``duckdb_miss_ms``) and the hit statement ``--hits`` times (``duckdb_hit_statement_ms``:
   what recomputing the answer costs the fastest engine at hand).

Ratios (with their targets): ``ratio_warm_spark_over_hit`` (≥ 600), ``ratio_duckdb_over_hit`` (≥ 100 on Q1 SF 1),
``ratio_miss_over_warm_spark`` (≤ 1.2), ``ratio_first_miss_over_warm_spark`` (≤ 1.5).

    .venv/bin/python scripts/bench/tpch.py [--sf 1] [--hits 100] [--misses 5] [--warm-misses 3] [--keep]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Api, BenchNode, Phase, say
from _procs import cairn_argv
from query import git_state, p50, pct

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ROOT / "tests" / "data" / "tpch"
TABLE = "lineitem"


# Substitution parameters (TPC-H 2.4.1.3, 2.4.6.3): the spec's defaults first, then others from their ranges.
def _q1(delta: int) -> str:
    text = (QUERIES / "q01.sql").read_text()
    return text.replace("interval '90' day", f"interval '{delta}' day")


def _q6(year: int, discount: str, quantity: int) -> str:
    text = (QUERIES / "q06.sql").read_text()
    text = text.replace("date '1994-01-01'", f"date '{year}-01-01'")
    text = text.replace("0.06 - 0.01", f"{discount} - 0.01").replace("0.06 + 0.01", f"{discount} + 0.01")
    return text.replace("l_quantity < 24", f"l_quantity < {quantity}")


def statements(name: str, n: int) -> list[str]:
    """The default statement, then n - 1 distinct others (each a new invocation)."""
    if name == "q1":
        deltas = [90, *(d for d in range(60, 121) if d != 90)]
        return [_q1(d) for d in deltas[:n]]
    combos = itertools.product(range(1994, 1998), ("0.06", "0.02", "0.03", "0.04", "0.05", "0.07"), (24, 25))
    return [_q6(y, d, q) for y, d, q in itertools.islice(combos, n)]


# --------------------------------------------------------------------------- Cairn


def generate(work: Path, sf: str) -> Path:
    out = work / "data"
    exe = Path(sys.executable).parent / "tpchgen-cli"  # installed beside the interpreter (test extra)
    cmd = [str(exe), "parquet", "-s", sf, "--tables", TABLE, "--output-dir", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600)
    return out / f"{TABLE}.parquet"


def ingest(node: BenchNode, parquet: Path) -> dict[str, Any]:
    argv = [*cairn_argv(), "--home", str(node.home), "add", str(parquet), "--name", TABLE, "--json"]
    out = subprocess.run(argv, env=node.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=3600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"cairn add exited with {out.returncode}: {out.stderr.decode(errors='replace')[-2000:]}")
    added: dict[str, Any] = json.loads(out.stdout)
    return added


def ask(api: Api, sql: str) -> tuple[float, dict[str, Any]]:
    ms, status, answer = api.request("POST", "/api/v0/query", {"sql": sql, "inputs": {TABLE: TABLE}, "limit": 0})
    if status != 200:
        raise RuntimeError(f"query failed: HTTP {status}: {answer}")
    return round(ms, 3), answer


def run_cairn(api: Api, node: BenchNode, sqls: list[str], warm: int, hits: int) -> dict[str, Any]:
    first_ms, first = ask(api, sqls[0])
    if first["source"] != "computed":
        raise RuntimeError(f"the first query was not computed: {first['source']}")
    for sql in sqls[1 : 1 + warm]:
        ask(api, sql)
    misses = []
    for sql in sqls[1 + warm :]:
        ms, answer = ask(api, sql)
        if answer["source"] != "computed":
            raise RuntimeError(f"a miss was answered from {answer['source']}")
        misses.append(ms)
    jobs_before = node.info()["spark"].get("jobs")
    for _ in range(5):
        ask(api, sqls[0])
    hit_ms, sources = [], set()
    for _ in range(hits):
        ms, answer = ask(api, sqls[0])
        hit_ms.append(ms)
        sources.add(answer["source"])
    if sources != {"local"}:
        raise RuntimeError(f"hits answered from {sources}")
    return {
        "first_miss_ms": first_ms,
        "miss_ms": misses,
        "hit_ms": hit_ms,
        "result_rows": first["row_count"],
        "logical_hash": first["logicalHash"],
        "spark_jobs_during_hits": (node.info()["spark"].get("jobs") or 0) - (jobs_before or 0),
    }


def bench_cairn(work: Path, parquet: Path, plan: dict[str, list[str]], args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "IPFS_TELEMETRY": "off", "CAIRN_SPARK_AUTOSTART": "true", "CAIRN_LOG_FORMAT": "json"}
    home = work / "cairn-home"
    env["CAIRN_HOME"] = str(home)
    env["CAIRN_API_MAX_UPLOAD_BYTES"] = str(parquet.stat().st_size + (64 << 20))
    node = BenchNode(home, env)
    out: dict[str, Any] = {}
    try:
        node.start()
        say(f"cairn add {parquet.name} ({parquet.stat().st_size / 1e6:.0f} MB)…")
        added = ingest(node, parquet)
        node.wait_spark()
        out["rows"] = added["rows_added"]
        out["paths"] = [str(home / "cache" / "slices" / f"{s['cid']}.parquet") for s in added["slices"]]
        api = Api(node.api, node.token())
        try:
            for name, sqls in plan.items():
                say(f"{name}: first miss, {args.warm_misses} warm misses, {args.misses} timed misses, {args.hits} hits")
                out[name] = run_cairn(api, node, sqls, args.warm_misses, args.hits)
        finally:
            api.close()
    finally:
        node.stop()
    return out


# --------------------------------------------------------------------------- baselines


def bench_spark(work: Path, paths: list[str], plan: dict[str, list[str]], warm: int) -> dict[str, Any]:
    """The worker's session settings over the node's slice files, the same statements in the same order."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark_worker.session import effective_conf

    conf = effective_conf(
        "local[2]",
        {"spark.local.dir": str(work / "spark-local"), "spark.sql.warehouse.dir": str(work / "spark-warehouse")},
    )
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    out: dict[str, Any] = {"version": spark.version}
    try:
        spark.read.parquet(*paths).createOrReplaceTempView(TABLE)
        for name, sqls in plan.items():
            spark.sql(sqls[0]).toArrow()
            for sql in sqls[1 : 1 + warm]:
                spark.sql(sql).toArrow()
            samples = []
            for sql in sqls[1 + warm :]:
                t0 = time.perf_counter()
                spark.sql(sql).toArrow()
                samples.append(round((time.perf_counter() - t0) * 1000, 2))
            out[name] = samples
    finally:
        spark.stop()
    return out


def bench_duckdb(paths: list[str], plan: dict[str, list[str]], warm: int, hits: int) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    files = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
    con.execute(f"CREATE VIEW {TABLE} AS SELECT * FROM read_parquet({files})")
    out: dict[str, Any] = {"version": duckdb.__version__}

    def timed(sql: str) -> float:
        t0 = time.perf_counter()
        con.sql(sql).to_arrow_table()
        return round((time.perf_counter() - t0) * 1000, 2)

    try:
        for name, sqls in plan.items():
            for sql in sqls[: 1 + warm]:
                timed(sql)
            out[name] = {
                "rows": con.sql(sqls[0]).to_arrow_table().num_rows,
                "miss": [timed(sql) for sql in sqls[1 + warm :]],
                "hit_statement": [timed(sqls[0]) for _ in range(max(5, hits // 10))],
            }
    finally:
        con.close()
    return out


# --------------------------------------------------------------------------- report


def report(name: str, cairn: dict[str, Any], spark: list[float], duck: dict[str, Any]) -> dict[str, Any]:
    c = cairn[name]
    hit, miss, warm_spark = p50(c["hit_ms"]), p50(c["miss_ms"]), p50(spark)
    duck_hit = p50(duck["hit_statement"])
    if duck["rows"] != c["result_rows"]:  # the two engines must agree before their times mean anything
        raise RuntimeError(f"{name}: Cairn answered {c['result_rows']} rows, DuckDB {duck['rows']}")
    return {
        "hit_ms": {"p50": hit, "p99": pct(c["hit_ms"], 99), "n": len(c["hit_ms"])},
        "miss_ms": {"p50": miss, "samples": c["miss_ms"]},
        "first_miss_ms": c["first_miss_ms"],
        "warm_spark_ms": {"p50": warm_spark, "samples": spark},
        "duckdb_ms": {"miss_p50": p50(duck["miss"]), "hit_statement_p50": duck_hit},
        "ratio_warm_spark_over_hit": round(warm_spark / hit, 1),
        "ratio_duckdb_over_hit": round(duck_hit / hit, 1),
        "ratio_miss_over_warm_spark": round(miss / warm_spark, 3),
        "ratio_first_miss_over_warm_spark": round(c["first_miss_ms"] / warm_spark, 3),
        "result_rows": c["result_rows"],
        "spark_jobs_during_hits": c["spark_jobs_during_hits"],
    }


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", default="1", help="TPC-H scale factor (default 1: 6 M lineitem rows)")
    parser.add_argument("--hits", type=int, default=100, help="timed hits per query (default 100)")
    parser.add_argument("--misses", type=int, default=5, help="timed misses per query (default 5)")
    parser.add_argument("--warm-misses", type=int, default=3, help="untimed misses before them (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    if args.hits < 1 or args.misses < 1 or args.warm_misses < 0 or args.misses + args.warm_misses > 40:
        parser.error("--hits and --misses ≥ 1, --warm-misses ≥ 0, misses + warm misses ≤ 40")
    return args


def main() -> None:
    args = _args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    n = 1 + args.warm_misses + args.misses
    plan = {"q1": statements("q1", n), "q6": statements("q6", n)}
    load_before = os.getloadavg()[0]
    phases: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-tpch-"))
    try:
        with Phase("generate", phases):
            parquet = generate(work, args.sf)
        with Phase("cairn", phases):
            cairn = bench_cairn(work, parquet, plan, args)
        with Phase("warm_spark", phases):
            spark = bench_spark(work, cairn["paths"], plan, args.warm_misses)
        with Phase("duckdb", phases):
            duck = bench_duckdb(cairn["paths"], plan, args.warm_misses, args.hits)
        out = {
            "bench": "tpch",
            "scale_factor": args.sf,
            "lineitem_rows": cairn["rows"],
            **{name: report(name, cairn, spark[name], duck[name]) for name in plan},
            "targets": {
                "ratio_warm_spark_over_hit": ">= 600",
                "ratio_duckdb_over_hit": ">= 100 (q1, SF 1)",
                "ratio_miss_over_warm_spark": "<= 1.2",
                "ratio_first_miss_over_warm_spark": "<= 1.5",
            },
            "phases": phases,
            "machine": {
                "cpus": os.cpu_count(),
                "spark": spark["version"],
                "duckdb": duck["version"],
                "git": git_state(),
                "loadavg_before": round(load_before, 2),
                "loadavg_after": round(os.getloadavg()[0], 2),
            },
        }
        print(json.dumps(out, indent=2))
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
