"""Fetching a trusted claim's blocks ahead of need (node/resolve/carry.py ``FetchAhead``), without IO: never for a
claim whose signer's node is a neighbour (its lookup answer carries the blocks), one fetch per claim at a time, and
an answer asked while the fetch is under way waits for it (``settle``) instead of fetching the same blocks beside
it (issue 21 item 5, docs/scaling.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from node.model import CID, Announcement, cid_for, cid_str
from node.resolve.carry import FetchAhead

RECEIPT, EXECUTION = b"receipt block", b"execution block"


class SlowKubo:
    """Answers block gets once ``release`` is set; counts them."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.gets: list[CID] = []
        self.blocks = {bytes(cid_for(d, "raw")): d for d in (RECEIPT, EXECUTION)}

    async def swarm_connect(self, addr: str, timeout: float | None = None) -> None:
        return None

    async def block_get(self, cid: CID, timeout: float | None = None, **_: Any) -> bytes:
        self.gets.append(cid)
        await self.release.wait()
        return self.blocks[bytes(cid)]


def _claim() -> Announcement:
    return Announcement(
        cid_for(b"invocation", "raw"),
        cid_for(EXECUTION, "raw"),
        cid_for(RECEIPT, "raw"),
        "f00",
        1,
        {"name": "spark"},
        ("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWA",),
        "did:key:z6Mk",
        "2026-11-28T00:00:00Z",
    )


async def test_a_neighbours_claim_is_not_fetched_ahead() -> None:
    kubo = SlowKubo()
    ahead = FetchAhead(kubo, 4096)  # type: ignore[arg-type]  # the two calls FetchAhead makes
    an = _claim()
    assert not ahead.wanted(an, near=True) and not ahead.start(an, near=True)
    await asyncio.sleep(0)
    assert kubo.gets == [] and ahead.fetched == 0


async def test_an_answer_waits_for_the_fetch_under_way_and_takes_its_blocks() -> None:
    kubo = SlowKubo()
    ahead = FetchAhead(kubo, 4096)  # type: ignore[arg-type]
    an = _claim()
    key = cid_str(an.execution)
    assert ahead.start(an)
    assert not ahead.wanted(an) and not ahead.start(an)  # one fetch per claim at a time
    waiting = asyncio.ensure_future(ahead.settle([key, "bafyother"]))
    await asyncio.sleep(0.01)
    assert not waiting.done() and ahead.blocks(key) == {}  # the answer waits rather than fetch beside it
    kubo.release.set()
    await asyncio.wait_for(waiting, 1.0)
    assert ahead.blocks(key) == {bytes(an.receipt): RECEIPT, bytes(an.execution): EXECUTION}
    assert len(kubo.gets) == 2 and ahead.fetched == 1
    assert not ahead.wanted(an)  # kept: not fetched again
    await ahead.settle([key])  # nothing under way: returns at once


async def test_settle_is_bounded() -> None:
    kubo = SlowKubo()
    ahead = FetchAhead(kubo, 4096)  # type: ignore[arg-type]
    an = _claim()
    assert ahead.start(an)
    await asyncio.wait_for(ahead.settle([cid_str(an.execution)], timeout=0.05), 1.0)  # gives up, fetch goes on
    assert ahead.blocks(cid_str(an.execution)) == {}
    await ahead.stop()
