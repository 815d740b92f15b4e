"""The benches' process helpers (scripts/bench/_procs.py): a process tree is found through /proc, and a timed
step waits until the tree is quiet (a node's Spark JVM warming up beside an ingest took one of the two cores)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))
from _procs import descendants, tree_pids, wait_tree_quiet

PARENT = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"


def _tree(child: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", PARENT.format(child=child)])
    try:
        yield proc
    finally:
        for pid in reversed(tree_pids(proc.pid)):  # by PID, children first
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def sleeping() -> Iterator[subprocess.Popen[bytes]]:
    yield from _tree("import time; time.sleep(60)")


@pytest.fixture
def spinning() -> Iterator[subprocess.Popen[bytes]]:
    yield from _tree("while True: pass")


def _with_child(proc: subprocess.Popen[bytes]) -> list[int]:
    """The tree once the parent has started its child (polled, 10 s at most)."""
    for _ in range(200):
        if len(pids := tree_pids(proc.pid)) == 2:
            return pids
        time.sleep(0.05)
    raise AssertionError("the child did not start within 10 s")


def test_tree_pids_finds_the_child(sleeping: subprocess.Popen[bytes]) -> None:
    pids = _with_child(sleeping)
    assert pids[0] == sleeping.pid and pids[1] != sleeping.pid
    assert descendants(sleeping.pid) == pids[1:]  # the root is not its own descendant


def test_a_sleeping_tree_is_quiet(sleeping: subprocess.Popen[bytes]) -> None:
    _with_child(sleeping)
    assert wait_tree_quiet(sleeping.pid, window=0.3, timeout=30) < 30


def test_a_busy_child_keeps_the_tree_busy(spinning: subprocess.Popen[bytes]) -> None:
    _with_child(spinning)
    with pytest.raises(RuntimeError, match="stayed busy"):
        wait_tree_quiet(spinning.pid, window=0.3, timeout=1.0)
