"""Benchmark: `cairn add` of a CSV vs pyarrow CSV→Parquet plus `ipfs add`, in the same run.

Prints one JSON object on stdout (progress goes to stderr):

1. Generates a deterministic CSV of about ``--size-mb`` MB (10^6 bytes): id int64, ts (ISO 8601
   timestamp), user (string, 100 000 distinct), amount float64, category (8 values), flag bool;
   written by ``pyarrow.csv`` with its default quoting (strings quoted; ``--quoting none`` to
   write them bare).
2. **Cairn**: starts a fresh node (own temp home, free ports, its own managed Kubo), waits until it is
   ready and its process tree is quiet (Spark's JVM warms up for seconds after the node listens), times
   ``cairn --home H add FILE --name bench --json`` end to end (CLI start, HTTP upload, ingest,
   answer), then reads the peak RSS (``VmHWM``) of the node process and of its Kubo from
   ``/proc/PID/status``, and stops the node by its PID (SIGTERM; the node stops its Kubo).
3. **Baseline**: what the same work costs done directly. A separate process streams the CSV
   into one Parquet file (``pyarrow.csv.open_csv`` with Cairn's 4 MiB blocks, ``ParquetWriter``
   with Cairn's slice writer options: zstd level 1, row groups of ``rows_per_slice`` rows),
   then ``ipfs add --cid-version 1 --hash blake3 --raw-leaves --chunker size-1048576 --pin``
   adds that file to a fresh Kubo repo (``init --profile=test``, no daemon). Its time is the
   two together; its peak RSS the larger of the two processes' (``wait4`` rusage).

``ratio_throughput`` = Cairn MB/s / baseline MB/s over the same input bytes (target:
≥ 0.85, ``target_ratio``); the node's peak RSS has a target too (≤ 400 MB, ``target_peak_rss_mb``), and
``meets`` says which targets this run met. ``memory_bounded`` gives the numbers behind "memory
bounded by slice size" (the node's peak and its growth during the ingest against one slice's
Arrow size, and the input size); comparing two input sizes shows whether the peak grows with the input.

    .venv/bin/python scripts/bench/ingest.py [--size-mb 1024] [--keep] [--quoting needed|none]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import BenchNode, say
from _procs import cairn_argv, cpu_seconds, wait_tree_quiet

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

MB = 1_000_000
TARGET_RATIO = 0.85  # Cairn's MB/s over the baseline's (raised from 0.8)
TARGET_PEAK_RSS_MB = 400  # the node's peak RSS, flat from 1 GB to 4 GB of input
GEN_ROWS = 1 << 20  # rows generated (and written to the CSV) per chunk
SEED = 20240101
CATEGORIES = ["books", "electronics", "food", "garden", "music", "sports", "toys", "travel"]
USERS = 100_000
EPOCH_2024 = 1_704_067_200


# --------------------------------------------------------------------------- input


def _uniform(n: int, seed: int) -> pa.Array:
    return pc.random(n, initializer=seed)


def _ints_below(r: pa.Array, bound: int) -> pa.Array:
    return pc.cast(pc.floor(pc.multiply(r, float(bound))), pa.int64())


def generate_csv(path: Path, size_bytes: int, quoting: str) -> int:
    """Write about ``size_bytes`` of CSV to ``path``, deterministically; returns the row count."""
    base = pa.array(range(GEN_ROWS), pa.int64())
    users = pa.array([f"user_{i}" for i in range(USERS)], pa.string())
    cats = pa.array(CATEGORIES, pa.string())
    rows = 0
    chunk = 0
    options = pacsv.WriteOptions(include_header=True, quoting_style=quoting)
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.string()),
            ("user", pa.string()),
            ("amount", pa.float64()),
            ("category", pa.string()),
            ("flag", pa.bool_()),
        ]
    )
    per_row: float | None = None
    with pa.OSFile(str(path), "wb") as sink, pacsv.CSVWriter(sink, schema, write_options=options) as writer:
        header = sink.tell()
        while sink.tell() < size_bytes:
            seed = SEED + 16 * chunk
            ids = pc.add(base, rows)
            # one row every ~3 s from 2024-01-01, jittered
            secs = pc.add(pc.add(pc.multiply(ids, 3), _ints_below(_uniform(GEN_ROWS, seed + 1), 3)), EPOCH_2024)
            ts = pc.replace_substring(
                pc.cast(pc.cast(secs, pa.timestamp("s")), pa.string()), " ", "T", max_replacements=1
            )
            table = pa.table(
                {
                    "id": ids,
                    "ts": ts,
                    "user": pc.take(users, _ints_below(_uniform(GEN_ROWS, seed + 2), USERS)),
                    "amount": pc.round(pc.multiply(_uniform(GEN_ROWS, seed + 3), 1000.0), 2),
                    "category": pc.take(cats, _ints_below(_uniform(GEN_ROWS, seed + 4), len(CATEGORIES))),
                    "flag": pc.less(_uniform(GEN_ROWS, seed + 5), 0.3),
                },
                schema=schema,
            )
            if per_row is None:  # bytes per row, from the first 64 Ki rows
                probe = pa.BufferOutputStream()
                pacsv.write_csv(
                    table.slice(0, 1 << 16), probe, pacsv.WriteOptions(include_header=False, quoting_style=quoting)
                )
                per_row = probe.tell() / (1 << 16)
            left = size_bytes - sink.tell()
            if left < per_row * GEN_ROWS:  # the last, partial chunk
                table = table.slice(0, max(1, round(left / per_row)))
            writer.write_table(table)
            per_row = (sink.tell() - header) / (rows + table.num_rows)
            rows += table.num_rows
            chunk += 1
    return rows


# --------------------------------------------------------------------------- processes


# Runs a command and reports its wall time and rusage. A small process of its own, because on
# Linux a child's ru_maxrss counts the memory of the process it was forked from (the parent's
# high-water mark is carried over at fork/exec), so measuring straight from this process (big
# after generating the CSV) would report at least this process's peak for every child.
_LAUNCHER = """
import json, os, signal, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))  # pass a stop on to the command
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"seconds": seconds, "maxrss_kib": usage.ru_maxrss, "cpu": usage.ru_utime + usage.ru_stime,
               "code": os.waitstatus_to_exitcode(status)}, f)
"""


def run_measured(
    argv: list[str], env: dict[str, str] | None = None, log: Path | None = None, stdout_path: Path | None = None
) -> tuple[float, float, float, int, str]:
    """Run ``argv`` to completion: (wall seconds, peak RSS MB of that process, its CPU seconds
    (user + system, all threads), exit code, stdout)."""
    fd, report = tempfile.mkstemp(prefix="bench-rusage-", suffix=".json")
    os.close(fd)
    try:
        with contextlib.ExitStack() as files:
            out = files.enter_context(open(stdout_path, "wb")) if stdout_path else subprocess.DEVNULL
            err = files.enter_context(open(log, "ab")) if log else subprocess.DEVNULL
            proc = subprocess.Popen(
                [sys.executable, "-S", "-c", _LAUNCHER, report, *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
            try:
                if proc.wait() != 0:
                    raise RuntimeError(f"the launcher of {argv[0]} failed with {proc.returncode}")
            except BaseException:
                if proc.poll() is None:  # interrupted: stop the command (the launcher passes SIGTERM on)
                    proc.terminate()
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                raise
        measured = json.loads(Path(report).read_text())
    finally:
        os.unlink(report)
    text = stdout_path.read_text() if stdout_path else ""
    # ru_maxrss is in KiB on Linux
    return measured["seconds"], measured["maxrss_kib"] * 1024 / MB, measured["cpu"], measured["code"], text


def proc_status_mb(pid: int, key: str) -> float | None:
    """``VmHWM`` / ``VmRSS`` of a live process, in MB (10^6 bytes)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024 / MB
    except (OSError, ValueError):
        pass
    return None


def wait_ready(node: BenchNode, timeout: float = 180.0) -> float:
    """Seconds until the node is ready (its Spark worker up) and its process tree is quiet: the timed ingest then
    measures the ingest, not the JVM's warm-up beside it (it took a core for ~15 s after the node listened, and the
    ingest had one core left: 0.58 instead of 0.8+)."""
    assert node.proc is not None
    t0 = time.monotonic()
    while not (node.http.request("GET", "/healthz")[2] or {}).get("ready"):  # 503 until ready: not an error here
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"the node was not ready within {timeout}s")
        time.sleep(0.2)
    wait_tree_quiet(node.proc.pid, timeout=timeout)
    return round(time.monotonic() - t0, 1)


# --------------------------------------------------------------------------- Cairn


def _delta(before: float | None, after: float | None) -> float | None:
    return round(after - before, 2) if before is not None and after is not None else None


def _cairn_env(work: Path, input_bytes: int) -> tuple[dict[str, str], int]:
    """The bench node's environment, and its rows per slice."""
    env = {**os.environ, "IPFS_TELEMETRY": "off"}
    env.pop("CAIRN_HOME", None)
    from config import load_settings

    settings = load_settings(work / "cairn-home", env=env)  # the defaults, or the CAIRN_* the caller set
    if input_bytes > settings.api.max_upload_bytes:  # the bench's own node takes a bigger upload
        env["CAIRN_API_MAX_UPLOAD_BYTES"] = str(input_bytes + (64 << 20))
    return env, settings.datasets.rows_per_slice


def _slice_sizes(home: Path, slices: list[dict[str, Any]], rows_per_slice: int) -> tuple[float | None, float | None]:
    """The Arrow and Parquet MB of one full slice (scaled from the first one, which is full unless it is the
    only one)."""
    first = home / "cache" / "slices" / f"{slices[0]['cid']}.parquet" if slices else None
    slice_arrow_mb = (
        pq.read_table(first).nbytes / slices[0]["rows"] * rows_per_slice / MB if first and first.exists() else None
    )
    return slice_arrow_mb, slices[0]["size"] / MB if slices else None


def _round_or_none(x: float | None) -> float | None:
    return round(x, 1) if x else None


def bench_cairn(work: Path, csv_path: Path, input_bytes: int) -> dict[str, Any]:
    env, rows_per_slice = _cairn_env(work, input_bytes)
    node = BenchNode(work / "cairn-home", env)
    try:
        node.start()
        assert node.proc is not None
        ready_s = wait_ready(node)
        rss_before = proc_status_mb(node.proc.pid, "VmRSS")
        hwm_before = proc_status_mb(node.proc.pid, "VmHWM")
        kubo_before = proc_status_mb(node.kubo_pid, "VmHWM") if node.kubo_pid else None
        node_cpu0, kubo_cpu0 = cpu_seconds(node.proc.pid), cpu_seconds(node.kubo_pid)
        say(f"cairn add {csv_path.name} ({input_bytes / MB:.0f} MB)…")
        os.sync()
        argv = [*cairn_argv(), "--home", str(node.home), "add", str(csv_path), "--name", "bench", "--json"]
        seconds, cli_rss, cli_cpu, code, out = run_measured(
            argv, env=env, log=work / "cairn-add.stderr", stdout_path=work / "cairn-add.json"
        )
        if code != 0:
            raise RuntimeError(f"cairn add exited with {code}: {(work / 'cairn-add.stderr').read_text()[-2000:]}")
        result = json.loads(out)
        node_hwm = proc_status_mb(node.proc.pid, "VmHWM")
        kubo_hwm = proc_status_mb(node.kubo_pid, "VmHWM") if node.kubo_pid else None
        node_cpu1, kubo_cpu1 = cpu_seconds(node.proc.pid), cpu_seconds(node.kubo_pid)
        slices = result["slices"]
        slice_arrow_mb, slice_parquet_mb = _slice_sizes(node.home, slices, rows_per_slice)
    finally:
        node.stop()
    rows = result["rows_added"]
    say(
        f"cairn: {rows} rows in {seconds:.1f} s ({input_bytes / MB / seconds:.1f} MB/s), "
        f"node {result['elapsed_ms'] / 1000:.1f} s, {len(slices)} slices"
    )
    return {
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds),
        "mb_per_s": round(input_bytes / MB / seconds, 2),
        "node_peak_rss_mb": _round_or_none(node_hwm),
        "kubo_peak_rss_mb": _round_or_none(kubo_hwm),
        "slices": len(slices),
        "rows": rows,
        "waited_for_ready_and_quiet_seconds": ready_s,  # untimed: the node's start, Spark's warm-up
        "node_elapsed_seconds": round(result["elapsed_ms"] / 1000, 3),  # the node's own count: after the upload
        "upload_and_cli_seconds": round(seconds - result["elapsed_ms"] / 1000, 3),
        "cli_peak_rss_mb": round(cli_rss, 1),
        "parquet_mb": round(sum(s["size"] for s in slices) / MB, 2),
        "cpu_seconds": {
            "node": _delta(node_cpu0, node_cpu1),
            "kubo": _delta(kubo_cpu0, kubo_cpu1),
            "cli": round(cli_cpu, 2),
        },
        "_memory": {
            "node_rss_before_ingest_mb": _round_or_none(rss_before),
            "node_peak_before_ingest_mb": _round_or_none(hwm_before),
            "kubo_peak_before_ingest_mb": _round_or_none(kubo_before),
            "rows_per_slice": rows_per_slice,
            "slice_arrow_mb": _round_or_none(slice_arrow_mb),
            "slice_parquet_mb": _round_or_none(slice_parquet_mb),
        },
    }


# --------------------------------------------------------------------------- baseline


def convert(csv_path: str, parquet_path: str, spec: str) -> None:
    """The baseline's pyarrow half (run in its own process, which imports nothing of Cairn):
    streaming CSV → one Parquet file, row groups of ``rows`` rows."""
    opts = json.loads(spec)
    row_group_rows = opts["rows"]
    reader = pacsv.open_csv(csv_path, read_options=pacsv.ReadOptions(block_size=opts["block_size"], use_threads=True))
    schema = reader.schema
    pending: list[pa.RecordBatch] = []
    count = 0
    with pq.ParquetWriter(parquet_path, schema, **opts["writer"]) as writer:
        for batch in reader:
            while batch.num_rows:
                take = min(row_group_rows - count, batch.num_rows)
                pending.append(batch.slice(0, take))
                count += take
                batch = batch.slice(take)
                if count == row_group_rows:
                    writer.write_table(pa.Table.from_batches(pending, schema=schema), row_group_size=row_group_rows)
                    pending, count = [], 0
        if pending:
            writer.write_table(pa.Table.from_batches(pending, schema=schema), row_group_size=row_group_rows)


def _baseline_repo(work: Path) -> tuple[str, dict[str, str]]:
    """A fresh Kubo repo (test profile) for the baseline's `ipfs add`: the binary and its environment."""
    from node.adapters.ipfs import find_kubo_binary

    ipfs = str(find_kubo_binary())
    repo = work / "baseline-kubo"
    env = {**os.environ, "IPFS_PATH": str(repo), "IPFS_TELEMETRY": "off"}
    out = subprocess.run(
        [ipfs, "init", "--profile=test"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"ipfs init failed: {out.stderr or out.stdout}")
    return ipfs, env


# the same UnixFS parameters as Cairn's add (node/adapters/ipfs/unixfs.py)
_IPFS_ADD = ["add", "--cid-version", "1", "--hash", "blake3", "--raw-leaves", "--chunker", "size-1048576"]


def bench_baseline(work: Path, csv_path: Path, input_bytes: int, rows: int, row_group_rows: int) -> dict[str, Any]:
    ipfs, env = _baseline_repo(work)
    parquet_path = work / "baseline.parquet"
    # The same Parquet as Cairn's slices (zstd 1, pages, dictionaries) from the same CSV blocks.
    from node.services.datasets.readers import DEFAULT_BLOCK_SIZE
    from node.services.datasets.slices import WRITER_OPTIONS

    spec = json.dumps({"rows": row_group_rows, "block_size": DEFAULT_BLOCK_SIZE, "writer": WRITER_OPTIONS})
    say("baseline: pyarrow CSV → Parquet…")
    os.sync()
    py_s, py_rss, py_cpu, code, _ = run_measured(
        [sys.executable, __file__, "--convert", str(csv_path), str(parquet_path), spec],
        log=work / "baseline-convert.stderr",
    )
    if code != 0:
        raise RuntimeError(f"baseline conversion failed: {(work / 'baseline-convert.stderr').read_text()[-2000:]}")
    say(f"baseline: ipfs add ({parquet_path.stat().st_size / MB:.0f} MB of Parquet)…")
    os.sync()
    add_s, add_rss, add_cpu, code, cid = run_measured(
        [ipfs, *_IPFS_ADD, "--pin", "--quieter", str(parquet_path)],
        env=env,
        log=work / "baseline-add.stderr",
        stdout_path=work / "baseline-add.out",
    )
    if code != 0:
        raise RuntimeError(f"ipfs add failed: {(work / 'baseline-add.stderr').read_text()[-2000:]}")
    seconds = py_s + add_s
    say(f"baseline: {seconds:.1f} s (pyarrow {py_s:.1f} s, ipfs add {add_s:.1f} s) → {cid.strip()}")
    return {
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds),
        "mb_per_s": round(input_bytes / MB / seconds, 2),
        "peak_rss_mb": round(max(py_rss, add_rss), 1),
        "pyarrow_seconds": round(py_s, 3),
        "ipfs_add_seconds": round(add_s, 3),
        "pyarrow_peak_rss_mb": round(py_rss, 1),
        "ipfs_add_peak_rss_mb": round(add_rss, 1),
        "parquet_mb": round(parquet_path.stat().st_size / MB, 2),
        "cpu_seconds": {"pyarrow": round(py_cpu, 2), "ipfs_add": round(add_cpu, 2)},
    }


# --------------------------------------------------------------------------- main


def kubo_version() -> str | None:
    try:
        from node.adapters.ipfs import find_kubo_binary

        out = subprocess.run(
            [str(find_kubo_binary()), "version", "--number"], capture_output=True, text=True, timeout=30, check=False
        )
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - informational only
        return None


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024, help="CSV size in MB (10^6 bytes); default 1024")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (CSV, homes, repos, logs)")
    parser.add_argument(
        "--quoting",
        choices=["needed", "none"],
        default="needed",
        help="pyarrow CSV quoting: needed (default: strings quoted) or none",
    )
    parser.add_argument("--convert", nargs=3, metavar=("CSV", "PARQUET", "SPEC"), help=argparse.SUPPRESS)
    return parser.parse_args()


def _memory_bounded(
    cairn: dict[str, Any], memory: dict[str, Any], baseline: dict[str, Any], input_bytes: int
) -> dict[str, Any]:
    """Whether the node's memory stayed bounded: its peak and growth against one slice's Arrow size."""
    peak, before, slice_mb = cairn["node_peak_rss_mb"], memory["node_rss_before_ingest_mb"], memory["slice_arrow_mb"]
    growth = round(peak - before, 1) if peak and before else None
    return {
        **memory,
        "node_peak_rss_mb": peak,
        "node_rss_growth_mb": growth,
        "growth_per_slice_arrow": round(growth / slice_mb, 2) if growth and slice_mb else None,
        "node_peak_over_input": round(peak / (input_bytes / MB), 3) if peak else None,
        "baseline_peak_rss_mb": baseline["peak_rss_mb"],
    }


def _machine(load_before: float) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "kubo": kubo_version(),
        "mem_total_mb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MB),
        # other work on the machine skews both sides: 1-minute load average before and after
        "loadavg_before": round(load_before, 2),
        "loadavg_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    args = _parse_args()
    if args.convert:
        convert(*args.convert)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (finally blocks) on SIGTERM too

    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-ingest-"))
    try:
        csv_path = work / "input.csv"
        say(f"generating {args.size_mb:g} MB of CSV in {work}…")
        t0 = time.perf_counter()
        rows = generate_csv(csv_path, int(args.size_mb * MB), args.quoting)
        input_bytes = csv_path.stat().st_size
        say(f"{rows} rows, {input_bytes / MB:.1f} MB in {time.perf_counter() - t0:.1f} s")
        os.sync()

        cairn = bench_cairn(work, csv_path, input_bytes)
        if cairn["rows"] != rows:
            raise RuntimeError(f"cairn added {cairn['rows']} rows, the CSV has {rows}")
        memory = cairn.pop("_memory")
        del cairn["rows"]
        baseline = bench_baseline(work, csv_path, input_bytes, rows, memory["rows_per_slice"])
        ratio = round(cairn["mb_per_s"] / baseline["mb_per_s"], 3)
        peak = cairn["node_peak_rss_mb"]
        result = {
            "bench": "ingest",
            "input_mb": round(input_bytes / MB, 1),
            "rows": rows,
            "quoting": args.quoting,
            "cairn": cairn,
            "baseline": baseline,
            "ratio_throughput": ratio,
            "target_ratio": TARGET_RATIO,
            "node_peak_rss_mb": peak,
            "target_peak_rss_mb": TARGET_PEAK_RSS_MB,
            "meets": {
                "ratio_throughput": ratio >= TARGET_RATIO,
                "node_peak_rss_mb": peak is not None and peak <= TARGET_PEAK_RSS_MB,
            },
            "memory_bounded": _memory_bounded(cairn, memory, baseline, input_bytes),
            "machine": _machine(load_before),
        }
        print(json.dumps(result, indent=2))
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
