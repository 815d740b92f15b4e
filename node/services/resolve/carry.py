"""A claim's small blocks: those an asker's checks (node/services/resolve/claim_checks.py) read, in the order they read
them.

Gathered by the signer's node to carry in a lookup answer (node/services/peers/own_claims.py, ``/cairn/lookup/1.1.0``),
and by
a node that hears a trusted signer's announcement to fetch them ahead of need (``FetchAhead``), so that an answer
from a far node, one no neighbour can carry, does not wait for bitswap round trips one link level at a time. Only
a node likely to use the claim fetches it ahead (``FetchAhead.likely``): one that asked queries of its shape lately.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from node.domain.model import (
    CID,
    Announcement,
    Execution,
    Receipt,
    RecursiveDataEnvelope,
    cid_str,
    decode,
    decode_object,
)
from node.domain.ports.block_store import BlockStore
from node.services.resolve.claim_checks import connect_providers
from node.support.errors import CairnError
from node.support.lru import Lru

log = logging.getLogger("cairn.resolve")

CARRY_CAP = 1024 * 1024  # carried bytes for one claim, whatever a setting says
CARRY_BLOCKS = 64  # carried blocks per claim
AHEAD_CLAIMS = 64  # claims whose blocks fetched ahead are kept (immutable: a CID names them)
AHEAD_TASKS = 4  # fetches ahead at once; beyond, a claim is fetched when asked, as before
AHEAD_TIMEOUT = 5.0  # seconds for any one block fetched ahead
# Seconds an answer waits for a fetch ahead of the same claim still under way, rather than fetch the same blocks a
# second time beside it (the bench asks as soon as the claim arrives: both fetches shared two cores).
AHEAD_SETTLE = 1.0
# Who fetches ahead. When every node that trusted the signer fetched each new claim, the 12
# nodes of a ring on 2 cores fetched at once at every announcement: propagation p50/p99 118/473 ms, to all 456 ms,
# the far answer 437 ms, against 94/182, 154 and 158 ms with the fetch ahead off (docs/scaling.md). Now a node
# fetches a claim ahead only if it asked a query of the claim's shape (its inputs' content and types: the
# announcement's ``shape``) among its last ``ASKED_SHAPES`` shapes: one that works on those data is the one likely
# to ask for the result. A claim naming no shape (ORDER BY, several inputs, a failure) says nothing of who will use
# it: one node in ``AHEAD_SHARE`` fetches it, chosen by a hash of its own key and the execution CID (the same nodes
# for every announcement of it, a different share for each claim). The others only connect their Kubo to the
# claim's providers (ClaimBook.reach_ahead), which is cheap and spares their first answer that connection.
ASKED_SHAPES = 256
AHEAD_SHARE = 4

Read = Callable[[CID], Awaitable[bytes | None]]


async def claim_blocks(
    read: Read,
    receipt: CID,
    execution: CID,
    budget: int,
    structure: CID | None = None,
    slices: list[CID] | None = None,
) -> list[tuple[CID, bytes]]:
    """Receipt, execution, structure, envelopes, link lists, then output slices while they fit in ``budget``
    bytes (at most ``CARRY_BLOCKS`` blocks). ``structure`` and ``slices`` default to what the receipt and the
    execution's output name. What ``read`` cannot give (None) is left out: the asker fetches it."""
    budget = max(0, min(budget, CARRY_CAP))
    if budget == 0:
        return []
    got: dict[bytes, bytes] = {}

    async def level(cids: list[CID]) -> list[Any]:
        async def one(cid: CID) -> None:
            if (data := await read(cid)) is not None:
                got[bytes(cid)] = data

        await asyncio.gather(*(one(c) for c in cids if bytes(c) not in got))
        return [_decoded(got.get(bytes(c)), c) for c in cids]

    rc, ex, *_ = await level([receipt, execution, *([structure] if structure else [])])
    if structure is None and isinstance(rc, Receipt):
        structure = rc.structure
        await level([structure])
    envs = [e for e in (ex.input, ex.output) if e is not None] if isinstance(ex, Execution) else []
    env_objs = await level(envs)
    lists = [e.content for e in env_objs if isinstance(e, RecursiveDataEnvelope)]
    contents = await level(lists)
    inner = [c for lst in contents if isinstance(lst, list) for c in lst if isinstance(c, CID)]
    inputs = [c for c in inner if c.codec.name == "dag-cbor"][:CARRY_BLOCKS]  # the inputs' slice lists
    await level(inputs)
    if slices is None:  # the output envelope's list: the result's slices
        last = env_objs[-1] if isinstance(ex, Execution) and ex.output is not None else None
        out_env = last if isinstance(last, RecursiveDataEnvelope) else None
        out_list = _decoded(got.get(bytes(out_env.content)), out_env.content) if out_env else None
        slices = [c for c in out_list if isinstance(c, CID)] if isinstance(out_list, list) else []
    out: list[tuple[CID, bytes]] = []
    small = [receipt, execution, *([structure] if structure else []), *envs, *lists, *inputs]
    for cid in dict.fromkeys(small):
        data = got.get(bytes(cid))
        if data is not None and len(data) <= budget and len(out) < CARRY_BLOCKS:
            out.append((cid, data))
            budget -= len(data)
    for cid in slices:  # in order, while they fit: a large result's are fetched
        await level([cid] if cid.codec.name == "raw" else [])
        data = got.get(bytes(cid))
        if data is None or len(data) > budget or len(out) >= CARRY_BLOCKS:
            break
        out.append((cid, data))
        budget -= len(data)
    return out


def _decoded(data: bytes | None, cid: CID) -> Any:
    """A block as an object, to find the links to follow next; None when it is not one we follow."""
    if data is None or cid.codec.name != "dag-cbor":
        return None
    try:
        value = decode(data, cid.codec.code)
        return value if isinstance(value, list) else decode_object(value)
    except CairnError:
        return None


class FetchAhead:
    """Blocks of trusted signers' new claims, fetched when the announcement arrives (gossip reaches every node;
    a lookup answer with blocks comes only from the signer's neighbours), by the nodes likely to use them
    (``likely``). Bounded: ``AHEAD_TASKS`` fetches at once, ``AHEAD_CLAIMS`` claims kept, ``budget`` bytes each,
    ``ASKED_SHAPES`` shapes remembered; the blocks are hash-checked by the Kubo client as they arrive and again, like
    carried ones, by the claim's checks when used. ``salt``: this node's key, which picks its share of the claims
    naming no shape."""

    def __init__(self, kubo: BlockStore, budget: int, salt: str = "") -> None:
        self.kubo, self.budget, self.salt = kubo, budget, salt
        self._kept: dict[str, Mapping[bytes, bytes]] = {}
        self._running: dict[str, asyncio.Task[None]] = {}  # execution CID → its fetch under way
        self._asked: Lru[bool] = Lru(ASKED_SHAPES)  # shapes of the queries this node asked lately
        self.fetched = 0  # claims whose blocks were fetched ahead (status, tests)

    def blocks(self, execution: str) -> Mapping[bytes, bytes]:
        return self._kept.get(execution, {})

    def asked(self, shape: str | None) -> None:
        """This node was asked a query of ``shape`` (``supersets.public_shape``; None: it has none)."""
        if shape is not None:
            self._asked.put(shape, True)

    def likely(self, an: Announcement) -> bool:
        """Whether this node is likely to use the claim: it asked a query of its shape lately; for a claim naming
        no shape, this node is in its share (one in ``AHEAD_SHARE``)."""
        if an.shape is not None:
            return self._asked.get(an.shape) is not None
        digest = hashlib.sha256(f"{self.salt}/{cid_str(an.execution)}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % AHEAD_SHARE == 0

    def wanted(self, an: Announcement, near: bool = False) -> bool:
        """Whether ``start`` would fetch this claim's blocks now: only when this node is ``likely`` to use it, and
        never when its signer's node is ``near`` (a connected peer): its lookup answer carries them, and fetching
        them too only competed with that answer for the CPU (the far answer at N = 3 went 28 → 68 ms,
        docs/scaling.md)."""
        key = cid_str(an.execution)
        return (
            not near
            and self.budget > 0
            and key not in self._kept
            and key not in self._running
            and len(self._running) < AHEAD_TASKS
            and self.likely(an)
        )

    def start(self, an: Announcement, near: bool = False) -> bool:
        """Fetch the claim's blocks in the background; False when it was not started (see ``wanted``)."""
        if not self.wanted(an, near):
            return False
        key = cid_str(an.execution)
        task = asyncio.ensure_future(self._fetch(an, key))
        self._running[key] = task
        task.add_done_callback(lambda _: self._running.pop(key, None))  # one fetch per key at a time
        return True

    async def settle(self, executions: list[str], timeout: float = AHEAD_SETTLE) -> None:
        """Wait (at most ``timeout`` s) for the fetches ahead of these claims still under way: an answer asked
        meanwhile takes their blocks instead of asking our Kubo for the same ones beside them."""
        tasks = {t for e in executions if (t := self._running.get(e)) is not None}
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def _fetch(self, an: Announcement, key: str) -> None:
        await connect_providers(self.kubo, an.providers)

        async def read(cid: CID) -> bytes | None:
            with contextlib.suppress(CairnError):
                return await self.kubo.block_get(cid, timeout=AHEAD_TIMEOUT)
            return None

        blocks = await claim_blocks(read, an.receipt, an.execution, self.budget)
        if blocks:
            self._kept[key] = {bytes(c): d for c, d in blocks}
            while len(self._kept) > AHEAD_CLAIMS:
                self._kept.pop(next(iter(self._kept)))
            self.fetched += 1
        log.debug("claim fetched ahead", extra={"execution": key, "blocks": len(blocks)})

    async def stop(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
