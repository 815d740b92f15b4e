"""The node's peer logic (``node.services.peers.Network``) in process: two real libp2p hosts, real indexes and real
signed
announcements; the resolver and Kubo around it are small fakes (what they do is tested on real parts elsewhere:
tests/integration/test_network.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from config import PeerSettings
from node.adapters.identity import Identity, generate
from node.adapters.index import ExecutionRow, Index
from node.adapters.ipfs.kubo_client import NodeIdentity
from node.domain.model import CID, Announcement, cid_for, cid_str, decode, parse_cid
from node.services.peers import TOPIC, Network
from node.services.resolve.peer_link import PeerLink
from node.support import wall_clock as clock
from node.support.errors import KuboUnreachable


@dataclass
class FakeResolver:
    """What Network asks of the resolver: sign an announcement for a row; record a checked claim."""

    identity: Identity
    claims: asyncio.Queue[tuple[str, Announcement]] = field(default_factory=asyncio.Queue)
    link: PeerLink = field(default_factory=PeerLink)  # the network attaches itself while it runs

    def announcement(self, row: ExecutionRow, providers: list[str]) -> Announcement:
        cids = [parse_cid(c) for c in (row.invocation, row.execution, row.receipt)]
        return Announcement(
            *cids,
            row.logical_hash,
            row.rows,
            {"name": "spark"},
            tuple(providers),
            self.identity.node_key,
            clock.utc_now_iso(),
        ).signed(self.identity.sign)

    def record_claim(self, peer: str, an: Announcement, data: bytes) -> bool:
        self.claims.put_nowait((peer, an))
        return True

    def reach_ahead(self, an: Announcement, near: bool = False) -> None:
        """Dialling a trusted signer's providers ahead of need: Kubo's part, tested in test_network.py."""


class FakeKubo:
    def __init__(self, up: bool) -> None:
        self.up = up
        self.id_calls = 0

    async def id(self, timeout: float | None = None) -> NodeIdentity:
        self.id_calls += 1
        if not self.up:
            raise KuboUnreachable("http://127.0.0.1:1")
        return NodeIdentity("12D3KooWKubo", "", ("/ip4/127.0.0.1/tcp/4001",), "kubo", ())


def _cid(name: str) -> CID:
    return cid_for(name.encode())


def _row(name: str, trust: str) -> ExecutionRow:
    iv, ex, rc = (cid_str(_cid(name + part)) for part in ("", "-ex", "-rc"))
    return ExecutionRow(iv, "q", ex, rc, "f1e2", 3, "st", (), "local", clock.now(), trust)


async def _network(tmp: Path, name: str, kubo_up: bool) -> tuple[Network, FakeResolver, Index]:
    ident = generate()
    resolver = FakeResolver(ident)
    index = Index(tmp / name / "index.sqlite")
    kubo = FakeKubo(kubo_up)
    net = Network(PeerSettings(), ident, resolver, index, kubo, None)  # type: ignore[arg-type]  # fakes
    await net.start()
    return net, resolver, index


async def test_catch_up_lookup_and_refusals(tmp_path: Path) -> None:
    a, a_resolver, a_index = await _network(tmp_path, "a", kubo_up=True)
    b, b_resolver, b_index = await _network(tmp_path, "b", kubo_up=False)
    try:
        a_index.results.add_execution(_row("computed-here", "computed"))
        a_index.results.add_execution(_row("a-peers-answer", "unverified"))  # never re-signed by a (docs/peers.md)
        b_index.results.add_execution(
            _row("computed-by-b", "computed")
        )  # b's Kubo is down: announced without providers
        await b.host.connect(a.host.addrs()[0])

        # On connect, a sends b what it computed itself, signed by a's key, naming a's Kubo as provider.
        peer, an = await asyncio.wait_for(b_resolver.claims.get(), timeout=20)
        assert peer == a.host.peer_id and an.signer == a.identity.node_key
        assert an.invocation == _cid("computed-here") and an.providers == ("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWKubo",)
        assert b_resolver.claims.empty() and b.received == 1 and b.refused == 0

        # A lookup reaches a: its own result comes back, the unverified one and unknown invocations do not.
        got = await b.lookup(_cid("computed-here"))
        assert [decode(x)["content"]["signer"] for x in got[a.host.peer_id]] == [a.identity.node_key]
        assert await b.lookup(_cid("a-peers-answer")) == {a.host.peer_id: []}
        assert await b.lookup(_cid("nobody-computed-this")) == {a.host.peer_id: []}

        peer, an = await asyncio.wait_for(a_resolver.claims.get(), timeout=20)
        assert (peer, an.invocation, an.providers) == (b.host.peer_id, _cid("computed-by-b"), ())

        # Garbage on the gossip topic is refused, counted and logged with the sender; nothing is recorded.
        # A topic's handlers run in order, so this one sees the message after Network's did.
        after_network: asyncio.Queue[bytes] = asyncio.Queue()
        a.host.subscribe(TOPIC, lambda sender, data: after_network.put_nowait(data))
        await b.host.wait_for_topic_peers(TOPIC, 1, timeout=20)
        await b.host.publish(TOPIC, b"not an announcement")
        assert await asyncio.wait_for(after_network.get(), timeout=20) == b"not an announcement"
        [(who, reason, _)] = a_index.peer_claims.refusals()
        assert who == b.host.peer_id and reason.startswith("not an announcement")
        assert a.refused == 1 and a_resolver.claims.empty()
    finally:
        await asyncio.gather(a.stop(), b.stop())


async def test_catch_up_asks_kubo_once_not_once_per_row(tmp_path: Path) -> None:
    """Catch-up once made one Kubo RPC (`id`, for the providers) per row, up to 1000 per connecting peer."""
    a, _, a_index = await _network(tmp_path, "a", kubo_up=True)
    b, b_resolver, _ = await _network(tmp_path, "b", kubo_up=True)
    try:
        for i in range(50):
            a_index.results.add_execution(_row(f"computed-{i}", "computed"))
        await b.host.connect(a.host.addrs()[0])
        got = [await asyncio.wait_for(b_resolver.claims.get(), timeout=30) for _ in range(50)]
        assert {an.invocation for _, an in got} == {_cid(f"computed-{i}") for i in range(50)}
        assert a.kubo.id_calls == 1  # type: ignore[attr-defined]  # the FakeKubo counts its calls
    finally:
        await asyncio.gather(a.stop(), b.stop())
