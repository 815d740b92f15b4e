"""The asyncio ↔ trio bridge (``p2p.bridge.TrioThread``) on its own, with a toy trio service."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import trio
import trio.lowlevel

from p2p.bridge import TrioThread
from p2p.errors import P2PError


class Service:
    """A trio service: optional set-up delay or failure, then ready, then wait, then clean up."""

    def __init__(self, bridge: TrioThread, *, setup: float = 0.0, fail: Exception | None = None, cleanup: float = 0.0):
        self.bridge, self.setup, self.fail, self.cleanup = bridge, setup, fail, cleanup
        self.setting_up, self.cleaned = threading.Event(), threading.Event()

    async def __call__(self) -> None:
        self.setting_up.set()
        await trio.sleep(self.setup)
        if self.fail is not None:
            raise self.fail
        self.bridge.ready()
        try:
            await self.bridge.wait_stopping()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(self.cleanup)
            self.cleaned.set()


@pytest.fixture
async def bridge():
    b = TrioThread("test-bridge")
    await b.start(Service(b))
    yield b
    await b.stop()
    assert not b.thread.is_alive()


async def test_run_returns_values_and_raises_errors(bridge):
    async def add(x, y):
        await trio.lowlevel.checkpoint()
        return x + y

    async def boom():
        raise ValueError("from trio")

    assert await bridge.run(add, 2, 3) == 5
    with pytest.raises(ValueError, match="from trio"):
        await bridge.run(boom)
    results = await asyncio.gather(*(bridge.run(add, i, i) for i in range(50)))
    assert results == [2 * i for i in range(50)]


async def test_trio_calls_back_into_asyncio(bridge):
    loop_thread = threading.get_ident()
    seen = []

    def sync_cb(x):
        seen.append(threading.get_ident())
        return x * 10

    async def async_cb(x):
        await asyncio.sleep(0.01)
        seen.append(threading.get_ident())
        return x + 1

    async def broken_cb():
        raise KeyError("from asyncio")

    async def in_trio():
        a = await bridge.call_asyncio(sync_cb, 4)
        b = await bridge.call_asyncio(async_cb, 4)
        try:
            await bridge.call_asyncio(broken_cb)
        except KeyError as e:
            return a, b, str(e)

    assert await bridge.run(in_trio) == (40, 5, "'from asyncio'")
    assert seen == [loop_thread, loop_thread]


async def test_cancelling_the_asyncio_caller_cancels_the_trio_task(bridge):
    state = {"started": threading.Event(), "cancelled": threading.Event()}

    async def forever():
        state["started"].set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            state["cancelled"].set()
            raise

    task = asyncio.create_task(bridge.run(forever))
    assert await asyncio.to_thread(state["started"].wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(state["cancelled"].wait, 60)
    assert await bridge.run(trio.sleep, 0) is None  # still serving


async def test_cancelling_trio_cancels_the_asyncio_callback(bridge):
    started, cancelled = threading.Event(), asyncio.Event()

    async def slow():
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def in_trio():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bridge.call_asyncio, slow)
            await trio.to_thread.run_sync(started.wait)  # the callback runs on the loop: now cancel it
            nursery.cancel_scope.cancel()
        return "moved on"

    assert await bridge.run(in_trio) == "moved on"
    await asyncio.wait_for(cancelled.wait(), 60)  # a bound only a hang fails


async def test_run_soon_failures_are_logged_not_fatal(bridge, caplog):
    async def bad():
        raise RuntimeError("background oops")

    bridge.run_soon(bad)
    deadline = time.monotonic() + 60  # a deadline to poll against, not a measurement
    while "background oops" not in caplog.text:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)
    assert bridge.running and await bridge.run(trio.sleep, 0) is None


async def test_stop_cancels_calls_in_flight_and_fails_them(caplog):
    """A stop cancels the calls under way at once, not at the end of the grace period: with an hour of grace
    and an hour to stop in, only that cancel lets the thread end (within 60 s, a bound only a hang fails)."""
    b = TrioThread("test-bridge", shutdown_grace=3600)
    service = Service(b)
    await b.start(service)
    in_flight = threading.Event()

    async def forever():
        in_flight.set()
        await trio.sleep_forever()

    task = asyncio.create_task(b.run(forever))
    assert await asyncio.to_thread(in_flight.wait, 60)
    async with asyncio.timeout(60):
        await b.stop(timeout=3600)
    assert "did not stop" not in caplog.text
    with pytest.raises(P2PError, match="stopped"):
        await task
    assert service.cleaned.is_set() and not b.thread.is_alive()
    with pytest.raises(P2PError, match="not running"):
        await b.run(trio.sleep, 0)
    await b.stop()  # idempotent
    with pytest.raises(P2PError, match="only once"):
        await b.start(Service(b))


async def test_a_service_failing_at_start_raises_and_leaves_no_thread():
    b = TrioThread("test-bridge")
    with pytest.raises(P2PError, match="no port for you"):
        await b.start(Service(b, setup=0.01, fail=P2PError("no port for you")))
    assert not b.thread.is_alive()
    c = TrioThread("test-bridge")
    with pytest.raises(P2PError, match="OSError: disk on fire"):
        await c.start(Service(c, fail=OSError("disk on fire")))
    assert not c.thread.is_alive()


async def test_cancelling_start_stops_the_thread():
    b = TrioThread("test-bridge", shutdown_grace=0.1)
    service = Service(b, setup=3600)  # still setting up when its start is cancelled
    task = asyncio.create_task(b.start(service))
    assert await asyncio.to_thread(service.setting_up.wait, 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not b.thread.is_alive()


async def test_a_hung_cleanup_is_cut_at_the_grace_period(caplog):
    """A cleanup that never ends is cancelled at the grace deadline: stop, given an hour, returns (within 60 s, a
    bound only a hang fails) with the thread ended and the cleanup cancelled."""
    b = TrioThread("test-bridge", shutdown_grace=0.2)
    cut = threading.Event()

    async def stubborn():
        b.ready()
        await b.wait_stopping()
        try:
            await trio.sleep_forever()  # not shielded: the grace deadline cancels it
        except trio.Cancelled:
            cut.set()
            raise

    await b.start(stubborn)
    async with asyncio.timeout(60):
        await b.stop(timeout=3600)
    assert cut.is_set() and not b.thread.is_alive()
    assert "did not stop" not in caplog.text
