"""TrustRepository contract (node.domain.ports.repositories): SQLite and its in-memory twin."""

from __future__ import annotations

from node.adapters.index import Index


def test_trusted_keys_are_listed_by_community_then_key(index: Index) -> None:
    trust = index.trust
    for key, community in [("k2", "lab"), ("k1", "lab"), ("k3", "bio"), ("k1", "bio"), ("k1", "lab")]:
        trust.trust_add(key, community)
    assert trust.trusted() == [("k1", "bio"), ("k3", "bio"), ("k1", "lab"), ("k2", "lab")]
    assert trust.trusted("lab") == [("k1", "lab"), ("k2", "lab")]
    assert trust.trusted("none") == []


def test_a_key_leaves_one_community_or_all(index: Index) -> None:
    trust = index.trust
    for key, community in [("k1", "lab"), ("k1", "bio"), ("k2", "lab")]:
        trust.trust_add(key, community)
    assert trust.trust_rm("k1", "lab") == 1
    assert trust.trust_rm("k1", "lab") == 0
    trust.trust_add("k1", "lab")
    assert trust.trust_rm("k1", None) == 2
    assert trust.trusted() == [("k2", "lab")]


def test_signer_scores_count_each_way(index: Index) -> None:
    trust = index.trust
    assert trust.signer_score("a") == (0, 0)
    for accepted in (True, True, False, True):
        trust.score("a", accepted)
    trust.score("b", False)
    assert trust.signer_score("a") == (3, 1) and trust.signer_score("b") == (0, 1)


def test_a_claims_status_scores_its_signer_unless_told_not_to(index: Index) -> None:
    """The flat method from before the split: the claim's status and the signer's score, as one call."""
    index.set_claim_status("inv", "a", "ex", "accepted")
    index.set_claim_status("inv", "a", "ex", "refused", "lied")
    index.set_claim_status("inv", "b", "ex", "refused", "policy: not trusted", score=False)
    assert index.trust.signer_score("a") == (1, 1) and index.trust.signer_score("b") == (0, 0)
