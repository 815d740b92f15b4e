"""Kubo's calls about the network: the swarm's peers and connections, the DHT's provider records."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from multiformats import CID

from node.adapters.ipfs.rpc_transport import KuboTransport
from node.domain.model.cid import parse_cid
from node.domain.ports.block_store import PeerInfo
from node.support.errors import KuboRPCError, KuboTimeout


class SwarmCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport

    async def connect(self, addr: str, *, timeout: float | None = None) -> None:
        await self._rpc.json_object("swarm/connect", [("arg", addr)], timeout=timeout)

    async def peers(self, *, timeout: float | None = None) -> list[PeerInfo]:
        obj = await self._rpc.json_object("swarm/peers", timeout=timeout)
        return [PeerInfo(id=p["Peer"], addrs=(p["Addr"],) if p.get("Addr") else ()) for p in obj.get("Peers") or ()]


class RoutingCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport
        self._provide_path: str | None = None  # learnt on first use: provide/once, else routing/provide

    async def provide(self, cid: CID | str, recursive: bool = False, *, timeout: float | None = None) -> int:
        """Announce ``cid`` to the DHT (queued: returns at once). Needs a connected peer.

        0.42 deprecates ``routing/provide`` for ``provide/once``; we use the latter and fall back to
        the former on a Kubo that lacks it (HTTP 404). Returns how many CIDs were queued (0 if unknown).
        """
        params = [("arg", parse_cid(cid)), ("recursive", recursive)]
        for path in [self._provide_path] if self._provide_path else ["provide/once", "routing/provide"]:
            try:
                lines = await self._rpc.json_lines(path, params, timeout=timeout)
            except KuboRPCError as e:
                if e.http_status == 404 and path == "provide/once":
                    continue
                raise
            self._provide_path = path
            return sum(1 for o in lines if isinstance(o, dict) and "Queued" in o)
        raise KuboRPCError("routing/provide", "no provide endpoint answered")

    async def iter_findprovs(
        self, cid: CID | str, num: int = 20, *, timeout: float | None = None
    ) -> AsyncGenerator[PeerInfo, None]:
        """Providers of ``cid`` as the DHT finds them (Kubo's event stream, Type 4 = provider)."""
        seen: set[str] = set()
        params = [("arg", parse_cid(cid)), ("num-providers", num)]
        limit = timeout if timeout is not None else self._rpc.timeout
        async for event in self._rpc.ndjson("routing/findprovs", params, timeout=limit):
            if event.get("Type") != 4:
                continue
            for r in event.get("Responses") or ():
                if r.get("ID") and r["ID"] not in seen:
                    seen.add(r["ID"])
                    yield PeerInfo(id=r["ID"], addrs=tuple(r.get("Addrs") or ()))

    async def findprovs(self, cid: CID | str, num: int = 20, *, timeout: float | None = None) -> list[PeerInfo]:
        """Up to ``num`` providers found within ``timeout`` (a timeout just ends the search)."""
        found: list[PeerInfo] = []
        try:
            async with aclosing(self.iter_findprovs(cid, num, timeout=timeout)) as peers:
                async for peer in peers:
                    found.append(peer)
                    if len(found) >= num:
                        break
        except KuboTimeout:
            pass
        return found
