"""A node under load, bounded (issue 15 item 6): the bench's own driver (scripts/bench/load.py) in small.

One real node process (`cairn node start`: its managed Kubo, its Spark worker) holds a generated CSV. The module
runs the bench's phases once, with 50 hit clients for 5 s, 5 miss clients for 5 s and ``/healthz`` sampled every
50 ms during a CROSS JOIN, and each test checks one side of what it saw. Every answer is compared with pandas/numpy
on the same CSV (``load.Oracle``), never with the node's own output. Latency is reported, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.fixtures.nodes import NodeProcess

ROOT = Path(__file__).resolve().parents[2]
ROWS = 20_000
CROSS_ROWS = 12_000  # 1.44e8 pairs: a Spark job of a few seconds, long next to a 50 ms healthz period
# Growth allowed once the load is over (generous: the load is ~10^3 requests, so a per-request leak shows).
FDS_SLACK = {"node": 8, "kubo": 32, "spark_worker": 8, "spark_jvm": 128}
NODE_RSS_SLACK_MB = 200.0


def _bench() -> ModuleType:
    path = ROOT / "scripts" / "bench" / "load.py"
    spec = importlib.util.spec_from_file_location("cairn_bench_load", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


load = _bench()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The bench's phases, once, against a fresh node: (the run, its figures)."""
    base = tmp_path_factory.mktemp("load")
    csv = base / "load.csv"
    load.write_csv(csv, ROWS)
    node = NodeProcess(base / "node", env={"CAIRN_SPARK_AUTOSTART": "true"}).start()
    try:
        added = node.cli("add", str(csv), "--name", load.DATASET, "--json")
        assert added.returncode == 0, added.stderr.decode()
        assert node.proc is not None
        run = load.Run(node.api, (node.home / "api.token").read_text().strip(), node.proc.pid, load.Oracle(csv))
        args = argparse.Namespace(
            clients=50, seconds=5.0, miss_clients=5, miss_seconds=5.0, hit_statements=4,
            cross_rows=CROSS_ROWS, idle_seconds=2.0, settle=0.5,
        )  # fmt: skip
        figures = asyncio.run(_phases(run, node, args))
        yield run, figures
    finally:
        node.stop()


async def _phases(run: Any, node: NodeProcess, args: argparse.Namespace) -> dict[str, Any]:
    await load.wait_spark_warm(run.base, node.home)
    return dict(await load.phases(run, args))


def _clean(t: dict[str, Any]) -> None:
    """No error of any kind: every request answered 2xx (no 429 either) with the oracle's rows."""
    assert t["errors"] == 0, t["examples"]
    assert t["non_2xx"] == {} and t["exceptions"] == {} and t["refused_429"] == 0, t["examples"]
    assert t["wrong_answers"] == 0, t["examples"]
    assert t["ok"] == t["requests"] > 0


def test_hits_under_load_are_all_right_and_from_the_index(loaded: tuple[Any, dict[str, Any]]) -> None:
    _, figures = loaded
    hits = figures["hits"]
    _clean(hits)
    assert hits["requests"] >= 50  # every client got at least one answer
    assert hits["sources"] == {"local": hits["requests"]}
    assert hits["spark_jobs_during"] == 0  # no hit reached Spark


def test_concurrent_misses_each_run_once_on_spark_and_are_right(loaded: tuple[Any, dict[str, Any]]) -> None:
    _, figures = loaded
    misses = figures["misses"]
    _clean(misses)
    assert misses["requests"] == misses["asked"] >= 5
    assert misses["sources"] == {"computed": misses["asked"]}
    assert misses["spark_jobs_during"] == misses["asked"]  # one Spark job per new constant


def test_healthz_answers_throughout_a_long_spark_job(loaded: tuple[Any, dict[str, Any]]) -> None:
    _, figures = loaded
    _clean(figures["long_job"])  # the CROSS JOIN's count is numpy's (a sorted search over the same CSV)
    during, idle = figures["healthz"]["during_long_job"], figures["healthz"]["idle"]
    for h in (idle, during):
        assert h["errors"] == 0 and h["samples"] > 0 and set(h["statuses"]) == {"200"}, h
    # Sampled every 50 ms while the job ran: several answers came back while Spark was busy.
    assert during["samples"] >= 3, during


def test_no_fd_or_memory_growth_after_the_load_settles(loaded: tuple[Any, dict[str, Any]]) -> None:
    run, figures = loaded
    start = figures["resources"]["start"]
    for role in FDS_SLACK:
        assert start[role] is not None, f"no {role} process at the start: {start}"

    def settled() -> dict[str, Any] | None:
        now = load.snapshot(run.pids)
        fine = all(now[r] and now[r]["fds"] <= start[r]["fds"] + slack for r, slack in FDS_SLACK.items())
        return now if fine else None

    now, deadline = settled(), time.monotonic() + 30  # a deadline to poll within, never a fixed wait
    while now is None and time.monotonic() < deadline:
        time.sleep(0.2)
        now = settled()
    last = load.snapshot(run.pids)
    assert now is not None, f"open fds did not come back near the start's: start {start}, now {last}"
    for role in FDS_SLACK:
        assert now[role]["pid"] == start[role]["pid"], f"{role} was restarted under load"
    assert now["node"]["rss_mb"] <= start["node"]["rss_mb"] + NODE_RSS_SLACK_MB, (start["node"], now["node"])
