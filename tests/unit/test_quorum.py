"""quorum:K counting (docs/peers.md "Quorum"): pure logic, no node."""

from __future__ import annotations

import pytest

from node.services.resolve.quorum import Mode, parse, tally
from node.services.resolve.resolver import accepts, valid_mode
from node.support.errors import InvalidInput

X, Y = ("hx", 3), ("hy", 3)


def test_parse() -> None:
    assert parse("quorum:2") == Mode(2, False) and parse("quorum:3:communities") == Mode(3, True)
    assert parse("community") is None and valid_mode("quorum:1") and valid_mode("any") and not valid_mode("all")
    for bad in ("quorum:", "quorum:0", "quorum:-1", "quorum:2:friends", "quorum:x", "quorum:1:communities:x"):
        with pytest.raises(InvalidInput):
            parse(bad)
    assert accepts("quorum:2") == ("computed", "recomputed-agreed")  # a stored peer row is counted again


def test_k_distinct_signers_agree_and_the_outvoted_are_named() -> None:
    t = tally([("s1", X), ("s2", X), ("s3", Y), ("s1", X)], Mode(2, False))  # s1 twice counts once
    assert t.output == X and t.agree == ("s1", "s2") and t.dissent == ("s3",) and t.counted == 2
    t = tally([("s1", X), ("s3", Y)], Mode(2, False))
    assert t.output is None and t.counted == 1
    assert tally([], Mode(1, False)).output is None


def test_a_tie_or_a_self_contradicting_signer_is_no_quorum() -> None:
    t = tally([("s1", X), ("s2", X), ("s3", Y), ("s4", Y)], Mode(2, False))
    assert t.output is None and set(t.dissent) | set(t.agree) == {"s1", "s2", "s3", "s4"}
    t = tally([("s1", X), ("s1", Y), ("s2", X)], Mode(2, False))  # s1 announced two outputs: no vote
    assert t.output is None and t.counted == 1 and "s1" in t.dissent


def test_communities_count_once_each() -> None:
    communities = {"s1": frozenset({"red"}), "s2": frozenset({"red"}), "s3": frozenset({"blue"})}
    votes = [("s1", X), ("s2", X)]
    assert tally(votes, Mode(2, True), communities).output is None  # two signers, one community
    assert tally([*votes, ("s3", X)], Mode(2, True), communities).output == X
    assert tally([("s9", X)], Mode(1, True), communities).output is None  # a signer trusted nowhere counts 0
