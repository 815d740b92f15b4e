"""The node on the peer-to-peer network: announcements (gossipsub), lookups, catch-up, over the p2p host.

Protocols (docs/p2p.md):
- gossip topic ``/cairn/executions/1``: one signed ``an_0`` block per message;
- ``/cairn/lookup/1.0.0``: request = the binary invocation CID, answer = DAG-CBOR list of ``an_0`` blocks;
- ``/cairn/lookup/1.1.0``: the same request; answer = DAG-CBOR list of ``{"an": an_0 block, "blocks": [[CID,
  bytes], …]}``: each announcement with its claim's small blocks (receipt, execution, envelopes, link lists,
  structure, small output slices; ``peers.lookup_carry_bytes``), so that the asker checks it without a fetch.
  Asked first; a peer that does not speak it is asked 1.0.0.
- ``/cairn/catchup/1.0.0``: sent to a peer when it connects: DAG-CBOR list of ``an_0`` blocks for results
  we already held, since gossip never replays old messages.
- ``/cairn/have/1.0.0``: request = a binary CID; answer = DAG-CBOR list of our Kubo's multiaddrs if our Kubo
  holds that block, else an empty list: how a pull by CID finds whose Kubo to connect to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from config import PeerSettings
from node.adapters.identity import Identity
from node.adapters.index import ExecutionRow, Index
from node.domain.model import CID, cid_str, encode
from node.domain.ports.block_store import BlockStore
from node.domain.ports.peer_host import PeerHost
from node.services.peers.admission import Admission, Replays
from node.services.peers.claim_intake import CATCHUP_LIMIT, REFUSAL_KINDS, Carried, ClaimIntake, intake_limits
from node.services.peers.claim_receiver import ClaimReceiver
from node.services.peers.host_setup import libp2p_host
from node.services.peers.outbound_choices import announceable, catch_up_rows, have_addrs, not_cairn, sort_answers
from node.services.peers.own_claims import OwnClaims
from node.services.resolve import Resolver
from node.support.errors import ConfigError, NotCairnPeer, peer_failure
from p2p.errors import P2PError, P2PTimeout

log = logging.getLogger("cairn.network")

TOPIC = "/cairn/executions/1"
LOOKUP = "/cairn/lookup/1.0.0"
LOOKUP_CARRYING = "/cairn/lookup/1.1.0"  # answers carry the claims' small blocks (docs/p2p.md)
CATCHUP = "/cairn/catchup/1.0.0"
HAVE = "/cairn/have/1.0.0"
CATCHUP_TIMEOUT = 10.0  # seconds for the peer to check and store a catch-up (1000 items: ~10 s under load)
PROBE_TIMEOUT = 5.0  # seconds `connect` waits for the new peer to answer an empty lookup


class Network:
    """The IO loop of the peer protocol: the host's events and requests handed to the parts that decide
    (``ClaimIntake``, node/services/peers/outbound_choices.py) and to those that do the node's side of the IO
    (``ClaimReceiver`` for what peers send, ``OwnClaims`` for what we sign and serve)."""

    def __init__(
        self,
        settings: PeerSettings,
        identity: Identity,
        resolver: Resolver,
        index: Index,
        kubo: BlockStore,
        peerstore: Any,
        host: PeerHost | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``host``: the transport (None: a libp2p host made from ``settings``; ``p2p.memory.MemoryHost`` runs the
        node on an in-memory network). ``clock``: seconds of a monotonic clock, for quotas and caches."""
        self.settings, self.identity, self.resolver, self.index, self.kubo = settings, identity, resolver, index, kubo
        self.host: PeerHost = host if host is not None else libp2p_host(settings, identity, peerstore)
        self._tasks: set[asyncio.Task[Any]] = set()
        admission = Admission(intake_limits(settings), replays=Replays(stored=index.peer_claims.signer_mark))
        self.intake = ClaimIntake(admission)
        self.receiver = ClaimReceiver(
            settings, self.intake, resolver, index.peer_claims, self.host.connected_peers, clock
        )
        self.own = OwnClaims(settings, resolver, index.results, kubo, clock)

    # What the node's metrics and tests read of the intake.
    @property
    def admission(self) -> Admission:
        return self.intake.admission

    @property
    def received(self) -> int:
        return self.intake.received

    @property
    def refused(self) -> int:
        return self.intake.refused

    @property
    def accepted(self) -> int:
        return self.intake.accepted

    @property
    def pruned(self) -> int:
        return self.intake.pruned

    @property
    def refusals(self) -> Counter[str]:
        return self.intake.refusals

    async def start(self) -> None:
        self.host.subscribe_relayed(TOPIC, self.receiver.on_gossip)
        self.host.set_handler(LOOKUP, self.own.on_lookup)
        self.host.set_handler(LOOKUP_CARRYING, self.own.on_lookup_carrying)
        self.host.set_handler(CATCHUP, self.receiver.on_catchup)
        self.host.set_handler(HAVE, self.own.on_have)
        # Lookups are idempotent reads: sent on a stream kept per peer, not a new one each.
        self.host.reuse_streams(LOOKUP_CARRYING, LOOKUP, HAVE)
        self.host.on_peer_connected(self._on_connected)
        try:
            await self.host.start()
        except P2PError as e:  # cannot listen where peers.listen says: the node's own config
            raise ConfigError(f"p2p host: {e}") from None
        self.resolver.link.attach(self)  # the resolver asks, tells and strikes through us from now on

    async def stop(self) -> None:
        self.resolver.link.attach(None)
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.host.stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def counters(self) -> dict[str, int]:
        """Refused inbound input by kind, including gossip frames the host refused (metrics: cairn_peer_refused)."""
        return {**{k: self.intake.refusals[k] for k in REFUSAL_KINDS}, "gossip-frame": self.host.inbound_refused}

    def claim_refused(self, peer: str, reason: str) -> None:
        """A claim from ``peer`` failed a check when used (``ClaimReceiver.claim_refused``)."""
        self.receiver.claim_refused(peer, reason)

    # -- outgoing ---------------------------------------------------------------------------------

    async def announce(self, row: ExecutionRow) -> None:
        if not announceable(row):  # e.g. an answer derived from a peer's result: never signed for here
            return
        if self.settings.lookup_carry_bytes > 0:
            self._spawn(self.own.carry(row))  # ready before the first lookup for it: a peer hit waits on no read
        try:
            await self.host.publish(TOPIC, await self.own.announcement(row))
        except P2PError as e:
            log.warning("announcement not sent", extra={"invocation": row.invocation, "error": str(e)})

    async def connect(self, addr: str) -> str:
        """Dial a peer and keep it only if it speaks Cairn's lookup protocol (otherwise a Kubo swarm address
        "connected", was kept in peers.json and failed at every start). The probe is an empty lookup, which
        every Cairn node answers with an empty list."""
        try:
            peer = await self.host.connect(addr)
            await self.host.request(peer, LOOKUP, b"", timeout=PROBE_TIMEOUT)
        except P2PError as e:
            peer = addr.rsplit("/p2p/", 1)[-1]
            if not_cairn(e):
                await self.host.forget(peer)
                raise NotCairnPeer(
                    f"{addr} is a libp2p peer that does not speak Cairn's protocols (a Kubo swarm address?): "
                    "not kept; use the `connect` address of the other node's `cairn status`"
                ) from None
            raise peer_failure(e) from None
        return peer

    async def lookup(self, invocation: CID) -> dict[str, list[bytes]]:
        """Ask every connected peer at once (``/cairn/lookup/1.0.0``); what arrived by the deadline."""
        got, _ = await self._ask(LOOKUP, invocation, None)
        return {p: [d for d, _ in items] for p, items in got.items()}

    async def lookup_carrying(self, invocation: CID) -> dict[str, list[Carried]]:
        """Ask every connected peer at once, ``/cairn/lookup/1.1.0`` first: each announcement with the blocks
        its answer carried (hash-checked here). Peers that do not speak 1.1.0 are asked 1.0.0 next."""
        out, old = await self._ask(LOOKUP_CARRYING, invocation, None)
        if old:
            out.update((await self._ask(LOOKUP, invocation, old))[0])
        return out

    async def _ask(
        self, protocol: str, invocation: CID, peers: list[str] | None
    ) -> tuple[dict[str, list[Carried]], list[str]]:
        """One lookup round over ``protocol``: the answers, and the peers that do not speak it."""
        if not self.host.connected_peers():
            return {}, []
        timeout = self.settings.lookup_timeout
        try:
            answers = await self.host.ask_all(protocol, bytes(invocation), timeout, peers=peers)
        except P2PError as e:  # a lookup is best effort: without answers the node computes (docs/peers.md)
            log.warning("lookup failed", extra={"invocation": cid_str(invocation), "error": str(e)})
            return {}, []
        got, old = sort_answers(answers)
        carrying = protocol == LOOKUP_CARRYING
        return {peer: self.receiver.lookup_answer(peer, answer, carrying) for peer, answer in got.items()}, old

    async def holders(self, cid: CID) -> dict[str, list[str]]:
        """The connected peers whose Kubo holds ``cid``, with their Kubo's addresses (``/cairn/have``), by
        ``peers.lookup_timeout``: whom to `swarm connect` before asking our Kubo for the blocks."""
        if not self.host.connected_peers():
            return {}
        try:
            answers = await self.host.ask_all(HAVE, bytes(cid), self.settings.lookup_timeout)
        except P2PError as e:  # best effort, as a lookup: the caller says nobody had it
            log.warning("have lookup failed", extra={"cid": cid_str(cid), "error": str(e)})
            return {}
        return {peer: addrs for peer, answer in answers.items() if (addrs := have_addrs(answer))}

    # -- catch-up sent to a peer that connects ------------------------------------------------------

    def _on_connected(self, peer: str) -> None:
        self._spawn(self._catch_up(peer))

    async def _send_catch_up(self, peer: str, data: bytes) -> None:
        """One catch-up, tried twice: a stream opened while a peer reconnects may land on its old connection,
        which is closing and never answers (seen as "no answer within 10 s" at reconnects)."""
        try:
            await self.host.send_direct(peer, CATCHUP, data, timeout=CATCHUP_TIMEOUT)
        except P2PTimeout:
            await self.host.send_direct(peer, CATCHUP, data, timeout=CATCHUP_TIMEOUT)

    async def _catch_up(self, peer: str) -> None:
        rows = catch_up_rows(self.index.results.executions(limit=CATCHUP_LIMIT))
        try:
            if rows:
                providers = await self.own.providers()  # one Kubo RPC for the whole catch-up
                items = [await self.own.announcement(r, providers) for r in rows]
                await self._send_catch_up(peer, encode(items))
            else:  # nothing to send: still find out whether the peer is a Cairn node at all (an empty lookup)
                await self.host.request(peer, LOOKUP, b"", timeout=PROBE_TIMEOUT)
        except P2PError as e:
            if not_cairn(e):  # remembered from before connect checked it, or dialled us: not a Cairn node
                # Not remembered (so not re-dialled and warned about at every start), but not cut off either:
                # a bare libp2p host may still gossip to us, and the gossip checks judge what it sends.
                log.info("peer does not speak Cairn's protocols: not remembered", extra={"peer": peer})
                await self.host.forget(peer, disconnect=False)
                return
            log.info("catch-up not delivered", extra={"peer": peer, "error": str(e)})
