"""Writes run behind: a block store's write started in the background that every later call of that store waits
for, so that the node reads its own writes; the write's own calls do not wait (they would wait for themselves)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Set inside a write-behind task: its own calls do not wait for it.
_BEHIND: contextvars.ContextVar[bool] = contextvars.ContextVar("kubo_write_behind", default=False)


class WritesBehind:
    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def start(self, write: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``write`` in the background; its failure is the caller's to handle (the task's result)."""

        async def run() -> T:
            _BEHIND.set(True)  # in this task's own context
            return await write

        task = asyncio.ensure_future(run())
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    async def settle(self) -> None:
        """Wait for the writes running behind, unless called from one of them."""
        if self._running and not _BEHIND.get():
            await asyncio.wait(list(self._running))  # not gather: a caller cancelled here must not cancel the writes
