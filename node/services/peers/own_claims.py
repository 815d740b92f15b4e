"""Our own results as peers get them: signed announcements, the blocks a lookup answer carries, and the answers to
``/cairn/lookup/1.0.0``, ``/cairn/lookup/1.1.0`` and ``/cairn/have/1.0.0`` (docs/p2p.md).

What may go out and the cache keys are decided in node/services/peers/outbound_choices.py; this reads the index and our
Kubo and keeps what was signed, read and encoded: all immutable for a given key, so kept in small LRUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from config import PeerSettings
from node.adapters.index import ExecutionRow
from node.domain.model import CID, cid_str, encode, parse_cid
from node.domain.ports.block_store import BlockStore
from node.domain.ports.repositories import ExecutionRepository
from node.services.peers.outbound_choices import ProvidersCache, announceable, announcement_key, provider_addrs
from node.services.resolve import Resolver
from node.services.resolve.carry import claim_blocks
from node.support.errors import InvalidCID, KuboError
from node.support.lru import Lru

log = logging.getLogger("cairn.network")

CARRY_CACHE = 64  # executions whose carried blocks are kept ready to send (immutable: a CID names them)


class OwnClaims:
    def __init__(
        self,
        settings: PeerSettings,
        resolver: Resolver,
        results: ExecutionRepository,
        kubo: BlockStore,
        clock: Callable[[], float],
    ) -> None:
        """``clock``: seconds of a monotonic clock (how long our Kubo's addresses are reused)."""
        self.settings, self.resolver, self.results, self.kubo, self.clock = settings, resolver, results, kubo, clock
        self._providers = ProvidersCache()
        self._carry_cache: Lru[list[tuple[CID, bytes]]] = Lru(CARRY_CACHE)
        # Our signed an_0 per execution and providers: a lookup answer is the very announcement we gossiped, so an
        # asker that heard it checks its signature once (node/services/resolve/claim_checks.py keeps checked bytes), and
        # we sign
        # once.
        self._signed: Lru[bytes] = Lru(CARRY_CACHE)
        self._answers: Lru[tuple[bytes, list[tuple[CID, bytes]], bytes]] = Lru(CARRY_CACHE)  # 1.1.0 answers, encoded

    async def providers(self) -> list[str]:
        """Where our Kubo can be reached: what other nodes `swarm connect` to before fetching by CID. Reused for
        a while (``ProvidersCache``): a catch-up of 1000 rows, or a burst of lookups, asks Kubo once."""
        now = self.clock()
        if (addrs := self._providers.fresh(now)) is not None:
            return addrs
        addrs = await self._kubo_providers()
        self._providers.keep(now, addrs)
        return addrs

    async def _kubo_providers(self) -> list[str]:
        try:
            ident = await self.kubo.id(timeout=5.0)
        except KuboError as e:  # announce anyway: peers that already reach our Kubo still fetch
            log.info("announcing without providers: %s", e.message)
            return []
        return provider_addrs(ident.id, ident.addresses)

    async def announcement(self, row: ExecutionRow, providers: list[str] | None = None) -> bytes:
        """Our signed an_0 for ``row`` (naming ``providers``, else our Kubo's addresses now)."""
        providers = await self.providers() if providers is None else providers
        key = announcement_key(row, providers)
        if (data := self._signed.get(key)) is None:
            data = self.resolver.announcement(row, providers).block().data
            self._signed.put(key, data)
        return data

    async def carry(self, row: ExecutionRow) -> list[tuple[CID, bytes]]:
        """The claim's blocks an asker's checks read (node/services/resolve/carry.py), within
        ``peers.lookup_carry_bytes``.
        Read offline from our Kubo; what cannot be read is not carried (the asker fetches it)."""
        if (hit := self._carry_cache.get(row.execution)) is not None:
            return hit

        async def read(cid: CID) -> bytes | None:
            with contextlib.suppress(KuboError):
                return await self.kubo.block_get(cid, timeout=5.0, offline=True)
            return None

        slices = [parse_cid(s) for s in row.slices]
        out = await claim_blocks(
            read,
            parse_cid(row.receipt),
            parse_cid(row.execution),
            self.settings.lookup_carry_bytes,
            parse_cid(row.structure),
            slices,
        )
        self._carry_cache.put(row.execution, out)
        return out

    def _requested(self, peer: str, request: bytes) -> ExecutionRow | None:
        """The row of a lookup's invocation, if ours to announce. A malformed request gets an empty answer, as
        for an unknown invocation."""
        try:
            invocation = parse_cid(request)
        except InvalidCID as e:
            log.debug("unreadable lookup request", extra={"peer": peer, "error": e.message})
            return None
        row = self.results.execution(cid_str(invocation))
        return row if row and announceable(row) else None

    async def on_lookup(self, peer: str, request: bytes) -> bytes:
        """``/cairn/lookup/1.0.0``: our announcement of the requested invocation, if we hold one."""
        row = self._requested(peer, request)
        return encode([await self.announcement(row)] if row else [])

    async def on_lookup_carrying(self, peer: str, request: bytes) -> bytes:
        """``/cairn/lookup/1.1.0``: as 1.0.0, each announcement with its claim's small blocks (docs/p2p.md)."""
        row = self._requested(peer, request)
        if not row:
            return encode([])
        an, blocks = await asyncio.gather(self.announcement(row), self.carry(row))
        hit = self._answers.get(row.execution)
        if hit is not None and hit[0] == an and hit[1] is blocks:  # the same signed an_0, the same carried list
            return hit[2]
        answer = encode([{"an": an, "blocks": [[c, d] for c, d in blocks]}])
        self._answers.put(row.execution, (an, blocks, answer))
        return answer

    async def on_have(self, peer: str, request: bytes) -> bytes:
        """Our Kubo's addresses if it holds the block (checked offline: never fetched for a peer), else []."""
        try:
            cid = parse_cid(request)
            await self.kubo.block_stat(cid, timeout=5.0, offline=True)
        except (InvalidCID, KuboError):  # unreadable, or not held here: the same empty answer
            return encode([])
        return encode(await self.providers())
