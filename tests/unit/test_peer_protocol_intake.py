"""The inbound half of the peer protocol without IO (node/services/peers/claim_intake.py): what a node does with what
peers
send (gossip, catch-up, lookup answers), driven with explicit times and real signed announcements."""

from __future__ import annotations

import pytest

from node.adapters.identity import Identity, generate
from node.domain.model import Announcement, cid_for, encode
from node.services.peers.admission import Admission, Limits
from node.services.peers.claim_intake import (
    CATCHUP_LIMIT,
    CATCHUP_MAX_BYTES,
    LOOKUP_ITEMS,
    ClaimIntake,
    Refused,
    check,
    check_kind,
    limit_kind,
    signed_at,
)
from node.services.resolve.claim_checks import UNREACHABLE
from node.support.errors import ClaimRefused

PEER = "12D3KooWPeer"
T0 = 1000.0


def _intake(**limits: float) -> ClaimIntake:
    return ClaimIntake(Admission(Limits(**limits)))  # type: ignore[arg-type]  # numbers for the fields named


def _announcement(who: Identity, name: str, time: str = "2024-05-01T12:00:00+00:00") -> bytes:
    iv, ex, rc = (cid_for(f"{name}{part}".encode()) for part in ("", "-ex", "-rc"))
    an = Announcement(iv, ex, rc, "f1e2", 3, {"name": "spark"}, (), who.node_key, time)
    return an.signed(who.sign).block().data


def _kinds(intake: ClaimIntake) -> list[str]:
    return [r.kind for r in intake.drain()]


def test_a_gossiped_announcement_is_taken_once_and_its_replay_refused() -> None:
    intake, who = _intake(), generate()
    data = _announcement(who, "one")
    assert intake.gossip_arrived(PEER, T0)
    take = intake.checked(PEER, data, check(data), T0, bulk=False, origin="12D3KooWOrigin")
    assert take is not None and take.announcement.signer == who.node_key and take.origin == "12D3KooWOrigin"
    assert take.mark == signed_at(take.announcement)  # the signer's newest time moved: to keep in the index
    intake.recorded()
    assert intake.gossip_arrived(PEER, T0 + 1)
    assert intake.checked(PEER, data, check(data), T0 + 1, bulk=False) is None
    assert _kinds(intake) == ["replay"]
    assert (intake.received, intake.accepted, intake.refused) == (2, 1, 1)


def test_a_gossip_flood_is_refused_before_decoding_past_the_peers_burst() -> None:
    intake = _intake(burst=3.0, rate=1.0)
    assert [intake.gossip_arrived(PEER, T0) for _ in range(5)] == [True, True, True, False, False]
    refusals = intake.drain()
    assert [(r.kind, r.strike) for r in refusals] == [("limit", False), ("limit", False)]
    assert intake.received == 5 and intake.refusals["limit"] == 2
    assert intake.gossip_arrived(PEER, T0 + 1.0)  # one more token a second later


def test_bad_messages_strike_their_peer_until_it_is_ignored_for_a_while() -> None:
    intake = _intake(strikes=3, ignore_for=60.0)
    for _ in range(3):
        assert intake.gossip_arrived(PEER, T0)
        assert intake.checked(PEER, b"garbage", check(b"garbage"), T0, bulk=False) is None
    refusals = intake.drain()
    assert [(r.kind, r.strike, r.ignored_now) for r in refusals] == [("malformed", True, False)] * 2 + [
        ("malformed", True, True)
    ]
    assert not intake.gossip_arrived(PEER, T0 + 59.0)
    assert _kinds(intake) == ["ignored"]
    assert intake.gossip_arrived(PEER, T0 + 60.0)  # the ignoring ends
    assert intake.gossip_arrived("12D3KooWOther", T0)  # another peer never was


def test_a_catch_up_is_bounded_before_and_after_decoding() -> None:
    intake, who = _intake(), generate()
    assert not intake.catchup_arrived(PEER, CATCHUP_MAX_BYTES + 1, T0)
    assert _kinds(intake) == ["limit"]
    assert intake.catchup_arrived(PEER, 10, T0) and intake.catchup_arrived(PEER, 10, T0)
    assert not intake.catchup_arrived(PEER, 10, T0)  # two catch-ups at once, then one a minute
    assert _kinds(intake) == ["limit"]

    data = _announcement(who, "caught-up")
    assert intake.catchup_items(PEER, {"not": "a list"}, T0) == []
    assert [(r.kind, r.strike) for r in intake.drain()] == [("malformed", True)]
    items = intake.catchup_items(PEER, [data, 7, *([data] * CATCHUP_LIMIT)], T0)
    assert len(items) == CATCHUP_LIMIT - 1 and all(d == data for d in items)  # the first CATCHUP_LIMIT, bytes only
    assert _kinds(intake) == ["limit"]


def test_catch_up_items_are_not_replays_and_carry_no_watermark() -> None:
    intake, who = _intake(), generate()
    data = _announcement(who, "old-result")
    takes = [intake.catchup_item(PEER, data, check(data), T0) for _ in range(2)]
    assert all(t is not None and t.mark is None and t.origin is None for t in takes)
    assert intake.received == 2 and intake.drain() == []


def test_a_catch_up_stops_being_taken_once_its_peer_is_ignored() -> None:
    intake, who = _intake(strikes=2), generate()
    data = _announcement(who, "fine")
    for _ in range(2):
        assert intake.catchup_item(PEER, b"bad", check(b"bad"), T0) is None
    assert intake.catchup_item(PEER, data, check(data), T0) is None
    assert _kinds(intake) == ["malformed", "malformed", "ignored"]


def test_new_signing_keys_from_one_peer_are_bounded() -> None:
    intake = _intake(new_signers_burst=2.0)
    signers = [generate() for _ in range(3)]
    datas = [_announcement(s, f"from-{i}") for i, s in enumerate(signers)]
    takes = [intake.catchup_item(PEER, d, check(d), T0) for d in datas]
    assert [t is not None for t in takes] == [True, True, False]
    assert _kinds(intake) == ["limit"]
    again = intake.catchup_item(PEER, datas[0], check(datas[0]), T0)  # a key already seen costs nothing
    assert again is not None


def test_lookup_answers_are_bounded_and_their_carried_blocks_checked() -> None:
    intake, who = _intake(), generate()
    data = _announcement(who, "asked")
    block = b"a carried block"
    good, bad = cid_for(block), cid_for(b"something else")
    answer = encode([{"an": data, "blocks": [[good, block]]}, {"an": data, "blocks": [[bad, block]]}, "not a map"])
    kept = intake.lookup_answer(PEER, answer, carrying=True, now=T0)
    assert kept == [(data, {bytes(good): block}), (data, {})]
    assert [(r.kind, r.strike) for r in intake.drain()] == [("malformed", True), ("malformed", True)]

    many = intake.lookup_answer(PEER, encode([data] * (LOOKUP_ITEMS + 2)), carrying=False, now=T0)
    assert many == [(data, {})] * LOOKUP_ITEMS
    assert _kinds(intake) == ["limit"]


def test_a_lookup_answer_refused_whole() -> None:
    intake = _intake(strikes=2)
    assert intake.lookup_answer(PEER, b"\xff not cbor", carrying=False, now=T0) is None
    assert intake.lookup_answer(PEER, encode({"an": b""}), carrying=False, now=T0) is None
    assert [(r.kind, r.ignored_now) for r in intake.drain()] == [("malformed", False), ("malformed", True)]
    assert intake.lookup_answer(PEER, encode([]), carrying=False, now=T0) is None  # ignored now
    assert _kinds(intake) == ["ignored"]


def test_a_badly_signed_lookup_item_is_left_to_the_resolver() -> None:
    intake = _intake()
    kept = intake.lookup_answer(PEER, encode([b"not an announcement"]), carrying=False, now=T0)
    assert kept == [(b"not an announcement", {})] and intake.drain() == []


def test_a_claim_refused_when_used_strikes_its_peer_unless_unreachable() -> None:
    intake = _intake(strikes=2)
    assert not intake.claim_refused(PEER, f"{UNREACHABLE}: /ip4/1.2.3.4/tcp/4001", T0)
    assert not intake.claim_refused(PEER, f"{UNREACHABLE}: again", T0)
    assert not intake.claim_refused(PEER, "receipt does not match", T0)
    assert intake.claim_refused(PEER, "receipt does not match", T0)  # the second strike ignores the peer
    assert intake.refusals["claim"] == 4 and intake.refused == 0 and intake.drain() == []


@pytest.mark.parametrize(("count", "loud"), [(1, True), (2, True), (3, False), (4, True), (6, False), (8, True)])
def test_refusals_are_logged_loudly_at_powers_of_two(count: int, loud: bool) -> None:
    assert Refused(PEER, "limit", "limit: x", count, False, False).loud is loud


def test_refusal_kinds() -> None:
    assert check_kind("bad signature: x") == "signature"
    assert check_kind("announcement names 9 providers") == "providers"
    assert check_kind("not an announcement") == "malformed"
    assert limit_kind("replay: taken") == "replay"
    assert limit_kind("limit: peer ignored after 20 bad messages") == "ignored"
    assert limit_kind("limit: too many announcements from this peer") == "limit"


def test_signed_at_reads_the_signers_clock_and_an_unreadable_time_is_oldest() -> None:
    who = generate()
    an = check(_announcement(who, "t", time="2024-05-01T12:00:00"))  # no zone: UTC
    assert isinstance(an, Announcement) and signed_at(an) == 1714564800.0
    bad = check(_announcement(who, "t", time="yesterday"))
    assert not isinstance(bad, ClaimRefused) and signed_at(bad) == float("-inf")
