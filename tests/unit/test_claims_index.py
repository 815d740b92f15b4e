"""Claims from peers, the parts that need no network: announcement bounds, trust labels in the index."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.adapters.identity import generate
from node.adapters.index import TRUST_LABELS, ExecutionRow, Index, trust_strength
from node.domain.model import Announcement, block_of, cid_for
from node.services.resolve.claim_checks import MAX_PROVIDERS, check_announcement
from node.support.errors import ClaimRefused

PEER = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


def _announcement(providers: list[str]) -> bytes:
    who = generate()
    c = cid_for(b"x")
    return block_of(
        Announcement(
            c, c, c, "f1e20" + "00" * 32, 1, {"name": "spark"}, tuple(providers), who.node_key, "2026-01-01T00:00:00Z"
        ).signed(who.sign)
    ).data


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 3 * MAX_PROVIDERS))
def test_provider_lists_are_bounded(n: int) -> None:
    data = _announcement([f"/ip4/127.0.0.1/tcp/{4000 + i}/p2p/{PEER}" for i in range(n)])
    if n <= MAX_PROVIDERS:
        assert len(check_announcement(data).providers) == n
    else:
        with pytest.raises(ClaimRefused, match=f"{n} providers"):
            check_announcement(data)


@pytest.mark.parametrize(
    "addr", ["/ip4/127.0.0.1/tcp/4001", "http://example.org/", "/ip4/1.2.3.4/tcp/1/p2p/" + "x" * 300]
)
def test_providers_must_be_peer_multiaddrs(addr: str) -> None:
    with pytest.raises(ClaimRefused, match="provider"):
        check_announcement(_announcement([addr]))


def _row(n: int, trust: str) -> ExecutionRow:
    return ExecutionRow(
        "inv",
        f"q{n}",
        f"ex{n}",
        f"rc{n}",
        f"lh{n}",
        n,
        "st",
        (f"s{n}",),
        "computed" if trust == "computed" else "peer",
        float(n),
        trust,
    )


@settings(max_examples=60, deadline=None)
@given(labels=st.lists(st.sampled_from(TRUST_LABELS), min_size=1, max_size=6))
def test_a_better_checked_row_replaces_a_looser_one_and_nothing_else_does(
    tmp_path_factory: pytest.TempPathFactory, labels: list[str]
) -> None:
    index = Index(tmp_path_factory.mktemp("ix") / "index.sqlite")
    for n, label in enumerate(labels):
        index.results.add_execution(_row(n, label))
    best = max(trust_strength(label) for label in labels)
    first_best = next(n for n, label in enumerate(labels) if trust_strength(label) == best)  # the oracle
    got = index.results.execution("inv")
    assert got is not None and got == _row(first_best, labels[first_best])


def test_an_index_from_before_trust_labels_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE executions (invocation TEXT PRIMARY KEY, query TEXT NOT NULL, execution TEXT NOT NULL, "
        "receipt TEXT NOT NULL, logical_hash TEXT NOT NULL, rows INTEGER NOT NULL, structure TEXT NOT NULL, "
        "slices TEXT NOT NULL, source TEXT NOT NULL, created REAL NOT NULL)"
    )
    db.execute("INSERT INTO executions VALUES ('i1', 'q', 'e1', 'r', 'h', 1, 's', '[]', 'computed', 1.0)")
    db.execute("INSERT INTO executions VALUES ('i2', 'q', 'e2', 'r', 'h', 1, 's', '[]', 'peer', 1.0)")
    db.commit()
    db.close()
    index = Index(path)
    one, two = index.results.execution("i1"), index.results.execution("i2")
    assert one is not None and one.trust == "computed"
    assert two is not None and two.trust == "unverified"  # nothing says how it was checked: the weakest label


def _claimant(index: Index, invocation: object, n: int) -> tuple[object, str]:
    """A well-signed claim about ``invocation`` from a fresh signer, recorded as received."""
    from node.adapters.index import ClaimRow
    from node.domain.model import cid_str

    who = generate()
    ex = cid_for(f"ex{n}".encode())
    an = Announcement(
        invocation, ex, ex, "f1e20" + "00" * 32, 1, {"name": "spark"}, (), who.node_key, "2026-01-01T00:00:00Z"
    ).signed(who.sign)
    index.peer_claims.add_claim(
        ClaimRow(
            cid_str(invocation),
            who.node_key,
            cid_str(ex),
            cid_str(ex),
            an.logical_hash,
            1,
            "peer",
            block_of(an).data,
            0.0,
            "pending",
            "",
        )
    )
    return ex, who.node_key


async def test_claims_order_scores_and_policy_refusals(tmp_path: Path) -> None:
    """Refused for what it says: never again. Refused by policy: looked at again. Signer refused more often than
    accepted: not used. Otherwise best record first."""
    from node.domain.model import cid_str
    from node.services.resolve.resolver import POLICY, Options, Resolver

    index = Index(tmp_path / "index.sqlite")
    resolver = Resolver(None, None, index, None, generate(), Options(tmp_path, 1))  # type: ignore[arg-type]
    inv = cid_for(b"the invocation")
    (ex_lied, lied), (ex_policy, policy), (_, good), (_, new), (_, bad) = [_claimant(index, inv, n) for n in range(5)]
    index.set_claim_status(cid_str(inv), lied, cid_str(ex_lied), "refused", "the data does not match")
    index.set_claim_status(cid_str(inv), policy, cid_str(ex_policy), "refused", POLICY + "not trusted", score=False)
    for _ in range(3):
        index.set_claim_status("other", good, "x", "accepted")
    for _ in range(2):  # a good record does not bring back a claim refused for what it says
        index.set_claim_status("other", lied, "x", "accepted")
    index.set_claim_status("other", bad, "x", "accepted")
    index.set_claim_status("other", bad, "y", "refused", "lied")
    index.set_claim_status("other", bad, "z", "refused", "lied")
    signers = [c.signer for c in await resolver.peers.claims(inv, None)]
    assert signers[0] == good and set(signers) == {good, policy, new}  # lied: final; bad: 1 accepted, 2 refused
    assert index.trust.signer_score(policy) == (0, 0)  # a policy refusal counts neither way
    (row,) = [c for c in index.peer_claims.claims(cid_str(inv)) if c.signer == bad]
    assert row.status == "refused" and "refused 2 times, accepted 1" in row.reason


def test_owed_pins_are_kept_across_a_reopen_until_done(tmp_path: Path) -> None:
    """The queue of pins owed by answers already given (docs/peers.md "Answer first"): oldest first, once per
    (cid, recursive), still there after the index is closed and opened again, gone only when done."""
    index = Index(tmp_path / "index.sqlite")
    index.pins.queue_pins([("a", False, True), ("b", True, False)])
    index.pins.queue_pins([("a", False, True)])  # queued twice: owed once
    index.close()
    index = Index(tmp_path / "index.sqlite")
    assert index.pins.pending_pins() == [("a", False, True), ("b", True, False)]
    index.pins.pin_done("a", False)
    assert index.pins.pending_pins() == [("b", True, False)]
    index.close()
