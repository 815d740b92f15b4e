"""The node's callbacks into the host (gossip and request handlers, peer hooks), and the asyncio tasks that run
the async ones: kept referenced until they end, their failures logged, cancelled when the host stops."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from node.support.errors import one_line

log = logging.getLogger("cairn.p2p")

GossipHandler = Callable[[str, bytes], "Awaitable[None] | None"]
#: ``(origin, forwarder, data)``: ``forwarder`` is the peer whose connection the message came on.
RelayedGossipHandler = Callable[[str, str, bytes], "Awaitable[None] | None"]
RequestHandler = Callable[[str, bytes], Awaitable[bytes]]
PeerCallback = Callable[[str], "Awaitable[None] | None"]


class LoopTasks:
    """The asyncio tasks the host started for the node (topic workers, async peer hooks)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn_callback(self, fn: Callable[..., Any], *args: Any) -> None:
        """On the loop: call a node callback; keep a reference to the task of an async one."""
        try:
            result = fn(*args)
        except Exception:
            log.exception("p2p callback %r failed", fn)
            return
        if inspect.isawaitable(result):
            self.keep(asyncio.ensure_future(result))

    def keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("p2p callback failed: %s", one_line(task.exception()))

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def wait(self) -> None:
        """Until the tasks kept now have ended (their errors are logged, not raised)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
