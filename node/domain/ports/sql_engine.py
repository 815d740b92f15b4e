"""The engine port: what runs a statement over input slices (the co-located Spark worker).

``node.services.resolve.spark.SparkWorker`` is the real one, ``node.services.resolve.memory_engine.MemoryEngine`` its
in-memory twin;
``tests/contract/test_sql_engine.py`` runs one suite against both. Failures are ``node.support.errors.SparkError``s: the
query's fault (``kind`` "analysis", or "runtime" with Spark's condition and SQLSTATE; status 422), ``SparkTimeout``
(504: the job was cancelled), ``SparkQueueFull``, ``SparkWorkerDied``, ``SparkStartError``; a stopped or never
started engine is a ``SparkError`` of kind "worker". Cancelling a ``run`` cancels its job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from node.support.tally import Timings

# View name -> (its Parquet slices, its column names in file order): how a statement's inputs are handed over.
Inputs = Mapping[str, tuple[Sequence[Path | str], list[str]]]


@dataclass(frozen=True)
class RunResult:
    table: pa.Table  # one chunk per column (unless a column holds over 2 GiB)
    elapsed_ms: float  # in the engine: temp views + the job + collecting the result as Arrow
    total_ms: float = 0.0  # seen by the node: the above + serialising, transfer, decoding
    job: str = ""
    profile: Mapping[str, Any] = field(default_factory=dict)  # the engine profile of the engine that ran it


class SqlEngine(Protocol):
    stop_timeout: float  # seconds a stop waits before it kills (the node shortens it when it stops in a hurry)

    @property
    def profile(self) -> Mapping[str, Any]:
        """Every setting that can change an answer, as the node writes it (``ep_0``); empty until started."""

    @property
    def deployment(self) -> dict[str, str]:
        """Where the engine runs, for receipts: empty when local."""

    @property
    def pid(self) -> int | None: ...

    @property
    def jobs_sent(self) -> int: ...

    @property
    def restarts(self) -> int: ...

    @property
    def job_times(self) -> Timings:
        """Each run's wall time by outcome: "ok", or the error's kind."""

    def alive(self) -> bool: ...
    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Idempotent; a run in flight ends with a ``SparkError`` of kind "cancelled"."""

    async def ping(self) -> dict[str, Any]:
        """``{"ok": True, …}`` while the engine answers."""

    async def stats(self) -> dict[str, Any]:
        """Counters: ``jobs``, ``succeeded``, ``failed``, ``cancelled``, ``running`` (a job id or None), plus
        ``restarts`` and ``jobs_sent``."""

    async def progress(self, job: str) -> dict[str, Any]:
        """Stages and tasks so far for ``job`` (``running`` False once it ended or before it started)."""

    async def run(
        self,
        statement: str,
        inputs: Inputs,
        *,
        timeout: float | None = None,
        job_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunResult:
        """Run ``statement`` with each input a view over its slices, columns named as given."""
