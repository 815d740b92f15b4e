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
        self.cleaned = threading.Event()

    async def __call__(self) -> None:
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
    deadline = time.monotonic() + 2
    while not state["cancelled"].is_set():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)
    assert await bridge.run(trio.sleep, 0) is None  # still serving


async def test_cancelling_trio_cancels_the_asyncio_callback(bridge):
    cancelled = asyncio.Event()

    async def slow():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def in_trio():
        with trio.move_on_after(0.05):
            await bridge.call_asyncio(slow)
        return "moved on"

    assert await bridge.run(in_trio) == "moved on"
    await asyncio.wait_for(cancelled.wait(), 2)


async def test_run_soon_failures_are_logged_not_fatal(bridge, caplog):
    async def bad():
        raise RuntimeError("background oops")

    bridge.run_soon(bad)
    deadline = time.monotonic() + 2
    while "background oops" not in caplog.text:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)
    assert bridge.running and await bridge.run(trio.sleep, 0) is None


async def test_stop_is_fast_and_fails_calls_in_flight():
    b = TrioThread("test-bridge")
    service = Service(b)
    await b.start(service)
    task = asyncio.create_task(b.run(trio.sleep_forever))
    await asyncio.sleep(0.02)
    t0 = time.perf_counter()
    await b.stop()
    assert time.perf_counter() - t0 < 0.5
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
    b = TrioThread("test-bridge")
    service = Service(b, setup=0.3)
    task = asyncio.create_task(b.start(service))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not b.thread.is_alive()


async def test_a_hung_cleanup_is_cut_at_the_grace_period():
    b = TrioThread("test-bridge", shutdown_grace=0.2)

    async def stubborn():
        b.ready()
        await b.wait_stopping()
        await trio.sleep(30)  # not shielded: the grace deadline cancels it

    await b.start(stubborn)
    t0 = time.perf_counter()
    await b.stop()
    assert time.perf_counter() - t0 < 1.0
    assert not b.thread.is_alive()
