"""libp2p's multi-line log records come out as one line on ``cairn.p2p.libp2p``."""

from __future__ import annotations

import logging

from p2p.logs import OneLineForwarder


def make_logger(name: str, forwarder: OneLineForwarder) -> logging.Logger:
    source = logging.getLogger(name)
    source.handlers[:] = [forwarder]
    source.propagate = False
    source.setLevel(logging.DEBUG)
    return source


def test_errors_become_one_line_warnings_and_repeats_are_dropped(caplog):
    caplog.set_level(logging.DEBUG, logger="cairn.p2p.test")
    src = make_logger("libp2p.test.fwd1", OneLineForwarder("cairn.p2p.test"))
    try:
        raise ConnectionResetError("socket connection broken\nmore detail")
    except ConnectionResetError:
        src.exception("Failed to open stream to peer X:\n  Error: reset\n  Timeout: 30s")
    src.error("Failed to open stream to peer X:\n  Error: reset\n  Timeout: 30s")
    src.error("Failed to open stream to peer X:\n  Error: reset\n  Timeout: 30s")  # repeat: dropped
    src.warning("dial failed")
    records = [r for r in caplog.records if r.name == "cairn.p2p.test"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING, logging.DEBUG]
    first = records[0].getMessage()
    assert "\n" not in first and first.startswith("libp2p.test.fwd1: Failed to open stream to peer X: | Error: reset")
    assert first.endswith("(ConnectionResetError: socket connection broken)")
    assert records[0].exc_info is None
    assert records[2].getMessage() == "libp2p.test.fwd1: dial failed"


def test_nothing_is_formatted_below_the_target_level(caplog):
    caplog.set_level(logging.WARNING, logger="cairn.p2p.test2")
    src = make_logger("libp2p.test.fwd2", OneLineForwarder("cairn.p2p.test2"))
    src.warning("routine")
    assert not [r for r in caplog.records if r.name == "cairn.p2p.test2"]
