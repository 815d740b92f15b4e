"""The node's two helper processes as the core sees them: the Spark worker, started once on first need, and the
managed Kubo, watched and restarted when it dies."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from node.adapters.ipfs import KuboClient, ManagedKubo
from node.services.resolve import SparkWorker
from node.support.errors import CairnError, SparkStartError, one_line

log = logging.getLogger("cairn.node")


class WorkerStart:
    """The Spark worker and its one start: Spark takes seconds to warm up, so the node serves at once and
    starts the worker on first need (or at once with ``spark.autostart``)."""

    def __init__(self, worker: SparkWorker) -> None:
        self.worker = worker
        self._start: asyncio.Future[None] | None = None

    def ensure(self) -> asyncio.Future[None]:
        if self._start is None:
            self._start = asyncio.ensure_future(self.worker.start())
        return self._start

    async def ready(self, emit: Callable[[str, dict[str, Any]], None]) -> None:
        """Called by the resolver only when it must compute: a peer or index hit never starts Spark."""
        starting = self.ensure()
        if not starting.done():
            emit("waiting", {"for": "spark worker to start"})
        try:
            await asyncio.shield(starting)
        except CairnError:
            raise
        except Exception as e:  # noqa: BLE001  any start failure reaches the asker as one clear error
            raise SparkStartError(one_line(f"the Spark worker could not start: {e}")) from None

    def state(self) -> str:
        if self._start is None:
            return "down"
        if not self._start.done():
            return "starting"
        if self._start.cancelled() or self._start.exception() is not None:
            return "failed"
        return "up" if self.worker.alive() else "restarting"

    async def stop(self) -> None:
        if self._start is not None:
            self._start.cancel()
            await asyncio.gather(self._start, return_exceptions=True)
        await self.worker.stop()


class KuboWatch:
    """Whether the node's Kubo serves. A managed Kubo is supervised: restarted when it dies, and the node's client
    moved to where it listens again (a restarted Kubo may get a new port). An external Kubo is neither started nor
    stopped by the node: it counts as up while the node runs (``Node.health`` asks it)."""

    def __init__(self, kubo: KuboClient, managed: ManagedKubo | None) -> None:
        self.kubo, self.managed = kubo, managed
        self.state = "up"
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.managed is not None:
            self._task = asyncio.create_task(self.managed.supervise(self._changed))

    def _changed(self, state: str) -> None:
        self.state = state
        if state == "up" and self.managed is not None:
            self.kubo.api_url = self.managed.api_url
        log.warning("managed kubo is %s", state, extra={"kubo_state": state})

    async def stop(self) -> None:
        """Stop watching (before the managed Kubo is stopped: a stop is not a death to repair)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def stopped(self) -> None:
        self.state = "down"
