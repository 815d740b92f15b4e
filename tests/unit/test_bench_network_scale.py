"""network_scale.py's idle figures (scripts/bench/network_scale.py): with ``--idle-split``, each node's process and
its Kubo are measured apart (CPU share, wake-ups a second), and the keys the bench always gave stay as they were."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALWAYS = {
    "node_rss_mb_p50",
    "node_rss_mb_max",
    "kubo_rss_mb_p50",
    "idle_cpu_percent_per_node_p50",
    "idle_cpu_percent_per_node_max",
}


def _bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    spec = importlib.util.spec_from_file_location("cairn_bench_network_scale", ROOT / "scripts/bench/network_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sleeper() -> Any:
    """A process that only sleeps: stands for an idle Kubo."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def _busy_idle(bench: ModuleType, nodes: list[Any], split: bool) -> dict[str, Any]:
    """``idle`` over 0.5 s while this process (every fake node's "node process") spins in a thread, which lives
    until ``idle`` has returned (a thread that ends takes its context switches out of /proc/PID/task)."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin)
    t.start()
    try:
        return bench.idle(nodes, 0.0, 0.5, split)
    finally:
        stop.set()
        t.join()


def test_idle_split_gives_node_and_kubo_apart(sleeper: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    monkeypatch.setattr(bench, "kubo_pid", lambda node: node.kubo)
    nodes = [SimpleNamespace(name="n0", proc=SimpleNamespace(pid=os.getpid()), kubo=sleeper.pid)]
    out = _busy_idle(bench, nodes, True)
    assert out.keys() >= ALWAYS
    one = out["per_node"]["n0"]
    assert (one["node_pid"], one["kubo_pid"]) == (os.getpid(), sleeper.pid)
    assert one["node_cpu_percent"] > 5  # the spinning thread (a loose bound: the suite may load both cores)
    assert one["kubo_cpu_percent"] < 20  # asleep
    assert one["node_cpu_percent"] + one["kubo_cpu_percent"] == pytest.approx(
        out["idle_cpu_percent_per_node_p50"], abs=0.02
    )
    assert (out["node_cpu_percent_p50"], out["kubo_cpu_percent_p50"]) == (
        one["node_cpu_percent"],
        one["kubo_cpu_percent"],
    )
    assert one["kubo_wakeups_per_s"] >= 0 and one["node_wakeups_per_s"] >= 0


def test_without_the_flag_the_keys_are_the_old_ones(sleeper: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    monkeypatch.setattr(bench, "kubo_pid", lambda node: node.kubo)
    nodes = [SimpleNamespace(name="n0", proc=SimpleNamespace(pid=os.getpid()), kubo=sleeper.pid)]
    assert bench.idle(nodes, 0.0, 0.1).keys() == ALWAYS


def test_wakeups_counts_a_processs_context_switches(sleeper: Any) -> None:
    bench = _bench()
    assert bench.wakeups(sleeper.pid) is not None
    assert bench.wakeups(None) is None
