"""node.core.WorkerStart: the Spark worker is started once, on first need; its state and its failure are reported
(a small fake worker here: the real one is driven by test_query.py and test_node_inprocess.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from node.core import WorkerStart
from node.services.resolve import SparkWorker
from node.support.errors import CairnError


class FakeWorker:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail, self.starts, self.stops, self.running = fail, 0, 0, False
        self.release = asyncio.Event()

    async def start(self) -> None:
        self.starts += 1
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        self.running = True

    async def stop(self) -> None:
        self.stops += 1
        self.running = False

    def alive(self) -> bool:
        return self.running


def _start(worker: FakeWorker) -> WorkerStart:
    return WorkerStart(cast(SparkWorker, worker))  # the fake has the four members WorkerStart uses


async def test_started_once_on_first_need_and_waiters_told() -> None:
    worker = FakeWorker()
    spark = _start(worker)
    assert spark.state() == "down" and worker.starts == 0
    events: list[tuple[str, dict[str, Any]]] = []
    waiters = [asyncio.ensure_future(spark.ready(lambda k, d: events.append((k, d)))) for _ in range(3)]
    assert spark.ensure() is spark.ensure()  # one start future, whoever asks
    assert spark.state() == "starting"
    worker.release.set()
    await asyncio.gather(*waiters)
    assert worker.starts == 1  # one start for every waiter
    assert spark.state() == "up" and [k for k, _ in events] == ["waiting"] * 3
    await spark.ready(lambda k, d: events.append((k, d)))  # already up: nothing to wait for
    assert len(events) == 3
    worker.running = False
    assert spark.state() == "restarting"


async def test_a_failed_start_is_one_clear_error() -> None:
    worker = FakeWorker(fail=OSError("java: not found\nsecond line"))
    spark = _start(worker)
    worker.release.set()
    with pytest.raises(CairnError) as e:
        await spark.ready(lambda k, d: None)
    assert e.value.message.startswith("the Spark worker could not start: java: not found")
    assert "\n" not in e.value.message and spark.state() == "failed"


async def test_stop_cancels_a_pending_start_and_stops_the_worker() -> None:
    worker = FakeWorker()
    spark = _start(worker)
    spark.ensure()
    await spark.stop()
    assert worker.stops == 1 and spark.state() == "failed"  # cancelled: never up
