"""Peers' shapes: the an_0 ``shape`` field, its record with the claim, and which
peers' claims a miss tries as candidate supersets (node.services.resolve.supersets)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from node.adapters.identity import generate
from node.adapters.index import ClaimRow, Index
from node.domain.model import Announcement, Invocation, block_of, cid_for, decode, encode
from node.domain.model.query import InputIdentity
from node.domain.sql import CanonicalQuery, canonicalize
from node.services.resolve import supersets
from node.services.resolve.claim_checks import check_announcement
from node.services.resolve.peer_supersets import PeerSupersets
from node.services.resolve.resolver import Flights
from node.support.errors import ClaimRefused

PEER = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
SHAPE = "ab" * 32
INPUTS = {"t": [("k", "utf8"), ("s", "utf8"), ("x", "int64")]}


def _an(shape: str | None, failure: str | None = None) -> Announcement:
    who = generate()
    c = cid_for(b"x")
    return Announcement(
        c,
        c,
        c,
        "" if failure else "f1e20" + "00" * 32,
        0 if failure else 1,
        {"name": "spark"},
        (f"/ip4/127.0.0.1/tcp/4001/p2p/{PEER}",),
        who.node_key,
        "2026-01-01T00:00:00Z",
        failure=failure,
        shape=shape,
    ).signed(who.sign)


def test_the_shape_round_trips_signed() -> None:
    data = block_of(_an(SHAPE)).data
    assert decode(data)["content"]["shape"] == SHAPE
    assert check_announcement(data).shape == SHAPE


def test_the_signature_covers_the_shape() -> None:
    an = _an(SHAPE)
    for other in ("cd" * 32, None):  # changed, or stripped: either breaks the signature
        forged = block_of(replace(an, shape=other)).data
        with pytest.raises(ClaimRefused, match="bad signature"):
            check_announcement(forged)


def test_an_announcement_without_a_shape_keeps_its_bytes_and_parses() -> None:
    """Old announcements (and failures, and results no rule can use) have no ``shape`` key at all."""
    an = _an(None)
    data = block_of(an).data
    assert "shape" not in decode(data)["content"]
    assert check_announcement(data).shape is None
    assert check_announcement(block_of(_an(None, failure="DIVIDE_BY_ZERO")).data).shape is None


@pytest.mark.parametrize("bad", ["", "AB" * 32, "ab" * 31, "zz" * 32, 7])
def test_a_malformed_shape_is_refused(bad: object) -> None:
    obj = decode(block_of(_an(SHAPE)).data)
    obj["content"]["shape"] = bad
    with pytest.raises(ClaimRefused, match="not an announcement"):
        check_announcement(encode(obj))


def _iv(logical: str) -> Invocation:
    c = cid_for(b"st")
    return Invocation(cid_for(b"qy"), (InputIdentity(c, logical, 6),))


def _q(sql: str) -> CanonicalQuery:
    return canonicalize(sql, INPUTS)


def test_the_public_shape_is_the_inputs_content_not_their_versions() -> None:
    """Two nodes that ingested the same CSV hold different version heads but the same input identities: the shape
    they announce is equal; other data, or another input structure of the query, gives another."""
    roll_up, coarser = _q("SELECT k, s, COUNT(*) FROM t GROUP BY k, s"), _q("SELECT k, COUNT(*) FROM t GROUP BY k")
    same = supersets.public_shape(roll_up, _iv("h1"))
    assert same is not None and len(same) == 64
    assert supersets.public_shape(coarser, _iv("h1")) == same  # the shape strips what the query selects
    assert supersets.public_shape(roll_up, _iv("h2")) != same
    assert supersets.public_shape(_q("SELECT k FROM t ORDER BY k"), _iv("h1")) is None


def _claim(invocation: str, signer: str, received: float, status: str = "pending", reason: str = "") -> ClaimRow:
    return ClaimRow(invocation, signer, f"ex-{invocation}", "rc", "h", 1, PEER, b"", received, status, reason, SHAPE)


def test_peer_candidates_newest_first_bounded_one_per_invocation() -> None:
    claims = [
        _claim("old", "did:key:a", 1.0),
        _claim("mine", "did:key:me", 9.0),  # our own: a local candidate already
        _claim("asked", "did:key:a", 8.0),  # the question itself: the exact lookup came first
        _claim("bad", "did:key:a", 7.0, "refused", "the data does not match"),
        _claim("twice", "did:key:b", 6.0),
        _claim("twice", "did:key:a", 5.0),  # the same invocation by another signer: the peer path tries both
        *(_claim(f"n{i}", "did:key:c", 4.0 - i / 10) for i in range(5)),
    ]

    def usable(c: ClaimRow) -> bool:
        return c.status != "refused" or c.reason.startswith("policy: ")

    got = supersets.peer_candidates(claims, "did:key:me", "asked", usable)
    assert [c.invocation for c in got] == ["twice", "n0", "n1", "n2"]
    assert len(got) == supersets.MAX_PEER_CANDIDATES
    policy = _claim("untrusted", "did:key:d", 10.0, "refused", "policy: signer is not in a trusted community")
    assert supersets.peer_candidates([policy], "did:key:me", "asked", usable) == [policy]  # another mode may allow


def test_claims_are_recorded_and_found_by_shape(tmp_path: Path) -> None:
    index = Index(tmp_path / "index.db")
    assert index.peer_claims.add_claim(_claim("inv", "did:key:a", 1.0))
    assert index.peer_claims.add_claim(replace(_claim("other", "did:key:a", 2.0), shape=None))
    assert [c.invocation for c in index.peer_claims.shape_claims(SHAPE)] == ["inv"]
    index.shapes.add_shape("local", "mine", "SELECT 1", 1, 0.0, SHAPE)
    index.shapes.add_shape("local", "unannounced", "SELECT 1", 1, 0.0)
    assert (index.shapes.shape_of("mine"), index.shapes.shape_of("unannounced")) == (SHAPE, None)
    index.close()


def test_an_index_from_before_shapes_were_announced_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE claims (invocation TEXT NOT NULL, signer TEXT NOT NULL, execution TEXT NOT NULL, receipt TEXT "
        "NOT NULL, logical_hash TEXT NOT NULL, rows INTEGER NOT NULL, peer TEXT NOT NULL, announcement BLOB NOT NULL, "
        "received REAL NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', "
        "PRIMARY KEY (invocation, signer, execution))"
    )
    db.execute("INSERT INTO claims VALUES ('inv', 's', 'ex', 'rc', 'h', 1, 'p', x'00', 1.0, 'pending', '')")
    db.execute(
        "CREATE TABLE shapes (shape TEXT NOT NULL, invocation TEXT NOT NULL, statement TEXT NOT NULL, outputs "
        "INTEGER NOT NULL, created REAL NOT NULL, PRIMARY KEY (shape, invocation))"
    )
    db.execute("INSERT INTO shapes VALUES ('local', 'mine', 'SELECT 1', 1, 0.0)")
    db.commit()
    db.close()
    index = Index(path)
    assert [c.shape for c in index.peer_claims.claims("inv")] == [None]  # kept, with no shape
    assert index.shapes.shape_of("mine") is None
    assert index.peer_claims.add_claim(_claim("new", "did:key:a", 2.0))
    assert [c.invocation for c in index.peer_claims.shape_claims(SHAPE)] == ["new"]
    index.close()


async def test_candidates_are_proved_at_once_within_one_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A miss waits at most ``PEER_PROOF_BUDGET`` for all its peer candidates together: a stalled one (it would
    take an hour) is dropped, its work cancelled, and the others proved meanwhile are kept in their listed order.
    Only the budget can end the wait before the 60 s bound, which only a hang fails."""
    monkeypatch.setattr(supersets, "PEER_PROOF_BUDGET", 0.3)
    cancelled: list[str] = []

    async def prove(claim: ClaimRow, *_: object) -> object:
        if claim.invocation == "stalls":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(claim.invocation)
                raise
        await asyncio.sleep(0)  # proved at once: well within the budget
        return None if claim.invocation == "unproved" else claim.invocation

    fake = SimpleNamespace(_prove_candidate=prove)
    listed = [_claim(i, "did:key:a", 1.0) for i in ("first", "stalls", "unproved", "last")]
    async with asyncio.timeout(60):
        got = await PeerSupersets.proved(fake, listed, None, None)  # type: ignore[arg-type]
    assert got == ["first", "last"]
    await asyncio.sleep(0)
    assert cancelled == ["stalls"]


async def test_a_cancelled_miss_leaves_no_proof_running() -> None:
    """The miss itself cancelled (its client gone, the node stopping) while its candidates are proved: every proof
    is cancelled with it, none is left reading from peers."""
    started: list[str] = []
    cancelled: list[str] = []
    both = asyncio.Event()

    async def prove(claim: ClaimRow, *_: object) -> object:
        started.append(claim.invocation)
        if len(started) == 2:
            both.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(claim.invocation)
            raise
        return None

    fake = SimpleNamespace(_prove_candidate=prove)
    listed = [_claim(i, "did:key:a", 1.0) for i in ("a", "b")]
    miss = asyncio.ensure_future(PeerSupersets.proved(fake, listed, None, None))  # type: ignore[arg-type]
    await asyncio.wait_for(both.wait(), 5.0)
    miss.cancel()
    with pytest.raises(asyncio.CancelledError):
        await miss
    await asyncio.sleep(0)
    assert sorted(cancelled) == ["a", "b"]


def test_read_statements_are_kept_bounded_least_recently_used_dropped() -> None:
    kept = supersets.statements()
    assert kept.cap == supersets.STATEMENTS_KEPT
    a, b = (cast(supersets.Statement, object()) for _ in range(2))
    kept.put("a", a)
    kept.put("b", b)
    assert (kept.get("a"), kept.get("b"), kept.get("c")) == (a, b, None)


async def test_work_behind_answers_waits_for_quiet_misses_at_most_defer_max(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pins and a derived answer's announcement (``Flights.quiet``) wait while a miss is in flight or one just
    ended, and no longer than ``DEFER_MAX``: a burst of answers is not slowed by the work of the ones before.
    With ``DEFER_MAX`` an hour, only the misses can end the wait before the 60 s bound (which only a hang fails);
    with it short, the deferral ends the wait while a miss is still in flight."""
    from node.services.resolve import resolver

    monkeypatch.setattr(resolver, "QUIET_FOR", 0.02)
    monkeypatch.setattr(resolver, "DEFER_MAX", 3600.0)
    misses = _Misses()
    waiting = asyncio.ensure_future(Flights.quiet(misses))  # type: ignore[arg-type]
    async with asyncio.timeout(60):
        await misses.looked_thrice()
        assert not waiting.done()  # a miss in flight
        misses.inflight.clear()
        misses.landing = True
        await misses.looked_thrice()
        assert not waiting.done()  # none in flight, but one just ended at each look: not quiet yet
        misses.landing = False
        await waiting  # quiet QUIET_FOR after the last: the hour's deferral did not end this wait

    monkeypatch.setattr(resolver, "DEFER_MAX", 0.05)
    stuck = _Misses()
    async with asyncio.timeout(60):
        await Flights.quiet(stuck)  # type: ignore[arg-type]
    assert stuck.inflight  # it returned with the miss still in flight: the deferral's end ended the wait


class _Looked(dict[str, object]):
    """Misses in flight that count the looks at them (``Flights.quiet`` looks once a round)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.looks, self.looked = 0, asyncio.Event()

    def __len__(self) -> int:
        self.looks += 1
        self.looked.set()
        return super().__len__()


class _Misses:
    """A resolver's misses as ``Flights.quiet`` reads them: those in flight, and when the last one landed (``landing``:
    one lands at every look, as in a burst)."""

    def __init__(self) -> None:
        self.inflight = _Looked({"a miss": object()})
        self.landing = False

    @property
    def _inflight(self) -> _Looked:
        return self.inflight

    @property
    def _last_landed(self) -> float:
        return time.monotonic() if self.landing else 0.0

    async def looked_thrice(self) -> None:
        """Until it looked three more times (it looked, slept, looked...): it kept waiting meanwhile."""
        until = self.inflight.looks + 3
        while self.inflight.looks < until:
            self.inflight.looked.clear()
            await self.inflight.looked.wait()
