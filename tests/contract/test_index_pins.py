"""PinRepository contract (node.domain.ports.repositories): SQLite and its in-memory twin."""

from __future__ import annotations

from node.adapters.index import Index
from tests.contract.conftest import Ticks


def test_owed_pins_oldest_first_once_per_cid_and_kind(index: Index, ticks: Ticks) -> None:
    pins = index.pins
    pins.queue_pins([("a", False, True), ("b", True, False)])
    ticks.tick()
    pins.queue_pins([("a", False, False), ("a", True, False), ("c", False, False)])  # (a, direct): owed already
    assert pins.pending_pins() == [("a", False, True), ("b", True, False), ("a", True, False), ("c", False, False)]
    assert pins.pending_pins(limit=2) == [("a", False, True), ("b", True, False)]
    pins.pin_done("a", False)
    pins.pin_done("zz", True)
    assert pins.pending_pins() == [("b", True, False), ("a", True, False), ("c", False, False)]


def test_owed_blocks_oldest_first_until_done(index: Index, ticks: Ticks) -> None:
    pins = index.pins
    pins.queue_pins([("a", True, False)], [("a", b"A"), ("b", b"B")])
    ticks.tick()
    pins.queue_pins([], [("a", b"other"), ("c", bytearray(b"C"))])  # a: owed already, its first bytes stay
    assert pins.pending_blocks() == [("a", b"A"), ("b", b"B"), ("c", b"C")]
    assert all(type(d) is bytes for _, d in pins.pending_blocks())
    assert pins.pending_blocks(limit=1) == [("a", b"A")]
    pins.blocks_done(["a", "c", "nothing"])
    assert pins.pending_blocks() == [("b", b"B")] and pins.pending_pins() == [("a", True, False)]
