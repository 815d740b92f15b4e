"""The index's in-memory twins and SQLite answer alike after any sequence of writes (a differential check beside
the contract suites: random operations on few keys, so that orders, ties, limits and conflicts all come up)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.adapters.index import TRUST_LABELS, ClaimRow, Divergence, ExecutionRow, Index
from node.support.errors import Conflict

KEYS = st.sampled_from(["a", "b", "c"])
TIMES = st.sampled_from([1.0, 2.0, 3.0])  # few: ties are common
LIMITS = st.sampled_from([-1, 0, 1, 2, 100])

Op = tuple[str, tuple[Any, ...]]


def _execution() -> st.SearchStrategy[ExecutionRow]:
    return st.builds(
        ExecutionRow,
        KEYS,
        st.just("q"),
        KEYS.map(lambda k: "ex" + k),
        st.just("rc"),
        st.just("lh"),
        st.integers(0, 3),
        st.just("st"),
        st.lists(KEYS, max_size=2).map(tuple),
        st.sampled_from(["computed", "peer"]),
        TIMES,
        st.sampled_from(TRUST_LABELS),
    )


def _claim() -> st.SearchStrategy[ClaimRow]:
    return st.builds(
        ClaimRow,
        KEYS,
        KEYS,
        KEYS,
        st.just("rc"),
        st.just("lh"),
        st.just(1),
        st.sampled_from(["p1", "p2"]),
        st.just(b"an"),
        TIMES,
        st.sampled_from(["pending", "accepted", "refused"]),
        st.just(""),
        st.sampled_from([None, "s1", "s2"]),
    )


WRITES: list[st.SearchStrategy[Op]] = [
    st.tuples(st.just("catalog.create_dataset"), st.tuples(KEYS, KEYS, KEYS, st.none(), st.just(""))),
    st.tuples(st.just("catalog.move_head"), st.tuples(KEYS, KEYS, KEYS)),
    st.tuples(st.just("catalog.set_version_facts"), st.tuples(KEYS, KEYS, st.integers(0, 3))),
    st.tuples(st.just("results.add_execution"), st.tuples(_execution())),
    st.tuples(
        st.just("results.add_divergence"),
        st.tuples(
            st.builds(Divergence, KEYS, *[st.just("x")] * 4, KEYS, st.just("p"), KEYS, *[st.just("y")] * 4, TIMES)
        ),
    ),
    st.tuples(st.just("results.set_output_names"), st.tuples(KEYS, st.lists(KEYS, max_size=2))),
    st.tuples(st.just("peer_claims.add_claim"), st.tuples(_claim())),
    st.tuples(st.just("peer_claims.set_claim_status"), st.tuples(KEYS, KEYS, KEYS, st.just("accepted"), st.just("ok"))),
    st.tuples(st.just("peer_claims.prune_claims"), st.tuples(st.sampled_from(["p1", "p2"]), LIMITS, LIMITS)),
    st.tuples(st.just("peer_claims.log_refusal"), st.tuples(KEYS, KEYS, st.integers(-1, 3))),
    st.tuples(st.just("peer_claims.set_signer_mark"), st.tuples(KEYS, TIMES, st.integers(0, 3))),
    st.tuples(st.just("trust.trust_add"), st.tuples(KEYS, KEYS)),
    st.tuples(st.just("trust.trust_rm"), st.tuples(KEYS, st.one_of(st.none(), KEYS))),
    st.tuples(st.just("trust.score"), st.tuples(KEYS, st.booleans())),
    st.tuples(
        st.just("pins.queue_pins"),
        st.tuples(
            st.lists(st.tuples(KEYS, st.booleans(), st.booleans()), max_size=3),
            st.lists(st.tuples(KEYS, KEYS.map(str.encode)), max_size=2),
        ),
    ),
    st.tuples(st.just("pins.pin_done"), st.tuples(KEYS, st.booleans())),
    st.tuples(st.just("pins.blocks_done"), st.tuples(st.lists(KEYS, max_size=2))),
    st.tuples(
        st.just("shapes.add_shape"), st.tuples(KEYS, KEYS, KEYS, st.integers(0, 2), TIMES, st.one_of(st.none(), KEYS))
    ),
]


def _call(index: Index, op: Op) -> object:
    repo, method = op[0].split(".")
    try:
        return getattr(getattr(index, repo), method)(*op[1])
    except Conflict:
        return "conflict"


def _reads(index: Index) -> dict[str, object]:
    """Everything the repositories say, under limits that leave nothing out (ties: compared as sets where the
    contract leaves their order open)."""
    keys = ["a", "b", "c", "zz"]
    return {
        "datasets": index.catalog.datasets(),
        "by_id": [index.catalog.dataset_by_id(k) for k in keys],
        "facts": [index.catalog.version_facts(k) for k in keys],
        "counts": (index.catalog.count(), index.results.count(), index.results.divergence_count(), index.generation),
        "executions": sorted(map(repr, index.results.executions(limit=-1))),
        "execution": [index.results.execution(k) for k in keys],
        "by_cid": [index.results.executions_by_cid("ex" + k) for k in keys],
        "with_slice": [sorted(map(repr, index.results.executions_with_slice(k, limit=-1))) for k in keys],
        "divergences": sorted(map(repr, index.results.divergences(limit=-1))),
        "names": [index.results.output_names(k) for k in keys],
        "claims": sorted(map(repr, index.peer_claims.claims(limit=-1))),
        "claim_counts": [index.peer_claims.claim_count(p, s) for p in (None, "p1") for s in (None, "accepted")],
        "shape_claims": [sorted(map(repr, index.peer_claims.shape_claims(s, limit=-1))) for s in ("s1", "s2")],
        "refusals": sorted(index.peer_claims.refusals(limit=-1)),
        "marks": [index.peer_claims.signer_mark(k) for k in keys],
        "trusted": index.trust.trusted(),
        "scores": [index.trust.signer_score(k) for k in keys],
        "pins": sorted(index.pins.pending_pins(limit=-1)),
        "blocks": sorted(index.pins.pending_blocks(limit=-1)),
        "candidates": [sorted(index.shapes.shape_candidates(k, limit=-1)) for k in keys],
        "shape_of": [index.shapes.shape_of(k) for k in keys],
    }


@pytest.fixture
def fresh_pair(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], tuple[Index, Index]]:
    return lambda: (Index(tmp_path_factory.mktemp("ix") / "index.sqlite"), Index.in_memory())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(WRITES), max_size=25))
def test_twins_and_sqlite_agree_after_any_writes(
    fresh_pair: Callable[[], tuple[Index, Index]], monkeypatch: pytest.MonkeyPatch, ops: list[Op]
) -> None:
    now = [0.0]
    monkeypatch.setattr("node.support.wall_clock.now", lambda: now[0])
    sqlite, memory = fresh_pair()
    try:
        for n, op in enumerate(ops):
            now[0] = float(n // 2)  # each op at one instant on both; two ops in a row share it (ties)
            assert _call(sqlite, op) == _call(memory, op), op
        assert _reads(sqlite) == _reads(memory)
    finally:
        sqlite.close()


def test_the_differential_check_sees_a_difference(tmp_path: Path) -> None:
    """The check itself: two indexes that differ by one write read differently."""
    one, two = Index(tmp_path / "one.sqlite"), Index.in_memory()
    one.trust.trust_add("k", "lab")
    assert _reads(one) != _reads(two)
    one.close()
