"""ClaimRepository contract (node.domain.ports.repositories): SQLite and its in-memory twin."""

from __future__ import annotations

from node.adapters.index import ClaimRow, Index
from tests.contract.conftest import Ticks


def _claim(
    n: int, received: float, peer: str = "p1", inv: str = "inv", status: str = "pending", shape: str | None = None
) -> ClaimRow:
    return ClaimRow(
        inv, f"did:key:s{n}", f"ex{n}", f"rc{n}", f"lh{n}", n, peer, b"an" + bytes([n]), received, status, "", shape
    )


def test_a_claim_is_recorded_once_and_comes_back_as_it_was(index: Index) -> None:
    claims = index.peer_claims
    assert claims.add_claim(_claim(1, 1.0, shape="sh"))
    assert not claims.add_claim(_claim(1, 9.0))  # same (invocation, signer, execution)
    assert claims.claims() == [_claim(1, 1.0, shape="sh")]
    assert claims.claim_count() == 1


def test_claims_are_listed_newest_first_by_invocation(index: Index) -> None:
    claims = index.peer_claims
    for n, (t, inv) in enumerate([(3.0, "a"), (1.0, "b"), (5.0, "a"), (2.0, "a")]):
        claims.add_claim(_claim(n, t, inv=inv))
    assert [c.received for c in claims.claims()] == [5.0, 3.0, 2.0, 1.0]
    assert [c.received for c in claims.claims("a")] == [5.0, 3.0, 2.0]
    assert [c.received for c in claims.claims("a", limit=2)] == [5.0, 3.0]
    assert [c.received for c in claims.claims("", limit=1)] == [5.0]  # no invocation: all


def test_claims_of_a_shape(index: Index) -> None:
    claims = index.peer_claims
    claims.add_claim(_claim(1, 1.0, shape="s1"))
    claims.add_claim(_claim(2, 2.0, shape="s1"))
    claims.add_claim(_claim(3, 3.0, shape="s2"))
    claims.add_claim(_claim(4, 4.0))
    assert [c.execution for c in claims.shape_claims("s1")] == ["ex2", "ex1"]
    assert [c.execution for c in claims.shape_claims("s1", limit=1)] == ["ex2"]
    assert claims.shape_claims("none") == []


def test_claims_are_counted_by_peer_and_status(index: Index) -> None:
    claims = index.peer_claims
    claims.add_claim(_claim(1, 1.0, peer="p1"))
    claims.add_claim(_claim(2, 2.0, peer="p1", status="accepted"))
    claims.add_claim(_claim(3, 3.0, peer="p2"))
    assert claims.claim_count() == 3 and claims.claim_count(peer="p1") == 2
    assert claims.claim_count(status="pending") == 2 and claims.claim_count("p1", "accepted") == 1
    assert claims.claim_count(peer="p9") == 0


def test_a_claims_status_is_set_and_an_unknown_claim_is_left_alone(index: Index) -> None:
    claims = index.peer_claims
    claims.add_claim(_claim(1, 1.0))
    claims.set_claim_status("inv", "did:key:s1", "ex1", "refused", "the data does not match")
    claims.set_claim_status("inv", "did:key:s9", "ex9", "accepted")
    (row,) = claims.claims()
    assert (row.status, row.reason) == ("refused", "the data does not match")
    assert claims.claim_count() == 1


def test_pruning_drops_claims_not_yet_accepted_first_oldest_first(index: Index) -> None:
    claims = index.peer_claims
    for n, (t, peer, status) in enumerate(
        [(1.0, "p1", "accepted"), (2.0, "p1", "pending"), (3.0, "p1", "refused"), (4.0, "p1", "pending")]
        + [(0.5, "p2", "pending"), (6.0, "p2", "accepted")]
    ):
        claims.add_claim(_claim(n, t, peer=peer, status=status))
    assert claims.prune_claims("p1", per_peer=2, total=100) == 2  # p1's pending at 2.0 and refused at 3.0
    assert sorted(c.execution for c in claims.claims() if c.peer == "p1") == ["ex0", "ex3"]
    assert claims.prune_claims("p1", per_peer=10, total=2) == 2  # p2's pending at 0.5, then p1's at 4.0
    assert sorted(c.execution for c in claims.claims()) == ["ex0", "ex5"]
    assert claims.prune_claims("p1", per_peer=10, total=10) == 0


def test_refusals_keep_the_last_ones_newest_first(index: Index, ticks: Ticks) -> None:
    claims = index.peer_claims
    for n in range(5):
        ticks.tick()
        claims.log_refusal(f"p{n}", f"bad {n}", keep=3)
    assert claims.refusals() == [("p4", "bad 4", ticks.t), ("p3", "bad 3", ticks.t - 1), ("p2", "bad 2", ticks.t - 2)]
    assert claims.refusals(limit=1) == [("p4", "bad 4", ticks.t)]
    claims.log_refusal("p5", "bad 5", keep=0)
    assert claims.refusals() == []


def test_a_signers_mark_only_rises(index: Index) -> None:
    claims = index.peer_claims
    assert claims.signer_mark("a") is None
    claims.set_signer_mark("a", 10.0, keep=5)
    claims.set_signer_mark("a", 7.0, keep=5)
    assert claims.signer_mark("a") == 10.0
    claims.set_signer_mark("a", 12.5, keep=5)
    assert claims.signer_mark("a") == 12.5


def test_past_the_cap_the_least_recently_moved_signer_is_forgotten(index: Index, ticks: Ticks) -> None:
    claims = index.peer_claims
    for signer in ("a", "b", "c"):
        ticks.tick()
        claims.set_signer_mark(signer, 1.0, keep=3)
    ticks.tick()
    claims.set_signer_mark("a", 2.0, keep=3)  # a moved: b is now the least recently moved
    ticks.tick()
    claims.set_signer_mark("d", 1.0, keep=3)
    assert [claims.signer_mark(s) for s in "abcd"] == [2.0, None, 1.0, 1.0]
