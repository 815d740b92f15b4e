"""The host's IO-free decisions, driven without a libp2p host: which kept request stream a request may take
(``p2p.requests.KeptStreams``), which gossip forwarders are remembered (``p2p.gossip.Forwarders``), when bootstrap
peers are dialled again (``p2p.connections.Redial``), and what a connection event means
(``PeerTable.connection_changed``)."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from p2p.connections import Redial
from p2p.gossip import Forwarders
from p2p.ids import peer_id
from p2p.peers import PeerTable
from p2p.requests import KEPT_IDLE, KeptStreams


def _peer(n: int) -> str:
    return peer_id(Ed25519PrivateKey.from_private_bytes(bytes([n]) * 32).public_key().public_bytes_raw())


ME, A, B = _peer(1), _peer(2), _peer(3)
LOOKUP = (A, "/cairn/lookup/1")


# -- kept request streams -------------------------------------------------------------------------------------


def test_a_kept_stream_carries_one_request_at_a_time_and_is_reused_after() -> None:
    kept: KeptStreams[str] = KeptStreams()
    assert kept.borrow(LOOKUP) is None  # nothing kept yet: a new stream is opened
    assert kept.keep(LOOKUP, "s1", now=0.0)
    assert not kept.keep(LOOKUP, "s2", now=0.0)  # one per (peer, protocol): the second is closed by the caller
    first = kept.borrow(LOOKUP)
    assert first is not None and first.stream == "s1"
    assert kept.borrow(LOOKUP) is None  # busy: a concurrent request opens its own stream
    assert kept.stale(LOOKUP, now=KEPT_IDLE * 10) is None  # a busy stream is never taken away as stale
    kept.give_back(first, now=5.0)
    again = kept.borrow(LOOKUP)
    assert again is first and len(kept) == 1


def test_a_stream_idle_too_long_is_handed_back_to_close_not_reused() -> None:
    kept: KeptStreams[str] = KeptStreams(idle=20.0)
    kept.keep(LOOKUP, "s1", now=100.0)
    assert kept.stale(LOOKUP, now=120.0) is None  # exactly the idle limit: still usable
    assert kept.stale(LOOKUP, now=120.5) == "s1"
    assert len(kept) == 0 and kept.borrow(LOOKUP) is None


def test_a_failed_stream_is_dropped_but_not_its_successor() -> None:
    kept: KeptStreams[str] = KeptStreams()
    kept.keep(LOOKUP, "s1", now=0.0)
    old = kept.borrow(LOOKUP)
    assert old is not None
    kept.drop(LOOKUP, old)
    assert len(kept) == 0
    kept.keep(LOOKUP, "s2", now=1.0)
    kept.drop(LOOKUP, old)  # a late drop of the failed one leaves the new one kept
    new = kept.borrow(LOOKUP)
    assert new is not None and new.stream == "s2"


def test_a_peer_gone_takes_all_its_kept_streams() -> None:
    kept: KeptStreams[str] = KeptStreams()
    kept.keep((A, "/p/1"), "a1", now=0.0)
    kept.keep((A, "/p/2"), "a2", now=0.0)
    kept.keep((B, "/p/1"), "b1", now=0.0)
    kept.drop_peer(A)
    assert len(kept) == 1 and kept.borrow((B, "/p/1")) is not None


# -- gossip forwarders ----------------------------------------------------------------------------------------


def test_a_forwarder_is_taken_once() -> None:
    f = Forwarders()
    f.note(b"m1", A)
    assert f.take(b"m1") == A
    assert f.take(b"m1") is None  # delivered: a second delivery has no forwarder (and is skipped)


def test_forwarders_past_the_limit_forget_the_oldest_half() -> None:
    f = Forwarders(limit=4)
    for i in range(4):
        f.note(bytes([i]), A)
    f.note(b"new", B)  # full: messages 0 and 1 (the oldest) go, 2 and 3 stay
    assert len(f) == 3
    assert f.take(bytes([0])) is None and f.take(bytes([1])) is None
    assert f.take(bytes([2])) == A and f.take(bytes([3])) == A and f.take(b"new") == B


# -- bootstrap redials ----------------------------------------------------------------------------------------


def test_bootstrap_redials_come_every_interval_from_the_last_one() -> None:
    redial = Redial(30.0, now=1000.0)
    assert not redial.due(1001.0)
    assert not redial.due(1029.9)
    assert redial.due(1030.0)
    assert not redial.due(1031.0)  # the clock restarted at 1030
    assert redial.due(1065.0)


# -- connection events ----------------------------------------------------------------------------------------


def test_every_new_connection_counts_as_a_reconnection() -> None:
    t = PeerTable(ME)
    # first connection, inbound: the table flips, its source address is not dialable
    assert t.connection_changed(A, up=True, live=True, inbound=True, remote="/ip4/127.0.0.1/tcp/50123")
    assert t.connected() == [A] and t.snapshot()[0]["source"] == "inbound"
    t.learn(A, ["/ip4/127.0.0.1/tcp/50123"])
    assert t.snapshot()[0]["addrs"] == []  # the ephemeral source port is never learned
    # the peer restarted and dialled again before its old connection closed: no flip, still a reconnection
    assert t.connection_changed(A, up=True, live=True, inbound=True, remote=None)
    # the old connection closes while the new one lives: nothing new
    assert not t.connection_changed(A, up=False, live=True, inbound=True, remote=None)
    # the last one closes: recorded, not a reconnection
    assert not t.connection_changed(A, up=False, live=False, inbound=True, remote=None)
    assert t.connected() == []


def test_a_forgotten_peer_is_not_brought_back_by_its_disconnection() -> None:
    t = PeerTable(ME)
    t.connection_changed(B, up=True, live=True, inbound=False, remote=None)
    t.forget(B)
    assert not t.connection_changed(B, up=False, live=False, inbound=False, remote=None)
    assert t.snapshot() == []
