"""CatalogRepository contract (node.domain.ports.repositories): SQLite and its in-memory twin."""

from __future__ import annotations

import pytest

from node.adapters.index import Index
from node.support.errors import Conflict
from tests.contract.conftest import Ticks


def test_a_dataset_is_found_by_name_and_by_id(index: Index, ticks: Ticks) -> None:
    cat = index.catalog
    assert cat.dataset("birds") is None and cat.dataset_by_id("did:key:z1") is None
    cat.create_dataset("birds", "did:key:z1", "bhead1", "k51ipns", "key-birds")
    row = cat.dataset("birds")
    assert row is not None and row == cat.dataset_by_id("did:key:z1")
    assert (row.name, row.id, row.head, row.ipns, row.key_name) == (
        "birds",
        "did:key:z1",
        "bhead1",
        "k51ipns",
        "key-birds",
    )
    assert row.created == row.updated == ticks.t
    assert cat.count() == 1


def test_datasets_are_listed_by_name(index: Index) -> None:
    for name in ("zebra", "Alpha", "beta", "alpha"):
        index.catalog.create_dataset(name, f"did:key:{name}", "h", None, "")
    assert [r.name for r in index.catalog.datasets()] == ["Alpha", "alpha", "beta", "zebra"]  # binary order
    assert index.catalog.count() == 4


@pytest.mark.parametrize(("name", "dataset_id"), [("birds", "did:key:other"), ("other", "did:key:z1")])
def test_a_taken_name_or_id_is_a_conflict_and_changes_nothing(index: Index, name: str, dataset_id: str) -> None:
    index.catalog.create_dataset("birds", "did:key:z1", "h1", None, "")
    generation = index.generation
    with pytest.raises(Conflict):
        index.catalog.create_dataset(name, dataset_id, "h2", None, "")
    assert [r.head for r in index.catalog.datasets()] == ["h1"] and index.generation == generation


def test_move_head_is_a_compare_and_set(index: Index, ticks: Ticks) -> None:
    cat = index.catalog
    cat.create_dataset("birds", "did:key:z1", "h1", None, "")
    created = ticks.t
    ticks.tick()
    assert cat.move_head("birds", "h1", "h2")
    assert not cat.move_head("birds", "h1", "h3")  # moved since h1 was read
    assert not cat.move_head("fish", "h1", "h3")
    row = cat.dataset("birds")
    assert row is not None and row.head == "h2" and row.created == created and row.updated == ticks.t


def test_generation_moves_with_every_write_of_a_head_only(index: Index) -> None:
    seen = [index.generation]
    index.catalog.create_dataset("birds", "did:key:z1", "h1", None, "")
    seen.append(index.generation)
    index.catalog.move_head("birds", "h1", "h2")
    seen.append(index.generation)
    index.catalog.move_head("birds", "h1", "h3")  # refused: no write
    index.catalog.set_version_facts("h2", "lh", 3)  # not a head
    seen.append(index.generation)
    assert seen[0] < seen[1] < seen[2] == seen[3]


def test_version_facts_last_writer_wins(index: Index) -> None:
    cat = index.catalog
    assert cat.version_facts("h") is None
    cat.set_version_facts("h", "lh1", 3)
    cat.set_version_facts("h", "lh2", 4)
    assert cat.version_facts("h") == ("lh2", 4)
