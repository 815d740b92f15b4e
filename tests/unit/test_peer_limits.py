"""The admission state machines (node/services/peers/admission.py) and the claim quotas (ClaimRepository.prune_claims),
over
generated event sequences: bounds hold for any flood, an honest sender within its rate is never refused."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from node.adapters.index import ClaimRow, Index
from node.services.peers.admission import MAX_TRACKED, RECENT_PER_SIGNER, Admission, Limits, Lru, Replays, TokenBucket

gaps = st.lists(st.floats(min_value=0.0, max_value=5.0, allow_nan=False), min_size=1, max_size=300)


def _times(deltas: list[float], start: float = 1000.0) -> list[float]:
    out, t = [], start
    for d in deltas:
        t += d
        out.append(t)
    return out


@given(gaps, st.floats(0.1, 10.0), st.integers(1, 20))
def test_a_bucket_never_allows_more_than_burst_plus_rate_times_elapsed(deltas, rate, burst):
    b = TokenBucket(rate, float(burst))
    times = _times(deltas)
    allowed = [t for t in times if b.allow(t)]
    for i, t in enumerate(allowed):  # any prefix: at most burst + rate * (t - first call)
        assert i + 1 <= burst + rate * (t - times[0]) + 1e-6


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=200), st.floats(0.1, 10.0), st.integers(1, 20))
def test_a_sender_within_the_rate_is_never_refused(extra, rate, burst):
    b = TokenBucket(rate, float(burst))
    t = 0.0
    for e in extra:
        t += 1.0 / rate + e  # never faster than the rate
        assert b.allow(t)


@given(st.lists(st.floats(min_value=-100.0, max_value=100.0, allow_nan=False), min_size=1, max_size=100))
def test_a_clock_stepping_back_gives_no_tokens(times):
    b = TokenBucket(1.0, 3.0)
    got = sum(b.allow(t) for t in times)
    span = max(0.0, max(times) - times[0])
    assert got <= 3 + span + 1e-6


LIM = Limits(rate=1.0, burst=5.0, new_signers_burst=3.0, new_signers_rate=0.1, strikes=4, ignore_for=60.0)
flood = st.lists(
    st.tuples(st.floats(0.0, 2.0), st.sampled_from(["mallory", "eve"]), st.integers(0, 10_000), st.booleans()),
    max_size=300,
)


@settings(max_examples=80)
@given(flood)
def test_minted_keys_from_one_peer_are_bounded_and_an_honest_peer_gets_through(events):
    """Flooders mint keys and send in bursts and catch-ups; alice sends one announcement a second with her key:
    every one of hers is admitted, and each flooder brings at most burst + rate * elapsed new keys."""
    adm, t0, t = Admission(LIM), 1000.0, 1000.0
    next_alice, keys = t0, {"mallory": set(), "eve": set()}
    for gap, peer, key, bulk in events:
        t += gap
        while next_alice <= t:
            assert adm.admit("alice", "did:key:alice", next_alice) is None
            next_alice += 1.0
        if adm.admit(peer, f"did:key:{peer}-{key}", t, bulk) is None:
            keys[peer].add(key)
    for peer in keys:
        assert len(keys[peer]) <= LIM.new_signers_burst + LIM.new_signers_rate * (t - t0) + 1e-6


@given(st.integers(1, 30), st.floats(0.0, 200.0))
def test_strikes_get_a_peer_ignored_for_a_while_then_heard_again(n, later):
    adm, t = Admission(LIM), 50.0
    banned = [adm.strike("mallory", t) for _ in range(n)]
    assert banned.count(True) == n // LIM.strikes  # every `strikes` bad messages, one ban
    ignored = adm.admit("mallory", "did:key:m", t + later)
    if n >= LIM.strikes and later < LIM.ignore_for:
        assert ignored is not None and ignored.startswith("limit: peer ignored")
    else:
        assert ignored is None
    assert adm.admit("alice", "did:key:a", t) is None  # others are not affected


def test_tables_are_bounded():
    adm = Admission(Limits(new_signers_burst=1e9))
    for i in range(MAX_TRACKED + 500):
        adm.admit(f"peer-{i}", f"key-{i}", 1.0)
    assert len(adm.peers) == MAX_TRACKED and len(adm.signers) == MAX_TRACKED
    lru: Lru[int] = Lru(2)
    lru.put("a", 1), lru.put("b", 2), lru.get("a"), lru.put("c", 3)
    assert (lru.get("a"), lru.get("b"), lru.get("c")) == (1, None, 3)  # b was the least recently used


def test_catchups_per_peer_are_limited():
    adm = Admission(LIM)
    assert [adm.catchup("p", 0.0) for _ in range(3)] == [None, None, "limit: too many catch-ups from this peer"]
    assert adm.catchup("q", 0.0) is None


claims = st.lists(
    st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.integers(0, 10**6), st.booleans()), min_size=1, max_size=60
)


@settings(max_examples=40, deadline=None)
@given(claims, st.integers(1, 10), st.integers(1, 20))
def test_claim_quotas_keep_the_newest_and_the_accepted(events, per_peer, total):
    """ClaimRepository.prune_claims against a plain Python model of the same rule (quota per peer, then overall; claims
    not accepted go first, oldest first)."""
    with tempfile.TemporaryDirectory() as d:
        index = Index(Path(d) / "index.sqlite")
        model: list[tuple[str, str, float, bool]] = []  # (peer, invocation, received, accepted)
        for i, (peer, n, accepted) in enumerate(events):
            inv = f"iv-{i}-{n}"
            row = ClaimRow(inv, "did:key:k", "ex", "rc", "h", 1, peer, b"", float(i), "pending", "")
            assert index.peer_claims.add_claim(row)
            if accepted:
                index.set_claim_status(inv, "did:key:k", "ex", "accepted")
            model.append((peer, inv, float(i), accepted))
            index.peer_claims.prune_claims(peer, per_peer, total)
            for scope in ([c for c in model if c[0] == peer], model):
                excess = len(scope) - (per_peer if scope is not model else total)
                for c in sorted(scope, key=lambda c: (c[3], c[2]))[: max(0, excess)]:
                    model.remove(c)
            assert sorted(c.invocation for c in index.peer_claims.claims(limit=10**6)) == sorted(c[1] for c in model)
        assert index.peer_claims.claim_count() <= total
        assert all(index.peer_claims.claim_count(peer=p) <= per_peer for p in ("p1", "p2", "p3"))
        index.close()


def test_the_refusal_log_keeps_the_last_ones():
    with tempfile.TemporaryDirectory() as d:
        index = Index(Path(d) / "index.sqlite")
        for i in range(30):
            index.peer_claims.log_refusal("p", f"r{i}", keep=10)
        assert sorted(r for _, r, _ in index.peer_claims.refusals(100)) == sorted(f"r{i}" for i in range(20, 30))
        index.close()


# -- replays: a per-signer watermark ------------------------------------------------------------------------------

WINDOW = 10.0
offers = st.lists(
    st.tuples(st.sampled_from(["offer"] * 8 + ["restart", "forget"]), st.sampled_from("abc"), st.integers(0, 40)),
    max_size=400,
)


def _time_of(signer: str, n: int) -> float:
    """An announcement's time is part of it (signed): the same one always has the same time."""
    return 1000.0 + 3.0 * n + (ord(signer) % 3)


@settings(max_examples=150)
@given(offers)
def test_a_gossiped_announcement_is_taken_once_across_restarts_and_forgetting(events):
    """Any order of offers (new, repeated, late), node restarts (the watermark read back from storage, what was
    remembered in memory lost) and keys forgotten from memory (a small LRU): no announcement is ever taken twice."""
    stored: dict[str, float] = {}

    def fresh() -> Replays:
        return Replays(WINDOW, stored.get, Lru(2))

    replays, taken = fresh(), set()
    for action, signer, n in events:
        if action == "restart":
            replays = fresh()
        elif action == "forget":  # every key pushed out of memory by others
            replays.keys = Lru(2)
        else:
            ident, t = f"{signer}{n}".encode(), _time_of(signer, n)
            if replays.check(signer, ident, t) is None:
                assert (signer, n) not in taken, f"{signer}{n} taken twice"
                taken.add((signer, n))
                if (newest := replays.take(signer, ident, t)) is not None:
                    stored[signer] = max(stored.get(signer, newest), newest)


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 5.0, allow_nan=False), st.floats(0.0, WINDOW / 2, allow_nan=False)),
        min_size=1,
        max_size=RECENT_PER_SIGNER - 1,
    )
)
def test_new_announcements_reordered_within_the_window_are_never_refused(sends):
    """An honest signer's announcements, each arriving up to half a window later than it could (reordered by the
    mesh), are all new: none refused as a replay."""
    replays = Replays(WINDOW)
    for i, (t, (_gap, lag)) in enumerate(zip(_times([g for g, _ in sends]), sends)):
        ident = str(i).encode()
        assert replays.check("did:key:a", ident, t - lag) is None, f"announcement {i} refused"
        replays.take("did:key:a", ident, t - lag)
        assert replays.check("did:key:a", ident, t - lag) is not None  # and once taken, a replay


alice_sends = st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(0, 1_000)), max_size=200)


@settings(max_examples=80)
@given(alice_sends)
def test_replays_are_paid_by_the_replayer_never_by_the_signer(events):
    """Alice sends one new announcement a second; between them mallory replays any of hers already sent, as often
    as it likes: every one of alice's is admitted, every replay refused, and mallory's refusals past its burst
    are its own bucket's."""
    adm, t, sent = Admission(LIM), 1000.0, []
    next_alice = t
    for gap, pick in events:
        t += gap
        while next_alice <= t:
            seen = (f"a{len(sent)}".encode(), next_alice)
            assert adm.admit_peer("alice", next_alice) is None
            assert adm.admit_signer("alice", "did:key:alice", next_alice, seen=seen) is None
            adm.replays.take("did:key:alice", *seen)
            sent.append(seen)
            next_alice += 1.0
        if sent:
            replay = sent[pick % len(sent)]
            reason = adm.admit_peer("mallory", t) or adm.admit_signer("mallory", "did:key:alice", t, seen=replay)
            assert reason is not None
            assert reason.startswith(("replay:", "limit: too many announcements from this peer")), reason


def test_the_watermark_is_kept_in_the_index_and_bounded():
    with tempfile.TemporaryDirectory() as d:
        index = Index(Path(d) / "index.sqlite")
        assert index.peer_claims.signer_mark("k0") is None
        index.peer_claims.set_signer_mark("k0", 50.0, keep=3)
        index.peer_claims.set_signer_mark("k0", 40.0, keep=3)  # never lowered
        assert index.peer_claims.signer_mark("k0") == 50.0
        for i in range(1, 5):
            index.peer_claims.set_signer_mark(f"k{i}", float(i), keep=3)
        assert [index.peer_claims.signer_mark(f"k{i}") for i in range(5)] == [
            None,
            None,
            2.0,
            3.0,
            4.0,
        ]  # least recent gone
        index.close()
        reopened = Index(Path(d) / "index.sqlite")
        replays = Replays(WINDOW, reopened.peer_claims.signer_mark)
        assert replays.check("k4", b"any", 4.0) is not None and replays.check("k4", b"any", 4.5) is None
        reopened.close()
