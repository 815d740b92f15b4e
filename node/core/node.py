"""``Node``: the one core API of a Cairn node. The CLI and the HTTP server only parse, call it, and render."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config import Settings
from node import __version__
from node.core.data_ops import DataOps
from node.core.peer_ops import PeerOps
from node.core.processes import KuboWatch, WorkerStart
from node.core.provenance_ops import ProvenanceOps
from node.core.serving import Serving
from node.core.stats import NodeStats, PeerStats
from node.datasets import (
    Datasets,
    Pulls,
    canonical_type,
)
from node.datasets.service import disk_full_is_507
from node.errors import (
    CairnError,
    InvalidInput,
    KuboError,
    NodeStopping,
    NotFound,
    RenderError,
    TooLarge,
    TypeMismatch,
)
from node.home import Home
from node.identity import Identity
from node.index import Index
from node.ipfs import KuboClient
from node.ipfs.gateway import GatewayClient
from node.model import (
    CID,
    MAX_BLOCK_BYTES,
    Block,
    cid_str,
    decode,
    decode_object,
    encode,
    holium_data,
    parse_cid,
    verify_block,
)
from node.model.cid import cid_for
from node.pipelines import PipelineRunner
from node.resolve import Jobs, Resolver
from node.resolve.answers import AnswerCache, key_of
from node.resolve.jobs import Job
from node.tally import Timings
from node.types import TypeChecks

if TYPE_CHECKING:
    from node.peers import Network  # imported at run time only when peers are enabled (libp2p is heavy)

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
    types: TypeChecks  # Transform.Storage checks (node.types)
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
        self.peers = PeerOps(self.network, self.index)
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

    async def health(self) -> dict[str, Any]:
        kubo: dict[str, Any] = {"state": self.kubo_state, "managed": self.managed is not None}
        if self.managed is not None:
            kubo["restarts"] = self.managed.restarts
        if self.kubo_state == "up":
            try:
                await self.kubo.version(timeout=2.0)
            except KuboError as e:
                kubo["state"] = "down"
                kubo["error"] = e.message
        spark_state = self.spark_state()
        spark = {"state": spark_state, "ready": spark_state == "up"}  # up: the worker answered, it takes a job now
        p2p: dict[str, Any] = {"state": "disabled", "ready": True}  # no p2p host: nothing to wait for
        if self.network is not None:
            p2p = await _p2p_health(self.network)
        ok = kubo["state"] == "up"
        # ok: the node and its Kubo serve (what the HTTP status says); ready: a miss would be computed at once.
        ready = ok and spark["ready"] and p2p["ready"] and not self.stopping
        health = {"ok": ok, "ready": ready, "stopping": self.stopping, "queries": self.running_queries()}
        return {**health, "kubo": kubo, "spark": spark, "p2p": p2p}

    async def info(self) -> dict[str, Any]:
        kubo: dict[str, Any] = {
            "managed": self.managed is not None,
            "state": self.kubo_state,
            "api": self.kubo.api_url,
        }
        if self.managed is not None:
            kubo["restarts"] = self.managed.restarts
            kubo["pid"] = self.managed.pid
        try:
            version = await self.kubo.version(timeout=5.0)
            ident = await self.kubo.id(timeout=5.0)
            kubo.update(version=version.version, peer_id=ident.id, swarm=list(ident.addresses))
        except KuboError as e:
            kubo["state"] = "down"
            kubo["error"] = e.message
        spark: dict[str, Any] = {
            "state": self.spark_state(),
            "mode": self.settings.spark.mode,
            "master": self.settings.spark.remote
            if self.settings.spark.mode == "connect"
            else self.settings.spark.master,
            "pid": self.worker.pid,
            "jobs": self.worker.jobs_sent,
            "restarts": self.worker.restarts,
        }
        p2p_addrs = self.network.host.addrs() if self.network else []
        return {
            "version": __version__,
            "home": str(self.home.path),
            "spark": spark,
            "api": self.api_url,
            "flight": self.flight_url,  # Arrow Flight SQL (docs/flight-sql.md); None: api.flight is off
            "peer_id": self.identity.peer_id,
            "node_key": self.identity.node_key,
            "p2p_addrs": p2p_addrs,
            # Two hosts, two address lists, easily confused (issue 16): which one `cairn connect` takes.
            "addresses": {"cairn_connect": p2p_addrs, "kubo_swarm": kubo.get("swarm", [])},
            "kubo": kubo,
            "uptime_s": round(time.time() - self.started_at, 3),
        }

    def spark_state(self) -> str:
        return self.spark.state()

    async def stats(self) -> NodeStats:
        """The node's counts now, for ``/metrics``; Kubo's repo size is asked with a short deadline."""
        try:
            repo_bytes: int | None = await self.kubo.repo_size(timeout=2.0)
        except CairnError:  # Kubo down or slow: cairn_kubo_up says why
            repo_bytes = None
        staging = self.resolver.staging
        return NodeStats(
            kubo_up=self.kubo_state == "up",
            kubo_restarts=self.managed.restarts if self.managed is not None else None,
            kubo_repo_bytes=repo_bytes,
            kubo_calls=dict(self.kubo.calls),
            kubo_errors=dict(self.kubo.errors),
            spark_jobs=self.worker.jobs_sent,
            spark_restarts=self.worker.restarts,
            spark_job_times=copy.deepcopy(self.worker.job_times),
            staged={"written": 0, "reused": 0, **(staging.counts if staging is not None else {})},
            executions=self.index.count("executions"),
            datasets=self.index.count("datasets"),
            divergences=self.index.count("divergences"),
            derived=self.resolver.derived,
            forwarded=self.resolver.forwarded,
            query_times=copy.deepcopy(self.query_times),
            jobs_running=self.jobs.live(),
            peers=self._peer_stats(),
        )

    def _peer_stats(self) -> PeerStats | None:
        if self.network is None:
            return None
        return PeerStats(
            connected=len(self.network.host.connected_peers()),
            accepted=self.network.accepted,
            refused=self.network.counters(),
            # refused: failed a check when used (node/resolve/claims.py)
            claims={s: self.index.claim_count(status=s) for s in ("pending", "accepted", "refused")},
            fetched_ahead=self.resolver.ahead.fetched,
        )

    # -- queries ----------------------------------------------------------------------------

    async def query(
        self,
        sql: str,
        inputs: dict[str, str],
        *,
        limit: int | None = None,
        trust: str | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        may_compute: bool = True,
        type_ref: str | None = None,
        retry: bool = False,
    ) -> dict[str, Any]:
        """Answer a SQL query over named inputs: from the index, or computed on Spark and published.
        ``may_compute`` False (an API client without the token): from the index or peers only. ``type_ref``: the
        CID of the type the result must be a term of (checked before anything runs, and on the result).
        ``retry``: a recorded failure is computed again (docs/queries.md "Recorded failures")."""
        if self.stopping:
            raise NodeStopping("the node is stopping: it takes no new query")
        started = time.perf_counter()
        limit = self.settings.query.answer_rows if limit is None else limit
        # A plain request (no progress events, no declared type) asked before: the same local hit, unless the
        # index changed since (node/resolve/answers.py).
        key = key_of(sql, inputs, limit, trust or self.resolver.trust_mode, may_compute)
        plain = on_event is None and type_ref is None and not retry
        generation = self.index.generation
        kept = self.answers.get(key, generation) if plain else None
        if kept is not None:
            kept["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
            self.query_times.observe("local", time.perf_counter() - started)
            return kept
        task = asyncio.current_task()
        assert task is not None  # always called from a task: the HTTP handler's or a job's
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
            self.answers.put(key, generation, answer)
        return answer

    async def _query(
        self,
        sql: str,
        inputs: dict[str, str],
        limit: int,
        trust: str | None,
        on_event: Callable[[str, dict[str, Any]], None] | None,
        may_compute: bool,
        type_ref: str | None,
        retry: bool = False,
    ) -> dict[str, Any]:
        declared = await self.types.normal_form(parse_cid(type_ref)) if type_ref is not None else None
        with disk_full_is_507("the query's result", self.datasets.tmp_dir):  # a miss writes its slices
            answer = await self.resolver.resolve(
                sql, inputs, on_event, trust=trust, may_compute=may_compute, retry=retry
            )
        row = answer.execution
        # The execution's outputs are positional: remember the asker's names for /data (computed or fetched).
        self.index.set_output_names(row.execution, list(answer.output_names))
        try:
            arrow_schema, shown = await self.resolver.preview(row, limit)  # rendered by node.values
        except RenderError as e:  # the answer is recorded: say where it is, never lose it
            raise RenderError(
                f"{e.message} (execution {row.execution} is recorded: "
                f"GET /api/v0/executions/{row.execution}/data?format=parquet)"
            ) from None
        schema = [[n, canonical_type(f.type)] for n, f in zip(answer.output_names, arrow_schema)]
        typed = await self._declared_type(declared, type_ref, schema, row.execution) if type_ref is not None else {}
        return typed | {
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
            "hints": list(answer.hints),  # what the asker could do to reuse peers' answers (issue 16)
        }

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
    ) -> dict[str, Any]:
        if self.stopping:  # refused now (503), not as a job that fails at once
            raise NodeStopping("the node is stopping: it takes no new query")
        job = self.jobs.start(
            lambda emit: self.query(
                sql,
                inputs,
                limit=limit,
                trust=trust,
                on_event=emit,
                may_compute=may_compute,
                type_ref=type_ref,
                retry=retry,
            )
        )
        return {"job": job.id, "events": f"/api/v0/jobs/{job.id}/events"}

    async def execution(self, cid: CID) -> dict[str, Any]:
        from node.model import Receipt

        row = self.index.executions_by_cid(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        receipt = decode_object(decode(await self.kubo.block_get(parse_cid(row.receipt))))
        assert isinstance(receipt, Receipt)
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
            "failure": row.failure.to_ipld() if row.failure is not None else None,
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
                for d in self.index.divergences(row.invocation)
            ],
        }

    async def execution_data(
        self, cid: CID, names: list[str] | None = None
    ) -> tuple[list[str] | None, AsyncIterator[Any]]:
        """An execution's column names (``names``, else those its asking query gave, else None for the
        positional ``_0, _1, …``) and its rows, slice by slice, read as they are sent."""
        row = self.index.executions_by_cid(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        return names or self.index.output_names(row.execution), self.resolver.iter_result(row)

    async def execution_files(
        self, cid: CID, names: list[str] | None = None
    ) -> tuple[list[str] | None, AsyncIterator[Path]]:
        """As :meth:`execution_data`, each slice as its local Parquet file: a reader that sends a result in small
        batches (Arrow Flight SQL) never holds a slice whole."""
        row = self.index.executions_by_cid(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        return names or self.index.output_names(row.execution), self.resolver.iter_result_files(row)

    # -- objects ----------------------------------------------------------------------------

    async def _put_block(self, block: Block, *, pin: bool = False) -> CID:
        codec = block.cid.codec.name
        return await self.kubo.block_put(block.data, codec=codec, pin=pin)

    async def dag_put(self, obj: Any, *, pin: bool = True) -> CID:
        """Validate an IPLD value (Holium/Cairn kinds by their ``typedVersion``), store it as one
        DAG-CBOR block and pin it. The CID is computed here first; Kubo must agree (DESIGN.md)."""
        data = await asyncio.to_thread(_checked_cbor, obj)  # a 4 MB value takes seconds: off the loop (issue 15)
        if len(data) > MAX_BLOCK_BYTES:  # Kubo refuses it (a 502 before issue 15); bulk data goes to UnixFS
            raise TooLarge(f"object encodes to {len(data)} bytes, over the {MAX_BLOCK_BYTES}-byte block limit")
        block = Block(cid_for(data, "dag-cbor"), data)
        await self._put_block(block, pin=pin)
        return block.cid

    async def dag_get(self, cid: CID) -> Any:
        data = await self.kubo.block_get(cid)
        verify_block(cid, data)
        if cid.codec.name in ("dag-cbor", "cbor"):
            return await asyncio.to_thread(decode, data, cid.codec.code)  # off the loop (issue 15)
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

    # -- a declared type (node.types; docs/provenance.md "Types") ---------------------------------------

    async def _declared_type(
        self, normal: Any, type_ref: str, schema: list[list[str]], execution: str
    ) -> dict[str, Any]:
        """The query's declared type checked on its result's structure: ``{"type": verdict}``, or TypeMismatch."""
        verdict = await self.types.check_result(normal, type_ref, schema)
        if not verdict["result"]:
            raise TypeMismatch(
                f"the result is not a term of the declared type {verdict['type']}: {verdict['code']} "
                f"(execution {execution} is recorded: GET /api/v0/executions/{execution})"
            )
        return {"type": verdict}

    def _step_query(
        self, sql: str, inputs: dict[str, str], trust: str | None, on_event: Callable[[str, dict[str, Any]], None]
    ) -> Awaitable[dict[str, Any]]:
        """A pipeline step is answered as any query (index → peers → Spark); no rows are rendered."""
        return self.query(sql, inputs, limit=0, trust=trust, on_event=on_event)


def _checked_cbor(obj: Any) -> bytes:
    """The value checked (Holium/Cairn kinds by their ``typedVersion``) and encoded as DAG-CBOR."""
    decode_object(obj)
    return encode(obj)


async def _p2p_health(network: Network) -> dict[str, Any]:
    """The p2p host's part of ``/healthz``: its thread running, and a new inbound connection accepted now (measured
    by a probe connection, ``P2PHost.accepting``: a host that runs but accepts no peer is not ready)."""
    host = network.host
    if not host.running:
        return {"state": "down", "ready": False, "accepting": False}
    reason = await host.accepting()
    if reason is None:
        return {"state": "up", "ready": True, "accepting": True}
    return {"state": "up", "ready": False, "accepting": False, "error": f"p2p host accepts no connection: {reason}"}
