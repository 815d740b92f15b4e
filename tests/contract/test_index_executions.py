"""ExecutionRepository contract (node.domain.ports.repositories): SQLite and its in-memory twin."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.adapters.index import TRUST_LABELS, Divergence, ExecutionRow, Index, trust_strength
from node.domain.model import Failure


def _row(n: int, trust: str = "computed", inv: str = "inv", created: float | None = None, **kw: object) -> ExecutionRow:
    row = ExecutionRow(
        inv,
        f"q{n}",
        f"ex{n}",
        f"rc{n}",
        f"lh{n}",
        n,
        "st",
        (f"s{n}",),
        "computed",
        float(n if created is None else created),
        trust,
    )
    return replace(row, **kw)  # type: ignore[arg-type]


def test_an_execution_comes_back_as_it_was_stored(index: Index) -> None:
    row = _row(1, profile="bep", slices=("s1", "s2"))
    failed = _row(2, inv="inv2", slices=(), rows=0, failure=Failure("DIVIDE_BY_ZERO", "22012", "division by zero"))
    index.results.add_execution(row)
    index.results.add_execution(failed)
    assert index.results.execution("inv") == row and index.results.execution("inv2") == failed
    assert index.results.execution("nothing") is None
    assert index.results.executions_by_cid("ex2") == failed and index.results.executions_by_cid("ex9") is None
    assert index.results.count() == 2


def test_slices_given_as_a_list_come_back_as_a_tuple(index: Index) -> None:
    index.results.add_execution(_row(1, slices=["a", "b"]))
    got = index.results.execution("inv")
    assert got is not None and got.slices == ("a", "b")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=st.lists(st.sampled_from(TRUST_LABELS), min_size=1, max_size=6))
def test_a_better_checked_answer_replaces_a_looser_one_and_nothing_else_does(
    make_index: Callable[[], Index], labels: list[str]
) -> None:
    index = make_index()
    for n, label in enumerate(labels):
        index.results.add_execution(_row(n, label))
    best = max(trust_strength(label) for label in labels)
    first_best = next(n for n, label in enumerate(labels) if trust_strength(label) == best)
    assert index.results.execution("inv") == _row(first_best, labels[first_best])


@pytest.mark.parametrize(
    ("trust", "replaces"), [("computed", True), ("recomputed-agreed", True), ("unverified", False)]
)
def test_a_result_checked_here_replaces_a_recorded_failure(index: Index, trust: str, replaces: bool) -> None:
    failed = _row(1, slices=(), rows=0, failure=Failure("X", "22012", "boom"))
    index.results.add_execution(failed)
    index.results.add_execution(_row(2, trust))
    assert index.results.execution("inv") == (_row(2, trust) if replaces else failed)


def test_a_recorded_failure_does_not_replace_a_result(index: Index) -> None:
    index.results.add_execution(_row(1))
    index.results.add_execution(_row(2, failure=Failure("X", "22012", "boom")))
    assert index.results.execution("inv") == _row(1)


def test_generation_moves_with_every_execution_written(index: Index) -> None:
    before = index.generation
    index.results.add_execution(_row(1))
    middle = index.generation
    index.results.add_execution(_row(2))  # kept out (first writer wins), still a write
    assert before < middle < index.generation


def test_executions_are_listed_newest_first_within_the_limit(index: Index) -> None:
    for n, created in enumerate([5.0, 1.0, 9.0, 3.0]):
        index.results.add_execution(_row(n, inv=f"i{n}", created=created))
    assert [r.invocation for r in index.results.executions()] == ["i2", "i0", "i3", "i1"]
    assert [r.invocation for r in index.results.executions(limit=2)] == ["i2", "i0"]


def test_executions_with_a_slice_match_whole_cids_oldest_first(index: Index) -> None:
    index.results.add_execution(_row(1, inv="i1", created=5.0, slices=("bafyA", "bafyB")))
    index.results.add_execution(_row(2, inv="i2", created=2.0, slices=("bafyB",)))
    index.results.add_execution(_row(3, inv="i3", created=1.0, slices=("bafyBB",)))
    assert [r.invocation for r in index.results.executions_with_slice("bafyB")] == ["i2", "i1"]
    assert [r.invocation for r in index.results.executions_with_slice("bafyB", limit=1)] == ["i2"]
    assert index.results.executions_with_slice("bafy") == []
    assert index.results.executions_with_slice("bafy_B") == []  # a wildcard character is no wildcard
    assert index.results.executions_with_slice("BAFYBB") == []  # matched as text (any case), then not exact
    index.results.add_execution(_row(4, inv="i4", created=0.5, slices=("BAFYB",)))
    assert index.results.executions_with_slice("bafyB", limit=1) == []  # the text match took the one place


def _divergence(signer: str, their: str, received: float, inv: str = "inv") -> Divergence:
    return Divergence(inv, "ex", "ep", "lh", 3, signer, "peer", their, "rc", None, "lh2", 4, received)


def test_a_divergence_is_recorded_once_and_listed_newest_first(index: Index) -> None:
    res = index.results
    assert res.add_divergence(_divergence("a", "x", 1.0))
    assert not res.add_divergence(_divergence("a", "x", 5.0))  # the same signer's same answer
    assert res.add_divergence(_divergence("b", "x", 3.0))
    assert res.add_divergence(_divergence("a", "y", 2.0, inv="other"))
    assert res.divergences() == [
        _divergence("b", "x", 3.0),
        _divergence("a", "y", 2.0, "other"),
        _divergence("a", "x", 1.0),
    ]
    assert res.divergences("inv") == [_divergence("b", "x", 3.0), _divergence("a", "x", 1.0)]
    assert res.divergences("inv", limit=1) == [_divergence("b", "x", 3.0)]
    assert res.divergence_count() == 3 and res.count() == 0


def test_output_names_first_writer_wins(index: Index) -> None:
    assert index.results.output_names("ex") is None
    index.results.set_output_names("ex", ["a", "b"])
    index.results.set_output_names("ex", ["c"])
    assert index.results.output_names("ex") == ["a", "b"]
