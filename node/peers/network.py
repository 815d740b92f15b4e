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
import contextlib
import datetime as dt
import hashlib
import logging
import time
from collections import Counter
from typing import Any

from config import PeerSettings
from node.errors import (
    ClaimRefused,
    ConfigError,
    EncodingError,
    InvalidCID,
    KuboError,
    NotCairnPeer,
    peer_failure,
)
from node.identity import Identity
from node.index import ExecutionRow, Index
from node.lru import Lru
from node.model import (
    CID,
    Announcement,
    cid_for,
    cid_str,
    decode,
    encode,
    parse_cid,
)
from node.peers.limits import Admission, Limits, Replays
from node.ports.block_store import BlockStore
from node.ports.peer_host import PeerHost
from node.resolve import Resolver
from node.resolve.carry import CARRY_BLOCKS, CARRY_CAP, claim_blocks
from node.resolve.claims import MAX_PROVIDERS, UNREACHABLE, check_announcement, provider_ok
from node.resolve.resolver import VERIFIED_LABELS
from p2p.addrs import reachability_order
from p2p.host import HostLimits, P2PError, P2PHost, P2PTimeout
from p2p.memory import MemoryHost

log = logging.getLogger("cairn.network")

TOPIC = "/cairn/executions/1"
LOOKUP = "/cairn/lookup/1.0.0"
LOOKUP_CARRYING = "/cairn/lookup/1.1.0"  # answers carry the claims' small blocks (docs/p2p.md)
CARRY_CACHE = 64  # executions whose carried blocks are kept ready to send (immutable: a CID names them)
CATCHUP = "/cairn/catchup/1.0.0"
HAVE = "/cairn/have/1.0.0"
CATCHUP_LIMIT = 1000  # announcements per catch-up, sent or read
# What inbound peer input is refused for (docs/peers.md "Floods and quotas"); "gossip-frame" is the host's count.
REFUSAL_KINDS = ("malformed", "signature", "providers", "limit", "ignored", "replay", "claim")
CATCHUP_MAX_BYTES = 2 * 1024 * 1024  # 1000 announcements take ~0.4 MB
CHECK_BATCH = 100  # catch-up items decoded and checked per thread hop
LOOKUP_ITEMS = 8  # announcements read from one peer's lookup answer
CATCHUP_TIMEOUT = 10.0  # seconds for the peer to check and store a catch-up (1000 items: ~10 s under load)
PROBE_TIMEOUT = 5.0  # seconds `connect` waits for the new peer to answer an empty lookup
PROVIDERS_TTL = 30.0  # seconds our Kubo's addresses are reused: one `id` RPC per catch-up burst, not one per row


def _ours(row: ExecutionRow) -> bool:
    """Only what was computed here (or recomputed here and agreed) goes out under our signature: signing a
    peer's unchecked answer would launder it into a trusted one for whoever trusts us (docs/peers.md)."""
    return row.trust in VERIFIED_LABELS


class Network:
    def __init__(
        self,
        settings: PeerSettings,
        identity: Identity,
        resolver: Resolver,
        index: Index,
        kubo: BlockStore,
        peerstore: Any,
        host: PeerHost | None = None,
    ) -> None:
        """``host``: the transport (None: a libp2p host made from ``settings``; ``p2p.memory.MemoryHost`` runs the
        node on an in-memory network)."""
        self.settings, self.identity, self.resolver, self.index, self.kubo = settings, identity, resolver, index, kubo
        self.host: PeerHost = host if host is not None else _libp2p_host(settings, identity, peerstore)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.admission = Admission(_limits(settings), replays=Replays(stored=index.signer_mark))
        self._providers_cache: tuple[float, list[str]] | None = None
        self._carry_cache: Lru[list[tuple[CID, bytes]]] = Lru(CARRY_CACHE)
        # Our signed an_0 per execution and providers: a lookup answer is the very announcement we gossiped, so an
        # asker that heard it checks its signature once (node/resolve/claims.py keeps checked bytes), and we sign
        # once.
        self._signed: Lru[bytes] = Lru(CARRY_CACHE)
        self._answers: Lru[tuple[bytes, list[tuple[CID, bytes]], bytes]] = Lru(CARRY_CACHE)  # 1.1.0 answers, encoded
        self.received = 0
        self.refused = 0
        self.accepted = 0  # announcements checked and stored (metrics: cairn_announcements_total)
        self.refusals: Counter[str] = Counter()  # by kind (docs/peers.md "Floods and quotas"); metrics read it
        self.pruned = 0

    async def start(self) -> None:
        self.host.subscribe_relayed(TOPIC, self._on_gossip)
        self.host.set_handler(LOOKUP, self._on_lookup)
        self.host.set_handler(LOOKUP_CARRYING, self._on_lookup_carrying)
        self.host.set_handler(CATCHUP, self._on_catchup)
        self.host.set_handler(HAVE, self._on_have)
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

    # -- outgoing ---------------------------------------------------------------------------------

    async def _providers(self) -> list[str]:
        """Where our Kubo can be reached: what other nodes `swarm connect` to before fetching by CID. Reused for
        ``PROVIDERS_TTL``: a catch-up of 1000 rows, or a burst of lookups, asks Kubo once."""
        now = time.monotonic()
        if self._providers_cache is not None and now - self._providers_cache[0] < PROVIDERS_TTL:
            return self._providers_cache[1]
        addrs = await self._kubo_providers()
        self._providers_cache = (now, addrs)
        return addrs

    async def _kubo_providers(self) -> list[str]:
        try:
            ident = await self.kubo.id(timeout=5.0)
        except KuboError as e:  # announce anyway: peers that already reach our Kubo still fetch
            log.info("announcing without providers: %s", e.message)
            return []
        addrs = reachability_order([a if "/p2p/" in a else f"{a}/p2p/{ident.id}" for a in ident.addresses])
        return addrs[:MAX_PROVIDERS]  # peers refuse announcements naming more (node/resolve/claims.py)

    async def _announcement(self, row: ExecutionRow, providers: list[str] | None = None) -> bytes:
        providers = await self._providers() if providers is None else providers
        key = "\n".join([row.invocation, row.execution, row.receipt, row.logical_hash, str(row.rows), *providers])
        key += f"\n{row.profile}"
        if (data := self._signed.get(key)) is None:
            data = self.resolver.announcement(row, providers).block().data
            self._signed.put(key, data)
        return data

    async def announce(self, row: ExecutionRow) -> None:
        if not _ours(row):  # e.g. an answer derived from a peer's result: never signed for here
            return
        if self.settings.lookup_carry_bytes > 0:
            self._spawn(self._carry(row))  # ready before the first lookup for it: a peer hit waits on no block read
        try:
            await self.host.publish(TOPIC, await self._announcement(row))
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
            if _not_cairn(e):
                await self.host.forget(peer)
                raise NotCairnPeer(
                    f"{addr} is a libp2p peer that does not speak Cairn's protocols (a Kubo swarm address?): "
                    "not kept; use the `connect` address of the other node's `cairn status`"
                ) from None
            raise peer_failure(e) from None
        return peer

    async def lookup(self, invocation: CID) -> dict[str, list[bytes]]:
        """Ask every connected peer at once (``/cairn/lookup/1.0.0``); what arrived by the deadline."""
        got = await self._ask(LOOKUP, invocation, None)
        return {p: [d for d, _ in items] for p, items in got.items()}

    async def lookup_carrying(self, invocation: CID) -> dict[str, list[tuple[bytes, dict[bytes, bytes]]]]:
        """Ask every connected peer at once, ``/cairn/lookup/1.1.0`` first: each announcement with the blocks
        its answer carried (hash-checked here). Peers that do not speak 1.1.0 are asked 1.0.0 next."""
        old: list[str] = []
        out = await self._ask(LOOKUP_CARRYING, invocation, None, old)
        if old:
            out.update(await self._ask(LOOKUP, invocation, old))
        return out

    async def _ask(
        self, protocol: str, invocation: CID, peers: list[str] | None, old: list[str] | None = None
    ) -> dict[str, list[tuple[bytes, dict[bytes, bytes]]]]:
        """One lookup round over ``protocol``; the peers that do not speak it are added to ``old``."""
        if not self.host.connected_peers():
            return {}
        timeout = self.settings.lookup_timeout
        try:
            answers = await self.host.ask_all(protocol, bytes(invocation), timeout, peers=peers)
        except P2PError as e:  # a lookup is best effort: without answers the node computes (docs/peers.md)
            log.warning("lookup failed", extra={"invocation": cid_str(invocation), "error": str(e)})
            return {}
        out: dict[str, list[tuple[bytes, dict[bytes, bytes]]]] = {}
        for peer, answer in answers.items():
            if not isinstance(answer, Exception):
                out[peer] = self._lookup_answer(peer, answer, carrying=protocol == LOOKUP_CARRYING)
            elif old is not None and isinstance(answer, P2PError) and _not_cairn(answer):
                old.append(peer)
        return out

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
        out: dict[str, list[str]] = {}
        for peer, answer in answers.items():
            try:
                items = decode(answer) if isinstance(answer, bytes) else []
            except EncodingError:
                continue
            addrs = [a for a in items if provider_ok(a)][:MAX_PROVIDERS] if isinstance(items, list) else []
            if addrs:
                out[peer] = addrs
        return out

    def _lookup_answer(
        self, peer: str, answer: bytes, carrying: bool = False
    ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """The announcements of one peer's answer that may be looked at: at most ``LOOKUP_ITEMS`` (a peer can sign
        for one execution per invocation; more is a flood), none from an ignored peer, within the bound on new
        keys; each with the blocks it carried (``carrying``: 1.1.0). The resolver checks and records them
        (node/resolve/peer_answers.py)."""
        now = time.monotonic()
        if reason := self.admission.ignored(peer, now):
            self._refuse(peer, "ignored", reason, strike=False)
            return []
        try:
            items = decode(answer)
        except EncodingError as e:
            self._refuse(peer, "malformed", f"unreadable lookup answer: {e.message}", strike=True)
            return []
        if not isinstance(items, list):
            self._refuse(peer, "malformed", "lookup answer is not a list of announcements", strike=True)
            return []
        if len(items) > LOOKUP_ITEMS:
            self._refuse(peer, "limit", f"limit: lookup answer of {len(items)} items, over {LOOKUP_ITEMS}", False)
        pairs = self._carried_items(peer, items[:LOOKUP_ITEMS]) if carrying else [(d, {}) for d in items[:LOOKUP_ITEMS]]
        kept: list[tuple[bytes, dict[bytes, bytes]]] = []
        for data, carried in pairs:
            if not isinstance(data, bytes):
                continue
            try:  # the signer it names, to bound minted keys; the resolver checks the whole announcement
                signer = check_announcement(data).signer
            except ClaimRefused:
                kept.append((data, {}))  # refused, logged and counted by the resolver
                continue
            if reason := self.admission.admit(peer, signer, now, bulk=True):
                self._refuse(peer, _limit_kind(reason), reason, strike=False)
                continue
            kept.append((data, carried))
        self.pruned += self.index.prune_claims(peer, self.settings.max_claims_per_peer, self.settings.max_claims)
        return kept

    def _carried_items(self, peer: str, items: list[Any]) -> list[tuple[Any, dict[bytes, bytes]]]:
        """1.1.0 items as (announcement, carried blocks): at most ``CARRY_BLOCKS`` blocks an item and ``CARRY_CAP``
        bytes in all are kept (the rest is dropped, and fetched by CID if needed); a block whose bytes do not
        give its CID (BLAKE3, as Cairn writes every block) is a bad message."""
        budget = CARRY_CAP
        out: list[tuple[Any, dict[bytes, bytes]]] = []
        for item in items:
            if not isinstance(item, dict):
                self._refuse(peer, "malformed", "lookup answer item is not a map", strike=True)
                continue
            carried: dict[bytes, bytes] = {}
            blocks = item.get("blocks")
            for pair in blocks[:CARRY_BLOCKS] if isinstance(blocks, list) else []:
                ok = isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], CID)
                if not ok or not isinstance(pair[1], bytes) or len(pair[1]) > budget:
                    continue
                if bytes(cid_for(pair[1], pair[0].codec.code)) != bytes(pair[0]):
                    self._refuse(peer, "malformed", f"carried block {cid_str(pair[0])} does not hash to it", True)
                    carried = {}
                    break
                carried[bytes(pair[0])] = pair[1]
                budget -= len(pair[1])
            out.append((item.get("an"), carried))
        return out

    # -- incoming ---------------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """Refused inbound input by kind, including gossip frames the host refused (metrics: cairn_peer_refused)."""
        return {**{k: self.refusals[k] for k in REFUSAL_KINDS}, "gossip-frame": self.host.inbound_refused}

    def _refuse(self, peer: str, kind: str, reason: str, strike: bool) -> None:
        """Count a refusal; a bad message (``strike``) is logged and kept, and counts towards ignoring its peer.
        Refusals for limits are counted only: a flood must not become a flood of log lines and index writes."""
        self.refused += 1
        self.refusals[kind] += 1
        n = self.refusals[kind]
        level = logging.WARNING if n & (n - 1) == 0 else logging.DEBUG  # the 1st, 2nd, 4th, 8th… of a kind
        log.log(level, "announcement refused", extra={"peer": peer, "reason": reason, "count": n})
        if strike:
            self.index.log_refusal(peer, reason)
            if self.admission.strike(peer, time.monotonic()):
                log.warning("peer ignored", extra={"peer": peer, "seconds": self.admission.limits.ignore_for})

    def _record(self, peer: str, origin: str, data: bytes) -> None:
        """One gossiped announcement, from ``peer`` (the connection it came on; ``origin``: the peer the message
        names as its first sender, minted at will): the peer's limits before any decoding, then the checks, then
        its signer's."""
        self.received += 1
        if reason := self.admission.admit_peer(peer, time.monotonic()):
            self._refuse(peer, _limit_kind(reason), reason, strike=False)
            return
        self._admit_checked(peer, data, _check(data), bulk=False, origin=origin)

    def _admit_checked(
        self, peer: str, data: bytes, checked: Announcement | ClaimRefused, bulk: bool, origin: str | None = None
    ) -> None:
        """An announcement checked on arrival (``_check``): refused and struck, or within the signer's limits
        and stored, within the quotas. ``origin``: a gossiped one's (None: a catch-up's item)."""
        now = time.monotonic()
        if reason := self.admission.ignored(peer, now):  # struck meanwhile (a catch-up's earlier items)
            self._refuse(peer, "ignored", reason, strike=False)
            return
        if isinstance(checked, ClaimRefused):
            self._refuse(peer, _kind(checked.message), checked.message, strike=True)
            return
        seen = None if bulk else (hashlib.blake2b(data, digest_size=16).digest(), _signed_at(checked))
        if reason := self.admission.admit_signer(peer, checked.signer, now, bulk, seen):
            self._refuse(peer, _limit_kind(reason), reason, strike=False)
            return
        if seen is not None and (newest := self.admission.replays.take(checked.signer, *seen)) is not None:
            self.index.set_signer_mark(checked.signer, newest, self.settings.max_signer_marks)
        if self.resolver.record_claim(peer, checked, data):
            self.accepted += 1
            # Gossip names its publisher, the signer's node: connected, its lookup answer carries the blocks.
            self.resolver.reach_ahead(checked, near=origin is not None and origin in self.host.connected_peers())
            s = self.settings
            self.pruned += self.index.prune_claims(peer, s.max_claims_per_peer, s.max_claims)

    def claim_refused(self, peer: str, reason: str) -> None:
        """A claim from ``peer`` failed a check when used (node/resolve/claims.py: blocks, receipt, data): its
        signer is scored down by the resolver, and the peer that brought it gets a strike. A claim whose
        providers could not be reached says nothing against the peer: counted, no strike."""
        self.refusals["claim"] += 1
        if not reason.startswith(UNREACHABLE) and self.admission.strike(peer, time.monotonic()):
            log.warning("peer ignored", extra={"peer": peer, "seconds": self.admission.limits.ignore_for})

    async def _on_gossip(self, origin: str, forwarder: str, data: bytes) -> None:
        self._record(forwarder, origin, data)

    async def _on_lookup(self, peer: str, request: bytes) -> bytes:
        try:
            invocation = parse_cid(request)
        except InvalidCID as e:  # a malformed request gets an empty answer, as for an unknown invocation
            log.debug("unreadable lookup request", extra={"peer": peer, "error": e.message})
            return encode([])
        row = self.index.execution(cid_str(invocation))
        return encode([await self._announcement(row)] if row and _ours(row) else [])

    async def _on_lookup_carrying(self, peer: str, request: bytes) -> bytes:
        """``/cairn/lookup/1.1.0``: as 1.0.0, each announcement with its claim's small blocks (docs/p2p.md)."""
        try:
            invocation = parse_cid(request)
        except InvalidCID as e:
            log.debug("unreadable lookup request", extra={"peer": peer, "error": e.message})
            return encode([])
        row = self.index.execution(cid_str(invocation))
        if not row or not _ours(row):
            return encode([])
        an, blocks = await asyncio.gather(self._announcement(row), self._carry(row))
        hit = self._answers.get(row.execution)
        if hit is not None and hit[0] == an and hit[1] is blocks:  # the same signed an_0, the same carried list
            return hit[2]
        answer = encode([{"an": an, "blocks": [[c, d] for c, d in blocks]}])
        self._answers.put(row.execution, (an, blocks, answer))
        return answer

    async def _carry(self, row: ExecutionRow) -> list[tuple[CID, bytes]]:
        """The claim's blocks an asker's checks read (node/resolve/carry.py), within ``peers.lookup_carry_bytes``.
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

    async def _on_have(self, peer: str, request: bytes) -> bytes:
        """Our Kubo's addresses if it holds the block (checked offline: never fetched for a peer), else []."""
        try:
            cid = parse_cid(request)
            await self.kubo.block_stat(cid, timeout=5.0, offline=True)
        except (InvalidCID, KuboError):  # unreadable, or not held here: the same empty answer
            return encode([])
        return encode(await self._providers())

    async def _on_catchup(self, peer: str, request: bytes) -> bytes:
        if len(request) > CATCHUP_MAX_BYTES:  # refused before decoding: decoding is the cost a flood would impose
            self._refuse(peer, "limit", f"limit: catch-up of {len(request)} bytes, over {CATCHUP_MAX_BYTES}", False)
            return b""
        if reason := self.admission.catchup(peer, time.monotonic()):
            self._refuse(peer, _limit_kind(reason), reason, strike=False)
            return b""
        try:
            items = await asyncio.to_thread(decode, request)  # up to 2 MiB of DAG-CBOR: off the event loop
        except EncodingError as e:
            self._refuse(peer, "malformed", f"unreadable catch-up: {e.message}", strike=True)
            return b""
        if not isinstance(items, list):
            self._refuse(peer, "malformed", "catch-up is not a list of announcements", strike=True)
            return b""
        if len(items) > CATCHUP_LIMIT:  # read the first ones only, as a sender of ours would have sent
            self._refuse(peer, "limit", f"limit: catch-up of {len(items)} items, over {CATCHUP_LIMIT}", strike=False)
        blobs = [d for d in items[:CATCHUP_LIMIT] if isinstance(d, bytes)]
        for start in range(0, len(blobs), CHECK_BATCH):
            batch = blobs[start : start + CHECK_BATCH]
            # Decoding and signature checks are CPU (~1 ms each, more under load): off the event loop, in batches.
            checked = await asyncio.to_thread(_check_all, batch)
            for data, result in zip(batch, checked):
                self.received += 1
                self._admit_checked(peer, data, result, bulk=True)
        return b""

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
        rows = [r for r in self.index.executions(limit=CATCHUP_LIMIT) if _ours(r)]
        try:
            if rows:
                providers = await self._providers()  # one Kubo RPC for the whole catch-up
                items = [await self._announcement(r, providers) for r in rows]
                await self._send_catch_up(peer, encode(items))
            else:  # nothing to send: still find out whether the peer is a Cairn node at all (an empty lookup)
                await self.host.request(peer, LOOKUP, b"", timeout=PROBE_TIMEOUT)
        except P2PError as e:
            if _not_cairn(e):  # remembered from before connect checked it, or dialled us: not a Cairn node
                # Not remembered (so not re-dialled and warned about at every start), but not cut off either:
                # a bare libp2p host may still gossip to us, and the gossip checks judge what it sends.
                log.info("peer does not speak Cairn's protocols: not remembered", extra={"peer": peer})
                await self.host.forget(peer, disconnect=False)
                return
            log.info("catch-up not delivered", extra={"peer": peer, "error": str(e)})


def _libp2p_host(settings: PeerSettings, identity: Identity, peerstore: Any) -> P2PHost:
    try:
        return P2PHost(
            identity.seed,
            settings.listen,
            peerstore_path=peerstore,
            bootstrap=settings.bootstrap,
            mdns=settings.mdns,
            announce=settings.announce,
            limits=_host_limits(settings),
        )
    except P2PError as e:  # a bad peers.listen / peers.bootstrap multiaddr: the node's own config
        raise ConfigError(f"p2p host: {e}") from None


def _conforms(real: P2PHost, twin: MemoryHost) -> tuple[PeerHost, PeerHost]:
    """Checked by mypy: the libp2p host and its in-memory twin are PeerHosts."""
    return real, twin


def _host_limits(s: PeerSettings) -> HostLimits:
    return HostLimits(
        inbound_connections=s.max_inbound_connections,
        streams_per_connection=s.max_streams_per_peer,
        streams_total=s.max_streams,
        frame_bytes_total=s.frame_budget_bytes,
        frame_bytes_per_peer=s.frame_budget_per_peer_bytes,
        frame_timeout=s.frame_timeout,
    )


def _not_cairn(e: P2PError) -> bool:
    """The peer answered, but not in Cairn's protocols (p2p words it so: docs/p2p.md)."""
    return "does not speak that protocol" in str(e)


def _check(data: bytes) -> Announcement | ClaimRefused:
    try:
        return check_announcement(data)
    except ClaimRefused as e:
        return e


def _check_all(batch: list[bytes]) -> list[Announcement | ClaimRefused]:
    return [_check(d) for d in batch]


def _kind(reason: str) -> str:
    """The counter a check_announcement refusal goes to (node/resolve/claims.py words its reasons)."""
    if reason.startswith("bad signature"):
        return "signature"
    if reason.startswith("announcement"):
        return "providers"
    return "malformed"


def _limit_kind(reason: str) -> str:
    if reason.startswith("replay"):
        return "replay"
    return "ignored" if reason.startswith("limit: peer ignored") else "limit"


def _signed_at(an: Announcement) -> float:
    """An announcement's time (its signer's clock, unix seconds); unreadable: older than any (a replay)."""
    try:
        t = dt.datetime.fromisoformat(an.time)
        return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()
    except (ValueError, OverflowError):
        return float("-inf")


def _limits(s: PeerSettings) -> Limits:
    return Limits(
        rate=s.announce_rate,
        burst=s.announce_burst,
        new_signers_burst=s.new_signers_burst,
        new_signers_rate=s.new_signers_per_hour / 3600.0,
        strikes=s.bad_messages_before_ignore,
        ignore_for=s.ignore_seconds,
        replay_window=s.replay_window,
    )
