"""Peers that lie or flood, against a real in-process node (real Kubo, index, resolver, libp2p
host) and attackers that are real libp2p hosts: minted keys, catch-up and gossip floods, malformed and oversized
gossip frames, gossip from a fresh origin per message, replayed announcements. The node's storage stays within
its quotas, its host stays up, the peer that floods or replays pays for it, and an honest peer still gets
through."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID as GOSSIPSUB
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_varint_prefixed
from prometheus_client.parser import text_string_to_metric_families

from node.adapters.identity import Identity, generate
from node.adapters.ipfs import ManagedKubo
from node.core import Node
from node.domain.model import Announcement, cid_for, decode, encode
from node.services.peers import CATCHUP, LOOKUP, TOPIC
from node.services.peers.claim_intake import CATCHUP_LIMIT, CATCHUP_MAX_BYTES, LOOKUP_ITEMS
from node.support import wall_clock as clock
from p2p.host import P2PHost
from tests.fixtures.inprocess import inprocess_node

QUOTAS = {
    "peers.enabled": True,
    "peers.max_claims_per_peer": 25,
    "peers.max_claims": 40,
    "peers.announce_burst": 10.0,
    "peers.announce_rate": 1.0,
    "peers.new_signers_burst": 3.0,
    "peers.new_signers_per_hour": 1.0,
    "peers.bad_messages_before_ignore": 1000,  # this test sends bad frames on purpose and keeps talking after
}


def announcement(ident: Identity, n: int, signed_by: Identity | None = None, at: str | None = None) -> bytes:
    """A well-formed an_0 naming ``ident`` as signer; signed by ``signed_by`` (a forgery) if given; at ``at``."""
    key = ident.node_key  # computed anew at each read, and not cheap (multibase): once here
    cids = [cid_for(f"{key}-{n}-{part}".encode()) for part in ("iv", "ex", "rc")]
    an = Announcement(*cids, "f1e2", 3, {"name": "spark"}, (), key, at or clock.utc_now_iso())
    return an.signed((signed_by or ident).sign).block().data


def from_fresh_origins(items: list[bytes]) -> bytes:
    """One gossipsub RPC frame publishing each of ``items`` on the topic from an origin minted for it (a libp2p key
    pair per message, signed as strict signing wants): what any sender can do over one connection."""
    msgs = []
    for data in items:
        kp = create_new_key_pair(os.urandom(32))
        origin = ID.from_pubkey(kp.public_key).to_bytes()
        msg = rpc_pb2.Message(data=data, topicIDs=[TOPIC], from_id=origin, seqno=os.urandom(8))
        msg.signature = kp.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
        msgs.append(msg)
    return encode_varint_prefixed(rpc_pb2.RPC(publish=msgs).SerializeToString())


async def until(
    what: str,
    check: Callable[[], bool],
    timeout: float = 30.0,
    poke: Callable[[], Awaitable[None]] | None = None,
    status: Callable[[], object] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (f": {status()}" if status else "")
        if poke is not None:
            await poke()
        await asyncio.sleep(0.1)


async def send_raw_gossip_frame(attacker: P2PHost, victim: str, frame: bytes) -> None:
    """Write ``frame`` on a gossipsub stream as a broken or hostile libp2p implementation could."""

    async def write() -> None:
        stream = await attacker._host.new_stream(ID.from_base58(victim), [GOSSIPSUB])
        await stream.write(frame)

    await attacker._bridge.run(write)


async def send_gossip_frames(attacker: P2PHost, victim: P2PHost, frames: list[bytes], gap: float = 0.05) -> int:
    """Write ``frames`` in turn on one gossipsub stream of the attacker's one connection, ``gap`` seconds apart (py-
    libp2p drops what it cannot queue to its subscriber at once: 32 messages), then an end mark; return once the
    victim's handlers had the end mark, so all the frames before it: how many messages of them were delivered."""
    end = os.urandom(16)
    delivered: list[bytes] = []
    victim.subscribe(TOPIC, lambda _origin, data: delivered.append(data))  # called after the node's own handler

    async def write() -> None:
        stream = await attacker._host.new_stream(ID.from_base58(victim.peer_id), [GOSSIPSUB])
        for frame in frames:
            await stream.write(frame)
            await trio.sleep(gap)
        await trio.sleep(1.0)  # the end mark alone, after the rest
        await stream.write(from_fresh_origins([end]))

    await attacker._bridge.run(write)
    await until("the end of the flood delivered", lambda: end in delivered, timeout=120)
    return len(delivered) - 1


def signers_from(node: Node, peer: str) -> set[str]:
    return {c.signer for c in node.index.peer_claims.claims(limit=10**6) if c.peer == peer}


def claims_signed_by(node: Node, keys: set[str]) -> int:
    return sum(c.signer in keys for c in node.index.peer_claims.claims(limit=10**6))


@contextlib.asynccontextmanager
async def running(*hosts: P2PHost) -> AsyncIterator[None]:
    """The attacker's and the honest peers' hosts, started together and stopped whatever the test did."""
    await asyncio.gather(*(h.start() for h in hosts))
    try:
        yield
    finally:
        await asyncio.gather(*(h.stop() for h in hosts))


async def test_a_flood_of_minted_keys_is_limited_and_an_honest_peer_gets_through(
    kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    mallory, alice, eve = P2PHost(os.urandom(32)), P2PHost(os.urandom(32)), P2PHost(os.urandom(32))
    alice_key = generate()
    async with inprocess_node(tmp_path / "victim", kubo_session, **QUOTAS) as (node, client):
        assert node.network is not None
        net = node.network
        async with running(mallory, alice, eve):
            for h in (mallory, alice, eve):
                h.subscribe(TOPIC, lambda s, d: None)
                await h.connect(net.host.addrs()[0])

            # Catch-up flood: 2 deliveries of 2 * CATCHUP_LIMIT announcements, each signed by a fresh key.
            minted = [generate() for _ in range(40)]
            items = [announcement(minted[i % len(minted)], i) for i in range(2 * CATCHUP_LIMIT)]
            for _ in range(3):
                await mallory.send_direct(net.host.peer_id, CATCHUP, encode(items), timeout=60)
            refused = net.counters()
            assert refused["limit"] >= 3  # the over-long lists, and the third catch-up
            assert (
                node.index.peer_claims.claim_count(peer=mallory.peer_id) <= 25
                and node.index.peer_claims.claim_count() <= 40
            )
            assert len(signers_from(node, mallory.peer_id)) <= 4  # burst of 3 keys, at most one more per hour
            assert net.pruned > 0

            # Gossip flood from more minted keys, one message each.
            await mallory.wait_for_topic_peers(TOPIC, 1, timeout=30)
            received = net.received
            for i in range(60):
                await mallory.publish(TOPIC, announcement(generate(), 10_000 + i))
            await until("the gossip flood to arrive", lambda: net.received >= received + 30)

            # Malformed frames: an ~80 kB non-announcement (from eve: mallory is past its rate, so what it sends
            # now is refused before decoding), a cut-short RPC, an over-long length prefix.
            assert net.counters()["malformed"] == 0
            await until(
                "the 80 kB message refused",
                lambda: net.counters()["malformed"] >= 1,
                poke=lambda: eve.publish(TOPIC, b"\x00" * 80_000),
            )
            await send_raw_gossip_frame(mallory, net.host.peer_id, encode_varint_prefixed(b"\xff" * 100))
            await until("the malformed frame refused", lambda: net.counters()["gossip-frame"] >= 1)
            await send_raw_gossip_frame(mallory, net.host.peer_id, b"\xff\xff\xff\xff\x0f")  # 4 GiB announced
            assert net.host.running

            # Alice still gets through, by gossip: her claim is stored, under her key, from her peer id.
            await alice.wait_for_topic_peers(TOPIC, 1, timeout=30)
            mine = announcement(alice_key, 1)
            await until(
                "alice's announcement stored",
                lambda: alice_key.node_key in signers_from(node, alice.peer_id),
                poke=lambda: alice.publish(TOPIC, mine),
            )
            assert (
                node.index.peer_claims.claim_count() <= 40
                and node.index.peer_claims.claim_count(peer=mallory.peer_id) <= 25
            )
            assert await alice.ping(net.host.peer_id, timeout=10) >= 0

            resp = await client.get("/metrics")
            text = await resp.text()
            assert 'cairn_peer_refused{kind="limit"}' in text and 'cairn_peer_refused{kind="gossip-frame"}' in text
            # The announcements family: alice's accepted, mallory's refused by kind; peers counted.
            fams = {f.name: f for f in text_string_to_metric_families(text)}
            ann = {s.labels["outcome"]: s.value for s in fams["cairn_announcements"].samples}
            assert ann["accepted"] == net.accepted >= 1 and ann["refused:limit"] == net.counters()["limit"] >= 1
            assert fams["cairn_peers"].samples[0].value == len(net.host.connected_peers())


async def test_a_peer_sending_bad_messages_is_ignored_others_are_not(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    mallory, alice = P2PHost(os.urandom(32)), P2PHost(os.urandom(32))
    settings = {**QUOTAS, "peers.bad_messages_before_ignore": 5}
    async with inprocess_node(tmp_path / "victim", kubo_session, **settings) as (node, _client):
        assert node.network is not None
        net = node.network
        async with running(mallory, alice):
            for h in (mallory, alice):
                await h.connect(net.host.addrs()[0])
            victim_key, forger = generate(), generate()
            forged = [announcement(victim_key, i, signed_by=forger) for i in range(5)]
            await mallory.send_direct(net.host.peer_id, CATCHUP, encode([*forged, b"junk"]), timeout=30)
            assert net.counters()["signature"] == 5
            assert net.counters()["ignored"] == 1  # the 6th item: mallory is ignored from the 5th bad message on
            # An over-long catch-up is refused before it is decoded (not counted as malformed) and costs alice
            # none of her catch-ups.
            await alice.send_direct(net.host.peer_id, CATCHUP, b"\x00" * (CATCHUP_MAX_BYTES + 1), timeout=60)
            assert net.counters()["limit"] == 1 and net.counters()["malformed"] == 0
            good = generate()
            await mallory.send_direct(net.host.peer_id, CATCHUP, encode([announcement(good, 1)]), timeout=30)
            assert good.node_key not in signers_from(node, mallory.peer_id)
            for n in (2, 3):  # two catch-ups: her whole burst, untouched by the refused one
                await alice.send_direct(net.host.peer_id, CATCHUP, encode([announcement(good, n)]), timeout=30)
            assert signers_from(node, alice.peer_id) == {good.node_key}
            assert node.index.peer_claims.claim_count(peer=alice.peer_id) == 2
            assert (
                len(node.index.peer_claims.refusals()) == 5
            )  # bad messages are logged; what an ignored peer sends is not


async def test_a_lookup_answer_is_read_within_bounds(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A peer answering a lookup with a flood of announcements from minted keys: at most LOOKUP_ITEMS are read,
    within the bound on new keys; an unreadable answer is a bad message."""
    mallory, alice = P2PHost(os.urandom(32)), P2PHost(os.urandom(32))
    flood = encode([announcement(generate(), i) for i in range(200)])
    honest = encode([announcement(generate(), 0)])

    async def mallory_answers(peer: str, request: bytes) -> bytes:
        return flood

    async def alice_answers(peer: str, request: bytes) -> bytes:
        return honest

    mallory.set_handler(LOOKUP, mallory_answers)
    alice.set_handler(LOOKUP, alice_answers)
    settings = {**QUOTAS, "peers.lookup_timeout": 60.0}  # returns once both answered; the machine may be loaded
    async with inprocess_node(tmp_path / "victim", kubo_session, **settings) as (node, _client):
        assert node.network is not None
        net = node.network
        async with running(mallory, alice):
            for h in (mallory, alice):
                await h.connect(net.host.addrs()[0])
            both = {mallory.peer_id, alice.peer_id}  # a lookup asks the peers the victim has seen connect
            await until("both peers connected", lambda: both <= set(net.host.connected_peers()))
            got = await net.lookup(cid_for(b"any invocation"))
            assert len(got[mallory.peer_id]) == 3  # LOOKUP_ITEMS read, of which new_signers_burst keys admitted
            assert len(got[mallory.peer_id]) <= LOOKUP_ITEMS and got[alice.peer_id] == [decode(honest)[0]]
            assert net.counters()["limit"] >= 2  # the over-long answer, and the keys past the bound

            async def garbage(peer: str, request: bytes) -> bytes:
                return b"\xff not cbor"

            mallory.set_handler(LOOKUP, garbage)
            got = await net.lookup(cid_for(b"any invocation"))
            assert got[mallory.peer_id] == [] and net.counters()["malformed"] == 1


FRESH_ORIGINS = 1000  # announcements, each from a fresh origin and a fresh key, over one connection


async def test_gossip_from_fresh_origins_over_one_connection_is_limited_by_that_peer(
    kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    """A fresh gossip origin per message (minted at no cost) used to get a fresh set of buckets each time: 1000
    announcements from 1000 origins and keys filled the claim quota (200), nobody limited, and pushed an honest
    peer's claim out of it. Limits are now the connection's: that peer is limited, the keys it brings are bounded, and
    alice's announcement lands and stays."""
    mallory, alice = P2PHost(os.urandom(32)), P2PHost(os.urandom(32))
    alice_key, minted = generate(), [generate() for _ in range(FRESH_ORIGINS)]
    frames = [from_fresh_origins([announcement(k, 1) for k in minted[i : i + 25]]) for i in range(0, len(minted), 25)]
    settings = {**QUOTAS, "peers.max_claims": 200}  # the flood alone would fill it on the old code
    async with inprocess_node(tmp_path / "victim", kubo_session, **settings) as (node, _client):
        assert node.network is not None
        net = node.network
        async with running(mallory, alice):
            for h in (mallory, alice):
                h.subscribe(TOPIC, lambda s, d: None)
                await h.connect(net.host.addrs()[0])
            await alice.wait_for_topic_peers(TOPIC, 1, timeout=30)
            mine = announcement(alice_key, 1)
            await until(
                "alice's announcement stored",
                lambda: alice_key.node_key in signers_from(node, alice.peer_id),
                poke=lambda: alice.publish(TOPIC, mine),
            )
            arrived = await send_gossip_frames(mallory, net.host, frames)
            assert arrived >= FRESH_ORIGINS // 3, f"only {arrived} of {FRESH_ORIGINS} delivered: no flood to judge"
            flooded = claims_signed_by(node, {k.node_key for k in minted})
            assert flooded <= QUOTAS["peers.new_signers_burst"] + 1, f"{flooded} of {arrived} minted keys' claims kept"
            # All but mallory's burst refused at its own bucket, before decoding; the limits track one peer.
            assert net.counters()["limit"] >= arrived - QUOTAS["peers.announce_burst"] - 5, net.counters()
            assert len(net.admission.peers) <= 3, f"{len(net.admission.peers)} peers tracked"
            assert node.index.peer_claims.claim_count(peer=mallory.peer_id) == flooded
            assert alice_key.node_key in signers_from(node, alice.peer_id)  # not pruned by the flood
            later = announcement(alice_key, 2)
            await until(
                "alice's next announcement stored",
                lambda: node.index.peer_claims.claim_count(peer=alice.peer_id) == 2,
                poke=lambda: alice.publish(TOPIC, later),
            )


async def test_a_replayed_announcement_costs_the_replayer_not_its_signer(
    kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    """Bob's genuine announcement replayed 20 times a second, each time from a fresh origin, used to spend bob's
    key's bucket: the node refused bob's next announcements. Now a replay is refused (bob's watermark, kept across
    restarts) and paid from the replayer's own bucket: bob's next five all land, mallory's own next is refused;
    bob's older announcements still arrive by catch-up, and a relay's forwarding of another signer still lands."""
    bob_key, dave_key, mallory_key = generate(), generate(), generate()
    bob, dave = P2PHost(bob_key.seed), P2PHost(dave_key.seed)  # as Cairn nodes are: the peer id is the key's
    mallory, carol = P2PHost(os.urandom(32)), P2PHost(os.urandom(32))
    genuine = announcement(bob_key, 0)
    replays = [from_fresh_origins([genuine]) for _ in range(60)]
    home = tmp_path / "victim"
    async with inprocess_node(home, kubo_session, **QUOTAS) as (node, _client):
        assert node.network is not None
        net = node.network
        async with running(bob, mallory, carol, dave):
            for h in (bob, mallory, carol):
                h.subscribe(TOPIC, lambda s, d: None)
                await h.connect(net.host.addrs()[0])
            await bob.wait_for_topic_peers(TOPIC, 1, timeout=30)
            await until(
                "bob's announcement stored",
                lambda: claims_signed_by(node, {bob_key.node_key}) == 1,
                poke=lambda: bob.publish(TOPIC, genuine),
            )
            # Mallory replays it for 3 s, then sends an announcement of its own: past its bucket, refused.
            arrived = await send_gossip_frames(
                mallory, net.host, [*replays, from_fresh_origins([announcement(mallory_key, 1)])]
            )
            assert arrived >= len(replays) // 2, f"only {arrived} delivered: no replay to judge"
            for i in range(1, 6):  # each once: a gossip refused is not sent again
                await bob.publish(TOPIC, announcement(bob_key, i))
            await until(
                "bob's next five stored",
                lambda: claims_signed_by(node, {bob_key.node_key}) == 6,
                status=lambda: (
                    f"{claims_signed_by(node, {bob_key.node_key}) - 1} of 5 stored, refused {net.counters()}"
                ),
            )
            refused = net.counters()
            assert refused["replay"] >= 1 and refused["replay"] + refused["limit"] >= arrived - 1, refused
            assert refused["replay"] <= QUOTAS["peers.announce_burst"] + 5  # then mallory's bucket was empty
            assert claims_signed_by(node, {mallory_key.node_key}) == 0
            assert node.index.peer_claims.claim_count(peer=mallory.peer_id) == 0

            # Older announcements of bob's (well below his watermark) arrive by catch-up, as to a reconnecting peer.
            older = [announcement(bob_key, 100 + i, at="2020-01-01T00:00:00.000000Z") for i in range(3)]
            await bob.send_direct(net.host.peer_id, CATCHUP, encode(older), timeout=60)
            assert claims_signed_by(node, {bob_key.node_key}) == 9

            # An honest relay: dave reaches the node only through carol; his announcement lands, from carol.
            await dave.connect(carol.addrs()[0])
            dave.subscribe(TOPIC, lambda s, d: None)
            await dave.wait_for_topic_peers(TOPIC, 1, timeout=30)
            relayed = announcement(dave_key, 1)
            await until(
                "dave's announcement stored through carol",
                lambda: dave_key.node_key in signers_from(node, carol.peer_id),
                poke=lambda: dave.publish(TOPIC, relayed),
            )

    # After a restart, the watermark still tells the replay (from a new connection): refused, bob's key charged
    # nothing.
    again = P2PHost(os.urandom(32))
    async with inprocess_node(home, kubo_session, **QUOTAS) as (node, _client):
        assert node.network is not None
        net = node.network
        await again.start()
        try:
            await again.connect(net.host.addrs()[0])
            assert await send_gossip_frames(again, net.host, replays[:3]) == 3
            assert net.counters()["replay"] == 3 and net.admission.signers.get(bob_key.node_key) is None
            assert claims_signed_by(node, {bob_key.node_key}) == 9
        finally:
            await again.stop()
