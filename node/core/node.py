"""``Node``: the one core API of a Cairn node. The CLI and the HTTP server only parse, call it, and render."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from config import Settings
from node import __version__
from node.adapters.home import Home
from node.adapters.identity import Identity
from node.adapters.index import Divergence as DivergenceRow
from node.adapters.index import ExecutionRow, Index
from node.adapters.ipfs import KuboClient
from node.adapters.ipfs.gateway_client import GatewayClient
from node.core import status
from node.core.data_ops import DataOps
from node.core.peer_ops import PeerOps
from node.core.processes import KuboWatch, WorkerStart
from node.core.provenance_ops import ProvenanceOps
from node.core.result_types import (
    Execution,
    FailureJson,
    Health,
    JobStarted,
    NodeInfo,
    QueryAnswer,
    ResultChecked,
    TypedQueryAnswer,
    job_started,
)
from node.core.serving import Serving
from node.core.stats import NodeStats
from node.domain.model import (
    CID,
    MAX_BLOCK_BYTES,
    Block,
    Failure,
    Receipt,
    cid_str,
    decode,
    decode_object,
    encode,
    holium_data,
    parse_cid,
    verify_block,
)
from node.domain.model.cid import cid_for
from node.services.datasets import Datasets, Pulls, canonical_type
from node.services.datasets.facade import disk_full_is_507
from node.services.pipelines import PipelineRunner
from node.services.resolve import Jobs, Resolver
from node.services.resolve.answers import AnswerCache, key_of
from node.services.resolve.jobs import Job
from node.services.resolve.resolver import Answer
from node.services.type_checks import TypeChecks
from node.support.errors import CairnError, InvalidInput, NodeStopping, NotFound, RenderError, TooLarge, TypeMismatch
from node.support.tally import Timings

if TYPE_CHECKING:
    from node.services.peers import Network  # imported at run time only when peers are enabled (libp2p is heavy)

Emit = Callable[[str, dict[str, Any]], None]
log = logging.getLogger("cairn.node")

_HOLIUM_IMPORTERS = {
    "json": holium_data.import_json,
    "csv": holium_data.import_csv,
    "cbor": holium_data.import_cbor,
    "bin": holium_data.import_bin,
}


@dataclass(frozen=True)
class Services:
    """What a ``Node`` holds: built and started by ``node.core.wiring``, stopped by ``Node.close``."""

    settings: Settings
    home: Home
    identity: Identity
    kubo: KuboClient
    kubo_watch: KuboWatch  # whether Kubo serves; a managed one's supervision
    index: Index
    datasets: Datasets
    spark: WorkerStart
    resolver: Resolver
    jobs: Jobs
    network: Network | None  # None: peers.enabled = false
    types: TypeChecks  # Transform.Storage checks (node.services.type_checks)
    gateway: GatewayClient  # /ipfs/: the client of a Kubo gateway that hash-checks what it relays


class Node:
    """A running Cairn node: its identity, its Kubo (managed or external), and the operations on them.

    Built complete by ``await Node.open(settings)`` (or ``async with Node.running(settings)``, both through
    ``node.core.wiring``); ``close()`` stops everything that started, in reverse order. Its life cycle, state,
    queries and objects are its own methods; the other areas are grouped: ``data`` (datasets), ``peers`` (peers
    and trust), ``serving`` (the gateway and the transfer protocol), ``provenance`` (lineage, verification,
    proofs, types, pipelines)."""

    def __init__(self, services: Services, started: AsyncExitStack) -> None:
        self.settings, self.home, self.identity = services.settings, services.home, services.identity
        self.kubo, self.kubo_watch = services.kubo, services.kubo_watch
        self.managed = services.kubo_watch.managed  # None: an external Kubo, which this node neither starts nor stops
        self.index, self.datasets, self.resolver = services.index, services.datasets, services.resolver
        self.jobs, self.spark, self.worker = services.jobs, services.spark, services.spark.worker
        self.network = services.network
        self.types, self.gateway = services.types, services.gateway
        self._started = started
        self.answers = AnswerCache()  # recent local hits
        self.query_times = Timings()  # answered queries by source, and refused ones (/metrics)
        self.started_at = time.time()
        self._api_url: str | None = None  # the HTTP API's address, once it listens
        self._flight_url: str | None = None  # the Arrow Flight SQL face's, once it listens
        self._stopping = False  # from the first signal: running queries finish, new ones are refused (503)
        self._queries: set[asyncio.Task[Any]] = set()  # the tasks answering a query now (HTTP requests, jobs)
        self._queries_changed = asyncio.Event()
        self._chores: set[asyncio.Task[None]] = set()  # background work: version hashes, the canonicalizer warm-up
        self.pulls = Pulls()
        self.pipelines = PipelineRunner(self.kubo, self.datasets, self.identity, self.home.path, self._step_query)
        self.serving = Serving(self.settings, self.kubo, self.datasets, self.gateway)
        self.data = DataOps(
            self.settings, self.datasets, self.kubo, self.network, self.serving, self.pulls, self._after_ingest
        )
        self.peers = PeerOps(self.network, self.index.trust, self.index.peer_claims)
        self.provenance = ProvenanceOps(self)

    # -- life cycle -------------------------------------------------------------------------

    @classmethod
    async def open(cls, settings: Settings) -> Node:
        """Start every part in order (``node.core.wiring``), then build the node."""
        from node.core.wiring import open_node

        return await open_node(settings)

    @classmethod
    @asynccontextmanager
    async def running(cls, settings: Settings) -> AsyncIterator[Node]:
        node = await cls.open(settings)
        try:
            yield node
        finally:
            await node.close()

    @property
    def kubo_state(self) -> str:
        return self.kubo_watch.state

    @property
    def api_url(self) -> str | None:
        return self._api_url

    @property
    def flight_url(self) -> str | None:
        return self._flight_url

    def listening(self, *, api: str | None = None, flight: str | None = None) -> None:
        """A face listens at this address (``info`` names it). The HTTP API's is written to the home's ``node.json``,
        with the Flight SQL face's if that listens already: where ``cairn`` finds this node."""
        if flight is not None:
            self._flight_url = flight
        if api is not None:
            self._api_url = api
            runtime = {"pid": os.getpid(), "api": api, "version": __version__, "started": time.time()}
            self.home.write_runtime(runtime | ({"flight": self._flight_url} if self._flight_url else {}))

    def stopped_listening(self) -> None:
        """The faces stop: ``node.json`` goes (when this process wrote it), ``cairn`` no longer finds this node."""
        self.home.clear_runtime(os.getpid())

    @property
    def stopping(self) -> bool:
        return self._stopping

    def begin_stopping(self) -> None:
        """The first signal: running queries finish, new ones (and pipeline runs, verifications) are refused."""
        self._stopping = True

    async def stop_pulls(self) -> None:
        """End every pull under way (503) and refuse new ones: a slow source must not hold the node's shutdown."""
        await self.pulls.stop()

    def job(self, job_id: str) -> Job:
        """A query, verify or pipeline job of this node (NotFound when it is unknown or forgotten)."""
        return self.jobs.get(job_id)

    def cancel_job(self, job_id: str) -> Job:
        """Cancel a running job (and its Spark job); a finished one is left as it is."""
        return self.jobs.cancel(job_id)

    def running_queries(self) -> int:
        return len(self._queries)

    async def queries_done(self) -> None:
        """Return once no query runs (new ones are refused once ``stopping`` is set)."""
        while self._queries:
            self._queries_changed.clear()
            await self._queries_changed.wait()

    async def cancel_queries(self, timeout: float = 3.0) -> int:
        """Cancel every running query (closing its Spark connection cancels its Spark job group; a result is
        recorded in the index in one step after it is stored and pinned, so nothing is left half-published)."""
        tasks = list(self._queries)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return len(tasks)

    def _after_ingest(self, head: CID) -> None:
        """Once-per-version work a first query would otherwise pay: the version's logical hash, in the background;
        for a snapshot dataset, of its state as queries read it (its projection, made now). A query that comes
        first shares the same computation (Datasets.version_hash)."""
        self._chore(self._hash_version(head))

    def warm_up(self) -> None:
        """A daemon's node (not an in-process one a test makes): start the canonicalizer's child now, so a
        node's first query does not pay for its start and sqlglot's first use (about 0.5 s here)."""
        self._chore(self.resolver.canonicalizer.warm())

    def _chore(self, work: Coroutine[Any, Any, None]) -> None:
        """Background work a request would otherwise wait for; kept referenced until it ends."""
        task = asyncio.create_task(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _hash_version(self, head: CID) -> None:
        try:
            await self.datasets.version_hash(await self.datasets.as_input(await self.datasets.version(head)))
        except CairnError as e:  # a query computes it again and says why if it still fails
            log.warning("background version hash failed", extra={"head": cid_str(head), "error": e.message})

    async def close(self, hurry: bool = False) -> None:
        """Stop the node's background work and pulls, then what ``open`` started (peers, jobs, worker, index, Kubo
        client, managed Kubo), last first. ``hurry`` (a second signal): the Spark worker gets 1 s to exit before
        its process group is killed (its jobs are already cancelled; it holds nothing that must be saved)."""
        if hurry:
            self.worker.stop_timeout = min(self.worker.stop_timeout, 1.0)
        try:
            for task in list(self._chores):
                task.cancel()
            await asyncio.gather(*self._chores, return_exceptions=True)
            await self.stop_pulls()
        finally:
            await self._started.aclose()
        self.kubo_watch.stopped()
        log.info("node stopped")

    # -- state ------------------------------------------------------------------------------

    async def health(self) -> Health:
        """Liveness (``ok``: the node and its Kubo serve) and readiness (``ready``: a miss would be computed now)."""
        return await status.health(self)

    async def info(self) -> NodeInfo:
        """The node's identity, addresses and state, and its Kubo's and Spark worker's."""
        return await status.info(self)

    def spark_state(self) -> str:
        return self.spark.state()

    async def stats(self) -> NodeStats:
        """The node's counts now, for ``/metrics``."""
        return await status.stats(self)

    # -- queries ----------------------------------------------------------------------------

    async def query(
        self,
        sql: str,
        inputs: dict[str, str],
        *,
        limit: int | None = None,
        trust: str | None = None,
        on_event: Emit | None = None,
        may_compute: bool = True,
        type_ref: str | None = None,
        retry: bool = False,
    ) -> QueryAnswer:
        """Answer a SQL query over named inputs: from the index, or computed on Spark and published.
        ``may_compute`` False (an API client without the token): from the index or peers only. ``type_ref``: the
        CID of the type the result must be a term of (checked before anything runs, and on the result; the answer
        is then a ``TypedQueryAnswer``). ``retry``: a recorded failure is computed again (docs/queries.md
        "Recorded failures")."""
        if self.stopping:
            raise NodeStopping("the node is stopping: it takes no new query")
        started = time.perf_counter()
        limit = self.settings.query.answer_rows if limit is None else limit
        # A plain request (no progress events, no declared type) asked before: the same local hit, unless the
        # index changed since (node/services/resolve/answers.py).
        key = key_of(sql, inputs, limit, trust or self.resolver.trust_mode, may_compute)
        plain = on_event is None and type_ref is None and not retry
        generation = self.index.generation
        kept = cast(QueryAnswer | None, self.answers.get(key, generation) if plain else None)  # a copy of one put
        if kept is not None:
            kept["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
            self.query_times.observe("local", time.perf_counter() - started)
            return kept
        task = asyncio.current_task()
        if task is None:  # every caller is a task (an HTTP handler's, a job's, a Flight call's): stop can cancel it
            raise RuntimeError("Node.query must run in a task")
        self._queries.add(task)
        try:
            answer = await self._query(sql, inputs, limit, trust, on_event, may_compute, type_ref, retry)
        except CairnError:
            self.query_times.observe("refused", time.perf_counter() - started)
            raise
        finally:
            self._queries.discard(task)
            self._queries_changed.set()
        self.query_times.observe(answer["source"], time.perf_counter() - started)
        if plain and answer["source"] == "local" and self.index.generation == generation:
            self.answers.put(key, generation, dict(answer))
        return answer

    async def _query(
        self,
        sql: str,
        inputs: dict[str, str],
        limit: int,
        trust: str | None,
        on_event: Emit | None,
        may_compute: bool,
        type_ref: str | None,
        retry: bool = False,
    ) -> QueryAnswer:
        declared = await self.types.normal_form(parse_cid(type_ref)) if type_ref is not None else None
        with disk_full_is_507("the query's result", self.datasets.tmp_dir):  # a miss writes its slices
            answer = await self.resolver.resolve(
                sql, inputs, on_event, trust=trust, may_compute=may_compute, retry=retry
            )
        row = answer.execution
        # The execution's outputs are positional: remember the asker's names for /data (computed or fetched).
        self.index.results.set_output_names(row.execution, list(answer.output_names))
        try:
            arrow_schema, shown = await self.resolver.preview(row, limit)  # rendered by node.support.values
        except RenderError as e:  # the answer is recorded: say where it is, never lose it
            raise RenderError(
                f"{e.message} (execution {row.execution} is recorded: "
                f"GET /api/v0/executions/{row.execution}/data?format=parquet)"
            ) from None
        schema = [[n, canonical_type(f.type)] for n, f in zip(answer.output_names, arrow_schema)]
        if type_ref is None:
            return _answer(answer, schema, shown)
        verdict = await self._declared_type(declared, type_ref, schema, row.execution)
        typed: TypedQueryAnswer = {"type": verdict, **_answer(answer, schema, shown)}
        return typed

    def start_query(
        self,
        sql: str,
        inputs: dict[str, str],
        *,
        limit: int | None = None,
        trust: str | None = None,
        may_compute: bool = True,
        type_ref: str | None = None,
        retry: bool = False,
    ) -> JobStarted:
        if self.stopping:  # refused now (503), not as a job that fails at once
            raise NodeStopping("the node is stopping: it takes no new query")

        async def work(emit: Emit) -> dict[str, Any]:
            answer = await self.query(
                sql,
                inputs,
                limit=limit,
                trust=trust,
                on_event=emit,
                may_compute=may_compute,
                type_ref=type_ref,
                retry=retry,
            )
            return dict(answer)

        return job_started(self.jobs.start(work))

    async def execution(self, cid: CID) -> Execution:
        """An execution this node's index holds, its receipt's facts, and the peers' answers that disagree."""
        row = self.index.results.executions_by_cid(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        receipt = Receipt.from_ipld(decode(await self.kubo.block_get(parse_cid(row.receipt))))
        return _execution(row, receipt, self.index.results.divergences(row.invocation))

    async def execution_data(
        self, cid: CID, names: list[str] | None = None
    ) -> tuple[list[str] | None, AsyncIterator[Any]]:
        """An execution's column names (``names``, else those its asking query gave, else None for the
        positional ``_0, _1, …``) and its rows, slice by slice, read as they are sent."""
        row = self.index.results.executions_by_cid(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        return names or self.index.results.output_names(row.execution), self.resolver.iter_result(row)

    async def execution_files(
        self, cid: CID, names: list[str] | None = None
    ) -> tuple[list[str] | None, AsyncIterator[Path]]:
        """As :meth:`execution_data`, each slice as its local Parquet file: a reader that sends a result in small
        batches (Arrow Flight SQL) never holds a slice whole."""
        row = self.index.results.executions_by_cid(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        return names or self.index.results.output_names(row.execution), self.resolver.iter_result_files(row)

    # -- objects ----------------------------------------------------------------------------

    async def _put_block(self, block: Block, *, pin: bool = False) -> CID:
        codec = block.cid.codec.name
        return await self.kubo.block_put(block.data, codec=codec, pin=pin)

    async def dag_put(self, obj: Any, *, pin: bool = True) -> CID:
        """Validate an IPLD value (Holium/Cairn kinds by their ``typedVersion``), store it as one
        DAG-CBOR block and pin it. The CID is computed here first; Kubo must agree (DESIGN.md)."""
        data = await asyncio.to_thread(_checked_cbor, obj)  # a 4 MB value takes seconds: off the loop
        if len(data) > MAX_BLOCK_BYTES:  # Kubo would refuse it (a 502); bulk data goes to UnixFS
            raise TooLarge(f"object encodes to {len(data)} bytes, over the {MAX_BLOCK_BYTES}-byte block limit")
        block = Block(cid_for(data, "dag-cbor"), data)
        await self._put_block(block, pin=pin)
        return block.cid

    async def dag_get(self, cid: CID) -> Any:
        data = await self.kubo.block_get(cid)
        verify_block(cid, data)
        if cid.codec.name in ("dag-cbor", "cbor"):
            return await asyncio.to_thread(decode, data, cid.codec.code)  # off the loop
        return data

    async def holium_import(self, data: bytes, fmt: str) -> tuple[CID, int]:
        """Import JSON/CSV/CBOR as a Holium data tree; store every block, pin the root recursively."""
        importer = _HOLIUM_IMPORTERS.get(fmt)
        if importer is None:
            raise InvalidInput(f"unknown data format {fmt!r}: use {', '.join(_HOLIUM_IMPORTERS)}")
        root, blocks = await asyncio.to_thread(importer, data)  # parsing and encoding a whole tree: off the loop
        for block in blocks:  # children come before parents, so a crash never leaves a dangling parent
            await self._put_block(block)
        await self.kubo.pin_add(root, recursive=True)
        return root, len(blocks)

    # -- a declared type (node.services.type_checks; docs/provenance.md "Types") ---------------------------------------

    async def _declared_type(
        self, normal: Any, type_ref: str, schema: list[list[str]], execution: str
    ) -> ResultChecked:
        """The query's declared type checked on its result's structure, or TypeMismatch."""
        verdict = await self.types.check_result(normal, type_ref, schema)
        if not verdict["result"]:
            raise TypeMismatch(
                f"the result is not a term of the declared type {verdict['type']}: {verdict['code']} "
                f"(execution {execution} is recorded: GET /api/v0/executions/{execution})"
            )
        return verdict

    def _step_query(
        self, sql: str, inputs: dict[str, str], trust: str | None, on_event: Emit
    ) -> Awaitable[QueryAnswer]:
        """A pipeline step is answered as any query (index → peers → Spark); no rows are rendered."""
        return self.query(sql, inputs, limit=0, trust=trust, on_event=on_event)


def _checked_cbor(obj: Any) -> bytes:
    """The value checked (Holium/Cairn kinds by their ``typedVersion``) and encoded as DAG-CBOR."""
    decode_object(obj)
    return encode(obj)


def _answer(answer: Answer, schema: list[list[str]], shown: list[list[Any]]) -> QueryAnswer:
    row = answer.execution
    return {
        "query": cid_str(answer.query),
        "invocation": cid_str(answer.invocation),
        "execution": row.execution,
        "receipt": row.receipt,
        "source": answer.source,
        "elapsed_ms": answer.elapsed_ms,
        "logicalHash": row.logical_hash,
        "row_count": row.rows,
        "schema": schema,
        "columns": list(answer.output_names),
        "rows": shown,
        "truncated": row.rows > len(shown),
        "inputs": answer.versions,
        "slices": list(row.slices),
        "peer": answer.peer,
        # quorum:K (docs/peers.md "Quorum"): how many agree, who, and who differs; null in other modes
        "quorum": (answer.peer or {}).get("quorum"),
        "trust": answer.trust,  # how it was checked: docs/peers.md "Trust labels"
        "verified": answer.verified,  # only computed here, or a peer's answer recomputed here and agreed
        "profile": row.profile,  # ep_0 of the engine that computed it (None: a peer's, see its receipt)
        "hints": list(answer.hints),  # what the asker could do to reuse peers' answers
    }


def _failure(failure: Failure | None) -> FailureJson | None:
    if failure is None:
        return None
    return {"class": failure.error_class, "sqlstate": failure.sqlstate, "message": failure.message}


def _execution(row: ExecutionRow, receipt: Receipt, divergences: list[DivergenceRow]) -> Execution:
    return {
        "execution": row.execution,
        "invocation": row.invocation,
        "query": row.query,
        "receipt": row.receipt,
        "logicalHash": row.logical_hash,
        "rows": row.rows,
        "structure": row.structure,
        "slices": list(row.slices),
        "source": row.source,
        "trust": row.trust,
        # A recorded failure (docs/queries.md "Recorded failures"): {class, sqlstate, message}; null for a result
        "failure": _failure(row.failure),
        "signer": receipt.signer,
        "time": receipt.time,
        "engine": receipt.engine,
        "timings": receipt.timings,
        "versions": [cid_str(v) for v in receipt.versions],
        "profile": cid_str(receipt.profile) if receipt.profile else None,
        # Peers' answers for the same invocation that disagree with this one (DESIGN.md "Engine profile").
        "divergences": [
            {
                "signer": d.signer,
                "peer": d.peer,
                "execution": d.their_execution,
                "receipt": d.their_receipt,
                "profile": d.their_profile,
                "logicalHash": d.their_logical_hash,
                "rows": d.their_rows,
                "received": d.received,
            }
            for d in divergences
        ],
    }
