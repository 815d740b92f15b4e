"""Benchmark: Cairn on the network (2–3 full nodes on 127.0.0.1) vs recomputing and vs plain Kubo, in the same run.

Prints one JSON object on stdout (progress goes to stderr):

1. **Peer hit vs recompute on warm Spark.** Nodes A and B (each its own temp home, free ports, managed Kubo,
   Spark worker with ``CAIRN_SPARK_AUTOSTART=true``); B ``cairn connect``s to A and ``cairn trust add``s A's
   node key. Both ingest the same generated Parquet (``--rows`` rows: id, k = id % 1000, v in [0, 1), s) as
   ``bench``. Both workers are warmed (worker up and its own warm-up query done, then ``--warm`` untimed
   misses on each node). Then, for ``--queries`` distinct constants C of
   ``SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE v > C GROUP BY k ORDER BY k``:
   A computes C (miss); once B has heard A's announcement, B asks the same (``trust: community``) → a
   **peer hit** (client wall ms, and the answer's ``elapsed_ms``); B asks it again (local hit, for scale);
   then B computes another constant with ``trust: self`` → **recompute** (a warm-Spark miss on B).
   B's ``spark.jobs`` must not move during peer hits and must grow by one per recompute.
   Where a peer hit's time goes: ``--diag`` more peer hits run as jobs (``wait: false``) whose progress
   events (``prepared``, ``lookup``, ``fetching``, ``done``, node clock) split it; and ``--probes`` rounds
   time, each on a fresh execution of A, against B's idle Kubo: every step of ``fetch_and_verify`` + record
   done alone as the node does them; the same steps batched (concurrent fetches, one ``pin/add``…); and
   the same objects read from A's HTTP API and put into B's Kubo (a stand-in for a lookup answer that
   would carry them).
2. **Announcement propagation.** Node C (no Spark) connects to B only (chain A–B–C). After a warm-up
   announcement has crossed (else C also connects to A, and ``hops`` says 1), for ``--announces`` new
   constants A computes; the time from A's answer (client) to the claim in C's ``GET /api/v0/announcements``
   (polled every 10 ms, 10 s deadline) is the sample. The claims' ``received`` stamps (B's and C's, same
   clock) give the per-hop arrival times as well. C is stopped afterwards.
3. **Fetch throughput of a large result.** A Parquet of about ``--result-mb`` MB (id, k hash, s: 96
   pseudo-random printable chars from BLAKE3's XOF, so zstd cannot squeeze it) is ingested by A and B as
   ``big`` with its columns stored as (s, k, id); A computes ``SELECT id, k, s FROM t ORDER BY id`` (the
   whole table, same size, but no Parquet chunk in common with the input B holds). Then:
   twice, a fresh plain Kubo (``ipfs init --profile=test``, daemon on free loopback ports,
   ``IPFS_TELEMETRY=off``) ``swarm connect``s to A's Kubo, cats a small file of A's (untimed), then
   RPC-``cat``s each result slice CID to a file (timed), and is stopped and removed; then B asks the query
   (``trust: community``) → a peer hit whose whole wall time (lookup, fetch, verify, record, answer) is
   Cairn's; then a third plain Kubo does the same again (B's Kubo now holds the result: bitswap's ledger
   tells whether it served some). ``ratio`` = Cairn MB/s over plain Kubo MB/s (mean of the plain runs
   whose bytes all came from A).
4. Stops every process it started by PID (nodes; then any of their Kubo/Spark processes left; plain
   Kubos) and removes the temp dir (unless ``--keep``).

Targets (DESIGN.md): peer hit ≥ 10× faster than recomputing on warm Spark; fetch through Cairn ≥ 0.95×
plain Kubo.

    .venv/bin/python scripts/bench/network.py [--rows 2000000] [--result-mb 500] [--queries 7] [--warm 3]
        [--diag 5] [--probes 3] [--announces 9] [--quiet-wait S] [--a-spark-conf auto|none|K=V,…] [--keep]
        [--parts peer,announce,fetch]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import itertools
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
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Self

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import QUIET, Api, BenchNode, Phase, free_port, say, stop_pid, wait_machine_quiet
from _procs import cpu_seconds, java_version, start_time

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import blake3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MB = 1_000_000
GEN_ROWS = 1 << 20
SMALL = "bench"
BIG = "big"
SQL = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE v > {c} GROUP BY k ORDER BY k"
BIG_SQL = "SELECT id, k, s FROM t ORDER BY id"
STRINGS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
STR_LEN = 96
PRINTABLE = bytes(0x20 + (b % 95) for b in range(256))  # byte → one of the 95 printable ASCII characters
POLL_S = 0.010
TARGET_PEER_RATIO = 15  # recompute over peer hit, on warm Spark
TARGET_PEER_P50_MS = 35  # peer hit p50, client wall time
TARGET_FETCH_RATIO = 0.95  # fetch through Cairn over plain Kubo, a 485 MB result
PARTS = ("peer", "announce", "fetch")  # --parts: 1 peer hit vs recompute, 2 announcement propagation, 3 fetch


def p50(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def stats(xs: list[float]) -> dict[str, Any]:
    return {
        "p50": p50(xs),
        "min": round(min(xs), 3) if xs else None,
        "max": round(max(xs), 3) if xs else None,
        "n": len(xs),
        "samples": [round(x, 3) for x in xs],
    }


class Constants:
    """Distinct predicate constants, never repeated within a run (each is a new invocation)."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"{0.05 + self.n * 0.0005:.4f}"


# --------------------------------------------------------------------------- input


def _mod(a: pa.Array, m: int) -> pa.Array:
    return pc.subtract(a, pc.multiply(pc.divide(a, m), m))


def generate_small(path: Path, rows: int) -> None:
    """id, k = id % 1000, v in [0, 1) (Knuth multiplicative hash of id), s (7 values); as query.py."""
    base = pa.array(range(GEN_ROWS), pa.int64())
    strings = pa.array(STRINGS, pa.string())
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())])
    done = 0
    with pq.ParquetWriter(str(path), schema, compression="zstd") as writer:
        while done < rows:
            n = min(GEN_ROWS, rows - done)
            ids = pc.add(base.slice(0, n), done)
            h = pc.bit_wise_and(pc.multiply(ids, 2654435761), 0xFFFFFFFF)
            writer.write_table(
                pa.table(
                    {
                        "id": ids,
                        "k": _mod(ids, 1000),
                        "v": pc.divide(pc.cast(h, pa.float64()), float(1 << 32)),
                        "s": pc.take(strings, _mod(pc.shift_right(h, 13), len(STRINGS))),
                    },
                    schema=schema,
                ),
                row_group_size=GEN_ROWS,
            )
            done += n


def _big_chunk(start: int, n: int) -> pa.Table:
    """Rows start…start+n-1: s (STR_LEN printable chars, pseudo-random), k (a 62-bit hash of id), id."""
    ids = pa.array(range(start, start + n), pa.int64())
    k = pc.bit_wise_and(pc.multiply(ids, 0x9E3779B97F4A7C15 & 0x3FFFFFFF), (1 << 62) - 1)
    raw = blake3.blake3(b"cairn-network-bench:" + start.to_bytes(8, "little")).digest(length=n * STR_LEN)
    data = pa.py_buffer(raw.translate(PRINTABLE))
    offsets = pc.cast(pc.multiply(pa.array(range(n + 1), pa.int64()), STR_LEN), pa.int32())
    s = pa.Array.from_buffers(pa.string(), n, [None, offsets.buffers()[1], data])
    # Stored as (s, k, id), asked for as (id, k, s): the result's Parquet then shares no 1 MiB chunk with
    # the input's, which B holds too (same columns in the same order gave byte-identical leading chunks).
    return pa.table({"s": s, "k": k, "id": ids})


def generate_big(path: Path, target_bytes: int) -> tuple[int, float]:
    """About ``target_bytes`` of Parquet *as Cairn writes its slices* (zstd 1): rows, bytes per row."""
    from node.services.datasets.slices import write_parquet_slice

    probe_rows = 1 << 16
    probe = path.with_suffix(".probe.parquet")
    write_parquet_slice(_big_chunk(0, probe_rows), str(probe))
    per_row = probe.stat().st_size / probe_rows
    probe.unlink()
    rows = max(1000, int(target_bytes / per_row))
    done = 0
    schema = _big_chunk(0, 1).schema
    with pq.ParquetWriter(str(path), schema, compression="zstd", compression_level=1) as writer:
        while done < rows:
            n = min(GEN_ROWS, rows - done)
            writer.write_table(_big_chunk(done, n), row_group_size=GEN_ROWS)
            done += n
    return rows, per_row


# --------------------------------------------------------------------------- the nodes


class PeerNode(BenchNode):
    """A full node of the network bench (``name``: A, B, C…), with the queries it is asked over its keep-alive API
    connection and the claims it has heard."""

    def ingest(self, path: Path, name: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        result = self.add(path, name)
        say(
            f"{self.label}: ingested {result['rows_added']} rows as {name!r} in {time.perf_counter() - t0:.1f} s "
            f"({len(result['slices'])} slices)"
        )
        return result

    def query(
        self, sql: str, dataset: str, trust: str | None, expect: str | None = None
    ) -> tuple[float, dict[str, Any]]:
        body = {"sql": sql, "inputs": {"t": dataset}, "trust": trust}
        ms, status, answer = self.http.request("POST", "/api/v0/query", body)
        if status != 200:
            raise RuntimeError(f"{self.label}: query failed: HTTP {status}: {answer}")
        if expect is not None and answer["source"] != expect:
            raise RuntimeError(
                f"{self.label}: expected source {expect!r}, got {answer['source']!r} "
                f"(peer {answer.get('peer')}) for {sql}"
            )
        return ms, answer

    def query_job(
        self, sql: str, dataset: str, trust: str | None
    ) -> tuple[float, dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        """The same query as a job (``wait: false``), following its events (server-sent) to the end:
        (client wall ms from the POST to the last event, the answer, the events with the node's stamps).
        ``self.job_posted`` is the POST's wall clock (the job's stamps count from about then)."""
        self.job_posted = time.time()
        t0 = time.perf_counter()
        _, status, started = self.http.request(
            "POST", "/api/v0/query", {"sql": sql, "inputs": {"t": dataset}, "trust": trust, "wait": False}
        )
        if status != 202:
            raise RuntimeError(f"{self.label}: job not started: HTTP {status}: {started}")
        _, status, text = self.http.request("GET", started["events"])
        ms = (time.perf_counter() - t0) * 1000
        events: list[tuple[str, dict[str, Any]]] = []
        kind = None
        for line in str(text).splitlines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind:
                events.append((kind, json.loads(line[6:])))
        result = next((d for k, d in events if k == "result"), None)
        if result is None:
            raise RuntimeError(f"{self.label}: job ended without a result: {events[-3:]}")
        return ms, result, events

    def claim_of(self, invocation: str) -> dict[str, Any] | None:
        for c in self.http.get("/api/v0/announcements")["claims"]:
            if c["invocation"] == invocation:
                return c
        return None


# --------------------------------------------------------------------------- part 1: peer hit vs recompute


def wait_claim(node: PeerNode, invocation: str, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while True:
        c = node.claim_of(invocation)
        if c is not None or time.monotonic() > deadline:
            return c
        time.sleep(POLL_S)


def events_split(
    events: list[tuple[str, dict[str, Any]]], answer: dict[str, Any], wall_ms: float
) -> dict[str, float | None]:
    """A peer-hit job's time by part, from its events' stamps (s since the job was created, node clock)."""
    t: dict[str, Any] = {}  # kind -> the first such event's time
    for kind, data in events:
        t.setdefault(kind, data.get("t"))

    def ms(a: str, b: str) -> float | None:
        return round((t[b] - t[a]) * 1000, 2) if t.get(a) is not None and t.get(b) is not None else None

    resolved = t["started"] * 1000 + answer["elapsed_ms"] if t.get("started") is not None else None
    return {
        # resolve the dataset version, canonicalize, hash the question (qy_0, iv_0)
        "prepare": ms("started", "prepared"),
        # index lookup (a miss) and the claims already received (SQLite)
        "index_and_known_claims": ms("prepared", "lookup"),
        # /cairn/lookup/1.1.0 (1.0.0 for older peers) to every connected peer, check + record answers, rank signers
        "lookup": ms("lookup", "fetching"),
        # fetch_and_verify (swarm connect, 5 blocks, cat of the slices, read + logical hash, pins),
        # the question's blocks put, the index row, provide
        "fetch_verify_record": round(resolved - t["fetching"] * 1000, 2) if resolved and t.get("fetching") else None,
        # reading the result slices back for the answer's rows, JSON of the answer
        "answer_rows": round(t["done"] * 1000 - resolved, 2) if resolved and t.get("done") is not None else None,
        # HTTP (POST, job start, the event stream) around it
        "http_and_job": round(wall_ms - t["done"] * 1000, 2) if t.get("done") is not None else None,
    }


# long: one timed sequence of laps (each lap is the time since the previous one), as the node runs it
async def _probe_fetch(
    kubo_api: str, kubo_auth: str | None, a_swarm: list[str], answer: dict[str, Any], work: Path, batched: bool = False
) -> dict[str, float]:
    """Each step of a peer hit after the lookup, done alone against B's (idle) Kubo, for a result B does not
    hold: what node/services/resolve/claim_checks.py fetch_and_verify + resolver._miss do, in the same order.

    ``batched``: the same work arranged as the measurements suggest: receipt and execution (both named
    by the announcement) fetched at once, then envelope and structure at once; a one-block slice fetched
    with ``block/get`` instead of ``cat``; the four direct pins in one ``pin/add`` call; the three block
    puts at once; the answer's rows read from the first batch only."""
    from node.adapters.identity import public_key_from_did
    from node.adapters.index import ExecutionRow, Index
    from node.adapters.ipfs import KuboClient
    from node.domain.model import (
        Execution,
        Receipt,
        RecursiveDataEnvelope,
        Structure,
        block_of,
        decode,
        decode_object,
        parse_cid,
    )
    from node.services.datasets import LogicalHasher
    from node.services.datasets.slices import read_slice
    from node.support.errors import CairnError

    out: dict[str, float] = {}

    def lap(name: str, t0: float) -> float:
        now = time.perf_counter()
        out[name] = round(out.get(name, 0.0) + (now - t0) * 1000, 3)
        return now

    async def obj(cid: Any, kind: type) -> Any:
        o = decode_object(decode(await kubo.block_get(cid, timeout=60), cid.codec.code))
        assert isinstance(o, kind)
        return o

    kubo = KuboClient(kubo_api, timeout=60.0, auth=kubo_auth)
    try:
        t = time.perf_counter()
        for addr in a_swarm:
            with contextlib.suppress(CairnError):
                await kubo.swarm_connect(addr, timeout=10.0)
                break
        t = lap("swarm_connect", t)
        receipt_cid = parse_cid(answer["receipt"])
        if batched:  # the announcement names the receipt and the execution: both at once
            rc, ex = await asyncio.gather(obj(receipt_cid, Receipt), obj(parse_cid(answer["execution"]), Execution))
        else:
            rc = await obj(receipt_cid, Receipt)
        t = lap("block_get_receipt", t)
        rc.verify(public_key_from_did(rc.signer))
        t = lap("receipt_signature", t)
        if batched:
            env, _ = await asyncio.gather(obj(ex.output, RecursiveDataEnvelope), obj(rc.structure, Structure))
            out_list = decode(await kubo.block_get(env.content, timeout=60))
        else:
            ex = await obj(rc.execution, Execution)
            env = await obj(ex.output, RecursiveDataEnvelope)
            out_list = decode(await kubo.block_get(env.content, timeout=60))
            await obj(rc.structure, Structure)
        t = lap("block_get_4_more", t)
        hasher = None
        for i, cid in enumerate(out_list):
            path = work / f"probe-{i}.parquet"
            t = time.perf_counter()
            if batched and cid.codec.name == "raw":  # a slice under 1 MiB is one raw block: no UnixFS walk
                path.write_bytes(await kubo.block_get(cid, timeout=60))
            else:
                with open(path, "wb") as f:  # noqa: ASYNC230 -- as the node's slice_path does
                    async for chunk in kubo.cat(cid, timeout=60):
                        f.write(chunk)
            t = lap("cat_slices", t)
            table = read_slice(path)
            t = lap("read_slices", t)
            hasher = hasher or LogicalHasher(table.schema)
            hasher.update(table)
            t = lap("logical_hash", t)
        assert hasher is not None
        if str(hasher.finish()) != rc.logical_hash:
            raise RuntimeError("probe: the logical hash does not match the receipt")
        t = time.perf_counter()
        direct = (receipt_cid, rc.execution, ex.output, rc.structure)
        if batched:
            await kubo.transport.rpc(
                "pin/add", [*(("arg", str(c)) for c in direct), ("recursive", "false")], timeout=60
            )
        else:
            for cid in direct:
                await kubo.pin_add(cid, recursive=False)
        t = lap("pins_4_direct", t)
        await kubo.pin_add(env.content, recursive=True)
        t = lap("pin_1_recursive", t)
        blocks = [block_of({"probe": secrets.token_hex(16)}) for _ in range(3)]  # abstract structure, qy_0, iv_0
        if batched:
            await asyncio.gather(*(kubo.block_put(b.data, codec=b.cid.codec.name) for b in blocks))
        else:
            for b in blocks:
                await kubo.block_put(b.data, codec=b.cid.codec.name)
        t = lap("block_put_3", t)
        index = Index(work / "probe-index.sqlite")
        t = time.perf_counter()
        index.results.add_execution(
            ExecutionRow(
                answer["invocation"],
                answer["query"],
                answer["execution"],
                answer["receipt"],
                answer["logicalHash"],
                answer["row_count"],
                "",
                tuple(answer["slices"]),
                "peer",
                time.time(),
            )
        )
        index.results.execution(answer["invocation"])
        t = lap("index_row_sqlite", t)
        for cid in (rc.execution, receipt_cid):
            try:
                await kubo.routing_provide(cid, timeout=5.0)
            except CairnError:
                break
        t = lap("provide_2", t)
        if batched:  # the answer's first rows only
            batch = next(pq.ParquetFile(work / "probe-0.parquet").iter_batches(batch_size=100))
            json.dumps([list(r.values()) for r in batch.to_pylist()])
        else:  # as Node.query: every result slice read back, then the first rows
            for i, _ in enumerate(out_list):
                table = read_slice(work / f"probe-{i}.parquet")
                if i == 0:
                    json.dumps([list(r.values()) for r in table.slice(0, 100).to_pylist()])
        lap("answer_rows", t)
    finally:
        await kubo.close()
        for p in work.glob("probe-*"):  # noqa: ASYNC240  cleanup after the timed laps
            p.unlink(missing_ok=True)
    out["sum"] = round(sum(out.values()), 3)
    return out


async def _probe_direct(a_api: str, kubo_api: str, kubo_auth: str | None, answer: dict[str, Any]) -> dict[str, float]:
    """What the claim's objects and a small result cost when they come over a request/response channel
    instead of bitswap: the receipt, execution, output envelope, output list, structure and the (one-block)
    result slice read from A's node (``GET /ipfs/{cid}``, ``Accept: application/vnd.ipld.raw``, one
    keep-alive connection), each put into B's Kubo (whose client checks the CID), one after the other.
    A stand-in for a lookup answer that carries those blocks with the an_0 (not something the node does)."""
    from node.adapters.ipfs import KuboClient
    from node.domain.model import Execution, Receipt, RecursiveDataEnvelope, decode, decode_object, parse_cid

    api = Api(a_api)
    kubo = KuboClient(kubo_api, timeout=60.0, auth=kubo_auth)
    out = {"http_get": 0.0, "block_put": 0.0}

    async def get(cid: Any) -> bytes:
        t = time.perf_counter()
        api.conn.request("GET", f"/ipfs/{cid}", headers={"Accept": "application/vnd.ipld.raw"})
        resp = api.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET /ipfs/{cid} from A: HTTP {resp.status}")
        out["http_get"] += (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        await kubo.block_put(data, codec=cid.codec.name)  # the client re-hashes: the CID must match
        out["block_put"] += (time.perf_counter() - t) * 1000
        return data

    try:
        t0 = time.perf_counter()
        rc_cid = parse_cid(answer["receipt"])
        rc = decode_object(decode(await get(rc_cid), rc_cid.codec.code))
        assert isinstance(rc, Receipt)
        ex = decode_object(decode(await get(rc.execution), rc.execution.codec.code))
        assert isinstance(ex, Execution) and ex.output is not None
        env = decode_object(decode(await get(ex.output), ex.output.codec.code))
        assert isinstance(env, RecursiveDataEnvelope)
        out_list = decode(await get(env.content))
        await get(rc.structure)
        for cid in out_list:
            if cid.codec.name != "raw":
                raise RuntimeError("the direct probe needs a one-block result slice")
            await get(cid)
        out["total"] = (time.perf_counter() - t0) * 1000
    finally:
        api.close()
        await kubo.close()
    return {k: round(v, 3) for k, v in out.items()}


def _warm_workers(a: PeerNode, b: PeerNode, consts: Constants, n_warm: int, trust: str) -> dict[str, Any]:
    """Both workers up with their warm-up query run, then throwaway misses on each and one untimed peer hit."""
    spark_a, spark_b = a.wait_spark(jit=False), b.wait_spark(jit=False)
    say(
        f"Spark workers up (A warm-up {spark_a.get('warmup_ms')} ms, B {spark_b.get('warmup_ms')} ms); "
        f"{n_warm} untimed misses on each…"
    )
    warm_ms: dict[str, list[float]] = {"a": [], "b": []}
    for _ in range(n_warm):
        warm_ms["a"].append(round(a.query(SQL.format(c=consts.next()), SMALL, "self", "computed")[0], 1))
        warm_ms["b"].append(round(b.query(SQL.format(c=consts.next()), SMALL, "self", "computed")[0], 1))
    # one untimed peer hit: the first pays for connections and code paths seen once
    c = consts.next()
    _, ans = a.query(SQL.format(c=c), SMALL, "self", "computed")
    wait_claim(b, ans["invocation"], 10.0)
    first_peer_ms, _ = b.query(SQL.format(c=c), SMALL, trust, "peer")
    say(f"warm: A misses {warm_ms['a']} ms, B misses {warm_ms['b']} ms, first peer hit {first_peer_ms:.0f} ms")
    return {"spark_a": spark_a, "spark_b": spark_b, "warm_ms": warm_ms, "first_peer_ms": first_peer_ms}


def _peer_hits_and_recomputes(
    a: PeerNode, b: PeerNode, consts: Constants, n: int, trust: str, phases: dict[str, Any]
) -> dict[str, list[Any]]:
    """n rounds: A computes C; B asks C (a peer hit, no Spark job), asks it again (local), recomputes another
    constant (exactly one Spark job)."""
    s: dict[str, list[Any]] = {
        k: [] for k in ("peer", "peer_node", "recompute", "recompute_node", "recompute_spark", "local", "a_miss")
    }
    s["heard"] = []
    wait_machine_quiet("peer_hits")
    with Phase("peer_hits_and_recomputes", phases):
        for i in range(n):
            c, other = consts.next(), consts.next()
            ms, ans = a.query(SQL.format(c=c), SMALL, "self", "computed")
            s["a_miss"].append(ms)
            s["heard"].append(wait_claim(b, ans["invocation"], 5.0) is not None)  # B heard A's announcement
            time.sleep(0.2)  # let A's after-work (pins, provide, JVM GC) settle
            jobs0 = b.info()["spark"]["jobs"]
            ms, got = b.query(SQL.format(c=c), SMALL, trust, "peer")
            if got["rows"] != ans["rows"] or got["execution"] != ans["execution"]:
                raise RuntimeError("the peer hit's answer differs from A's")
            s["peer"].append(ms)
            s["peer_node"].append(got["elapsed_ms"])
            if b.info()["spark"]["jobs"] != jobs0:
                raise RuntimeError("a peer hit started a Spark job on B")
            s["local"].append(b.query(SQL.format(c=c), SMALL, trust, "local")[0])
            ms, mine = b.query(SQL.format(c=other), SMALL, "self", "computed")
            s["recompute"].append(ms)
            s["recompute_node"].append(mine["elapsed_ms"])
            if b.info()["spark"]["jobs"] != jobs0 + 1:
                raise RuntimeError("B's recompute did not run exactly one Spark job")
            timings = b.http.get(f"/api/v0/executions/{mine['execution']}").get("timings") or {}
            if timings.get("compute_ms") is not None:
                s["recompute_spark"].append(float(timings["compute_ms"]))
            say(
                f"  {i + 1}/{n}: A miss {s['a_miss'][-1]:.0f} ms; B peer hit {s['peer'][-1]:.1f} ms "
                f"(node {s['peer_node'][-1]:.1f}); B local {s['local'][-1]:.1f} ms; "
                f"B recompute {s['recompute'][-1]:.0f} ms"
            )
    return s


def _peer_hit_diagnostic(
    a: PeerNode, b: PeerNode, consts: Constants, n: int, trust: str, phases: dict[str, Any]
) -> dict[str, Any]:
    """Where a peer hit's time goes: peer hits run as jobs, split by their progress events."""
    say(f"{n} peer hits as jobs (progress events)…")
    splits, diag_wall = [], []
    with Phase("peer_hit_diagnostic", phases):
        for _ in range(n):
            c = consts.next()
            _, ans = a.query(SQL.format(c=c), SMALL, "self", "computed")
            wait_claim(b, ans["invocation"], 5.0)
            time.sleep(0.2)
            ms, got, events = b.query_job(SQL.format(c=c), SMALL, trust)
            if got["source"] != "peer":
                raise RuntimeError(f"diagnostic peer hit answered from {got['source']}")
            diag_wall.append(ms)
            splits.append(events_split(events, got, ms))
    split_p50 = {k: p50([v for sp in splits if (v := sp[k]) is not None]) for k in splits[0]} if splits else {}
    return {
        "from": "progress events of peer hits run as jobs (node clock)",
        "p50": split_p50,
        "job_wall_ms": stats(diag_wall),
        "each": splits,
    }


def _peer_hit_probes(
    a: PeerNode, b: PeerNode, consts: Constants, n: int, work: Path, phases: dict[str, Any]
) -> dict[str, Any]:
    """Each step alone, against B's idle Kubo: as the node does it, batched, and over A's HTTP API, in turn."""
    say(f"{n} probes of the fetch/verify/record steps on B's Kubo…")
    a_swarm = a.info()["kubo"].get("swarm") or []
    from node.adapters.ipfs import home_kubo_auth

    b_kubo, b_auth = b.info()["kubo"]["api"], home_kubo_auth(b.home)  # B's managed Kubo wants its RPC secret
    probes: list[dict[str, float]] = []
    batched: list[dict[str, float]] = []
    direct: list[dict[str, float]] = []
    with Phase("peer_hit_probes", phases):
        for i in range(3 * n):  # in turn: as the node does it, batched, over A's HTTP API
            _, ans = a.query(SQL.format(c=consts.next()), SMALL, "self", "computed")
            time.sleep(0.3)
            if i % 3 == 2:
                direct.append(asyncio.run(_probe_direct(a.api, b_kubo, b_auth, ans)))
            else:
                (batched if i % 3 else probes).append(
                    asyncio.run(_probe_fetch(b_kubo, b_auth, a_swarm, ans, work, bool(i % 3)))
                )
    return {
        "from": "each step alone against B's idle Kubo, result not held by B",
        "p50": {k: p50([p[k] for p in probes]) for k in probes[0]} if probes else {},
        "each": probes,
        "batched_p50": {k: p50([p[k] for p in batched]) for k in batched[0]} if batched else {},
        "batched_each": batched,
        "objects_and_slice_over_http_p50": {k: p50([p[k] for p in direct]) for k in direct[0]} if direct else {},
        "objects_and_slice_over_http_each": direct,
    }


def part_peer_hit(
    a: PeerNode, b: PeerNode, consts: Constants, args: argparse.Namespace, work: Path, phases: dict[str, Any]
) -> dict[str, Any]:
    trust = "community"
    warm = _warm_workers(a, b, consts, args.warm, trust)
    s = _peer_hits_and_recomputes(a, b, consts, args.queries, trust, phases)
    breakdown = _peer_hit_diagnostic(a, b, consts, args.diag, trust, phases)
    probes = _peer_hit_probes(a, b, consts, args.probes, work, phases)
    # the HTTP floor of B (a 404 answered from a dict) and B's /api/v0/node, for scale
    floor = [b.http.request("GET", "/api/v0/jobs/none")[0] for _ in range(30)]

    peer_p50, rec_p50, spark_p50 = p50(s["peer"]), p50(s["recompute"]), p50(s["recompute_spark"])
    return {
        "peer_hit_ms": {
            **stats(s["peer"]),
            "node_elapsed_p50": p50(s["peer_node"]),
            "node_elapsed_samples": s["peer_node"],
            "first_untimed_ms": round(warm["first_peer_ms"], 1),
            "trust": trust,
            "claim_heard_by_gossip_before_query": s["heard"],
            "spark_jobs_on_b_during_peer_hits": 0,
        },
        "recompute_ms": {
            **stats(s["recompute"]),
            "node_elapsed_p50": p50(s["recompute_node"]),
            "trust": "self",
            "node": "B",
            "spark_compute_ms_p50": spark_p50,
            "spark_compute_ms": s["recompute_spark"],
        },
        "ratio_recompute_over_peer_hit": round(rec_p50 / peer_p50, 2) if peer_p50 and rec_p50 else None,
        "peer_hit_target": {
            "ratio_recompute_over_peer_hit": TARGET_PEER_RATIO,
            "p50_ms": TARGET_PEER_P50_MS,
            "met": bool(peer_p50 and rec_p50 and rec_p50 / peer_p50 >= TARGET_PEER_RATIO)
            and bool(peer_p50 and peer_p50 <= TARGET_PEER_P50_MS),
        },
        "ratio_spark_compute_over_peer_hit": (
            round(spark_p50 / peer_p50, 2) if spark_p50 is not None and s["recompute_spark"] and peer_p50 else None
        ),
        "local_hit_on_b_ms": stats(s["local"]),
        "a_miss_ms": stats(s["a_miss"]),
        "warm_misses_ms": warm["warm_ms"],
        "peer_hit_breakdown_ms": breakdown,
        "peer_hit_probes_ms": probes,
        "http_floor_ms_p50": p50(floor),
        "spark": {
            "a_worker_warmup_ms": warm["spark_a"].get("warmup_ms"),
            "b_worker_warmup_ms": warm["spark_b"].get("warmup_ms"),
        },
    }


# --------------------------------------------------------------------------- part 2: announcements


def announcement_stamp(node: PeerNode, invocation: str) -> tuple[float, float] | None:
    """(the an_0's own ``time`` as its signer stamped it, the receiver's ``received``), epoch seconds, read
    from the node's index (read-only) since the HTTP listing does not show the announcement's time."""
    import datetime as dt
    import sqlite3

    from node.domain.model import Announcement, decode, decode_object

    db = sqlite3.connect(f"file:{node.home / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        row = db.execute(
            "SELECT announcement, received FROM claims WHERE invocation = ? ORDER BY received LIMIT 1", (invocation,)
        ).fetchone()
    finally:
        db.close()
    if row is None:
        return None
    an = decode_object(decode(bytes(row[0])))
    if not isinstance(an, Announcement):
        return None
    return dt.datetime.fromisoformat(an.time).timestamp(), float(row[1])


def _announce_topology(a: PeerNode, b: PeerNode, c: PeerNode, consts: Constants) -> tuple[str, int]:
    """C connected to B; a warm-up announcement across the chain (else C connects to A too): the topology
    and how many hops an announcement from A takes to C."""
    c.cli("connect", b.info()["p2p_addrs"][0])
    topology = "chain A-B-C (C connected to B only)"
    hops = 2

    def warm(timeout: float) -> bool:
        _, ans = a.query(SQL.format(c=consts.next()), SMALL, "self", "computed")
        return wait_claim(c, ans["invocation"], timeout) is not None

    say("announcements: warm-up across the chain A–B–C…")
    if not warm(30.0):
        say("the warm-up announcement did not reach C through B within 30 s: connecting C to A as well")
        c.cli("connect", a.info()["p2p_addrs"][0])
        topology, hops = "all connected (gossip did not cross B)", 1
        if not warm(30.0):
            raise RuntimeError("announcements never reach C")
    a_id = a.info()["peer_id"]
    c_peers = [p for p in c.http.get("/api/v0/peers")["peers"] if p.get("connected")]
    if hops == 2 and any(a_id in json.dumps(p) for p in c_peers):
        topology, hops = "C also connected to A (discovered)", 1
    return topology, hops


def _announce_once(a: PeerNode, b: PeerNode, c: PeerNode, consts: Constants, s: dict[str, list[float]]) -> bool:
    """A computes a new constant; C's claim polled for (10 s): samples appended to `s`; False on a timeout."""
    _, ans = a.query(SQL.format(c=consts.next()), SMALL, "self", "computed")
    t_answer, wall_answer = time.perf_counter(), time.time()
    seen = None
    while time.perf_counter() - t_answer < 10.0:
        seen = c.claim_of(ans["invocation"])
        if seen is not None:
            break
        time.sleep(POLL_S)
    if seen is None:
        return False
    s["polled"].append((time.perf_counter() - t_answer) * 1000)
    s["c_recv"].append((seen["received"] - wall_answer) * 1000)
    at_b = b.claim_of(ans["invocation"])
    if at_b is not None:
        s["b_recv"].append((at_b["received"] - wall_answer) * 1000)
    for node, into in ((b, s["from_an_b"]), (c, s["from_an_c"])):
        with contextlib.suppress(Exception):  # informational: never fail the run on it
            stamp = announcement_stamp(node, ans["invocation"])
            if stamp:
                into.append((stamp[1] - stamp[0]) * 1000)
    b_recv = s["b_recv"]
    say(
        f"  announcement at C {s['polled'][-1]:.1f} ms after A's answer (C's stamp {s['c_recv'][-1]:+.1f} ms, "
        f"B's {b_recv[-1] if b_recv else float('nan'):+.1f} ms)"
    )
    return True


def part_announce(
    a: PeerNode, b: PeerNode, c: PeerNode, consts: Constants, n: int, phases: dict[str, Any]
) -> dict[str, Any]:
    topology, hops = _announce_topology(a, b, c, consts)
    s: dict[str, list[float]] = {k: [] for k in ("polled", "c_recv", "b_recv", "from_an_b", "from_an_c")}
    timeouts = 0
    wait_machine_quiet("announcements")
    with Phase("announcements", phases):
        for _ in range(n):
            if not _announce_once(a, b, c, consts, s):
                timeouts += 1
    polled, c_recv, b_recv = s["polled"], s["c_recv"], s["b_recv"]
    hop = [cc - bb for cc, bb in zip(c_recv, b_recv)] if len(c_recv) == len(b_recv) else []
    return {
        "p50": p50(polled),
        "samples": [round(x, 1) for x in polled],
        "hops": hops,
        "topology": topology,
        "poll_interval_ms": POLL_S * 1000,
        "timeouts": timeouts,
        # the claims' `received` stamps (the receiving node's clock = this machine's) minus the time A's
        # answer reached the client; negative = the announcement arrived before A's HTTP answer was read
        "received_stamp_ms": {
            "c_p50": p50(c_recv),
            "b_p50": p50(b_recv),
            "b_to_c_p50": p50(hop),
            "c": [round(x, 1) for x in c_recv],
            "b": [round(x, 1) for x in b_recv],
        },
        # the receiver's `received` minus the time A signed into the announcement (just before it gossiped
        # it): the one-way latency of the gossip itself, over 1 hop (B) and 2 hops (C)
        "from_announcement_time_ms": {
            "b_p50": p50(s["from_an_b"]),
            "c_p50": p50(s["from_an_c"]),
            "b": [round(x, 1) for x in s["from_an_b"]],
            "c": [round(x, 1) for x in s["from_an_c"]],
        },
    }


# --------------------------------------------------------------------------- part 3: fetch throughput


class PlainKubo:
    """A fresh, plain Kubo: its own repo, `init --profile=test`, daemon on free loopback ports."""

    def __init__(self, repo: Path) -> None:
        from node.adapters.ipfs import find_kubo_binary

        self.repo, self.binary = repo, str(find_kubo_binary())
        self.env = {**os.environ, "IPFS_PATH": str(repo), "IPFS_TELEMETRY": "off"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.started: int | None = None
        self.api_port = 0

    def start(self) -> Self:
        out = subprocess.run(
            [self.binary, "init", "--profile=test"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"ipfs init failed: {out.stderr or out.stdout}")
        cfg_path = self.repo / "config"
        cfg = json.loads(cfg_path.read_text())
        self.api_port = free_port()
        cfg["Addresses"]["API"] = f"/ip4/127.0.0.1/tcp/{self.api_port}"
        cfg["Addresses"]["Gateway"] = f"/ip4/127.0.0.1/tcp/{free_port()}"
        cfg["Addresses"]["Swarm"] = [f"/ip4/127.0.0.1/tcp/{free_port()}"]
        cfg["Bootstrap"] = []
        cfg_path.write_text(json.dumps(cfg, indent=2))
        self._log = open(self.repo.parent / f"{self.repo.name}.log", "wb")  # noqa: SIM115 -- closed in stop()
        self.proc = subprocess.Popen(
            [self.binary, "daemon"], env=self.env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.started = start_time(self.proc.pid)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"plain Kubo exited with {self.proc.returncode}")
            try:
                self.rpc("id")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("plain Kubo did not answer within 60 s") from None
                time.sleep(0.05)
        say(f"plain Kubo pid {self.proc.pid}, API port {self.api_port}")
        return self

    def rpc(self, cmd: str, *args: str, sink: Any = None) -> Any:
        """POST /api/v0/<cmd>?arg=…; the JSON answer, or the body streamed to ``sink`` (bytes counted)."""
        query = urllib.parse.urlencode([("arg", a) for a in args])
        conn = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=600)
        try:
            conn.request("POST", f"/api/v0/{cmd}" + (f"?{query}" if query else ""))
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"plain Kubo {cmd}: HTTP {resp.status}: {resp.read()[:500]!r}")
            if sink is None:
                return json.loads(resp.read() or b"null")
            n = 0
            while chunk := resp.read(1 << 20):
                sink.write(chunk)
                n += len(chunk)
            return n
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            stop_pid(self.proc.pid, self.started, "plain Kubo")
            self._log.close()


def cpu_of(pids: dict[str, int | None]) -> dict[str, float | None]:
    return {k: cpu_seconds(p) if p else None for k, p in pids.items()}


def cpu_delta(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float | None]:
    return {
        k: round(after[k] - v, 2) if v is not None and after.get(k) is not None else None  # type: ignore[operator]  # both sides checked not None on this line
        for k, v in before.items()
    }


def _connect_plain(kubo: PlainKubo, a_swarm: list[str]) -> None:
    for addr in a_swarm:
        try:
            kubo.rpc("swarm/connect", addr)
            return
        except RuntimeError:
            continue
    raise RuntimeError("plain Kubo could not connect to A's Kubo")


def _cat_slices(
    kubo: PlainKubo, out: Path, slices: list[str], watch: dict[str, int | None]
) -> tuple[list[dict[str, Any]], int, float, dict[str, float | None]]:
    """Each slice cat to a file, timed: per slice, bytes in all, seconds in all, CPU seconds of the watched."""
    per_slice, total = [], 0
    cpu0 = cpu_of(watch)
    t0 = time.perf_counter()
    for cid in slices:
        t = time.perf_counter()
        with open(out, "wb") as f:
            n = kubo.rpc("cat", cid, sink=f)
        per_slice.append({"bytes": n, "seconds": round(time.perf_counter() - t, 3)})
        total += n
    seconds = time.perf_counter() - t0
    cpu = cpu_delta(cpu0, cpu_of(watch))
    out.unlink(missing_ok=True)
    return per_slice, total, seconds, cpu


def _bitswap_recv(kubo: PlainKubo, a_kubo_peer: str | None, b_kubo_peer: str | None) -> dict[str, int]:
    """Bytes bitswap received from A's and from B's Kubo, by their ledgers."""
    recv = {}
    for label, peer in (("a", a_kubo_peer), ("b", b_kubo_peer)):
        if peer:
            with contextlib.suppress(RuntimeError):
                recv[label] = int((kubo.rpc("bitswap/ledger", peer) or {}).get("Recv") or 0)
    return recv


def plain_kubo_fetch(
    work: Path,
    name: str,
    a_swarm: list[str],
    slices: list[str],
    a_kubo_peer: str | None,
    b_kubo_peer: str | None,
    warm_cid: str | None,
    watch: dict[str, int | None],
) -> dict[str, Any]:
    repo = work / name
    kubo = PlainKubo(repo).start()
    assert kubo.proc is not None
    watch = {**watch, "plain_kubo": kubo.proc.pid}
    try:
        _connect_plain(kubo, a_swarm)
        # untimed: a small file A holds (the query dataset's slice), so that the connection and bitswap's
        # session are up, as they are for B, whose Kubo has fetched from A's before
        warm_s = None
        if warm_cid:
            t = time.perf_counter()
            with open(os.devnull, "wb") as f:
                kubo.rpc("cat", warm_cid, sink=f)
            warm_s = round(time.perf_counter() - t, 3)
        per_slice, total, seconds, cpu = _cat_slices(kubo, work / f"{name}.out", slices, watch)
        peers = [p.get("Peer") for p in (kubo.rpc("swarm/peers") or {}).get("Peers") or []]
        recv = _bitswap_recv(kubo, a_kubo_peer, b_kubo_peer)
    finally:
        kubo.stop()
        shutil.rmtree(repo, ignore_errors=True)
    also_b = bool(b_kubo_peer and b_kubo_peer in peers)
    say(
        f"{name}: {total / MB:.1f} MB in {seconds:.2f} s = {total / MB / seconds:.1f} MB/s "
        f"(bitswap bytes received from A {recv.get('a')}, from B {recv.get('b')})"
    )
    return {
        "seconds": round(seconds, 3),
        "bytes": total,
        "mb_per_s": round(total / MB / seconds, 2),
        "per_slice": per_slice,
        "warmup_cat_s": warm_s,
        "cpu_seconds": cpu,
        "swarm_peers": len(peers),
        "b_kubo_among_peers": also_b,
        "bitswap_recv_bytes_from_a": recv.get("a"),
        "bitswap_recv_bytes_from_b": recv.get("b"),
    }


class CacheWatcher(threading.Thread):
    """Watches B's slice cache while B fetches: when each result slice's ``.part`` file appears and when
    the finished ``<cid>.parquet`` replaces it (Kubo cat = the bytes arriving)."""

    def __init__(self, cache: Path, cids: list[str]) -> None:
        super().__init__(daemon=True)
        self.cache, self.cids = cache, set(cids)
        self.part: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            now = time.time()
            with contextlib.suppress(OSError):
                for e in os.scandir(self.cache):
                    cid = e.name.split(".", 1)[0]
                    if cid not in self.cids:
                        continue
                    if e.name.endswith(".part"):
                        self.part.setdefault(cid, now)
                    elif e.name == f"{cid}.parquet":
                        self.done.setdefault(cid, now)
            time.sleep(0.005)


async def _repin_result(kubo_api: str, home: Path, execution: str) -> float:
    """B's recursive pin of the result's output list (what fetch_and_verify does last), redone on B's Kubo
    now that every block is local: pin rm, then pin add, timed (ms). B's Kubo re-hashes what it reads
    (``Datastore.HashOnRead``)."""
    from node.adapters.ipfs import KuboClient, home_kubo_auth
    from node.domain.model import Execution, RecursiveDataEnvelope, decode, decode_object, parse_cid

    kubo = KuboClient(kubo_api, timeout=600.0, auth=home_kubo_auth(home))  # B's managed Kubo wants its secret
    try:
        ex_cid = parse_cid(execution)
        ex = decode_object(decode(await kubo.block_get(ex_cid, offline=True), ex_cid.codec.code))
        assert isinstance(ex, Execution) and ex.output is not None
        env = decode_object(decode(await kubo.block_get(ex.output, offline=True), ex.output.codec.code))
        assert isinstance(env, RecursiveDataEnvelope)
        await kubo.pin_rm(env.content, recursive=True)
        t = time.perf_counter()
        await kubo.pin_add(env.content, recursive=True)
        return round((time.perf_counter() - t) * 1000, 1)
    finally:
        await kubo.close()


def _big_dataset(a: PeerNode, b: PeerNode, work: Path, result_mb: float, phases: dict[str, Any]) -> dict[str, Any]:
    """The large Parquet generated and ingested by A and B, its input logical hash paid on both."""
    big = work / "big.parquet"
    say(f"generating about {result_mb:g} MB (as Cairn slices) of Parquet…")
    t0 = time.perf_counter()
    rows, per_row = generate_big(big, int(result_mb * MB))
    say(
        f"{rows} rows, {per_row:.1f} bytes a row; file {big.stat().st_size / MB:.0f} MB"
        f" in {time.perf_counter() - t0:.1f} s"
    )
    with Phase("fetch_ingest", phases):
        added_a = a.ingest(big, BIG)
        b.ingest(big, BIG)
    big.unlink()
    # The input's logical hash is computed at the first query on a version, then cached: pay it here, on
    # both nodes, so that it is not counted as fetching (it is what `prepare` costs on a fresh version).
    input_hash_ms = {n.name: round(n.http.request("GET", f"/api/v0/datasets/{BIG}")[0], 1) for n in (a, b)}
    say(f"input logical hash of {BIG!r} (first GET /api/v0/datasets/{BIG}): {input_hash_ms} ms")
    dataset = {
        "rows": rows,
        "parquet_bytes_per_row": round(per_row, 1),
        "slices": len(added_a["slices"]),
        "parquet_mb": round(sum(s["size"] for s in added_a["slices"]) / MB, 1),
        "sql": BIG_SQL,
    }
    return {"input_hash_ms": input_hash_ms, "dataset": dataset}


def _cairn_fetch(
    b: PeerNode, slices: list[str], b_watch: dict[str, int | None], logical_hash: str, phases: dict[str, Any]
) -> tuple[float, dict[str, Any], list[tuple[str, dict[str, Any]]], dict[str, float | None], CacheWatcher]:
    """B asks the large query as a peer hit, its cache dir watched: wall ms, answer, events, CPU, the watcher."""
    # untimed: B's canonicalizer child started, as part 1's queries leave it (a refused statement is enough)
    b.http.request("POST", "/api/v0/query", {"sql": "SELECT no_such_column FROM t", "inputs": {"t": BIG}})
    say("B: the same query as a peer hit (trust community)…")
    watcher = CacheWatcher(b.home / "cache" / "slices", slices)
    watcher.start()
    jobs0 = b.info()["spark"]["jobs"]
    cpu0 = cpu_of(b_watch)
    with Phase("fetch_cairn", phases):
        wall_ms, got, events = b.query_job(BIG_SQL, BIG, "community")
    cairn_cpu = cpu_delta(cpu0, cpu_of(b_watch))
    watcher.halt.set()
    watcher.join()
    if got["source"] != "peer" or got["logicalHash"] != logical_hash:
        raise RuntimeError(f"B's answer is not the peer's result: source {got['source']}")
    if b.info()["spark"]["jobs"] != jobs0:
        raise RuntimeError("B ran Spark for the large peer hit")
    return wall_ms, got, events, cairn_cpu, watcher


def _fetch_timeline(
    b: PeerNode,
    events: list[tuple[str, dict[str, Any]]],
    got: dict[str, Any],
    watcher: CacheWatcher,
    slices: list[str],
    total: int,
) -> dict[str, float | None]:
    """The fetch on a timeline: the job's stamps (wall clock from about the POST) and B's cache dir."""
    stamps: dict[str, Any] = {}  # kind -> the first such event's time
    for kind, data in events:
        stamps.setdefault(kind, data.get("t"))
    if not all(c in watcher.part and c in watcher.done for c in slices) or stamps.get("fetching") is None:
        return {}
    posted = b.job_posted
    fetching = posted + stamps["fetching"]
    resolved = posted + stamps["started"] + got["elapsed_ms"] / 1000
    parts, dones = [watcher.part[c] for c in slices], [watcher.done[c] for c in slices]
    spans = sorted(zip(parts, dones))
    merged: list[list[float]] = []  # cats may overlap (several slices fetched at once): their union
    for p, d in spans:
        if merged and p <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], d)
        else:
            merged.append([p, d])
    cat = sum(d - p for p, d in merged)
    return {
        # swarm connect to A's Kubo, receipt (+ signature), execution, envelope, output list, structure
        "claim_objects_before_first_slice": round((parts[0] - fetching) * 1000, 1),
        # time some result slice's Kubo cat to B's cache ran (from its .part file appearing to the renamed
        # file; slices fetched at once counted once)
        "kubo_cat_slices": round(cat * 1000, 1),
        "kubo_cat_mb_per_s": round(total / MB / cat, 2) if cat > 0 else None,
        "slices_fetched_at_once_max": max(sum(1 for p, d in spans if p <= t < d) for t in parts),
        # between the first cat's start and the last cat's end, time no cat ran (waiting for a read + hash)
        "no_cat_between_cats": round(sum(b[0] - a[1] for a, b in itertools.pairwise(merged)) * 1000, 1),
        # after the last cat: the read + hash of what is left, the check, the question's blocks, the index
        # row, the owed pins queued (pins and provides run after the answer)
        "after_last_cat_until_resolved": round((resolved - max(dones)) * 1000, 1),
    }


def _verify_alone(b: PeerNode, slices: list[str], logical_hash: str, repin_ms: float) -> dict[str, Any]:
    """What B's verify and answer cost alone, on the slices it now holds (node idle)."""
    from node.services.datasets import LogicalHasher
    from node.services.datasets.slices import read_slice

    paths = [b.home / "cache" / "slices" / f"{s}.parquet" for s in slices]
    t = time.perf_counter()
    tables = [read_slice(p) for p in paths]
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    h = LogicalHasher(tables[0].schema)
    for tb in tables:
        h.update(tb)
    ok = str(h.finish()) == logical_hash
    hash_s = time.perf_counter() - t
    arrow_bytes = sum(tb.nbytes for tb in tables)
    del tables
    t = time.perf_counter()
    batch = next(pq.ParquetFile(paths[0]).iter_batches(batch_size=100))
    json.dumps([list(r.values()) for r in batch.to_pylist()])
    first_rows_s = time.perf_counter() - t
    return {
        "read_all_slices": round(read_s * 1000, 1),
        "logical_hash": round(hash_s * 1000, 1),
        "arrow_mb": round(arrow_bytes / MB, 1),
        "logical_hash_gb_per_s": round(arrow_bytes / 1e9 / hash_s, 2) if hash_s else None,
        "hash_matches": ok,
        # the first batch of 100 rows of the first slice (pyarrow decodes its whole row group)
        "first_100_rows_only": round(first_rows_s * 1000, 1),
        "recursive_pin_of_output_list_again": repin_ms,
    }


def _a_computes_big(a: PeerNode, phases: dict[str, Any]) -> tuple[float, dict[str, Any], int]:
    """A computes the large result: its wall ms, answer, and the result's bytes (its slice files)."""
    say(f"A computes {BIG_SQL}…")
    with Phase("fetch_a_compute", phases):
        a_ms, ans = a.query(BIG_SQL, BIG, "self", "computed")
    slices = ans["slices"]
    total = sum((a.home / "cache" / "slices" / f"{s}.parquet").stat().st_size for s in slices)
    say(f"A: {ans['row_count']} rows, {len(slices)} slices, {total / MB:.1f} MB in {a_ms / 1000:.1f} s")
    return a_ms, ans, total


def _kubo_runs(
    kubo_before: list[dict[str, Any]], kubo3: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[str], float]:
    """The plain-Kubo runs by name, the ones the ratio uses, their mean seconds.

    A plain-Kubo run counts only if every byte came from A (bitswap's ledger): after Cairn's fetch, B's
    Kubo holds the result too, and a Kubo that finds it (DHT) fetches from both."""
    named = {"before_cairn_1": kubo_before[0], "before_cairn_2": kubo_before[1], "after_cairn": kubo3}
    runs = [r for r in named.values() if not r.get("bitswap_recv_bytes_from_b")] or kubo_before
    kubo_s = statistics.mean(r["seconds"] for r in runs)
    return named, [n for n, r in named.items() if r in runs], kubo_s


def part_fetch(
    a: PeerNode, b: PeerNode, work: Path, result_mb: float, warm_cid: str | None, phases: dict[str, Any]
) -> dict[str, Any]:
    big = _big_dataset(a, b, work, result_mb, phases)
    a_ms, ans, total = _a_computes_big(a, phases)
    slices = ans["slices"]
    heard = wait_claim(b, ans["invocation"], 10.0) is not None
    a_kubo = a.info()["kubo"]
    a_swarm, a_kubo_peer = a_kubo.get("swarm") or [], a_kubo.get("peer_id")
    b_kubo_peer = b.info()["kubo"].get("peer_id")
    time.sleep(2.0)  # let A's publish after-work settle
    watch = {"a_kubo": a_kubo.get("pid"), "a_node": a.proc.pid if a.proc else None}
    b_watch = {**watch, "b_kubo": b.info()["kubo"].get("pid"), "b_node": b.proc.pid if b.proc else None}

    def plain(name: str) -> dict[str, Any]:
        return plain_kubo_fetch(work, name, a_swarm, slices, a_kubo_peer, b_kubo_peer, warm_cid, watch)

    kubo_before = []
    for i in (1, 2):  # B holds none of the result yet: every byte comes from A
        wait_machine_quiet(f"fetch_kubo_{i}")
        with Phase(f"fetch_plain_kubo_{i}", phases):
            kubo_before.append(plain(f"plain-kubo-{i}"))
    wait_machine_quiet("fetch_cairn")
    wall_ms, got, events, cairn_cpu, watcher = _cairn_fetch(b, slices, b_watch, ans["logicalHash"], phases)
    split = events_split(events, got, wall_ms)
    cairn_s = wall_ms / 1000
    say(f"cairn: {total / MB:.1f} MB in {cairn_s:.2f} s = {total / MB / cairn_s:.1f} MB/s; {split}")
    timeline = _fetch_timeline(b, events, got, watcher, slices, total)
    wait_machine_quiet("fetch_kubo_3")
    with Phase("fetch_plain_kubo_3_after_cairn", phases):
        kubo3 = plain("plain-kubo-3")
    repin_ms = asyncio.run(_repin_result(b.info()["kubo"]["api"], b.home, ans["execution"]))  # before the reads
    alone = _verify_alone(b, slices, ans["logicalHash"], repin_ms)
    named, used, kubo_s = _kubo_runs(kubo_before, kubo3)
    kubo_mbps = total / MB / kubo_s
    cairn_mbps = total / MB / cairn_s
    return {
        "result_mb": round(total / MB, 1),
        "requested_result_mb": result_mb,
        "result_rows": ans["row_count"],
        "slices": len(slices),
        "cairn_mb_per_s": round(cairn_mbps, 2),
        "kubo_mb_per_s": round(kubo_mbps, 2),
        "ratio": round(cairn_mbps / kubo_mbps, 3),
        "target_ratio": TARGET_FETCH_RATIO,
        "meets": cairn_mbps / kubo_mbps >= TARGET_FETCH_RATIO,
        "cairn_seconds": round(cairn_s, 3),
        "kubo_seconds": round(kubo_s, 3),
        "kubo_runs": {**named, "used_in_ratio": used},
        "cairn_breakdown_ms": {**split, "timeline": timeline},
        # CPU seconds (user + system, all threads) of each process during the fetch: 2 cores are shared
        # by the sender's Kubo, the receiver's Kubo and (Cairn) the receiving node's verify
        "cairn_cpu_seconds": cairn_cpu,
        "verify_and_answer_alone_on_b_ms": alone,
        "input_logical_hash_first_get_ms": big["input_hash_ms"],
        "a_compute_ms": round(a_ms, 1),
        "claim_heard_before_query": heard,
        "dataset": big["dataset"],
    }


# --------------------------------------------------------------------------- main


def dumps(obj: Any, indent: int = 0, width: int = 120) -> str:
    """JSON with nested objects and arrays kept on one line when they fit in ``width`` characters."""
    flat = json.dumps(obj)
    if not isinstance(obj, (dict, list)) or len(flat) + indent <= width:
        return flat
    pad = " " * (indent + 2)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 2, width)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 2, width) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the query dataset (default 2 000 000)")
    parser.add_argument(
        "--result-mb",
        type=float,
        default=500,
        help="size of the large result (Parquet MB as Cairn writes it; default 500)",
    )
    parser.add_argument("--queries", type=int, default=7, help="timed peer hits and recomputes (default 7)")
    parser.add_argument("--warm", type=int, default=3, help="untimed misses on each node first (default 3)")
    parser.add_argument("--diag", type=int, default=5, help="peer hits run as jobs for their breakdown (default 5)")
    parser.add_argument("--probes", type=int, default=3, help="step-by-step fetch probes (default 3)")
    parser.add_argument("--announces", type=int, default=9, help="timed announcements A → C (default 9)")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="S",
        help="before each timed part, wait up to S s for other work to use < 10%% of the CPUs",
    )
    parser.add_argument(
        "--a-spark-conf",
        default="auto",
        help="extra Spark settings for node A (CAIRN_SPARK_CONF; it computes the large result): "
        "'auto' (spark.driver.memory=3g when --result-mb > 100), 'none', or K=V,…",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (homes, logs)")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"which parts to run, comma-separated, of {','.join(PARTS)} (default all)",
    )
    args = parser.parse_args()
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not args.parts or any(p not in PARTS for p in args.parts):
        parser.error(f"--parts: a comma-separated list of {', '.join(PARTS)}")
    if args.rows < 1000 or args.queries < 1 or args.result_mb <= 0 or args.announces < 1:
        parser.error("--rows ≥ 1000, --queries ≥ 1, --announces ≥ 1, --result-mb > 0")
    return args


def _a_spark_conf(args: argparse.Namespace) -> str:
    if args.a_spark_conf == "auto":
        return "spark.driver.memory=3g" if args.result_mb > 100 else ""
    return "" if args.a_spark_conf == "none" else str(args.a_spark_conf)


def _node_envs(a_conf: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The environments of nodes A, B (Spark) and C (none)."""
    base = {**os.environ, "IPFS_TELEMETRY": "off"}
    for k in [k for k in base if k.startswith("CAIRN_")]:
        del base[k]  # the defaults, whatever the caller's shell says
    env_a = {**base, "CAIRN_SPARK_AUTOSTART": "true", **({"CAIRN_SPARK_CONF": a_conf} if a_conf else {})}
    env_b = {**base, "CAIRN_SPARK_AUTOSTART": "true"}
    env_c = {**base, "CAIRN_SPARK_AUTOSTART": "false"}
    return env_a, env_b, env_c


def _start_a_and_b(
    work: Path, rows: int, envs: tuple[dict[str, str], ...], nodes: list[PeerNode], phases: dict[str, Any]
) -> tuple[PeerNode, PeerNode, str | None]:
    """Nodes A and B started (appended to `nodes`), both with the small dataset, B connected to A and trusting
    it; the CID of A's first slice (warm-up fetches in part 3 read it)."""
    small = work / "small.parquet"
    say(f"generating {rows} rows of Parquet in {work}…")
    generate_small(small, rows)
    with Phase("start_and_ingest", phases):
        a = PeerNode(work / "a", envs[0], name="A").start()
        nodes.append(a)
        b = PeerNode(work / "b", envs[1], name="B").start()
        nodes.append(b)
        warm_cid = (a.ingest(small, SMALL)["slices"] or [{}])[0].get("cid")
        b.ingest(small, SMALL)
        small.unlink()
        b.cli("connect", a.info()["p2p_addrs"][0])
        b.cli("trust", "add", a.info()["node_key"])
    say("B connected to A and trusts A's key")
    return a, b, warm_cid


def _machine(a: PeerNode, nodes: list[PeerNode], a_conf: str, load_before: float) -> dict[str, Any]:
    import pyspark

    kubo_version = a.info()["kubo"].get("version")
    spark_pids = {n.name: n.info()["spark"].get("pid") for n in nodes}
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "spark": pyspark.__version__,
        "java": java_version(),
        "kubo": kubo_version,
        "mem_total_mb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MB),
        "a_spark_conf": a_conf or None,
        "spark_worker_pids": spark_pids,
        # other work on the machine skews every figure: see also phases.*.other_cpu_share
        "loadavg_before": round(load_before, 2),
        "loadavg_after": round(os.getloadavg()[0], 2),
    }


def _part_announce_with_c(
    a: PeerNode,
    b: PeerNode,
    consts: Constants,
    args: argparse.Namespace,
    work: Path,
    envs: tuple[dict[str, str], ...],
    nodes: list[PeerNode],
    phases: dict[str, Any],
) -> dict[str, Any]:
    """Part 2 with its own node C, started and stopped here."""
    c = PeerNode(work / "c", envs[2], name="C").start()
    nodes.append(c)
    announce = part_announce(a, b, c, consts, args.announces, phases)
    c.stop()
    nodes.remove(c)
    say(f"node C stopped; announcement p50 {announce['p50']} ms over {announce['hops']} hop(s)")
    return announce


def main() -> None:
    args = _parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (finally blocks) on SIGTERM too
    QUIET["max_wait_s"] = args.quiet_wait
    a_conf = _a_spark_conf(args)
    load_before = os.getloadavg()[0]
    phases: dict[str, Any] = {}
    consts = Constants()
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-network-"))
    nodes: list[PeerNode] = []
    try:
        envs = _node_envs(a_conf)
        a, b, warm_cid = _start_a_and_b(work, args.rows, envs, nodes, phases)
        result: dict[str, Any] = {"bench": "network", "rows": args.rows, "parts": args.parts}
        if "peer" in args.parts:
            part1 = part_peer_hit(a, b, consts, args, work, phases)
            result.update({"sql": SQL, **part1, "target_ratio_recompute_over_peer_hit": TARGET_PEER_RATIO})
        if "announce" in args.parts:
            result["announce_propagation_ms"] = _part_announce_with_c(a, b, consts, args, work, envs, nodes, phases)
        if "fetch" in args.parts:
            result["fetch"] = part_fetch(a, b, work, args.result_mb, warm_cid, phases)
        result.update(
            {
                "phases": phases,
                "quiet_waits": QUIET["waits"] if args.quiet_wait > 0 else None,
                "machine": _machine(a, nodes, a_conf, load_before),
            }
        )
        print(dumps(result))
    finally:
        for n in reversed(nodes):
            try:
                n.stop()
            except Exception as e:  # noqa: BLE001 -- stop the others all the same
                say(f"stopping node {n.name}: {e}")
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
