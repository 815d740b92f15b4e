"""Work owed behind answers: blocks to put, pins, provides (docs/peers.md "Answer first").

What keeping an answer takes is written to the index before the answer goes out (one transaction: a crash loses
none, the next start does it), then done in the background: the blocks put right after the answer (reads of our
Kubo wait for that put: ``KuboClient.write_behind``), the pins once no miss is in flight (``quiet``), so that a
burst of answers is not slowed by the pins of the ones before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from node.adapters.ipfs import KuboClient
from node.domain.model import CID, cid_str, parse_cid
from node.domain.ports.repositories import PinRepository
from node.support.errors import CairnError

log = logging.getLogger("cairn.resolve")
PIN_RETRY = 10.0  # seconds before owed pins that failed are tried again
PIN_DELAY = 0.2  # seconds between an answer and the pins it queued
BLOCKS_DELAY = 0.01  # seconds between an answer and the put of the blocks it owed (reads of Kubo wait for it)
Pin = tuple[str, bool, bool]  # (CID, recursive, provide once pinned)


class Owed:
    """The queue of owed work (kept in the index) and the background tasks that drain it, cancelled at ``stop``
    (what they owed stays in the index)."""

    def __init__(
        self, kubo: KuboClient, pins: PinRepository, quiet: Callable[[], Awaitable[None]], fetch_timeout: float
    ) -> None:
        self.kubo, self.pins, self.quiet, self.fetch_timeout = kubo, pins, quiet, fetch_timeout
        self._pinner: asyncio.Future[None] | None = None  # drains the owed pins (pins.pending_pins)
        self._tasks: set[asyncio.Future[Any]] = set()  # after answering: connects to providers, block puts

    def owe(self, pins: Sequence[Pin], blocks: Sequence[tuple[CID, bytes]] = ()) -> None:
        """Queue ``pins`` and the ``blocks`` to put (one transaction), and put the blocks right after the answer
        that owes them."""
        self.pins.queue_pins(list(pins), [(cid_str(c), d) for c, d in blocks])
        if blocks:
            self.keep_task(self.kubo.write_behind(self.put_owed_blocks(BLOCKS_DELAY)))

    async def put_blocks(self, blocks: Sequence[tuple[CID, bytes]]) -> None:
        """Blocks into our Kubo: one call per codec, the calls at once."""
        by_codec: dict[str, dict[bytes, bytes]] = {}
        for cid, data in blocks:  # once each: a self-join names one structure twice
            by_codec.setdefault(cid.codec.name, {})[bytes(cid)] = data
        await asyncio.gather(*(self.kubo.block_put_many(list(d.values()), codec=c) for c, d in by_codec.items()))

    async def put_owed_blocks(self, delay: float = 0.0) -> None:
        """Put the blocks owed to our Kubo; those put leave the queue. A failed put (Kubo down or restarting)
        leaves them owed: tried again before the next pins (``_drain_pins``) and at start. ``delay``: the answer
        that owed them goes out first (its rows are read from the slice cache, not Kubo)."""
        await asyncio.sleep(delay)
        owed = self.pins.pending_blocks()
        if not owed:
            return
        try:
            await self.put_blocks([(parse_cid(c), d) for c, d in owed])
        except CairnError as e:
            log.warning("owed blocks not put: tried again", extra={"blocks": len(owed), "reason": e.message})
            return
        self.pins.blocks_done([c for c, _ in owed])

    def keep_task(self, task: asyncio.Future[Any]) -> None:
        """A task behind an answer: cancelled at ``stop``."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def drain_pins(self) -> None:
        """Start the background pinning of what the index says is owed, unless it runs (also at node start)."""
        if self._pinner is None or self._pinner.done():
            self._pinner = asyncio.ensure_future(self._drain_pins())

    async def stop(self) -> None:
        for task in [self._pinner, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in [self._pinner, *self._tasks] if t is not None), return_exceptions=True)

    async def _drain_pins(self) -> None:
        """Pin, then provide, each owed CID, oldest first; each leaves the queue only once pinned. A pin that
        fails (Kubo down or restarting) is tried again after ``PIN_RETRY``. Started after ``PIN_DELAY``: the
        answer that queued them goes out first, its Kubo calls not queued behind the pins; then once misses are
        quiet."""
        await asyncio.sleep(PIN_DELAY)
        await self.quiet()
        while owed := self.pins.pending_pins():
            await self.put_owed_blocks()  # before the pins (a pin of a block not here would fetch it); at start too
            failed = False
            for cid, recursive, provide in owed:
                try:
                    await self.kubo.pin_add(cid, recursive=recursive, timeout=self.fetch_timeout)
                except CairnError as e:
                    log.warning("owed pin failed: tried again", extra={"cid": cid, "reason": e.message})
                    failed = True
                    continue
                if provide:
                    await self.provide([parse_cid(cid)])
                self.pins.pin_done(cid, recursive)
            if failed:
                await asyncio.sleep(PIN_RETRY)

    async def provide(self, cids: list[CID]) -> None:
        """Announce on the IPFS DHT; with no peers Kubo refuses at once, which is not an error for us."""
        for cid in cids:
            try:
                await self.kubo.routing_provide(cid, timeout=5.0)
            except CairnError as e:
                log.debug("provide skipped", extra={"cid": cid_str(cid), "reason": e.message})
                return
