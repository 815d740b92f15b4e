"""Fetching a trusted claim's blocks ahead of need (node/services/resolve/carry.py ``FetchAhead``), without IO: only
claims
of a shape this node asked lately (or, naming no shape, a deterministic share of the nodes), never for a claim whose
signer's node is a neighbour (its lookup answer carries the blocks), one fetch per claim at a time, and an answer
asked while the fetch is under way waits for it (``settle``) instead of fetching the same blocks beside it
("many nodes", docs/scaling.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from node.adapters.identity import generate
from node.adapters.index import Index
from node.domain.model import CID, Announcement, Invocation, cid_for, cid_str
from node.domain.model.query import InputIdentity
from node.domain.sql import CanonicalQuery, canonicalize
from node.services.resolve import supersets
from node.services.resolve.carry import AHEAD_SHARE, ASKED_SHAPES, FetchAhead
from node.services.resolve.resolver import Options, Resolver

RECEIPT, EXECUTION = b"receipt block", b"execution block"
SHAPE, OTHER = "ab" * 32, "cd" * 32
PROVIDER = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWA"
DEADLINE = 30.0  # seconds: only a bound for a test that fails, never a wait a passing one needs


async def until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` on the event loop until it holds; fail after ``DEADLINE`` s."""
    end = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < end, f"{what} not met within {DEADLINE} s"
        await asyncio.sleep(0.001)


async def background_done(since: set[asyncio.Task[object]]) -> None:
    """Wait for every task started after the snapshot ``since`` (a connect, a fetch ahead) to end: whatever the
    calls made since then began has run to its end, so what it did not do, it never will."""
    new = asyncio.all_tasks() - since - {asyncio.current_task()}
    if new:
        await asyncio.wait_for(asyncio.gather(*new, return_exceptions=True), DEADLINE)


class SlowKubo:
    """Answers block gets once ``release`` is set; counts them, and the connects."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.gets: list[CID] = []
        self.connects: list[str] = []
        self.blocks = {bytes(cid_for(d, "raw")): d for d in (RECEIPT, EXECUTION)}

    async def swarm_connect(self, addr: str, timeout: float | None = None) -> None:
        self.connects.append(addr)

    async def block_get(self, cid: CID, timeout: float | None = None, **_: Any) -> bytes:
        self.gets.append(cid)
        await self.release.wait()
        return self.blocks[bytes(cid)]


def _claim(shape: str | None = SHAPE, signer: str = "did:key:z6Mk", execution: bytes = EXECUTION) -> Announcement:
    return Announcement(
        cid_for(b"invocation", "raw"),
        cid_for(execution, "raw"),
        cid_for(RECEIPT, "raw"),
        "f00",
        1,
        {"name": "spark"},
        (PROVIDER,),
        signer,
        "2026-11-28T00:00:00Z",
        shape=shape,
    )


def _asked(shape: str = SHAPE) -> FetchAhead:
    ahead = FetchAhead(SlowKubo(), 4096)  # type: ignore[arg-type]  # the two calls FetchAhead makes
    ahead.asked(shape)
    return ahead


def test_only_claims_of_a_shape_asked_here_are_wanted() -> None:
    ahead = _asked()
    assert ahead.wanted(_claim(SHAPE)) and not ahead.wanted(_claim(OTHER))
    ahead.asked(None)  # a query with no shape (ORDER BY, several inputs) is remembered as nothing
    assert not ahead.wanted(_claim(OTHER))


def test_the_shapes_asked_are_bounded_the_oldest_forgotten() -> None:
    ahead = _asked()
    for i in range(ASKED_SHAPES):
        ahead.asked(f"{i:064x}")
    assert not ahead.wanted(_claim(SHAPE)) and ahead.wanted(_claim(f"{ASKED_SHAPES - 1:064x}"))


def test_a_claim_naming_no_shape_is_fetched_by_a_deterministic_share_of_the_nodes() -> None:
    """Nothing says who will use it: one node in ``AHEAD_SHARE``, by its key and the execution, the same at every
    announcement of the claim; each claim its own share."""
    an = _claim(None)
    nodes = [FetchAhead(SlowKubo(), 4096, f"did:key:node{i}") for i in range(800)]  # type: ignore[arg-type]
    share = [n.wanted(an) for n in nodes]
    assert share == [n.wanted(an) for n in nodes]
    assert 0.6 / AHEAD_SHARE < sum(share) / len(nodes) < 1.4 / AHEAD_SHARE
    one = nodes[0]
    claims = [_claim(None, execution=b"ex %d" % i) for i in range(800)]
    assert 0.6 / AHEAD_SHARE < sum(one.wanted(c) for c in claims) / len(claims) < 1.4 / AHEAD_SHARE


async def test_a_neighbours_claim_is_not_fetched_ahead() -> None:
    kubo = SlowKubo()
    kubo.release.set()  # a fetch wrongly started would run to its end
    ahead = FetchAhead(kubo, 4096)  # type: ignore[arg-type]  # the two calls FetchAhead makes
    ahead.asked(SHAPE)  # even of a shape asked here
    an = _claim()
    since = asyncio.all_tasks()
    assert not ahead.wanted(an, near=True) and not ahead.start(an, near=True)
    await background_done(since)
    assert kubo.gets == [] and ahead.fetched == 0


async def test_an_answer_waits_for_the_fetch_under_way_and_takes_its_blocks() -> None:
    kubo = SlowKubo()
    ahead = FetchAhead(kubo, 4096)  # type: ignore[arg-type]
    ahead.asked(SHAPE)
    an = _claim()
    key = cid_str(an.execution)
    assert ahead.start(an)
    assert not ahead.wanted(an) and not ahead.start(an)  # one fetch per claim at a time
    waiting = asyncio.ensure_future(ahead.settle([key, "bafyother"], timeout=DEADLINE))
    # Both blocks asked of Kubo, held there until released: the settle task has run meanwhile (it was ready first).
    await until(lambda: len(kubo.gets) == 2, what="the fetch ahead to ask Kubo for both blocks")
    assert not waiting.done() and ahead.blocks(key) == {}  # the answer waits rather than fetch beside it
    kubo.release.set()
    await asyncio.wait_for(waiting, DEADLINE)
    assert ahead.blocks(key) == {bytes(an.receipt): RECEIPT, bytes(an.execution): EXECUTION}
    assert len(kubo.gets) == 2 and ahead.fetched == 1
    assert not ahead.wanted(an)  # kept: not fetched again
    await ahead.settle([key])  # nothing under way: returns at once


async def test_settle_is_bounded() -> None:
    kubo = SlowKubo()
    ahead = FetchAhead(kubo, 4096)  # type: ignore[arg-type]
    ahead.asked(SHAPE)
    an = _claim()
    assert ahead.start(an)
    # Kubo never answers: settle gives up after its own (short) timeout, the fetch goes on.
    await asyncio.wait_for(ahead.settle([cid_str(an.execution)], timeout=0.05), DEADLINE)
    assert ahead.blocks(cid_str(an.execution)) == {} and not ahead.wanted(an)  # still under way
    await ahead.stop()


def _resolver(tmp_path: Path, kubo: SlowKubo) -> tuple[Resolver, str]:
    """A resolver with real index whose one trusted key is the signer's, fetching ahead 4 KiB a claim."""
    index = Index(tmp_path / "index.sqlite")
    signer = generate().node_key
    index.trust.trust_add(signer, "default")
    options = Options(tmp_path, 1, fetch_ahead_bytes=4096)
    resolver = Resolver(None, kubo, index, None, generate(), options)  # type: ignore[arg-type]
    return resolver, signer


class Asked(Exception):
    """Raised in place of the miss: the test needs only what ``resolve`` did before it."""


def _prepared(sql: str, logical: str = "h1") -> tuple[CanonicalQuery, Invocation]:
    """``sql`` over one input of content ``logical``, as ``Resolver.prepare`` would give it (without datasets)."""
    cq = canonicalize(sql, {"t": [("k", "utf8"), ("x", "int64")]})
    return cq, Invocation(cid_for(b"qy"), (InputIdentity(cid_for(b"st"), logical, 6),))


def _shape(sql: str, logical: str = "h1") -> str:
    shape = supersets.public_shape(*_prepared(sql, logical))
    assert shape is not None
    return shape


async def _ask(resolver: Resolver, monkeypatch: pytest.MonkeyPatch, sql: str, logical: str = "h1") -> str | None:
    """Ask ``sql`` over one input of content ``logical``: the query's public shape."""
    cq, iv = _prepared(sql, logical)

    async def prepare(*_: object) -> object:
        return cq, [], iv, []

    async def miss(*_: object) -> object:
        raise Asked

    monkeypatch.setattr(resolver, "prepare", prepare)
    monkeypatch.setattr(resolver, "_miss", miss)
    with pytest.raises(Asked):
        await resolver.resolve(sql, {"t": "t"})
    return supersets.public_shape(cq, iv)


async def test_a_trusted_claim_of_a_shape_we_asked_is_fetched_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many nodes: a node that asked a query of the claim's shape (the same inputs' content, any
    selection) fetches the claim's blocks when the announcement comes, before it is asked the claim's query; the
    same node, before it asked, only connected."""
    kubo = SlowKubo()
    kubo.release.set()
    resolver, signer = _resolver(tmp_path, kubo)
    cq = "SELECT k, SUM(x) FROM t GROUP BY k"
    before = _claim(_shape(cq), signer, b"before")
    since = asyncio.all_tasks()
    resolver.reach_ahead(before)
    await background_done(since)
    assert kubo.connects == [PROVIDER] and kubo.gets == [] and resolver.ahead.fetched == 0
    assert await _ask(resolver, monkeypatch, cq) == before.shape
    an = _claim(before.shape, signer)  # another query of the same shape: a coarser roll-up, say
    resolver.reach_ahead(an)
    await asyncio.wait_for(resolver.ahead.settle([cid_str(an.execution)], timeout=DEADLINE), DEADLINE)
    assert resolver.ahead.fetched == 1 and len(kubo.gets) == 2 and kubo.connects == [PROVIDER, PROVIDER]
    assert set(resolver.ahead.blocks(cid_str(an.execution))) == {bytes(an.receipt), bytes(an.execution)}
    await resolver.stop_pins()


async def test_a_trusted_claim_of_a_shape_we_never_asked_is_only_connected_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At N = 12 on one machine every node fetching every claim at once slowed the announcements 94 → 118 ms p50
    and the far answer 158 → 437 ms (docs/scaling.md): a claim over other data is not fetched; our Kubo is only
    connected to its providers, which spares the first answer that connection if it comes."""
    kubo = SlowKubo()
    kubo.release.set()
    resolver, signer = _resolver(tmp_path, kubo)
    asked = await _ask(resolver, monkeypatch, "SELECT k, SUM(x) FROM t GROUP BY k", logical="other data")
    assert asked is not None and asked != SHAPE
    since = asyncio.all_tasks()
    resolver.reach_ahead(_claim(SHAPE, signer))
    await background_done(since)
    assert kubo.connects == [PROVIDER] and kubo.gets == [] and resolver.ahead.fetched == 0
    since = asyncio.all_tasks()
    resolver.reach_ahead(_claim(SHAPE, signer, b"another"))  # its providers dialled lately: not again
    await background_done(since)
    assert kubo.connects == [PROVIDER] and kubo.gets == []
    await resolver.stop_pins()
