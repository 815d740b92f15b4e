"""Benchmark: a query answered by Cairn (hit and miss) vs the same SQL in a warm SparkSession, in the same run.

Prints one JSON object on stdout (progress goes to stderr):

1. Generates a deterministic Parquet file of ``--rows`` rows (id int64 = 0…n-1, k int64 = id % 1000,
   v float64 in [0, 1) from a multiplicative hash of id, s string of 7 values) and ingests it into a fresh
   node (own temp home, free ports, managed Kubo, ``CAIRN_SPARK_AUTOSTART=true``) with
   ``cairn --home H add FILE --name bench --json``. Not timed.
2. Waits until the node's Spark worker is up *and* has run its warm-up query, then, over HTTP
   (``POST /api/v0/query``, one keep-alive ``http.client`` connection, wall time on the client until the
   whole answer is read):
   - **misses**: ``SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE v > C GROUP BY k ORDER BY k``
     with a new constant C each time (a new invocation each time). The very first query on the fresh
     dataset version (C = 0.05) is reported apart as ``first_miss_ms``: it is the plan's first run in the
     worker's JVM, and it pays whatever the node does once per version (the input's logical hash, if the
     ingest did not record it). Then ``--warm-misses`` untimed misses (the JVM's
     JIT warms up on this statement over several runs), then the ``--misses`` timed ones (``miss_ms``).
     Each miss is broken down with its receipt's ``timings`` (``GET /api/v0/executions/{execution}``), the
     node's ``computed`` log line and the answer's ``elapsed_ms``.
   - **hits**: the first timed statement again, ``--hits`` times (after 5 untimed ones); every answer must
     say ``source: local`` and the node's ``spark.jobs`` must not move (``spark_jobs_during_hits``).
   - **probes** (node idle): what the pieces of a miss and of a hit cost when done alone.
3. Stops the node (by PID; it stops its Kubo and Spark worker), then **baseline**: a SparkSession in this
   process (``local[2]``, the worker's own settings from ``spark_worker.session``: UI off, 4 shuffle
   partitions, ANSI, UTC) over the node's slice files (``HOME/cache/slices/<cid>.parquet``), each run
   ``spark.read.parquet`` + columns named as in the dataset + temp view ``t`` + ``spark.sql(…).toArrow()``.
   It runs exactly the node worker's sequence: the worker's warm-up query, the first constant, the warm
   constants (untimed), then the timed constants (``warm_spark_ms``), so both JVMs are equally warm.
   A second pass (diagnostic, same session) runs, per timed constant and in rotating order, with constants
   never seen before (Spark generates code per statement, literals included): the same plain run, the view
   already registered (SQL + toArrow only), and the worker's own job code (``spark_worker.worker.Worker.execute``:
   canonical statement, ``col_N`` names, forced session settings, temp views dropped, Arrow IPC), plus the
   timed statement run again (``repeat``: what a statement Spark has already compiled costs).
   The node and this SparkSession never run together. DuckDB: timed the same way if importable, else ``null``.
4. Removes the temp dir (unless ``--keep``) and every process it started.

Ratios (DESIGN.md "Targets"): ``ratio_miss_over_warm_spark`` = p50 miss / p50 warm Spark (≤ 1.3),
``ratio_warm_spark_over_hit`` = p50 warm Spark / p50 hit (≥ 400).

    .venv/bin/python scripts/bench/query.py [--rows 10000000] [--hits 200] [--misses 9] [--warm-misses 4]
    .venv/bin/python scripts/bench/query.py --modes local,standalone,connect --rows 200000 --misses 5

``--modes`` instead times, per Spark mode, a fresh node's misses and bare Spark's run of the same
statements in the same mode (same files; a standalone master + 1 worker or a Connect server from
scripts/spark_cluster.py; the node's inputs staged in ``spark.staging``), and prints their p50s and ratio.
                                            [--quiet-wait SECONDS] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import importlib.util
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import QUIET, Api, BenchNode, OtherCpu, Phase, say, wait_machine_quiet
from _procs import java_version, wait_tree_quiet

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MB = 1_000_000
GEN_ROWS = 1 << 20  # rows generated (and written as one row group) per chunk
DATASET = "bench"
# A second dataset of the same shape and size but other rows (new files), asked once the worker is warm: its first
# miss is what a new version costs beyond a warm miss, apart from the young JVM's JIT.
FRESH_DATASET = "bench_fresh"
FRESH_CONSTANTS = ("0.0511", "0.0512")  # never asked before in this JVM (a literal is part of Spark's code)
SQL = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE v > {c} GROUP BY k ORDER BY k"
FIRST_CONSTANT = "0.05"  # the first query on the fresh version (reported apart)
HIT_WARMUP = 5
STRINGS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
# The targets: a hit at the HTTP floor, a miss and a first miss close to warm Spark.
TARGET_MISS_RATIO = 1.2
TARGET_FIRST_MISS_RATIO = 1.5
TARGET_HIT_RATIO = 600
TARGET_HIT_P50_MS = 1.0
TARGET_DUCKDB_RATIO = 100


def p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(xs)
    return round(s[max(0, min(len(s) - 1, int(-(-len(s) * q // 100)) - 1))], 3) if s else float("nan")


def constants(n: int) -> list[str]:
    """n distinct predicate constants 0.1, 0.2, … 0.9, then 0.015, 0.025, … (never the first query's)."""
    out: list[str] = []
    i = 1
    while len(out) < n:
        c = f"{i / 10:.1f}" if i < 10 else f"{0.01 * (i - 9) + 0.005:.3f}"
        if c != FIRST_CONSTANT:
            out.append(c)
        i += 1
    return out


# --------------------------------------------------------------------------- input


def _mod(a: pa.Array, m: int) -> pa.Array:
    """a % m for non-negative int64 (pyarrow has no modulo kernel; integer divide truncates)."""
    return pc.subtract(a, pc.multiply(pc.divide(a, m), m))


def generate_parquet(path: Path, rows: int, first_id: int = 0) -> None:
    """Write ``rows`` deterministic rows: id (from ``first_id``), k = id % 1000, v in [0, 1), s (7 values)."""
    base = pa.array(range(GEN_ROWS), pa.int64())
    strings = pa.array(STRINGS, pa.string())
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())])
    done = 0
    with pq.ParquetWriter(str(path), schema, compression="zstd") as writer:
        while done < rows:
            n = min(GEN_ROWS, rows - done)
            ids = pc.add(base.slice(0, n), done + first_id)
            # Knuth's multiplicative hash, low 32 bits / 2^32: uniform in [0, 1), independent of k
            h = pc.bit_wise_and(pc.multiply(ids, 2654435761), 0xFFFFFFFF)
            table = pa.table(
                {
                    "id": ids,
                    "k": _mod(ids, 1000),
                    "v": pc.divide(pc.cast(h, pa.float64()), float(1 << 32)),
                    "s": pc.take(strings, _mod(pc.shift_right(h, 13), len(STRINGS))),
                },
                schema=schema,
            )
            writer.write_table(table, row_group_size=GEN_ROWS)
            done += n


# --------------------------------------------------------------------------- other work on the machine


CLEAN_SHARE = 0.1  # a sample during which other work used more than this share of the CPUs is "disturbed"


def clean_p50(samples: list[float], shares: list[float]) -> float | None:
    """p50 of the undisturbed samples, or None if fewer than 3 of them."""
    kept = [x for x, sh in zip(samples, shares) if sh < CLEAN_SHARE]
    return p50(kept) if len(kept) >= 3 else None


# --------------------------------------------------------------------------- Cairn


def ingest(node: BenchNode, parquet: Path) -> dict[str, Any]:
    say(f"cairn add {parquet.name} ({parquet.stat().st_size / MB:.0f} MB of Parquet)…")
    t0 = time.perf_counter()
    result = node.add(parquet, DATASET)
    say(f"ingested {result['rows_added']} rows in {time.perf_counter() - t0:.1f} s, {len(result['slices'])} slices")
    return result


def computed_lines(node: BenchNode) -> dict[str, float]:
    """invocation → compute_ms from the node's ``computed`` log lines (JSON log format)."""
    out: dict[str, float] = {}
    for line in node.log_path.read_text(errors="replace").splitlines():
        if '"computed"' not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("msg") == "computed" and "invocation" in obj:
            out[obj["invocation"]] = float(obj["compute_ms"])
    return out


def query(api: Api, c: str, dataset: str = DATASET) -> tuple[float, dict[str, Any]]:
    ms, status, answer = api.request("POST", "/api/v0/query", {"sql": SQL.format(c=c), "inputs": {"t": dataset}})
    if status != 200:
        raise RuntimeError(f"query (v > {c}) failed: HTTP {status}: {answer}")
    return ms, answer


def miss_breakdown(api: Api, node: BenchNode, misses: list[dict[str, Any]]) -> None:
    """Add to each miss what its receipt and the node's log say about where the time went."""
    logged = computed_lines(node)
    for m in misses:
        receipt = api.get(f"/api/v0/executions/{m['execution']}")
        t = receipt.get("timings") or {}
        compute, round_trip, total = t.get("compute_ms"), t.get("engine_round_trip_ms"), t.get("total_ms")
        to_engine = logged.get(m["invocation"])  # from the start of the computation to the answer of the worker
        node_ms, client_ms = m["node_elapsed_ms"], m["client_ms"]
        m["receipt_timings"] = t

        def d(a: float | None, b: float | None) -> float | None:
            return round(a - b, 1) if a is not None and b is not None else None

        m["parts_ms"] = {
            # in the worker: spark.read.parquet + temp view + Spark SQL + toArrow
            "worker_spark": compute,
            # after Spark in the worker (temp views dropped, Arrow IPC), the Unix socket, decoding in the node
            "worker_after_spark_and_ipc": d(round_trip, compute),
            # input slice paths before the call (the log line is rounded to 0.1 ms)
            "before_worker_call": d(to_engine, round_trip),
            # canonical order, Parquet write, `ipfs add` of the result, its logical hash, building the objects
            "result_write_add_hash": d(total, to_engine),
            # prepare (resolve the version, canonicalize, hash the question, index lookup) + sign the receipt,
            # block puts, recursive pin, index row, provide
            "prepare_and_publish_objects": d(node_ms, total),
            # HTTP, reading the result back for the answer's rows, JSON
            "http_and_answer": d(client_ms, node_ms),
        }


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


async def _kubo_probes(
    kubo_api: str, kubo_auth: str | None, slice_cids: list[str], work: Path, result: pa.Table
) -> dict[str, Any]:
    """Each step of a miss's publish, alone, against the node's own Kubo (idle)."""
    from node.adapters.ipfs import KuboClient

    out: dict[str, Any] = {}
    kubo = KuboClient(kubo_api, timeout=60.0, auth=kubo_auth)
    try:
        out.update(await _probe_result_write(kubo, work, result))
        blocks, timings = await _probe_block_puts(kubo)
        out.update(timings)
        out.update(await _probe_pins(kubo, slice_cids))
        out["dag_import_13_blocks_pinned_ms"] = await _probe_dag_import(kubo)
        out.update(await _probe_provide(kubo, blocks[:3]))
    finally:
        await kubo.close()
    return out


async def _probe_result_write(kubo: Any, work: Path, result: pa.Table) -> dict[str, float]:
    """Writing the result's Parquet, its logical hash, adding it to Kubo."""
    from node.services.datasets import LogicalHasher
    from node.services.datasets.slices import write_parquet_slice

    path = work / "probe-result.parquet"
    write, add, hashing = [], [], []
    for _ in range(5):  # the real result with its first column shifted: new bytes, a new CID
        table = result.set_column(0, result.schema[0].name, pc.add(result.column(0), secrets.randbelow(1 << 20) + 1))
        t0 = time.perf_counter()
        write_parquet_slice(table, str(path))
        write.append(_ms_since(t0))
        t0 = time.perf_counter()
        h = LogicalHasher(table.schema)
        h.update(table)
        h.finish()
        hashing.append(_ms_since(t0))
        t0 = time.perf_counter()
        await kubo.add(path, pin=False)
        add.append(_ms_since(t0))
    return {
        "result_parquet_write_ms": p50(write),
        "result_logical_hash_ms": p50(hashing),
        "kubo_add_result_ms": p50(add),
    }


async def _probe_block_puts(kubo: Any) -> tuple[list[Any], dict[str, float]]:
    """13 small dag-cbor blocks, as a miss over one input puts (abstract structure, query, invocation,
    structure, SQL leaf, module envelope, input list, input root, output list, 2 envelopes, execution,
    receipt): one RPC after the other, as the node does, then all at once. Returns the blocks too."""
    from node.domain.model import block_of

    out = {}
    blocks = [block_of({"probe": secrets.token_hex(16), "n": i}) for i in range(26)]
    t0 = time.perf_counter()
    for b in blocks[:13]:
        await kubo.block_put(b.data, codec=b.cid.codec.name)
    out["block_put_13_sequential_ms"] = round(_ms_since(t0), 2)
    t0 = time.perf_counter()
    await asyncio.gather(*(kubo.block_put(b.data, codec=b.cid.codec.name) for b in blocks[13:]))
    out["block_put_13_concurrent_ms"] = round(_ms_since(t0), 2)
    return blocks, out


async def _probe_pins(kubo: Any, slice_cids: list[str]) -> dict[str, float]:
    """The receipt's recursive pin walks everything it links, the input dataset's slices included:
    pin a fresh root over the input slice CIDs (as a receipt's input list links them), vs a lone block."""
    from node.domain.model import block_of, parse_cid

    cids = [parse_cid(c) for c in slice_cids]
    over_inputs, lone = [], []
    for _ in range(3):
        root = block_of({"probe": secrets.token_hex(16), "inputs": cids})
        await kubo.block_put(root.data, codec=root.cid.codec.name)
        t0 = time.perf_counter()
        await kubo.pin_add(root.cid, recursive=True)
        over_inputs.append(_ms_since(t0))
        await kubo.pin_rm(root.cid, recursive=True)
        leaf = block_of({"probe": secrets.token_hex(16)})
        await kubo.block_put(leaf.data, codec=leaf.cid.codec.name)
        t0 = time.perf_counter()
        await kubo.pin_add(leaf.cid, recursive=True)
        lone.append(_ms_since(t0))
        await kubo.pin_rm(leaf.cid, recursive=True)
    return {"pin_recursive_over_input_slices_ms": p50(over_inputs), "pin_recursive_one_block_ms": p50(lone)}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


async def _probe_dag_import(kubo: Any) -> float:
    """13 blocks in one CAR, one `dag import` call that also pins its root (which links the rest)."""
    from node.domain.model import block_of, encode

    imports = []
    for _ in range(3):
        leaves = [block_of({"probe": secrets.token_hex(16), "n": i}) for i in range(12)]
        root = block_of({"probe": secrets.token_hex(16), "links": [b.cid for b in leaves]})
        header = encode({"roots": [root.cid], "version": 1})
        car = bytearray(_varint(len(header)) + header)
        for b in [*leaves, root]:
            raw = bytes(b.cid)
            car += _varint(len(raw) + len(b.data)) + raw + b.data
        t0 = time.perf_counter()
        await kubo.dag_import(bytes(car), pin_roots=True)
        imports.append(_ms_since(t0))
        await kubo.pin_rm(root.cid, recursive=True)
    return p50(imports)


async def _probe_provide(kubo: Any, blocks: list[Any]) -> dict[str, Any]:
    from node.support.errors import CairnError

    provide, outcome = [], ""
    for b in blocks:
        t0 = time.perf_counter()
        try:
            await kubo.routing_provide(b.cid, timeout=5.0)
            outcome = "queued"
        except CairnError as e:
            outcome = f"refused: {e.message[:80]}"
        provide.append(_ms_since(t0))
    return {"provide_one_ms": p50(provide), "provide_outcome": outcome}


def probes(
    api: Api, node: BenchNode, slice_cids: list[str], schema: list[tuple[str, str]], work: Path, result_file: Path
) -> dict[str, Any]:
    from node.domain.sql import canonicalize
    from node.services.datasets.slices import read_slice

    def timed(fn: Any, n: int) -> float:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1000)
        return p50(samples)

    out: dict[str, Any] = {}
    # the HTTP floor: a request the node answers without Kubo, SQLite or Parquet (a 404 from a dict lookup)
    out["http_round_trip_floor_ms"] = timed(lambda: api.request("GET", "/api/v0/jobs/none"), 50)
    # canonicalizing a statement not seen before, and one seen before (the node caches per statement text)
    out["canonicalize_new_statement_ms"] = timed(
        lambda: canonicalize(SQL.format(c=f"0.{secrets.randbelow(10**9):09d}1"), {"t": schema}), 5
    )
    out["canonicalize_cached_ms"] = timed(lambda: canonicalize(SQL.format(c="0.1"), {"t": schema}), 50)
    # the dataset's description: resolve the version + its (now cached) logical hash, over HTTP
    out["get_dataset_warm_ms"] = timed(lambda: api.request("GET", f"/api/v0/datasets/{DATASET}"), 20)
    # what every answer (hit or miss) does after resolving: read the result slice, take the first rows
    result = read_slice(result_file)

    def answer_rows() -> None:
        json.dumps({"rows": [list(r.values()) for r in read_slice(result_file).slice(0, 100).to_pylist()]})

    out["answer_rows_from_result_parquet_ms"] = timed(answer_rows, 50)
    from node.adapters.ipfs import home_kubo_auth

    auth = home_kubo_auth(node.home)  # the node's managed Kubo wants its RPC secret
    out.update(asyncio.run(_kubo_probes(node.kubo_api or "", auth, slice_cids, work, result)))
    return out


def bench_cairn(
    work: Path, parquet: Path, rows: int, warm: list[str], timed: list[str], n_hits: int, phases: dict[str, Any]
) -> tuple[dict[str, Any], list[Path], list[tuple[str, str]]]:
    env = {**os.environ, "IPFS_TELEMETRY": "off", "CAIRN_SPARK_AUTOSTART": "true", "CAIRN_LOG_FORMAT": "json"}
    home = work / "cairn-home"
    env["CAIRN_HOME"] = str(home)
    if parquet.stat().st_size > (1 << 30) - (64 << 20):  # the bench's node takes a bigger upload
        env["CAIRN_API_MAX_UPLOAD_BYTES"] = str(parquet.stat().st_size + (64 << 20))
    node = BenchNode(home, env)
    try:
        with Phase("ingest_and_spark_start", phases):
            node.start()
            added = ingest(node, parquet)
            if added["rows_added"] != rows:
                raise RuntimeError(f"cairn added {added['rows_added']} rows, the file has {rows}")
            spark = node.wait_spark()
        say(f"Spark worker up (pid {spark.get('pid')}, warm-up query {spark.get('warmup_ms')} ms)")
        slice_cids = [s["cid"] for s in added["slices"]]
        paths = [home / "cache" / "slices" / f"{c}.parquet" for c in slice_cids]
        missing = [p for p in paths if not p.exists()]
        if missing:
            raise RuntimeError(f"slice files not in the node's cache: {missing[:3]}")
        time.sleep(2.0)  # let the ingest's after-work (Kubo, GC) settle

        api = Api(node.api, node.token())
        try:
            misses = _bench_misses(api, node, warm, timed, phases)
            hits = _bench_hits(api, node, misses["misses"][0]["constant"], n_hits, phases)
            fresh = _bench_fresh_version(api, node, work, rows, phases)
            # -- probes (node idle) -------------------------------------------------------------
            say("probes…")
            described = api.get(f"/api/v0/datasets/{DATASET}")
            schema = [(name, typ) for name, typ in described["schema"]]
            _, hit_answer = query(api, hits["constant"])
            result_file = home / "cache" / "slices" / f"{hit_answer['slices'][0]}.parquet"
            with Phase("probes", phases):
                probe = probes(api, node, slice_cids, schema, work, result_file)
            with Phase("node_idle_5s", phases):  # what the node, its Kubo and its worker use when asked nothing
                time.sleep(5.0)
        finally:
            api.close()
        node_info = node.info()
    finally:
        node.stop()
    say(f"node stopped (pid {node.proc.pid if node.proc else None})")

    return (
        {
            "slices": len(slice_cids),
            "parquet_mb": round(sum(s["size"] for s in added["slices"]) / MB, 1),
            "spark_worker_warmup_ms": spark.get("warmup_ms"),
            **misses,
            "hits": hits,
            "fresh_version": fresh,
            "probes": probe,
            "kubo_version": (node_info.get("kubo") or {}).get("version"),
        },
        paths,
        schema,
    )


def _miss(api: Api, c: str, dataset: str = DATASET) -> dict[str, Any]:
    """One query expected to be a miss, timed, with the share of the CPUs other work used meanwhile."""
    other = OtherCpu()
    other.start()
    ms, a = query(api, c, dataset)
    share = other.share()
    if a["source"] != "computed":
        raise RuntimeError(f"query v > {c} was expected to be a miss, got source {a['source']}")
    say(
        f"  miss v > {c}: {ms:.0f} ms (node {a['elapsed_ms']:.0f} ms, {a['row_count']} rows)"
        + (f"; other work used {share:.0%} of the CPUs" if share >= CLEAN_SHARE else "")
    )
    return {
        "constant": c,
        "client_ms": round(ms, 1),
        "node_elapsed_ms": a["elapsed_ms"],
        "invocation": a["invocation"],
        "execution": a["execution"],
        "row_count": a["row_count"],
        "other_cpu_share": share,
    }


def _bench_misses(
    api: Api, node: BenchNode, warm: list[str], timed: list[str], phases: dict[str, Any]
) -> dict[str, Any]:
    """The first miss on the fresh version, the untimed warm misses, the timed ones (each a Spark job)."""
    jobs0 = node.info()["spark"]["jobs"]
    wait_machine_quiet("first_miss")
    say(f"first query on the fresh version (v > {FIRST_CONSTANT})…")
    with Phase("first_miss", phases):
        first = _miss(api, FIRST_CONSTANT)
    say(f"{len(warm)} untimed misses (JIT warm-up on this statement)…")
    warm_misses = [_miss(api, c) for c in warm]
    wait_machine_quiet("misses")
    say(f"{len(timed)} timed misses…")
    with Phase("misses", phases):
        misses = [_miss(api, c) for c in timed]
    jobs1 = node.info()["spark"]["jobs"]
    expected = 1 + len(warm) + len(timed)
    if jobs1 - jobs0 != expected:
        raise RuntimeError(f"{expected} misses sent {jobs1 - jobs0} Spark jobs")
    miss_breakdown(api, node, [first, *warm_misses, *misses])
    return {"first_miss": first, "warm_misses": warm_misses, "misses": misses}


def _bench_fresh_version(api: Api, node: BenchNode, work: Path, rows: int, phases: dict[str, Any]) -> dict[str, Any]:
    """FRESH_DATASET ingested after the timed misses and hits, then its first miss and a second one."""
    path = work / "fresh.parquet"
    generate_parquet(path, rows, first_id=rows)  # other ids: other values, other files
    say(f"a fresh version: cairn add {path.name} as {FRESH_DATASET!r}…")
    added = node.add(path, FRESH_DATASET)
    path.unlink()
    if added["rows_added"] != rows:
        raise RuntimeError(f"cairn added {added['rows_added']} rows to {FRESH_DATASET}, the file has {rows}")
    assert node.proc is not None
    waited = wait_tree_quiet(node.proc.pid)  # the ingest's after-work (Kubo, GC) is not the miss's
    say(f"the node was quiet after {waited:.1f} s")
    wait_machine_quiet("fresh_version")
    with Phase("fresh_version_first_miss", phases):
        first = _miss(api, FRESH_CONSTANTS[0], FRESH_DATASET)
    second = _miss(api, FRESH_CONSTANTS[1], FRESH_DATASET)
    miss_breakdown(api, node, [first, second])
    return {"first_miss": first, "second_miss": second}


def _bench_hits(api: Api, node: BenchNode, hit_c: str, n_hits: int, phases: dict[str, Any]) -> dict[str, Any]:
    """A timed statement again, n_hits times over one connection: each answered from the index, no Spark job."""
    for _ in range(HIT_WARMUP):
        query(api, hit_c)
    jobs_before = node.info()["spark"]["jobs"]
    hit_ms: list[float] = []
    node_ms: list[float] = []
    sources: dict[str, int] = {}
    wait_machine_quiet("hits")
    say(f"{n_hits} hits (v > {hit_c}) over one keep-alive connection…")
    with Phase("hits", phases):
        for _ in range(n_hits):
            ms, a = query(api, hit_c)
            hit_ms.append(ms)
            node_ms.append(a["elapsed_ms"])
            sources[a["source"]] = sources.get(a["source"], 0) + 1
    jobs_after = node.info()["spark"]["jobs"]
    if jobs_after != jobs_before or set(sources) != {"local"}:
        raise RuntimeError(f"hits sent {jobs_after - jobs_before} Spark jobs; sources {sources}")
    say(f"  hit p50 {p50(hit_ms):.2f} ms, p99 {pct(hit_ms, 99):.2f} ms")
    return {
        "client_ms": hit_ms,
        "node_elapsed_ms": node_ms,
        "sources": sources,
        "spark_jobs_before": jobs_before,
        "spark_jobs_after": jobs_after,
        "constant": hit_c,
    }


# --------------------------------------------------------------------------- baselines


class _Baseline:
    """A SparkSession in this process with the node worker's settings, over the node's slice files."""

    def __init__(self, work: Path, paths: list[Path], schema: list[tuple[str, str]]) -> None:
        tmp = work / "spark-tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
            p for p in (os.environ.get("SPARK_SUBMIT_OPTS"), f"-Djava.io.tmpdir={tmp}") if p
        )
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        from spark_worker.session import effective_conf

        conf = effective_conf(
            "local[2]",
            {
                "spark.local.dir": str(work / "spark-local"),
                "spark.sql.warehouse.dir": str(work / "spark-warehouse"),
                "spark.app.name": "cairn-query-bench-baseline",
            },
        )
        self.work = work
        self.schema = schema
        self.columns = [name for name, _ in schema]
        self.files = [str(p) for p in paths]
        say("baseline: starting a SparkSession (local[2])…")
        t0 = time.perf_counter()
        builder = SparkSession.builder
        for k, v in conf.items():
            builder = builder.config(k, v)
        self.spark = builder.getOrCreate()
        self.spark.sparkContext.setLogLevel("WARN")
        self.start_s = time.perf_counter() - t0
        self.worker: Any = None

    def plain(self, c: str) -> float:
        """Read the files, name the columns, register t, run, collect the result as Arrow."""
        t0 = time.perf_counter()
        self.spark.read.parquet(*self.files).toDF(*self.columns).createOrReplaceTempView("t")
        table = self.spark.sql(SQL.format(c=c)).toArrow()
        ms = (time.perf_counter() - t0) * 1000
        if table.num_rows == 0:
            raise RuntimeError("the baseline query returned no rows")
        return round(ms, 1)

    def sql_only(self, c: str) -> float:
        """The view ``t`` already registered (by an earlier plain run, same files): Spark SQL + toArrow only."""
        t0 = time.perf_counter()
        self.spark.sql(SQL.format(c=c)).toArrow()
        return round((time.perf_counter() - t0) * 1000, 1)

    def worker_job(self, c: str) -> tuple[float, float]:
        """The worker's own job code: its elapsed_ms (what a receipt calls compute_ms) and the call's wall time."""
        from node.domain.sql import canonicalize
        from spark_worker.jobs import Job

        statement = canonicalize(SQL.format(c=c), {"t": self.schema}).statement
        abstract = [f"col_{i}" for i in range(len(self.columns))]
        t0 = time.perf_counter()
        header, _ = self.worker.execute(Job(f"bench-{secrets.token_hex(4)}", statement, {"a": (self.files, abstract)}))
        return header["elapsed_ms"], round((time.perf_counter() - t0) * 1000, 1)

    def warm_up(self, warm: list[str]) -> float:
        """The node worker's sequence: its warm-up query (the same code), the first query, the warm misses."""
        from spark_worker.jobs import Job

        t0 = time.perf_counter()
        small = self.work / "warmup.parquet"
        pq.write_table(pa.table({"k": [i % 7 for i in range(1000)], "v": [i * 0.5 for i in range(1000)]}), small)
        self.worker.execute(
            Job(
                "warmup",
                "SELECT col_0, count(*), sum(col_1) FROM a GROUP BY col_0",
                {"a": ([str(small)], ["col_0", "col_1"])},
            )
        )
        for c in [FIRST_CONSTANT, *warm]:
            self.plain(c)
        return time.perf_counter() - t0

    def diagnostic(self, timed: list[str]) -> dict[str, list[float]]:
        """Spark compiles code per statement (a literal is part of the generated code), so a statement seen
        before runs faster: each variant gets constants never seen before (0.0111, 0.0121…), except "repeat",
        which re-runs a statement of the timed pass. The order rotates."""
        diag: dict[str, list[float]] = {
            "plain": [],
            "sql_only": [],
            "worker_execute": [],
            "worker_execute_total": [],
            "repeat": [],
        }

        def run_worker(c: str) -> None:
            elapsed, total = self.worker_job(c)
            diag["worker_execute"].append(elapsed)
            diag["worker_execute_total"].append(total)

        def run(key: str, how: Callable[[str], float], c: str) -> None:
            diag[key].append(how(c))

        for i, c in enumerate(timed):
            steps: list[Callable[[], None]] = [
                functools.partial(run, "plain", self.plain, f"0.{i + 1:02d}11"),
                functools.partial(run, "sql_only", self.sql_only, f"0.{i + 1:02d}21"),
                functools.partial(run_worker, f"0.{i + 1:02d}31"),
                functools.partial(run, "repeat", self.plain, c),
            ]
            for step in steps[i % 4 :] + steps[: i % 4]:
                step()
        return diag

    def close(self) -> None:
        from spark_worker.process import stop_spark

        if self.worker is not None:
            os.close(self.worker.wake_r)
            os.close(self.worker.wake_w)
        stop_spark(self.spark)


def bench_spark(
    work: Path,
    paths: list[Path],
    schema: list[tuple[str, str]],
    warm: list[str],
    timed: list[str],
    phases: dict[str, Any],
) -> dict[str, Any]:
    """The same SQL in a warm SparkSession in this process, with the worker's settings and warm-up."""
    from spark_worker.worker import Worker

    base = _Baseline(work, paths, schema)
    try:
        # The worker's own job code, in this session: its elapsed_ms is what a receipt calls compute_ms.
        base.worker = Worker(base.spark, None, work / "unused.sock", 0, None, warmup=False)  # type: ignore[arg-type]  # no job log: the bench drives the worker directly
        wait_machine_quiet("baseline_warmup")
        warm_s = base.warm_up(warm)
        say(f"baseline: session {base.start_s:.1f} s, warm-up {warm_s:.1f} s")
        wait_machine_quiet("baseline")
        samples, shares = [], []
        other = OtherCpu()
        with Phase("baseline_warm_spark", phases):
            for c in timed:
                other.start()
                samples.append(base.plain(c))
                shares.append(other.share())
        say(f"baseline: warm Spark p50 {p50(samples):.0f} ms over {len(samples)} runs")
        wait_machine_quiet("baseline_diagnostic")
        with Phase("baseline_diagnostic", phases):
            diag = base.diagnostic(timed)
        say(
            f"baseline diagnostic: new statements: plain {p50(diag['plain']):.0f} ms, view already registered "
            f"{p50(diag['sql_only']):.0f} ms, worker job code {p50(diag['worker_execute']):.0f} ms; "
            f"a statement run before {p50(diag['repeat']):.0f} ms"
        )
        version = base.spark.version
    finally:
        base.close()
    return {
        "samples": samples,
        "other_cpu_share": shares,
        "diagnostic": diag,
        "session_start_s": round(base.start_s, 1),
        "warmup_s": round(warm_s, 1),
        "spark": version,
    }


def bench_duckdb(paths: list[Path], warm: list[str], timed: list[str]) -> tuple[dict[str, Any] | None, str]:
    try:
        import duckdb
    except ImportError:
        return None, "duckdb is not installed in the venv (not a dependency of Cairn): not measured"

    con = duckdb.connect()
    files = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet({files})")
    for c in [FIRST_CONSTANT, *warm]:
        con.sql(SQL.format(c=c)).to_arrow_table()
    samples = []
    for c in timed:
        t0 = time.perf_counter()
        con.sql(SQL.format(c=c)).to_arrow_table()
        samples.append(round((time.perf_counter() - t0) * 1000, 2))
    con.close()
    return {"p50": p50(samples), "samples": samples, "version": duckdb.__version__}, "measured"


# --------------------------------------------------------------------------- --modes

MODES = ("local", "standalone", "connect")


def _mode_cluster(mode: str, work: Path, token: str) -> tuple[list[Any], dict[str, str]]:
    """The Spark a mode runs on, from scripts/spark_cluster.py, and the node's settings for it (as env)."""
    cluster = importlib.import_module("scripts.spark_cluster")  # by name: mypy sees scripts/ files as top-level

    (work / mode).mkdir(parents=True, exist_ok=True)
    staging = {"CAIRN_SPARK_STAGING": f"file://{work / 'staging'}"}  # executors read the slices there
    if mode == "standalone":
        procs, url = cluster.start_standalone(work / mode, 1)
        return procs, {**staging, "CAIRN_SPARK_MODE": mode, "CAIRN_SPARK_MASTER": url}
    if mode == "connect":
        server, port = cluster.start_connect(work / mode, token)
        remote = f"sc://localhost:{port}"
        return [server], {**staging, "CAIRN_SPARK_MODE": mode, "CAIRN_SPARK_REMOTE": remote, "CAIRN_SPARK_TOKEN": token}
    return [], {}


def _mode_misses(work: Path, parquet: Path, mode: str, env_extra: dict[str, str], consts: list[str]) -> dict[str, Any]:
    """A fresh node in ``mode``: ingest, then every constant as a miss (the first len-``timed`` untimed)."""
    home = work / f"home-{mode}"
    env = {**os.environ, "IPFS_TELEMETRY": "off", "CAIRN_SPARK_AUTOSTART": "true", "CAIRN_LOG_FORMAT": "json"}
    env.update(CAIRN_HOME=str(home), CAIRN_SPARK_WARMUP_ROWS="200000", **env_extra)  # the same JIT warm-up in each
    node = BenchNode(home, env)
    try:
        node.start()
        added = ingest(node, parquet)
        node.wait_spark()
        api = Api(node.api, node.token())
        try:
            ms = [_miss(api, c)["client_ms"] for c in consts]
        finally:
            api.close()
    finally:
        node.stop()
    paths = [home / "cache" / "slices" / f"{s['cid']}.parquet" for s in added["slices"]]
    return {"ms": ms, "paths": paths}


def _bare_session(mode: str, work: Path, env_extra: dict[str, str], token: str) -> Any:
    from pyspark.sql import SparkSession

    from spark_worker.session import effective_conf

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if mode == "connect":
        return SparkSession.builder.remote(f"{env_extra['CAIRN_SPARK_REMOTE']}/;token={token}").getOrCreate()
    master = env_extra.get("CAIRN_SPARK_MASTER", "local[2]")
    extra = {"spark.local.dir": str(work / f"bare-{mode}"), "spark.app.name": f"cairn-bench-bare-{mode}"}
    if mode == "standalone":
        extra.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    builder = SparkSession.builder
    for k, v in effective_conf(master, extra).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def _bare_spark(spark: Any, paths: list[Path], consts: list[str]) -> list[float]:
    """Bare Spark: read the same files, register ``t``, run, collect as Arrow (as _Baseline.plain)."""
    out = []
    for c in consts:
        t0 = time.perf_counter()
        spark.read.parquet(*map(str, paths)).toDF("id", "k", "v", "s").createOrReplaceTempView("t")
        spark.sql(SQL.format(c=c)).toArrow()
        out.append(round((time.perf_counter() - t0) * 1000, 1))
    return out


def bench_modes(args: argparse.Namespace) -> dict[str, Any]:
    """For each mode: a node's miss latency and bare Spark's in the same mode, same files, same constants."""
    consts = constants(args.warm_misses + args.misses)
    n_warm = args.warm_misses
    token = secrets.token_hex(16)
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-modes-"))
    out: dict[str, Any] = {"rows": args.rows, "warm": n_warm, "timed": args.misses, "modes": {}}
    try:
        parquet = work / "input.parquet"
        generate_parquet(parquet, args.rows)
        for mode in args.modes.split(","):
            say(f"mode {mode}…")
            procs, env_extra = _mode_cluster(mode, work, token)
            try:
                node = _mode_misses(work, parquet, mode, env_extra, consts)
                spark = _bare_session(mode, work, env_extra, token)
                try:
                    # The warm constants twice: the node's worker also ran its JIT warm-up before them.
                    bare = _bare_spark(spark, node["paths"], consts[:n_warm] + consts)[n_warm:]
                finally:
                    spark.stop()
            finally:
                for p in reversed(procs):
                    p.stop()
            miss, base = p50(node["ms"][n_warm:]), p50(bare[n_warm:])
            out["modes"][mode] = {
                "miss_p50_ms": miss,
                "bare_spark_p50_ms": base,
                "ratio_miss_over_bare_spark": round(miss / base, 2),
                "miss_ms": node["ms"][n_warm:],
                "bare_spark_ms": bare[n_warm:],
            }
            say(f"mode {mode}: miss p50 {miss:.0f} ms, bare Spark p50 {base:.0f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    return out


# --------------------------------------------------------------------------- main


def git_state() -> dict[str, Any]:
    """The commit measured, and the files that differ from it (the node runs from this working tree)."""

    def git(*a: str) -> str:
        out = subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True, timeout=30, check=False)
        return out.stdout

    try:
        return {
            "head": git("rev-parse", "--short", "HEAD").strip() or None,
            "changed": [ln[3:] for ln in git("status", "--porcelain").splitlines() if len(ln) > 3],
        }
    except (OSError, subprocess.TimeoutExpired):
        return {"head": None, "changed": []}


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the dataset (default 10 000 000)")
    parser.add_argument("--hits", type=int, default=200, help="timed hits (default 200)")
    parser.add_argument("--misses", type=int, default=9, help="timed misses (default 9)")
    parser.add_argument(
        "--warm-misses",
        type=int,
        default=4,
        help="untimed misses between the first query and the timed ones (default 4)",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="S",
        help="before each timed step, wait up to S seconds for other work on the machine to "
        "use < 10%% of the CPUs (default 0: do not wait)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (Parquet, home, logs)")
    parser.add_argument(
        "--modes",
        default="",
        metavar="M,M",
        help="instead: misses vs bare Spark in each Spark mode (local,standalone,connect), clusters started by "
        "scripts/spark_cluster.py, inputs staged (spark.staging); prints that JSON",
    )
    args = parser.parse_args()
    if args.rows < 1000 or args.hits < 1 or args.misses < 1 or args.warm_misses < 0:
        parser.error("--rows ≥ 1000, --hits and --misses ≥ 1, --warm-misses ≥ 0")
    return args


def _import_node_code() -> None:
    # Everything of the node's code this process uses, imported now: the run then measures one state of it.
    for module in (
        "node.services.datasets",
        "node.services.datasets.slices",
        "node.support.errors",
        "node.adapters.ipfs",
        "node.domain.model",
        "node.domain.sql",
        "spark_worker.server",
        "spark_worker.session",
    ):
        importlib.import_module(module)


def _brief(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "constant": m["constant"],
        "client_ms": m["client_ms"],
        "node_elapsed_ms": m["node_elapsed_ms"],
        "parts_ms": m["parts_ms"],
    }


def _hit_report(cairn: dict[str, Any]) -> dict[str, Any]:
    hits = cairn["hits"]["client_ms"]
    return {
        "p50": p50(hits),
        "p99": pct(hits, 99),
        "n": len(hits),
        "min": round(min(hits), 3),
        "max": round(max(hits), 3),
        "node_elapsed_p50": p50(cairn["hits"]["node_elapsed_ms"]),
        "constant": cairn["hits"]["constant"],
        "sources": cairn["hits"]["sources"],
    }


def _miss_report(cairn: dict[str, Any], timed: list[str]) -> dict[str, Any]:
    misses = cairn["misses"]
    return {
        "p50": p50([m["client_ms"] for m in misses]),
        "samples": [m["client_ms"] for m in misses],
        "constants": timed,
        "other_cpu_share": [m["other_cpu_share"] for m in misses],
        "node_elapsed_p50": p50([m["node_elapsed_ms"] for m in misses]),
        "untimed_warm_misses": [m["client_ms"] for m in cairn["warm_misses"]],
    }


def _miss_parts_p50(misses: list[dict[str, Any]]) -> dict[str, float | None]:
    parts: dict[str, float | None] = {}
    for k in misses[0]["parts_ms"]:
        values = [m["parts_ms"][k] for m in misses if m["parts_ms"][k] is not None]
        parts[k] = p50(values) if values else None
    return parts


def _ratios(cairn: dict[str, Any], spark: dict[str, Any], duck: dict[str, Any] | None) -> dict[str, float | None]:
    """Ratios (DESIGN.md "Targets") of the medians, and over the samples no other work disturbed."""
    hits, misses = cairn["hits"]["client_ms"], cairn["misses"]
    miss = [m["client_ms"] for m in misses]
    hit_p50, miss_p50, spark_p50 = p50(hits), p50(miss), p50(spark["samples"])
    return {
        "ratio_miss_over_warm_spark": round(miss_p50 / spark_p50, 3),
        "ratio_warm_spark_over_hit": round(spark_p50 / hit_p50, 1),
        # the same over the samples other work did not disturb (< 10 % of the CPUs), if ≥ 3 on each side
        "ratio_miss_over_warm_spark_undisturbed": (
            round(mc / sc, 3)
            if (mc := clean_p50(miss, [m["other_cpu_share"] for m in misses])) is not None
            and (sc := clean_p50(spark["samples"], spark["other_cpu_share"])) is not None
            else None
        ),
        "ratio_first_miss_over_warm_spark": round(cairn["first_miss"]["client_ms"] / spark_p50, 3),
        # the first miss on a version ingested once the worker was warm: what a new version costs, JIT apart
        "ratio_fresh_version_first_miss_over_warm_spark": round(
            cairn["fresh_version"]["first_miss"]["client_ms"] / spark_p50, 3
        ),
        "ratio_duckdb_over_hit": round(duck["p50"] / hit_p50, 1) if duck else None,
    }


def _meets(cairn: dict[str, Any], spark: dict[str, Any], duck: dict[str, Any] | None) -> dict[str, bool | None]:
    """Each target of ``targets``: met (True), missed (False), not measured (None)."""
    r = _ratios(cairn, spark, duck)
    hit_p50 = p50(cairn["hits"]["client_ms"])
    duck_r = r["ratio_duckdb_over_hit"]
    return {
        "ratio_miss_over_warm_spark": (r["ratio_miss_over_warm_spark"] or 0) <= TARGET_MISS_RATIO,
        "ratio_first_miss_over_warm_spark": (r["ratio_first_miss_over_warm_spark"] or 0) <= TARGET_FIRST_MISS_RATIO,
        "ratio_warm_spark_over_hit": (r["ratio_warm_spark_over_hit"] or 0) >= TARGET_HIT_RATIO,
        "hit_p50_ms": hit_p50 <= TARGET_HIT_P50_MS,
        "ratio_duckdb_over_hit": None if duck_r is None else duck_r >= TARGET_DUCKDB_RATIO,
    }


def _machine(cairn: dict[str, Any], spark: dict[str, Any], git: dict[str, Any], load_before: float) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "spark": spark["spark"],
        "java": java_version(),
        "kubo": cairn["kubo_version"],
        "git": git,
        "mem_total_mb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MB),
        "spark_worker_warmup_ms": cairn["spark_worker_warmup_ms"],
        "baseline_session_start_s": spark["session_start_s"],
        "baseline_warmup_s": spark["warmup_s"],
        # other work on the machine skews both sides: see also phases.*.other_cpu_share
        "loadavg_before": round(load_before, 2),
        "loadavg_after": round(os.getloadavg()[0], 2),
    }


def _fresh_report(fresh: dict[str, Any]) -> dict[str, Any]:
    first, second = fresh["first_miss"], fresh["second_miss"]
    return {
        "first_miss": first["client_ms"],
        "second_miss": second["client_ms"],
        "first_miss_node_elapsed": first["node_elapsed_ms"],
        "first_miss_parts": first["parts_ms"],
        "second_miss_parts": second["parts_ms"],
    }


def _report(
    args: argparse.Namespace,
    cairn: dict[str, Any],
    spark: dict[str, Any],
    duck: tuple[dict[str, Any] | None, str],
    timed: list[str],
    phases: dict[str, Any],
    machine: dict[str, Any],
) -> dict[str, Any]:
    """The one JSON object the bench prints (its keys in this order)."""
    misses = cairn["misses"]
    diag = spark["diagnostic"]
    return {
        "bench": "query",
        "rows": args.rows,
        "sql": SQL,
        "hit_ms": _hit_report(cairn),
        "miss_ms": _miss_report(cairn, timed),
        "first_miss_ms": cairn["first_miss"]["client_ms"],
        "fresh_version_ms": _fresh_report(cairn["fresh_version"]),
        "warm_spark_ms": {
            "p50": p50(spark["samples"]),
            "samples": spark["samples"],
            "other_cpu_share": spark["other_cpu_share"],
        },
        "warm_spark_diagnostic_ms": {
            "plain_p50": p50(diag["plain"]),
            "sql_only_p50": p50(diag["sql_only"]),
            "worker_execute_p50": p50(diag["worker_execute"]),
            "worker_execute_total_p50": p50(diag["worker_execute_total"]),
            "repeat_p50": p50(diag["repeat"]),
            **diag,
        },
        "duckdb_ms": duck[0],
        "duckdb_note": duck[1],
        **_ratios(cairn, spark, duck[0]),
        "targets": {
            "ratio_miss_over_warm_spark": f"<= {TARGET_MISS_RATIO}",
            "ratio_first_miss_over_warm_spark": f"<= {TARGET_FIRST_MISS_RATIO}",
            "ratio_warm_spark_over_hit": f">= {TARGET_HIT_RATIO}",
            "hit_p50_ms": f"<= {TARGET_HIT_P50_MS}",
            "ratio_duckdb_over_hit": f">= {TARGET_DUCKDB_RATIO}",
        },
        "meets": _meets(cairn, spark, duck[0]),
        "spark_jobs_during_hits": cairn["hits"]["spark_jobs_after"] - cairn["hits"]["spark_jobs_before"],
        "miss_parts_ms_p50": _miss_parts_p50(misses),
        "miss_breakdown": {"first": _brief(cairn["first_miss"]), "timed": [_brief(m) for m in misses]},
        "probes": cairn["probes"],
        "dataset": {
            "slices": cairn["slices"],
            "parquet_mb": cairn["parquet_mb"],
            "result_rows": misses[0]["row_count"],
        },
        "phases": phases,
        "quiet_waits": QUIET["waits"] if args.quiet_wait > 0 else None,
        "machine": machine,
    }


def main() -> None:
    args = _parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (finally blocks) on SIGTERM too
    _import_node_code()
    if args.modes:
        print(json.dumps({**bench_modes(args), "git": git_state()}, indent=2))
        return
    git = git_state()
    load_before = os.getloadavg()[0]
    QUIET["max_wait_s"] = args.quiet_wait
    phases: dict[str, Any] = {}
    consts = constants(args.warm_misses + args.misses)
    warm, timed = consts[: args.warm_misses], consts[args.warm_misses :]
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-query-"))
    try:
        parquet = work / "input.parquet"
        say(f"generating {args.rows} rows of Parquet in {work}…")
        t0 = time.perf_counter()
        generate_parquet(parquet, args.rows)
        say(f"{parquet.stat().st_size / MB:.0f} MB in {time.perf_counter() - t0:.1f} s")

        cairn, paths, schema = bench_cairn(work, parquet, args.rows, warm, timed, args.hits, phases)
        spark = bench_spark(work, paths, schema, warm, timed, phases)
        if importlib.util.find_spec("duckdb") is not None:
            wait_machine_quiet("baseline_duckdb")
        with Phase("baseline_duckdb", phases):
            duck = bench_duckdb(paths, warm, timed)
        if duck[0] is None:
            del phases["baseline_duckdb"]
        machine = _machine(cairn, spark, git, load_before)
        print(json.dumps(_report(args, cairn, spark, duck, timed, phases, machine), indent=2))
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
