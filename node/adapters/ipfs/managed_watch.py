"""Watching the managed Kubo: woken when its process exits (its pidfd, no polling), what an exit left, and the
listeners told the daemon's state."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger("node.adapters.ipfs.managed")  # one logger name for the managed Kubo, whichever module logs

RECHECK_S = 5.0  # the supervisor looks again this often while the daemon lives (it is woken at once when it exits)

State = Literal["up", "down", "restarting"]
OnChange = Callable[[State], Awaitable[None] | None]


@dataclass(frozen=True)
class ExitInfo:
    returncode: int | None
    at: float  # time.time() when noticed
    log_tail: str


async def wait_for_exit(proc: subprocess.Popen[bytes] | None, poll_interval: float) -> None:
    """Until ``proc`` exits, or ``RECHECK_S`` pass (a stop begun meanwhile is then seen). Woken by the
    process's pidfd, not by polling: a 0.1 s poll woke an idle node's event loop 10 times a second, 0.4-0.9 %
    of a core. Where there is no pidfd (or no live process), it sleeps ``poll_interval``."""
    fd = -1
    if proc is not None and proc.poll() is None:  # not reaped: its pid is still this process's
        with contextlib.suppress(AttributeError, OSError):
            fd = os.pidfd_open(proc.pid)
    if fd < 0:
        await asyncio.sleep(poll_interval)
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def woken() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, woken)
    try:
        await asyncio.wait_for(exited, RECHECK_S)
    except TimeoutError:
        pass
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def notify(on_change: OnChange | None, state: State) -> None:
    """Tell the listener the daemon's new state; a listener that fails is logged, never stops the watch."""
    if on_change is None:
        return
    try:
        result = on_change(state)
        if inspect.isawaitable(result):
            await result
    except Exception:  # a broken listener must not stop the supervision
        log.exception("Kubo state listener failed on %r", state)
