"""The Spark worker's stall watchdog (``spark_worker.engine.Engine.watch``) on a clock of the test's own: a JVM
that uses no CPU while a job runs is killed once that has lasted more than ``stall_s``, and not before; a JVM that
computes, however slowly, or that has no job, is never killed. (tests/integration/test_spark_budgets.py kills a
stopped real JVM this way.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from spark_worker import engine
from spark_worker.engine import Engine
from spark_worker.process import STALL_CPU_S, WATCH_EVERY_S

STALL_S = 20.0


class _Jvm:
    """The worker and its JVM as the watchdog reads them, one sample per tick: the JVM's CPU seconds, and whether
    a job runs. ``stopping.wait`` moves the clock on by one tick, or stops the watch once the samples are over."""

    stall_s = STALL_S

    def __init__(self, samples: list[tuple[float, bool]]) -> None:
        self.now, self.cpu, self.killed_at = 0.0, 0.0, list[float]()
        self.pid, self.stalled, self.lock = 4242, False, threading.Lock()
        self.running: dict[str, object] = {"job": object()}
        self.stopping = SimpleNamespace(wait=self._tick)
        self._samples: Iterator[tuple[float, bool]] = iter(samples)

    def jvm_proc(self) -> _Jvm:
        return self

    def _tick(self, seconds: float) -> bool:
        sample = next(self._samples, None)
        if sample is None:
            return True
        self.now += seconds
        self.cpu, busy = sample
        self.running = {"job": object()} if busy else {}
        return False

    def kill(self) -> None:
        self.killed_at.append(self.now)


def _watch(monkeypatch: pytest.MonkeyPatch, samples: list[tuple[float, bool]]) -> tuple[list[float], bool]:
    """Run the watchdog over ``samples``: when it killed the JVM, and whether it called the job stalled."""
    jvm = _Jvm(samples)
    monkeypatch.setattr(engine, "time", SimpleNamespace(monotonic=lambda: jvm.now))
    monkeypatch.setattr(engine, "cpu_seconds", lambda pid: jvm.cpu if pid == jvm.pid else None)
    monkeypatch.setattr(engine, "jvm_proc", lambda: jvm)
    Engine.watch(jvm, lambda: bool(jvm.running), jvm.stopping)  # type: ignore[arg-type]
    return jvm.killed_at, jvm.stalled


@pytest.fixture(autouse=True)
def _ticks_of_one_second() -> None:
    assert WATCH_EVERY_S == 1.0  # the times below count ticks as seconds


def test_a_jvm_idle_while_a_job_runs_is_killed_after_the_stall_budget_and_not_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    killed_at, stalled = _watch(monkeypatch, [(0.0, True)] * 40)
    assert killed_at == [STALL_S + 1] and stalled  # more than stall_s without progress: at the tick after it


def test_the_budget_counts_from_the_last_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    computing = [(float(t), True) for t in range(1, 11)]  # a core's worth each tick until t = 10
    killed_at, stalled = _watch(monkeypatch, [*computing, *[(10.0, True)] * 40])
    assert killed_at == [10 + STALL_S + 1] and stalled


def test_a_slow_job_that_computes_is_never_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = [(t * 2 * STALL_CPU_S, True) for t in range(1, 100)]  # twice the least CPU that counts as progress
    assert _watch(monkeypatch, slow) == ([], False)


def test_an_idle_worker_with_no_job_is_never_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _watch(monkeypatch, [(0.0, False)] * 100) == ([], False)
