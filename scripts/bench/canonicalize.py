"""Benchmark: the canonicalizer in the node's process (as it once ran) vs in the sandbox's child processes.

Prints one JSON object: p50/p90 in milliseconds of ``canonicalize`` for a typical statement (a join, a filter, a
GROUP BY and an ORDER BY over two inputs), three ways:

- ``cold``: a statement not seen before (a new literal each time), so nothing is remembered anywhere;
- ``repeated``: the same statement again (the old ``lru_cache`` in process; the sandbox's memo);
- the sandbox's child is started once before timing (a start is not a statement's cost).

    .venv/bin/python scripts/bench/canonicalize.py [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from node.domain.sql import canonicalize  # after the path above
from node.domain.sql.sandbox import Sandbox

INPUTS = {
    "sales": [("region", "utf8"), ("product", "utf8"), ("amount", "int64"), ("day", "date32")],
    "prices": [("product", "utf8"), ("price", "float64")],
}
SQL = (
    "SELECT s.region, p.product, SUM(s.amount * p.price) AS revenue FROM sales s JOIN prices p "
    "ON s.product = p.product WHERE s.amount > {n} AND s.day >= DATE '2024-01-01' "
    "GROUP BY s.region, p.product ORDER BY revenue DESC"
)


def quantiles(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=10)
    return {"p50_ms": round(statistics.median(samples) * 1000, 3), "p90_ms": round(q[8] * 1000, 3)}


async def timed(runs: int, call: Callable[[int], Awaitable[object]]) -> dict[str, float]:
    samples = []
    for n in range(runs):
        started = time.perf_counter()
        await call(n)
        samples.append(time.perf_counter() - started)
    return quantiles(samples)


async def main(runs: int) -> dict[str, object]:
    sandbox = Sandbox(timeout=60)
    await sandbox.canonicalize(SQL.format(n=-1), INPUTS)  # the child is up

    async def here(n: int) -> object:
        return canonicalize(SQL.format(n=n), INPUTS)

    async def there(n: int) -> object:
        return await sandbox.canonicalize(SQL.format(n=n), INPUTS)

    try:
        return {
            "runs": runs,
            "cold": {"in_process": await timed(runs, here), "sandbox": await timed(runs, there)},
            "repeated": {
                "in_process": await timed(runs, lambda _: here(0)),
                "sandbox": await timed(runs, lambda _: there(0)),
            },
        }
    finally:
        await sandbox.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    print(json.dumps(asyncio.run(main(parser.parse_args().runs))))
