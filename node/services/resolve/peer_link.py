"""The peer network as the resolver sees it: asked for claims, told of results and of refused claims.

The resolver is built before the network (which needs it to record claims and sign announcements), and a node may
run without peers: the network attaches itself here when its host runs and detaches when it stops. Until then,
nothing is asked and nothing is told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

from node.adapters.index import ExecutionRow
from node.domain.model import CID

# Per peer, its answer's announcements, each with the blocks it carried (CID bytes → hash-checked bytes).
LookupAnswers = Mapping[str, Sequence[tuple[bytes, Mapping[bytes, bytes]]]]


class PeerNetwork(Protocol):
    """What the resolver asks of the running peer network (node.services.peers.Network)."""

    async def lookup_carrying(self, invocation: CID) -> LookupAnswers:
        """Ask every connected peer for its claims of ``invocation``, with the blocks that check them."""
        ...

    async def announce(self, row: ExecutionRow) -> None:
        """Tell peers of a result held here."""
        ...

    def claim_refused(self, peer: str, reason: str) -> None:
        """A claim ``peer`` brought failed a check when used."""
        ...


class PeerLink:
    def __init__(self) -> None:
        self.network: PeerNetwork | None = None

    def attach(self, network: PeerNetwork | None) -> None:
        """The network once its host runs; None once it stops."""
        self.network = network

    def ask(self, invocation: CID) -> asyncio.Future[LookupAnswers] | None:
        """Start the lookup of ``invocation`` among connected peers (None without a running network)."""
        if self.network is None:
            return None
        return asyncio.ensure_future(self.network.lookup_carrying(invocation))

    async def published(self, row: ExecutionRow) -> None:
        if self.network is not None:
            await self.network.announce(row)

    def refused(self, peer: str, reason: str) -> None:
        if self.network is not None:
            self.network.claim_refused(peer, reason)
