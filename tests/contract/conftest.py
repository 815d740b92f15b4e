"""Contract suites: one per port (node.domain.ports), each run against every implementation of it (the real adapter and
its in-memory twin), so that the twins cannot drift from what they stand in for."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from node.adapters.index import Index


@pytest.fixture(params=["sqlite", "memory"])
def make_index(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], Index]]:
    """Makes fresh indexes: the six repositories on SQLite, then as in-memory twins."""
    made: list[Index] = []

    def make() -> Index:
        fresh = (
            Index(tmp_path_factory.mktemp("ix") / "index.sqlite") if request.param == "sqlite" else Index.in_memory()
        )
        made.append(fresh)
        return fresh

    try:
        yield make
    finally:
        for ix in made:
            ix.close()


@pytest.fixture
def index(make_index: Callable[[], Index]) -> Index:
    return make_index()


class Ticks:
    """A clock for ``node.support.wall_clock.now`` that moves only when told: rows written at known, distinct times."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def tick(self, by: float = 1.0) -> float:
        self.t += by
        return self.t


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> Ticks:
    clock = Ticks()
    monkeypatch.setattr("node.support.wall_clock.now", clock)
    return clock
