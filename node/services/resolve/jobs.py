"""Query jobs: a query started with ``wait: false`` runs as a job whose progress events can be followed
(server-sent events) and whose answer is kept for a while.

The table is bounded, so that no client can grow it without end: at most ``max_live`` jobs run at once (more are
refused with 429), and a finished job is dropped ``keep_seconds`` after it ended, the oldest first beyond
``max_kept``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from node.support.errors import CairnError, NotFound, TooManyJobs

log = logging.getLogger("cairn.jobs")

KEEP_SECONDS = 600.0
MAX_LIVE = 16
_counter = itertools.count(1)


@dataclass
class Job:
    id: str
    created: float = field(default_factory=time.time)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    finished: float | None = None  # when it ended (time.time()), for expiry
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, {"t": round(time.time() - self.created, 4), **data}))
        self._changed.set()

    def view(self) -> dict[str, Any]:
        state = "done" if self.result is not None else "failed" if self.error is not None else "running"
        return {"id": self.id, "state": state, "result": self.result, "error": self.error}

    async def follow(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Every event from the first, then new ones as they come, until the job ends."""
        seen = 0
        while True:
            while seen < len(self.events):
                yield self.events[seen]
                seen += 1
            if self.done:
                return
            self._changed.clear()
            await self._changed.wait()


class Jobs:
    def __init__(self, max_live: int = MAX_LIVE, keep_seconds: float = KEEP_SECONDS) -> None:
        self.max_live, self.keep_seconds = max_live, keep_seconds
        self.max_kept = max(256, 16 * max_live)  # finished answers kept at most, whatever their age
        self._jobs: dict[str, Job] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._jobs)

    def live(self) -> int:
        return sum(1 for j in self._jobs.values() if not j.done)

    def start(self, work: Callable[[Callable[[str, dict[str, Any]], None]], Awaitable[dict[str, Any]]]) -> Job:
        self._expire()
        if self.live() >= self.max_live:
            raise TooManyJobs(f"{self.max_live} query jobs already run (api.max_jobs): try again when one ends")
        job = Job(f"job-{next(_counter)}-{secrets.token_hex(4)}")
        self._jobs[job.id] = job

        async def run() -> None:
            job.emit("started", {})
            try:
                job.result = await work(job.emit)
                job.emit("done", {"invocation": job.result.get("invocation"), "source": job.result.get("source")})
            except CairnError as e:
                job.error = {"type": type(e).__name__, "message": e.message, "status": e.status}
                job.emit("failed", job.error)
            except asyncio.CancelledError:  # DELETE /api/v0/jobs/{id}, or the node stopping
                job.error = {"type": "Cancelled", "message": f"job {job.id} was cancelled", "status": 409}
                job.emit("failed", job.error)
                raise
            except Exception as e:  # keep the job's promise: it ends, and says how
                log.exception("unhandled error in job %s", job.id)  # a bug: the trace goes to the log
                job.error = {"type": "InternalError", "message": f"internal error: {type(e).__name__}", "status": 500}
                job.emit("failed", job.error)
            finally:
                job.finished = time.time()

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        job.task = task
        return job

    def cancel(self, job_id: str) -> Job:
        """Cancel a running job (its Spark job is cancelled with it); a finished one is left as it is."""
        job = self.get(job_id)
        if job.task is not None and not job.task.done():
            job.task.cancel()
        return job

    def get(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFound(f"no job {job_id!r}") from None

    def _expire(self) -> None:
        cutoff = time.time() - self.keep_seconds
        ended = sorted((j for j in self._jobs.values() if j.finished is not None), key=lambda j: j.finished or 0.0)
        excess = len(ended) - self.max_kept
        for n, job in enumerate(ended):
            if n < excess or (job.finished or 0.0) < cutoff:
                del self._jobs[job.id]

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
