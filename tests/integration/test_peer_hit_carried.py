"""A peer hit from blocks the lookup answer carried, on real in-process nodes (real Kubo, libp2p,
index, resolver): ``/cairn/lookup/1.1.0`` answers carry a claim's small blocks; the asker hash-checks them, runs
every check of node/services/resolve/claim_checks.py on them, stores them, answers, then pins from a durable queue."""

from __future__ import annotations

import asyncio
import inspect
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from node.adapters.identity import generate
from node.adapters.ipfs import ManagedKubo
from node.core import Node
from node.domain.model import (
    CID,
    Announcement,
    Block,
    Execution,
    Receipt,
    RecursiveDataEnvelope,
    block_of,
    cid_for,
    cid_str,
    encode,
)
from node.services.datasets import LogicalHasher
from node.services.datasets.slices import write_parquet_slice
from node.services.peers import LOOKUP
from node.services.peers.network import LOOKUP_CARRYING
from node.services.resolve.claim_checks import asked, bytecode_of, fetch_and_verify, structure_of
from node.services.resolve.resolver import ENGINE_HANDLE
from node.support import wall_clock as clock
from node.support.errors import ClaimRefused, KuboError
from p2p.host import P2PHost
from tests.fixtures.inprocess import add_csv, inprocess_node, query

PEERS = {"peers.enabled": True}
SALES = b"region,amount\nnorth,10\nsouth,7\nnorth,3\n"


async def _value(v: bool | Awaitable[bool]) -> bool:
    return await v if inspect.isawaitable(v) else v


async def until(what: str, check: Callable[[], bool | Awaitable[bool]], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await _value(check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _slice(table: pa.Table) -> Block:
    """A Parquet slice as Cairn writes it, as the one raw block its UnixFS file is (under 1 MiB)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.parquet"
        write_parquet_slice(table, str(path))
        return block_of(path.read_bytes(), "raw")


async def forge(node: Node, sql: str, out: pa.Table, **lie: Any) -> tuple[bytes, list[Block], Any]:
    """A whole claim for ``sql`` over ``node``'s sales (its own input slices), stored nowhere: (an_0 block, every
    block of the claim, what ``node`` asks). By default every part is true; ``lie`` makes one part false."""
    cq, _, iv, versions = await node.resolver.prepare(sql, {"sales": "sales"})
    iv_block = block_of(iv)
    want = asked(iv_block, cq.statement, ENGINE_HANDLE, [tuple(s.cid for s in v.slices) for v in versions])
    key = generate()
    blocks: list[Block] = []

    def put(b: Block) -> CID:
        blocks.append(b)
        return b.cid

    in_env = put(block_of(RecursiveDataEnvelope(put(block_of([put(block_of(list(want.inputs[0])))])))))
    out_env = put(block_of(RecursiveDataEnvelope(put(block_of([put(_slice(out))])))))
    statement = lie.get("statement", cq.statement)
    ex = put(block_of(Execution(bytecode_of(statement)[1].cid, ENGINE_HANDLE, in_env, False, out_env)))
    st = put(block_of(structure_of(out.schema)))
    h = LogicalHasher(out.schema)
    h.update(out)
    lh = lie.get("logical_hash", str(h.finish()))
    rc_obj = Receipt(
        ex, iv_block.cid, key.node_key, clock.utc_now_iso(), {"name": "spark"}, lh, out.num_rows, st, (), {}
    )
    rc = put(block_of(rc_obj.signed(key.sign)))
    an = Announcement(iv_block.cid, ex, rc, lh, out.num_rows, {"name": "spark"}, (), key.node_key, clock.utc_now_iso())
    return block_of(an.signed(key.sign)).data, blocks, want


def carrying(an: bytes, blocks: list[Block]) -> bytes:
    return encode([{"an": an, "blocks": [[b.cid, b.data] for b in blocks]}])


async def absent(node: Node, cid: CID) -> bool:
    try:
        await node.kubo.block_stat(cid, timeout=5.0, offline=True)
    except KuboError:
        return True
    return False


async def ask_through(node: Node, client: Any, sql: str, an: bytes, blocks: list[Block] | None) -> dict[str, Any]:
    """Ask ``node`` (trust any) with one fake peer connected that holds the claim ``an``: in a 1.1.0 answer
    carrying ``blocks``, or, with ``blocks`` None, a peer that speaks 1.0.0 only (the announcement alone)."""
    peer = P2PHost(os.urandom(32))

    async def plain(_peer: str, request: bytes) -> bytes:
        return encode([an]) if request else encode([])  # an empty request is the probe at connect

    async def answer(_peer: str, request: bytes) -> bytes:
        return carrying(an, blocks or [])

    peer.set_handler(LOOKUP, plain)
    if blocks is not None:
        peer.set_handler(LOOKUP_CARRYING, answer)
    await peer.start()
    try:
        net = node.network
        assert net is not None
        await peer.connect(net.host.addrs()[0])
        await until("peer connected", lambda: peer.peer_id in net.host.connected_peers())
        status, got = await query(client, {"sql": sql, "inputs": {"sales": "sales"}, "trust": "any"})
    finally:
        await peer.stop()
    assert status == 200, got
    return got


async def test_peer_hit_from_carried_blocks_then_pinned(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """The claim's blocks are in no Kubo and its announcement names no provider: only the lookup answer has
    them. The asker uses it (every check passed on them), has stored them, and pins them after answering."""
    sql = "SELECT COUNT(*) AS carried_n FROM sales WHERE amount > 4"  # a name of its own: its blocks are new
    out = pa.table({"carried_n": pa.array([2], pa.int64())})  # the truth: 10 and 7
    async with inprocess_node(tmp_path / "b", kubo_session, **PEERS) as (b, client):
        await add_csv(client, "sales", SALES)
        an, blocks, _ = await forge(b, sql, out)
        # All but the input side (our own slices' list and envelope, which other executions over them store).
        assert all([await absent(b, blk.cid) for blk in blocks[3:]])
        got = await ask_through(b, client, sql, an, blocks)
        assert got["source"] == "peer" and got["trust"] == "unverified", got
        assert got["rows"] == [[2]] and b.resolver.computed == 0
        assert not any([await absent(b, blk.cid) for blk in blocks])  # stored here: what we answer with is kept

        async def drained() -> bool:
            return not b.index.pins.pending_pins()

        await until("owed pins drained", drained)
        pinned = await b.kubo.pin_ls(got["receipt"])
        assert pinned, "the receipt is pinned once the queue drained"


async def test_the_answer_is_the_same_as_by_the_old_path(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """One claim, used by one node from a 1.1.0 answer's carried blocks, and by another from a 1.0.0 answer
    (the blocks fetched from Kubo, as before 1.1.0): the same answer, field for field, but timing."""
    sql = "SELECT COUNT(*) AS n FROM sales WHERE amount > 8"
    out = pa.table({"n": pa.array([1], pa.int64())})
    async with (
        inprocess_node(tmp_path / "b1", kubo_session, **PEERS) as (b1, c1),
        inprocess_node(tmp_path / "b2", kubo_session, **PEERS) as (b2, c2),
    ):
        for c in (c1, c2):
            await add_csv(c, "sales", SALES)
        an, blocks, _ = await forge(b1, sql, out)
        new = await ask_through(b1, c1, sql, an, blocks)  # B1 stores the blocks in the shared Kubo
        old = await ask_through(b2, c2, sql, an, None)  # so B2 reads them from there
        assert new["source"] == old["source"] == "peer" and b2.resolver.computed == 0
        for answer in (new, old):
            answer.pop("elapsed_ms")
            answer.pop("inputs")  # each node's own dataset version of the same data (same invocation)
            answer["peer"].pop("peer")  # two fake peers, one each
        assert new == old


@pytest.mark.parametrize(
    ("lie", "word"),
    [
        ({"logical_hash": "f1e2deadbeef"}, "logical hash"),
        ({"statement": "SELECT 1 AS n"}, "bytecode"),
    ],
)
async def test_a_lie_carried_is_refused_as_one_fetched(
    kubo_session: ManagedKubo, tmp_path: Path, lie: dict[str, str], word: str
) -> None:
    """Carried blocks go through the same checks: one false part refuses the claim, naming it."""
    sql = "SELECT COUNT(*) AS n FROM sales WHERE amount > 5"
    async with inprocess_node(tmp_path / "b", kubo_session) as (b, client):
        await add_csv(client, "sales", SALES)
        an_data, blocks, want = await forge(b, sql, pa.table({"n": pa.array([2], pa.int64())}), **lie)
        from node.services.resolve.claim_checks import check_announcement

        an = check_announcement(an_data)
        carried = {bytes(blk.cid): blk.data for blk in blocks}
        with pytest.raises(ClaimRefused, match=word):
            await fetch_and_verify(b.kubo, b.datasets, an, want, 5.0, carried=carried)


async def test_lookup_checks_carried_blocks_and_falls_back_to_1_0(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A carried block whose bytes are not its CID's is a bad message (nothing of that item is carried); a peer
    that speaks only 1.0.0 is asked 1.0.0."""
    sql = "SELECT COUNT(*) AS n FROM sales WHERE amount > 6"
    liar, old = P2PHost(os.urandom(32)), P2PHost(os.urandom(32))
    async with inprocess_node(tmp_path / "b", kubo_session, **PEERS) as (b, client):
        await add_csv(client, "sales", SALES)
        an, blocks, want = await forge(b, sql, pa.table({"n": pa.array([2], pa.int64())}))
        bad = [[blk.cid, blk.data] for blk in blocks]
        bad[0][1] = b"not the bytes of " + bytes(bad[0][0])

        async def lying(_peer: str, request: bytes) -> bytes:
            return encode([{"an": an, "blocks": bad}])

        async def plain(_peer: str, request: bytes) -> bytes:
            return encode([an])

        liar.set_handler(LOOKUP_CARRYING, lying)
        liar.set_handler(LOOKUP, plain)  # as every Cairn node, it answers 1.0.0 too (the probe at connect asks it)
        old.set_handler(LOOKUP, plain)
        await asyncio.gather(liar.start(), old.start())
        try:
            net = b.network
            assert net is not None
            for h in (liar, old):
                await h.connect(net.host.addrs()[0])
            both = {liar.peer_id, old.peer_id}
            await until("peers connected", lambda: both <= set(net.host.connected_peers()))
            got = await net.lookup_carrying(want.cid)
        finally:
            await asyncio.gather(liar.stop(), old.stop())
        assert got[liar.peer_id] == [(an, {})] and net.counters()["malformed"] == 1
        assert got[old.peer_id] == [(an, {})]  # asked 1.0.0: the announcement alone


async def test_owed_pins_are_resumed_at_start(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A pin queued before an answer and not done when the node stopped (a crash) is done at the next start."""
    data = os.urandom(64)
    cid = cid_for(data, "raw")
    async with inprocess_node(tmp_path / "n", kubo_session) as (node, _):
        await node.kubo.block_put(data, codec="raw")
        await node.resolver.stop_pins()  # the drain started at open must not run now: the pin stays owed (a crash)
        node.index.pins.queue_pins([(cid_str(cid), False, False)])  # as _keep_peer_answer does, the drain not yet run
        # Asked as a direct pin: a listing of indirect pins fails on the incomplete DAGs other tests left pinned
        # in the session's shared Kubo (that listing cannot be known then).
        assert not await node.kubo.pin_ls(cid, type="direct")
    async with inprocess_node(tmp_path / "n", kubo_session) as (node, _):

        async def done() -> bool:
            return not node.index.pins.pending_pins()

        await until("the owed pin done", done)
        assert await node.kubo.pin_ls(cid, type="direct")


async def test_owed_blocks_are_put_at_start(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A peer's answer owes its carried blocks to Kubo with its pins, in one transaction, before it is given;
    they are put after it. Owed and not yet put when the node stopped (a crash): put at the next start, before
    the pin that needs them, and then no longer owed."""
    data = os.urandom(64)
    cid = cid_for(data, "raw")
    async with inprocess_node(tmp_path / "n", kubo_session) as (node, _):
        await node.resolver.stop_pins()  # as if the node died right after answering: nothing drained
        node.index.pins.queue_pins([(cid_str(cid), False, False)], [(cid_str(cid), data)])
        assert node.index.pins.pending_blocks() == [(cid_str(cid), data)]
        assert await absent(node, cid)
    async with inprocess_node(tmp_path / "n", kubo_session) as (node, _):

        async def done() -> bool:
            return not node.index.pins.pending_pins() and not node.index.pins.pending_blocks()

        await until("the owed block put and pinned", done)
        assert not await absent(node, cid)
        assert await node.kubo.pin_ls(cid, type="direct")
