"""A node under load, bounded: the bench's own driver (scripts/bench/load.py) in small.

One real node process (`cairn node start`: its managed Kubo, its Spark worker) holds a generated CSV. The module
runs the bench's phases once, with 50 hit clients for 5 s, 5 miss clients for 5 s and ``/healthz`` sampled every
50 ms during a CROSS JOIN, and each test checks one side of what it saw. Every answer is compared with pandas/numpy
on the same CSV (``load.Oracle``), never with the node's own output. Latency is reported, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import secrets
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import CID, multihash

from node.domain.model.cid import blake3_cid, cid_str, parse_cid
from node.services.datasets import versions
from tests.fixtures.inprocess import add_csv
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


def test_the_trivial_route_baseline_is_measured_in_the_same_run(loaded: tuple[Any, dict[str, Any]]) -> None:
    """Hits/s are judged against GET /api/v0/trust by the same clients; reported, not asserted."""
    _, figures = loaded
    _clean({**figures["trivial_route"], "wrong_answers": 0})
    assert figures["trivial_route"]["requests"] >= 50
    assert figures["ratio_hits_over_trivial"] > 0


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


# -- what the load found: every memoized hit re-derived the same immutable values (CIDs, the input's version) ----


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.sampled_from(["dag-cbor", "cbor", "raw", "dag-pb"]))
def test_memoized_cids_are_multiformats_own(digest: bytes, codec: str) -> None:
    """The memo returns what multiformats computes, whichever way in (an independent CID built from parts)."""
    expected = CID("base32", 1, codec, multihash.wrap(digest, "blake3"))
    text = expected.encode("base32")
    for _ in range(2):  # the second time from the memo
        assert blake3_cid(digest, codec) == expected
        assert cid_str(expected) == text
        assert parse_cid(text) == expected
        assert cid_str(parse_cid(expected.encode("base58btc"))) == text
    v0 = CID("base58btc", 0, "dag-pb", multihash.wrap(hashlib.sha256(digest).digest(), "sha2-256"))
    assert cid_str(v0, keep_v0=True) == str(v0) and cid_str(str(v0), keep_v0=True) == str(v0)
    assert cid_str(v0) == v0.set(version=1, base="base32").encode("base32")


def test_a_cid_is_printed_and_parsed_by_multiformats_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """~0.15 ms of CPU each in multiformats' pure Python, about ten per hit: the second time comes from the memo."""
    calls: Counter[str] = Counter()
    encode, decode = CID.encode, CID.decode

    def counting_encode(self: CID, *a: Any, **k: Any) -> str:
        calls["encode"] += 1
        return encode(self, *a, **k)

    def counting_decode(data: Any) -> CID:
        calls["decode"] += 1
        return decode(data)

    monkeypatch.setattr(CID, "encode", counting_encode)
    monkeypatch.setattr(CID, "decode", staticmethod(counting_decode))
    c = blake3_cid(secrets.token_bytes(32), "dag-cbor")
    text = cid_str(c)
    for _ in range(50):
        assert cid_str(c) == text and parse_cid(text) == c
    assert calls == {"encode": 1, "decode": 1}


async def test_a_dataset_version_is_built_once_per_head(inode: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each hit resolved its input by rebuilding the version (every block's signature checked again); now a head,
    which names its whole chain, is built once, and an append (a new head) is seen at once."""
    node, client = inode
    builds: list[str] = []
    real = versions.build_version

    def counting(head: CID, *rest: Any) -> Any:
        builds.append(cid_str(head))
        return real(head, *rest)

    monkeypatch.setattr(versions, "build_version", counting)
    await add_csv(client, "memo", b"id,v\n1,10\n2,20\n")
    first = [await node.datasets.resolve("memo") for _ in range(20)]
    assert len(builds) <= 1 and {v.head for _, v in first} == {first[0][1].head} and first[0][1].rows == 2
    resp = await client.post("/api/v0/datasets", params={"to": "memo", "filename": "more.csv"}, data=b"id,v\n3,30\n")
    assert resp.status == 200, await resp.json()
    _, after = await node.datasets.resolve("memo")
    assert after.head != first[0][1].head and after.rows == 3  # the new head, not the remembered one
    _, old = await node.datasets.resolve(cid_str(first[0][1].head))  # the frozen old version still resolves
    assert old.rows == 2
    assert builds.count(cid_str(first[0][1].head)) == 1


async def test_overlapping_readers_of_a_head_share_one_build(inode: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest's background hash and a query both reading a new head built it twice (CI saw it); callers that
    overlap now await one build, and a build whose caller is cancelled is done again by the next reader."""
    node, client = inode
    await add_csv(client, "overlap", b"id\n1\n2\n3\n")
    _, v = await node.datasets.resolve("overlap")
    builds: list[CID] = []
    real = node.datasets.versions._build_version

    async def slow(head: CID, timeout: float | None) -> Any:
        builds.append(head)
        await asyncio.sleep(0.05)  # wide enough for every reader to arrive while it runs
        return await real(head, timeout)

    monkeypatch.setattr(node.datasets.versions, "_build_version", slow)
    node.datasets.versions._versions.clear()
    got = await asyncio.gather(*(node.datasets.version(v.head) for _ in range(10)))
    assert builds == [v.head] and {g.rows for g in got} == {3}
    node.datasets.versions._versions.clear()
    first = asyncio.create_task(node.datasets.version(v.head))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(node.datasets.version(v.head))
    await asyncio.sleep(0.01)
    first.cancel()
    assert (await second).rows == 3 and first.cancelled() and builds == [v.head] * 3
