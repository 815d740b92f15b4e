"""Engine profile on a real node (real Kubo, Spark worker, libp2p; DESIGN.md "Engine profile").

- the receipt of a computed answer links an ``ep_0`` that the node serves from Kubo, whose content names the
  versions (checked against pyspark, pyarrow and ``java`` itself) and the answer-relevant settings;
- a peer's disagreeing answer for an invocation the node holds is recorded as a divergence (API, metrics),
  and the node's own answer stays the cached one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyspark
import pytest

from tests.fixtures.nodes import NodeProcess, poll

SALES = (
    b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\nnorth,apple,1\n"
)
SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base = tmp_path_factory.mktemp("profile-node")
    n = NodeProcess(base / "a", env={"CAIRN_SPARK_AUTOSTART": "true"}).start()
    csv = base / "sales.csv"
    csv.write_bytes(SALES)
    r = n.cli("add", str(csv), "--name", "sales")
    assert r.returncode == 0, r.stderr.decode()
    yield n
    n.stop()


def _ask(node: NodeProcess, sql: str) -> dict[str, Any]:
    req = urllib.request.Request(
        node.api + "/api/v0/query",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"sql": sql, "inputs": {"sales": "sales"}}).encode(),
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def _block(node: NodeProcess, cid: str) -> Any:
    from node.model import decode, decode_object, parse_cid, verify_block

    req = urllib.request.Request(f"{node.api}/ipfs/{cid}", headers={"Accept": "application/vnd.ipld.raw"})
    with urllib.request.urlopen(req, timeout=60) as r:  # the block's bytes, as the node's Kubo holds them
        data = r.read()
    verify_block(parse_cid(cid), data)
    return decode_object(decode(data))


def _java() -> tuple[str, str]:
    """The JVM's vendor and runtime version, asked of ``java`` itself (independent of the worker)."""
    cmd = ["java", "-XshowSettings:properties", "-version"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    props = dict(re.findall(r"^\s+([\w.]+) = (.*)$", out, re.M))
    return props["java.vendor"], props["java.runtime.version"]


def test_receipt_links_an_engine_profile(node: NodeProcess) -> None:
    from node.model import EngineProfile, Receipt

    answer = _ask(node, SQL)
    assert answer["source"] == "computed" and answer["profile"]
    receipt = _block(node, answer["receipt"])
    assert isinstance(receipt, Receipt) and str(receipt.profile) == answer["profile"]
    profile = _block(node, answer["profile"])
    assert isinstance(profile, EngineProfile) and profile.engine == "spark"
    vendor, version = _java()
    assert profile.versions == {
        "spark": pyspark.__version__,
        "pyarrow": pa.__version__,
        "java": f"{vendor} {version}",
        "scala": profile.versions["scala"],
    }
    assert re.fullmatch(r"2\.13\.\d+", profile.versions["scala"])
    assert profile.jvm["locale"] == "en-US" and profile.jvm["timezone"] == "UTC"
    for key, value in (
        ("spark.sql.legacy.timeParserPolicy", "CORRECTED"),
        ("spark.sql.mapKeyDedupPolicy", "EXCEPTION"),
        ("spark.sql.ansi.enabled", "true"),
        ("spark.sql.session.timeZone", "UTC"),
        ("spark.sql.shuffle.partitions", "4"),
    ):
        assert profile.settings[key] == value
    assert sum(k.startswith("spark.sql.legacy.") for k in profile.settings) > 50  # every legacy key is recorded
    status, ex = node.get(f"/api/v0/executions/{answer['execution']}")
    assert status == 200 and ex["profile"] == answer["profile"] and ex["divergences"] == []
    # One profile for every answer of this worker: a second query's receipt links the same ep_0.
    other = _ask(node, "SELECT product, COUNT(*) AS n FROM sales GROUP BY product ORDER BY product")
    assert other["profile"] == answer["profile"] and other["receipt"] != answer["receipt"]


def test_divergent_peer_answer_is_recorded_not_cached(node: NodeProcess) -> None:
    from node.identity import generate
    from node.model import Announcement, EngineProfile, block_of, cid_str, parse_cid

    mine = _ask(node, SQL)
    assert mine["source"] == "local"
    # A peer whose engine parses dates the legacy way claims another answer for the same invocation.
    theirs = block_of(
        EngineProfile("spark", {"spark": "3.5.0"}, {"locale": "tr-TR"}, {"spark.sql.legacy.timeParserPolicy": "LEGACY"})
    )
    peer = generate()
    an = Announcement(
        parse_cid(mine["invocation"]),
        parse_cid(mine["execution"]),
        parse_cid(mine["receipt"]),
        "0" * 64,
        3,
        {"name": "spark", "profile": cid_str(theirs.cid)},
        (),
        peer.node_key,
        "2026-01-01T00:00:00Z",
    ).signed(peer.sign)
    _gossip(node, block_of(an).data)
    ex = poll(
        lambda: (lambda e: e if e["divergences"] else None)(node.get(f"/api/v0/executions/{mine['execution']}")[1]),
        30,
        0.2,
        what="the divergence to be recorded",
    )
    [d] = ex["divergences"]
    assert d["signer"] == peer.node_key and d["profile"] == cid_str(theirs.cid) and d["logicalHash"] == "0" * 64
    assert ex["profile"] == mine["profile"] and ex["logicalHash"] == mine["logicalHash"]
    again = _ask(node, SQL)  # still our own answer: a divergence is surfaced, never a second cache entry
    assert again["source"] == "local" and again["logicalHash"] == mine["logicalHash"]
    with urllib.request.urlopen(node.api + "/metrics", timeout=10) as r:
        assert re.search(r"^cairn_divergences 1\.0$", r.read().decode(), re.M)


def _gossip(target: NodeProcess, data: bytes) -> None:
    """Publish on the executions topic from a throwaway libp2p host connected to ``target``."""
    from p2p.host import P2PHost

    async def go() -> None:
        host = P2PHost(os.urandom(32), ["/ip4/127.0.0.1/tcp/0"])
        await host.start()
        try:
            await host.connect(target.get("/api/v0/node")[1]["p2p_addrs"][0])
            deadline = asyncio.get_running_loop().time() + 30
            while asyncio.get_running_loop().time() < deadline:
                await host.publish("/cairn/executions/1", data)
                if target.get("/api/v0/announcements")[1]["claims"]:
                    return
                await asyncio.sleep(0.3)
            raise AssertionError("the gossiped announcement never arrived")
        finally:
            await host.stop()

    asyncio.run(go())
