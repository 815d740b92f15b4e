"""Benchmark: logical hash throughput vs plain BLAKE3 over the same Arrow buffers.

Prints one JSON object. GB/s is "bytes of Arrow data (Table.nbytes) per second"; the
baseline hashes every buffer of every chunk (validity, offsets, values, data) with one
BLAKE3 hasher, same threading, in the same run; ``ratio`` = ours / baseline.

    .venv/bin/python scripts/bench/logical_hash.py [--gb 1.0] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import blake3
import pyarrow as pa
import pyarrow.compute as pc

from node.services.datasets.logical_hash import logical_hash

BATCH_ROWS = 1 << 20  # chunking as a Parquet reader would hand it over


def _ints(n: int, scale: float) -> pa.Array:
    return pc.cast(pc.floor(pc.multiply(pc.random(n), scale)), pa.int64())


def _with_nulls(arr: pa.Array, fraction: float) -> pa.Array:
    return pc.if_else(pc.less(pc.random(len(arr)), fraction), pa.scalar(None, arr.type), arr)


def _chunked(rows: int, make_batch: Callable[[int], dict[str, pa.Array]]) -> pa.Table:
    """A table of ``rows`` rows in chunks of BATCH_ROWS, each with buffers of its own (not
    slices of one big array, so that the raw baseline hashes each byte once)."""
    batches = []
    for start in range(0, rows, BATCH_ROWS):
        batches.append(pa.record_batch(make_batch(min(BATCH_ROWS, rows - start))))
    return pa.Table.from_batches(batches)


def numeric_table(target_bytes: int) -> pa.Table:
    def batch(n: int) -> dict[str, pa.Array]:
        return {
            "i0": _ints(n, 2.0**52),
            "i1": _with_nulls(_ints(n, 1e6), 0.01),
            "f0": pc.random(n),
            "f1": pc.multiply(pc.random(n), 1e9),
        }

    return _chunked(target_bytes // (4 * 8), batch)


def string_table(target_bytes: int) -> pa.Table:
    # Per row: an int64, a ~12-byte string (5% nulls), a ~38-byte string, two int32 offsets.
    def batch(n: int) -> dict[str, pa.Array]:
        a = pc.cast(_ints(n, 1e12), pa.string())
        b = pc.binary_join_element_wise(a, pc.cast(_ints(n, 1e9), pa.string()), "-host.example.org")
        return {"k": _ints(n, 1e9), "s0": _with_nulls(a, 0.05), "s1": b}

    return _chunked(target_bytes // 66, batch)


def raw_blake3(table: pa.Table) -> bytes:
    h = blake3.blake3(max_threads=blake3.blake3.AUTO)
    for column in table.columns:
        for chunk in column.chunks:
            for buf in chunk.buffers():
                if buf is not None:
                    h.update(buf)
    return h.digest()


def _best(fn: Callable[[pa.Table], object], table: pa.Table, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn(table)
        best = min(best, time.perf_counter() - t0)
    return best


def measure(name: str, table: pa.Table, repeat: int) -> dict:
    size = table.nbytes
    ours = _best(logical_hash, table, repeat)
    raw = _best(raw_blake3, table, repeat)
    return {
        "table": name,
        "rows": table.num_rows,
        "columns": [f"{f.name}:{f.type}" for f in table.schema],
        "arrow_bytes": size,
        "logical_hash_gbps": round(size / ours / 1e9, 3),
        "raw_blake3_gbps": round(size / raw / 1e9, 3),
        "ratio": round(raw / ours, 3),
        "logical_hash_seconds": round(ours, 4),
        "raw_blake3_seconds": round(raw, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="size of the numeric table (GB)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    target = int(args.gb * 1e9)
    results = []
    table = numeric_table(target)
    results.append(measure("numeric", table, args.repeat))
    del table
    gc.collect()
    table = string_table(target // 2)
    results.append(measure("strings", table, args.repeat))
    print(
        json.dumps(
            {
                "bench": "logical_hash",
                "target_gbps": 1.0,
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "pyarrow": pa.__version__,
                "blake3": blake3.__version__,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
