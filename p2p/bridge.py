"""asyncio ↔ trio: one trio service in a dedicated thread, driven from an asyncio loop.

py-libp2p runs on trio; the node runs on asyncio. :class:`TrioThread` runs a trio *service*
coroutine under ``trio.run`` in its own thread and offers the two directions of traffic:

- asyncio → trio: :meth:`TrioThread.run` (await a trio coroutine from asyncio) and
  :meth:`TrioThread.run_soon` (fire and forget, from any thread). The trio task is started
  in a nursery kept open for the thread's lifetime with ``TrioToken.run_sync_soon``; the
  outcome comes back with ``loop.call_soon_threadsafe``. Cancelling the awaiting asyncio task
  cancels the trio task.
- trio → asyncio: :meth:`TrioThread.call_asyncio` (await, in trio, a sync or async callable
  run on the asyncio loop) and :meth:`TrioThread.to_loop` (fire and forget).

Stopping cancels the tasks the bridge started, then lets the service clean up (bounded by a
deadline), and joins the thread; completion is signalled through the loop, so no executor
thread is involved. The thread is a daemon, and an ``atexit`` hook stops threads nobody
stopped, so a forgotten bridge never keeps the interpreter alive.

Why not ``trio-asyncio``: it carried traffic but hung on SIGINT (NOTES.md). Why not run the
node itself on trio: aiohttp and the rest of the node are asyncio.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from node.support.errors import one_line
from p2p.errors import P2PError

log = logging.getLogger("cairn.p2p")

T = TypeVar("T")

_live: weakref.WeakSet[TrioThread] = weakref.WeakSet()


@atexit.register
def _stop_forgotten() -> None:
    for bridge in list(_live):
        bridge.stop_from_any_thread(timeout=3.0)


class TrioThread:
    """A trio service in a dedicated thread, with an asyncio-facing API. Single use."""

    def __init__(self, name: str, *, shutdown_grace: float = 2.0) -> None:
        self.name = name
        self._grace = shutdown_grace
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready: asyncio.Future[None] | None = None
        self._done: asyncio.Future[None] | None = None
        self._started = False
        self._stopped = False
        self._stop_requested = threading.Event()
        # trio side, set in the thread
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop_event: trio.Event | None = None
        self._stopping: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._scopes: set[trio.CancelScope] = set()
        self._is_ready = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        """True between the service's :meth:`ready` and the start of the shutdown."""
        return self._is_ready and self._nursery is not None and not self._stop_requested.is_set()

    @property
    def started(self) -> bool:
        return self._started

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    async def start(self, service: Callable[[], Awaitable[None]]) -> None:
        """Run ``service()`` in the thread; return when it calls :meth:`ready`.

        The service sets itself up, calls ``ready()``, awaits :meth:`wait_stopping`, cleans
        up and returns. If it fails before ``ready()``, this raises its error as
        :class:`P2PError` (a :class:`P2PError` it raised is passed through).
        """
        if self._started:
            raise P2PError("a TrioThread can be started only once")
        self._started = True
        self.loop = asyncio.get_running_loop()
        self._ready = self.loop.create_future()
        self._done = self.loop.create_future()
        self._thread = threading.Thread(target=self._thread_main, args=(service,), name=self.name, daemon=True)
        _live.add(self)
        self._thread.start()
        try:
            await self._ready
        except BaseException:
            await self.stop()
            raise

    async def stop(self, timeout: float = 5.0) -> None:
        """Cancel bridge tasks, let the service clean up, join the thread. Idempotent."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._request_stop()
        try:
            if self._done is not None and self._thread is not None and self._thread.is_alive():
                try:
                    await asyncio.wait_for(asyncio.shield(self._done), timeout)
                except TimeoutError:
                    log.warning("%s did not stop within %g s", self.name, timeout)
        finally:
            if self._thread is not None:
                self._thread.join(timeout=1.0)
            _live.discard(self)

    def stop_from_any_thread(self, timeout: float) -> None:
        """Blocking stop for code that has no loop (``atexit``)."""
        self._stopped = True
        self._request_stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _request_stop(self) -> None:
        self._stop_requested.set()
        token, event = self._token, self._stop_event
        if token is None or event is None:
            return  # the thread checks _stop_requested once it has a token
        try:
            token.run_sync_soon(event.set)
        except trio.RunFinishedError:
            pass

    def _thread_main(self, service: Callable[[], Awaitable[None]]) -> None:
        failure: BaseException | None = None
        try:
            trio.run(self._main, service)
        except BaseException as e:  # noqa: BLE001 - reported to the asyncio side
            failure = _unwrap(e)
        finally:
            self._nursery = None
            if failure is not None:
                if self._is_ready:
                    log.warning("%s stopped on error: %s", self.name, one_line(failure))
                error = failure if isinstance(failure, P2PError) else P2PError(one_line(failure))
                self.to_loop(_resolve, self._ready, False, error)
            else:
                self.to_loop(_resolve, self._ready, False, P2PError("stopped before it was ready"))
            self.to_loop(_resolve, self._done, True, None)

    async def _main(self, service: Callable[[], Awaitable[None]]) -> None:
        self._stop_event = trio.Event()
        self._stopping = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        if self._stop_requested.is_set():
            self._stop_event.set()
        with trio.CancelScope() as root:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._service_then_stop, service)
                await self._stop_event.wait()
                root.deadline = trio.current_time() + self._grace
                for scope in list(self._scopes):
                    scope.cancel()
                self._stopping.set()
            self._nursery = None

    async def _service_then_stop(self, service: Callable[[], Awaitable[None]]) -> None:
        try:
            await service()
        finally:
            # A service that returns (or fails) on its own ends the thread.
            if self._stop_event is not None:
                self._stop_event.set()
        if not self._stop_requested.is_set():
            raise P2PError("the service stopped on its own")

    # ------------------------------------------------------------------ for the service (trio)

    def ready(self) -> None:
        """Called by the service (in trio) once it is up: :meth:`start` returns."""
        self._is_ready = True
        self.to_loop(_resolve, self._ready, True, None)

    async def wait_stopping(self) -> None:
        """In trio: returns when :meth:`stop` was called and bridge tasks were cancelled."""
        stopping = self._stopping
        if stopping is None:  # set before the service starts: only a caller outside the service gets here
            raise P2PError("wait_stopping is for the service the bridge runs")
        await stopping.wait()

    # ------------------------------------------------------------------ asyncio → trio

    async def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``fn(*args)`` in the trio thread from asyncio; exceptions come back raised.

        Raises :class:`P2PError` if the thread is not running or stops meanwhile. Cancelling
        the calling asyncio task cancels the trio task.
        """
        token = self._token
        if not self.running or token is None:
            raise P2PError("the p2p host is not running")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        box: list[trio.CancelScope] = []
        cancelled = False

        async def runner() -> None:
            with trio.CancelScope() as scope:
                box.append(scope)  # before reading `cancelled`: see the except below
                if cancelled:
                    scope.cancel()
                self._scopes.add(scope)
                try:
                    result = await fn(*args)
                except trio.Cancelled:
                    self.to_loop(_resolve, fut, False, P2PError("the p2p host stopped"))
                    raise
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    self.to_loop(_resolve, fut, False, e)
                else:
                    self.to_loop(_resolve, fut, True, result)
                finally:
                    self._scopes.discard(scope)

        def spawn() -> None:
            if self._nursery is None or self._stop_requested.is_set():
                self.to_loop(_resolve, fut, False, P2PError("the p2p host stopped"))
            else:
                self._nursery.start_soon(runner)

        try:
            token.run_sync_soon(spawn)
        except trio.RunFinishedError:
            raise P2PError("the p2p host is not running") from None
        try:
            return await fut
        except asyncio.CancelledError:
            # `cancelled` is set before `box` is read, and the runner appends to `box` before
            # reading `cancelled`: whichever side comes second cancels the trio task.
            cancelled = True
            if box:
                try:
                    token.run_sync_soon(box[0].cancel)
                except trio.RunFinishedError:
                    pass
            raise

    def run_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``fn(*args)`` in the trio thread, from any thread; errors are logged. Cancelled
        at stop. A no-op when the thread is not running."""
        token = self._token
        if token is None:
            return

        async def runner() -> None:
            with trio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    await fn(*args)
                except trio.Cancelled:
                    raise
                except Exception as e:  # noqa: BLE001
                    log.warning("p2p task %s failed: %s", getattr(fn, "__name__", fn), one_line(e))
                finally:
                    self._scopes.discard(scope)

        def spawn() -> None:
            if self._nursery is not None and not self._stop_requested.is_set():
                self._nursery.start_soon(runner)

        try:
            token.run_sync_soon(spawn)
        except trio.RunFinishedError:
            pass

    # ------------------------------------------------------------------ trio → asyncio

    def to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule ``fn(*args)`` on the asyncio loop, from any thread (dropped once it closed)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed in between
            pass

    async def call_asyncio(self, fn: Callable[..., Any], *args: Any) -> Any:
        """In trio: run ``fn(*args)`` (sync, or returning an awaitable) on the asyncio loop and
        return its result. Cancelling the trio task cancels the asyncio task."""
        loop, token = self.loop, self._token
        if loop is None or loop.is_closed() or token is None:
            raise P2PError("the asyncio loop is gone")

        async def call() -> Any:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        done = trio.Event()

        def wake(_: Any) -> None:
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        coro = call()
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:
            coro.close()
            raise P2PError("the asyncio loop is gone") from None
        future.add_done_callback(wake)
        try:
            await done.wait()
        except trio.Cancelled:
            future.cancel()
            raise
        return future.result()


def _resolve(fut: asyncio.Future[Any] | None, ok: bool, value: Any) -> None:
    if fut is None or fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _unwrap(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    if isinstance(e, BaseExceptionGroup):
        # Prefer a P2PError, then anything that is not a cancellation.
        flat = [x for x in e.exceptions if not isinstance(x, trio.Cancelled)]
        for x in flat:
            if isinstance(x, P2PError):
                return x
        if flat:
            return _unwrap(flat[0])
    return e
