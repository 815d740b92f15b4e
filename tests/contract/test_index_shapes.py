"""ShapeRepository contract (node.domain.ports.repositories): SQLite and its in-memory twin."""

from __future__ import annotations

from node.adapters.index import Index


def test_candidates_of_a_shape_newest_first_first_writer_wins(index: Index) -> None:
    shapes = index.shapes
    shapes.add_shape("s1", "i1", "SELECT 1", 1, 1.0)
    shapes.add_shape("s1", "i2", "SELECT 2", 2, 3.0, public="p")
    shapes.add_shape("s1", "i1", "SELECT other", 9, 9.0)  # the same execution over the same shape: kept as first
    shapes.add_shape("s2", "i3", "SELECT 3", 3, 2.0)
    assert shapes.shape_candidates("s1") == [("i2", "SELECT 2", 2), ("i1", "SELECT 1", 1)]
    assert shapes.shape_candidates("s1", limit=1) == [("i2", "SELECT 2", 2)]
    assert shapes.shape_candidates("none") == []


def test_the_public_shape_of_a_result(index: Index) -> None:
    shapes = index.shapes
    shapes.add_shape("local1", "i1", "SELECT 1", 1, 1.0)
    assert shapes.shape_of("i1") is None
    shapes.add_shape("local2", "i1", "SELECT 1", 1, 2.0, public="pub")
    assert shapes.shape_of("i1") == "pub" and shapes.shape_of("i9") is None
