"""Ingest bombs on a real node process (its own Kubo): small uploads that stand for enormous inputs are refused
within the ingest caps (docs/datasets.md "Limits"), memory measured, ``/healthz`` answered meanwhile, and an ingest
whose client goes away stops with nothing kept.

- a gzip whose 1 MB holds 1 GiB of CSV (concatenated gzip members): 413 once it decompresses past
  ``datasets.max_decompression_ratio`` times its size, nothing kept, node RSS bounded;
- a ``.parquet.gz`` that inflates to 1 GiB: spooled (if at all) under ``$CAIRN_HOME/tmp``, never the system temp
  directory, and refused the same way (413, not a 400 after spooling it all);
- 30,000 columns as a one-row Parquet file, a CSV header or JSON keys: 413 from the footer, the header or the keys,
  before pyarrow builds a schema (the old node answered 201, its RSS up by hundreds of MB);
- an upload whose client closes the connection mid-ingest: the ingest stops, its work files go, nothing is
  committed and the node's CPU returns to idle;
- a pull of a dataset past the column or row cap: 413 from what its chain claims (two in-process nodes).
"""

from __future__ import annotations

import gzip
import http.client
import io
import json
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import inprocess_node
from tests.fixtures.nodes import NodeProcess, poll

MIB = 1 << 20
# What a refused bomb may add to the node's RSS: an ingest's working memory (a few 4 MiB chunks on 4 threads, Arrow
# pools; about 110 MB for the first ingest of a fresh node) for the gzip bomb, whose reading was always streamed;
# next to nothing for 30,000 columns refused before pyarrow sees them (the old node: 201 and +680 MB for the Parquet
# file, +460 MB for the CSV).
RSS_BOUND = 150 * MIB
WIDE_RSS_BOUND = 48 * MIB


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base = tmp_path_factory.mktemp("bombs")
    systemp = base / "systemp"  # the node's system temp directory: a spool there is outside $CAIRN_HOME
    systemp.mkdir()
    env = {"CAIRN_SPARK_AUTOSTART": "false", "CAIRN_PEERS_ENABLED": "false", "TMPDIR": str(systemp)}
    n = NodeProcess(base / "node", env=env).start()
    try:
        yield n
    finally:
        n.stop()


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def pid_of(node: NodeProcess) -> int:
    assert node.proc is not None
    return node.proc.pid


def upload(node: NodeProcess, body: bytes, **params: str) -> tuple[int, Any]:
    """POST /api/v0/datasets with the token; (status, JSON)."""
    token = (node.home / "api.token").read_text().strip()
    url = urllib.parse.urlsplit(node.api)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=300)
    try:
        target = "/api/v0/datasets?" + urllib.parse.urlencode(params)
        conn.request("POST", target, body=body, headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


class Watch:
    """While a request runs: the node's RSS sampled (its peak above the start) and ``/healthz`` asked in a loop,
    every answer kept (status, or the failure) so the test can say an honest client was answered throughout."""

    def __init__(self, node: NodeProcess, also: Callable[[], None] | None = None) -> None:
        self.node, self.pid, self.also = node, pid_of(node), also
        self.start = rss(self.pid)
        self.peak = self.start
        self.health: list[object] = []
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._sample), threading.Thread(target=self._healthz)]

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, rss(self.pid))
            if self.also is not None:
                self.also()

    def _healthz(self) -> None:
        while not self._done.is_set():
            try:
                self.health.append(self.node.get("/healthz")[0])  # urllib, 10 s timeout
            except OSError as e:
                self.health.append(repr(e))
            self._done.wait(0.1)

    def __enter__(self) -> Watch:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        for t in self._threads:
            t.join()

    @property
    def grew(self) -> int:
        return self.peak - self.start


def gzip_members(first: bytes, block: bytes, count: int) -> bytes:
    """``first`` then ``count`` copies of ``block``, as concatenated gzip members (one member compressed once,
    repeated): a small body for an enormous input."""
    member = gzip.compress(block, 9)
    return gzip.compress(first, 9) + member * count


def assert_refused(status: int, body: Any, *words: str, seen: str = "") -> str:
    assert status == 413 and body["error"]["type"] == "TooLarge", (status, str(body)[:300], seen)
    message = str(body["error"]["message"])
    assert "\n" not in message and all(w in message for w in words), message
    return message


def work_files(node: NodeProcess) -> list[str]:
    tmp = node.home / "tmp"
    return sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []


def dataset_status(node: NodeProcess, name: str) -> int:
    return int(node.get(f"/api/v0/datasets/{name}")[0])


def test_a_gzip_bomb_is_refused_as_it_inflates_and_nothing_is_kept(node: NodeProcess) -> None:
    rows = b"12345,67890\n" * (16 * MIB // 12)
    bomb = gzip_members(b"a,b\n", rows, 64)  # 1 GiB of CSV, 89 M rows
    assert len(bomb) < 2 * MIB
    with Watch(node) as w:
        status, body = upload(node, bomb, name="bomb", filename="bomb.csv.gz")
    assert_refused(status, body, "datasets.max_decompression_ratio", "bomb.csv.gz", seen=f"RSS +{w.grew >> 20} MB")
    assert w.grew < RSS_BOUND, f"node RSS grew {w.grew >> 20} MB"
    assert w.health and all(h == 200 for h in w.health), w.health
    assert dataset_status(node, "bomb") == 404 and work_files(node) == []
    # The same rows at an honest size go in: the cap is on the ratio, not on gzip.
    honest = rows[: 12 * (4 * MIB // 12)]
    status, body = upload(node, gzip_members(b"a,b\n", honest, 1), name="fine", filename="fine.csv.gz")
    assert status == 201 and body["rows_read"] == 4 * MIB // 12, body


def test_a_parquet_gz_bomb_is_never_spooled_outside_the_home(node: NodeProcess) -> None:
    systemp = node.home.parent / "systemp"
    outside: set[str] = set()

    def spools() -> None:  # the node's open files in the system temp dir (a spool is unlinked, still open)
        for fd in Path(f"/proc/{pid_of(node)}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(str(systemp)):
                outside.add(target)

    bomb = gzip_members(b"PAR1", bytes(16 * MIB), 64)  # 1 GiB once inflated
    with Watch(node, also=spools) as w:
        status, body = upload(node, bomb, name="pbomb", filename="bomb.parquet.gz")
    assert not outside, f"spooled outside $CAIRN_HOME: {outside} (then answered {status})"
    assert_refused(status, body, "datasets.max_decompression_ratio", "bomb.parquet.gz")
    assert w.grew < RSS_BOUND, f"node RSS grew {w.grew >> 20} MB"
    assert dataset_status(node, "pbomb") == 404 and work_files(node) == []
    assert sum(f.stat().st_size for f in systemp.rglob("*") if f.is_file()) == 0


WIDE = 30_000  # 3 times datasets.max_columns (10,000)


def wide_inputs() -> dict[str, bytes]:
    table = pa.table({f"c{i:05d}": pa.array([i], pa.int64()) for i in range(WIDE)})
    parquet = io.BytesIO()
    pq.write_table(table, parquet)
    names = [f"c{i:05d}" for i in range(WIDE)]
    csv = (",".join(names) + "\n" + ",".join("1" for _ in names) + "\n").encode()
    jsonl = json.dumps(dict.fromkeys(names, 1)).encode() + b"\n"
    return {"wide.parquet": parquet.getvalue(), "wide.csv": csv, "wide.jsonl": jsonl}


@pytest.mark.parametrize("filename", ["wide.parquet", "wide.csv", "wide.jsonl"])
def test_thirty_thousand_columns_are_refused_before_the_schema_is_built(node: NodeProcess, filename: str) -> None:
    body_bytes, name = wide_inputs()[filename], filename.replace(".", "-")
    with Watch(node) as w:
        status, body = upload(node, body_bytes, name=name, filename=filename)
    seen = f"RSS +{w.grew >> 20} MB for {len(body_bytes) >> 10} KiB of {filename}"
    assert_refused(status, body, "30000", "datasets.max_columns (10000)", seen=seen)
    assert w.grew < WIDE_RSS_BOUND, seen
    assert w.health and all(h == 200 for h in w.health), w.health
    assert dataset_status(node, name) == 404 and work_files(node) == []


def send_and_leave(node: NodeProcess, body: bytes, params: dict[str, str]) -> None:
    """Send the upload on a raw connection, wait until its ingest is under way (its work directory holds a slice),
    then close the connection without reading an answer."""
    token = (node.home / "api.token").read_text().strip()
    url = urllib.parse.urlsplit(node.api)
    head = (
        f"POST /api/v0/datasets?{urllib.parse.urlencode(params)} HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname or "127.0.0.1", url.port or 80)) as s:
        s.sendall(head + body)
        poll(lambda: any((node.home / "tmp").glob("ingest-*/slice-*")), 120, what="the ingest to cut a slice")


def test_an_ingest_whose_client_goes_away_stops_and_keeps_nothing(node: NodeProcess) -> None:
    rng = np.random.default_rng(7)
    lines = [f"{i % 100},{'ab'[x]}\n" for i, x in enumerate(rng.integers(0, 2, 1 << 21))]
    block = "".join(lines).encode()  # gzip ratio about 13: within the caps, only slow (84 M rows)
    body = gzip_members(b"n,s\n", block, 40)
    pid = pid_of(node)
    send_and_leave(node, body, {"name": "left", "filename": "left.csv.gz"})
    # The work stops: its files go and the node's CPU falls back to idle (under 0.3 s of CPU in a second).
    poll(lambda: work_files(node) == [], 60, what="the stopped ingest's work files to go")

    def idle() -> bool:
        before = cpu_seconds(pid)
        time.sleep(1.0)
        return cpu_seconds(pid) - before < 0.3

    poll(idle, 120, interval=0.0, what="the node's CPU to fall back to idle")
    assert dataset_status(node, "left") == 404  # nothing was committed
    assert "left" not in [d["name"] for d in node.get("/api/v0/datasets")[1]["datasets"]]


async def test_a_pull_is_held_to_the_same_caps(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A pull is an ingest from a peer: a dataset wider than datasets.max_columns, or with more rows than
    datasets.max_rows, is refused (413) from what its chain claims, before a slice is fetched; nothing is kept."""
    files = {
        "wide": "".join(f"c{i}," for i in range(40)).rstrip(",") + "\n" + ",".join("1" * 40) + "\n",
        "long": "a,b\n" + "".join(f"{i},{i}\n" for i in range(300)),
        "fits": "a,b\n" + "".join(f"{i},{i}\n" for i in range(50)),
    }
    caps = {"datasets.max_columns": 30, "datasets.max_rows": 100}
    async with (
        inprocess_node(tmp_path / "a", kubo_session) as (src, ca),
        inprocess_node(tmp_path / "b", kubo_session, **caps) as (puller, cb),
    ):
        for name, text in files.items():
            resp = await ca.post("/api/v0/datasets", params={"name": name, "filename": f"{name}.csv"}, data=text)
            assert resp.status == 201, await resp.text()

        async def pull(name: str) -> tuple[int, Any]:
            resp = await cb.post("/api/v0/pull", json={"source": f"{src.api_url}/odf/{name}"})
            return resp.status, await resp.json()

        assert_refused(*await pull("wide"), "40 columns", "datasets.max_columns (30)")
        assert_refused(*await pull("long"), "300 rows", "datasets.max_rows")
        status, body = await pull("fits")
        assert status == 200 and body["name"] == "fits", body
        listed = await (await cb.get("/api/v0/datasets")).json()
        assert [d["name"] for d in listed["datasets"]] == ["fits"]
        assert not list((puller.home.path / "tmp").iterdir())
