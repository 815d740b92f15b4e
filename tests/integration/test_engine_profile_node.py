"""Engine profile on an in-process node (real Kubo, Spark worker, libp2p; DESIGN.md "Engine profile").

- the receipt of a computed answer links an ``ep_0`` that the node serves from Kubo, whose content names the
  versions (checked against pyspark, pyarrow and ``java`` itself) and the answer-relevant settings;
- a peer's disagreeing answer for an invocation the node holds is recorded as a divergence (API, metrics),
  and the node's own answer stays the cached one.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pyspark
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, add_csv, ask, inprocess_node, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")  # one node, its worker and its p2p host for the module

SALES = (
    b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\nnorth,apple,1\n"
)
SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[InNode]:
    base = tmp_path_factory.mktemp("profile-node")
    async with inprocess_node(base / "a", kubo_session, **{"peers.enabled": True}) as n:
        await n[0].spark.ensure()
        await add_csv(n[1], "sales", SALES)
        yield n


async def _get(node: InNode, path: str) -> Any:
    resp = await node[1].get(path)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def _block(node: InNode, cid: str) -> Any:
    from node.domain.model import decode, decode_object, parse_cid, verify_block

    resp = await node[1].get(f"/ipfs/{cid}", headers={"Accept": "application/vnd.ipld.raw"})
    data = await resp.read()  # the block's bytes, as the node's Kubo holds them
    verify_block(parse_cid(cid), data)
    return decode_object(decode(data))


def _java() -> tuple[str, str]:
    """The JVM's vendor and runtime version, asked of ``java`` itself (independent of the worker)."""
    cmd = ["java", "-XshowSettings:properties", "-version"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    props = dict(re.findall(r"^\s+([\w.]+) = (.*)$", out, re.M))
    return props["java.vendor"], props["java.runtime.version"]


async def test_receipt_links_an_engine_profile(node: InNode) -> None:
    from node.domain.model import EngineProfile, Receipt

    answer = await ask(node[1], SQL)
    assert answer["source"] == "computed" and answer["profile"]
    receipt = await _block(node, answer["receipt"])
    assert isinstance(receipt, Receipt) and str(receipt.profile) == answer["profile"]
    profile = await _block(node, answer["profile"])
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
    ex = await _get(node, f"/api/v0/executions/{answer['execution']}")
    assert ex["profile"] == answer["profile"] and ex["divergences"] == []
    # One profile for every answer of this worker: a second query's receipt links the same ep_0.
    other = await ask(node[1], "SELECT product, COUNT(*) AS n FROM sales GROUP BY product ORDER BY product")
    assert other["profile"] == answer["profile"] and other["receipt"] != answer["receipt"]


async def test_divergent_peer_answer_is_recorded_not_cached(node: InNode) -> None:
    from node.adapters.identity import generate
    from node.domain.model import Announcement, EngineProfile, block_of, cid_str, parse_cid

    mine = await ask(node[1], SQL)
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
    await _gossip(node, block_of(an).data)

    async def recorded() -> dict[str, Any] | None:
        e = await _get(node, f"/api/v0/executions/{mine['execution']}")
        return e if e["divergences"] else None

    ex = await wait_for(recorded, 30, "the divergence to be recorded")
    [d] = ex["divergences"]
    assert d["signer"] == peer.node_key and d["profile"] == cid_str(theirs.cid) and d["logicalHash"] == "0" * 64
    assert ex["profile"] == mine["profile"] and ex["logicalHash"] == mine["logicalHash"]
    again = await ask(node[1], SQL)  # still our own answer: a divergence is surfaced, never a second cache entry
    assert again["source"] == "local" and again["logicalHash"] == mine["logicalHash"]
    metrics = await (await node[1].get("/metrics")).text()
    assert re.search(r"^cairn_divergences 1\.0$", metrics, re.M)


async def _gossip(target: InNode, data: bytes) -> None:
    """Publish on the executions topic from a throwaway libp2p host connected to ``target``."""
    from p2p.host import P2PHost

    host = P2PHost(os.urandom(32), ["/ip4/127.0.0.1/tcp/0"])
    await host.start()
    try:
        await host.connect((await _get(target, "/api/v0/node"))["p2p_addrs"][0])
        deadline = asyncio.get_running_loop().time() + 30
        while asyncio.get_running_loop().time() < deadline:
            await host.publish("/cairn/executions/1", data)
            if (await _get(target, "/api/v0/announcements"))["claims"]:
                return
            await asyncio.sleep(0.3)  # gossip has no delivery ack: re-publish until the node lists the claim
        raise AssertionError("the gossiped announcement never arrived")
    finally:
        await host.stop()
