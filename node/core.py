"""The one core API of a Cairn node. The CLI and the HTTP server only parse, call it, and render."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from config import Settings
from node import __version__
from node.datasets import Datasets, ReadOptions, Version, block_of_dataset, canonical_type, pull, slice_of_dataset
from node.errors import CairnError, InvalidInput, KuboError, NotFound, RenderError, Unavailable, peer_failure
from node.home import Home
from node.identity import Identity
from node.index import Index
from node.ipfs import KuboClient, ManagedKubo, api_url_from_address, find_kubo_binary
from node.model import CID, Block, cid_str, decode, decode_object, encode, holium_data, parse_cid, verify_block
from node.model.cid import cid_for
from node.resolve import Jobs, Resolver, SparkWorker

log = logging.getLogger("cairn.node")

_HOLIUM_IMPORTERS = {
    "json": holium_data.import_json,
    "csv": holium_data.import_csv,
    "cbor": holium_data.import_cbor,
    "bin": holium_data.import_bin,
}


class Node:
    """A running Cairn node: its identity, its Kubo (managed or external), and the operations on them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = Home(settings.home)
        self.identity: Identity | None = None
        self.kubo: KuboClient | None = None
        self.managed: ManagedKubo | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self.kubo_state = "down"
        self.started_at: float | None = None
        self.api_url: str | None = None  # set by the HTTP face once it listens
        self.index: Index | None = None
        self.worker: SparkWorker | None = None
        self._worker_start: asyncio.Future[None] | None = None
        self.resolver: Resolver | None = None
        self.jobs: Jobs | None = None
        self.network: Any = None  # node.network.Network when the p2p host runs
        self._datasets: Datasets | None = None

    @property
    def datasets(self) -> Datasets:
        if self._datasets is None:
            raise CairnError("the node has not started")
        return self._datasets

    @datasets.setter
    def datasets(self, value: Datasets) -> None:
        self._datasets = value

    # -- life cycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.home.init():
            log.info("initialised node home", extra={"home": str(self.home.path)})
        self.identity = self.home.identity()
        ipfs = self.settings.ipfs
        if ipfs.api:
            url = api_url_from_address(ipfs.api)
            self.kubo = KuboClient(url, timeout=ipfs.timeout)
            try:
                await self.kubo.version()  # fail now, clearly, if the external Kubo is unreachable
            except BaseException:
                await self.kubo.close()
                raise
            self.kubo_state = "up"
        else:
            self.managed = ManagedKubo(
                self.home.kubo_repo,
                find_kubo_binary(ipfs.binary or None),
                api_port=ipfs.api_port,
                gateway_port=ipfs.gateway_port,
                swarm_port=ipfs.swarm_port,
                bootstrap=list(ipfs.bootstrap),
                log_path=self.home.logs / "kubo.log",
                # Re-hash every block read from the blockstore: what we serve is checked against its CID.
                config={"Datastore.HashOnRead": True},
            )
            url = await self.managed.start()
            self.kubo = KuboClient(url, timeout=ipfs.timeout)
            self.kubo_state = "up"
            self._supervisor = asyncio.create_task(self.managed.supervise(self._on_kubo_change))
        self.index = Index(self.home.path / "index.sqlite")
        self.datasets = Datasets(self.kubo, self.index, self.home.path, self.settings.datasets.rows_per_slice)
        sp = self.settings.spark
        self.worker = SparkWorker(
            _socket_path(self.home.path),
            master=sp.master,
            conf=dict(c.split("=", 1) for c in sp.conf if "=" in c),
            log_path=self.home.logs / "spark.log",
            start_timeout=sp.start_timeout,
        )
        # Spark takes seconds to warm up: the node serves at once, queries wait for the worker.
        if sp.autostart:
            self._ensure_worker()
        peers = self.settings.peers
        self.resolver = Resolver(
            self.datasets,
            self.kubo,
            self.index,
            self.worker,
            self.identity,
            self.datasets.tmp_dir,
            self.settings.datasets.rows_per_slice,
            sp.query_timeout,
            trust_mode=peers.trust,
            community=peers.community or None,
            fetch_timeout=peers.fetch_timeout,
            resolve_timeout=peers.resolve_timeout,
            worker_ready=self._worker_ready,
        )
        self.jobs = Jobs()
        if self.settings.peers.enabled:
            from node.peers import Network

            self.network = Network(
                self.settings.peers, self.identity, self.resolver, self.index, self.kubo, self.home.path / "peers.json"
            )
            await self.network.start()
        self.started_at = time.time()
        log.info("node started", extra={"peer_id": self.identity.peer_id, "kubo": url})

    def _on_kubo_change(self, state: str) -> None:
        self.kubo_state = state
        if state == "up" and self.managed is not None and self.kubo is not None:
            self.kubo.api_url = self.managed.api_url  # a restarted Kubo may listen on a new port
        log.warning("managed kubo is %s", state, extra={"kubo_state": state})

    async def stop(self) -> None:
        if self.network is not None:
            await self.network.stop()
            self.network = None
        if self.jobs is not None:
            await self.jobs.close()
        if self._worker_start is not None:
            self._worker_start.cancel()
            await asyncio.gather(self._worker_start, return_exceptions=True)
        if self.worker is not None:
            await self.worker.stop()
        if self._supervisor is not None:
            self._supervisor.cancel()
            try:
                await self._supervisor
            except asyncio.CancelledError:
                pass
            self._supervisor = None
        if self.kubo is not None:
            await self.kubo.close()
        if self.index is not None:
            self.index.close()
        if self.managed is not None:
            await self.managed.stop()
        self.kubo_state = "down"
        log.info("node stopped")

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- state ------------------------------------------------------------------------------

    def _kubo(self) -> KuboClient:
        if self.kubo is None:
            raise KuboError("the node has not started its Kubo")
        return self.kubo

    async def health(self) -> dict[str, Any]:
        kubo: dict[str, Any] = {"state": self.kubo_state, "managed": self.managed is not None}
        if self.managed is not None:
            kubo["restarts"] = self.managed.restarts
        if self.kubo_state == "up":
            try:
                await self._kubo().version(timeout=2.0)
            except KuboError as e:
                kubo["state"] = "down"
                kubo["error"] = e.message
        return {"ok": kubo["state"] == "up", "kubo": kubo}

    async def info(self) -> dict[str, Any]:
        assert self.identity is not None
        kubo: dict[str, Any] = {
            "managed": self.managed is not None,
            "state": self.kubo_state,
            "api": self.kubo.api_url if self.kubo else None,
        }
        if self.managed is not None:
            kubo["restarts"] = self.managed.restarts
            kubo["pid"] = self.managed.pid
        try:
            version = await self._kubo().version(timeout=5.0)
            ident = await self._kubo().id(timeout=5.0)
            kubo.update(version=version.version, peer_id=ident.id, swarm=list(ident.addresses))
        except KuboError as e:
            kubo["state"] = "down"
            kubo["error"] = e.message
        spark: dict[str, Any] = {"state": self.spark_state()}
        if self.worker is not None:
            spark.update(
                master=self.settings.spark.master,
                pid=self.worker.pid,
                jobs=self.worker.jobs_sent,
                restarts=self.worker.restarts,
            )
        return {
            "version": __version__,
            "home": str(self.home.path),
            "spark": spark,
            "api": self.api_url,
            "peer_id": self.identity.peer_id,
            "node_key": self.identity.node_key,
            "p2p_addrs": self.network.host.addrs() if self.network else [],
            "kubo": kubo,
            "uptime_s": round(time.time() - self.started_at, 3) if self.started_at else 0.0,
        }

    def _ensure_worker(self) -> asyncio.Future[None]:
        assert self.worker is not None
        if self._worker_start is None:
            self._worker_start = asyncio.ensure_future(self.worker.start())
        return self._worker_start

    async def _worker_ready(self, emit: Callable[[str, dict[str, Any]], None]) -> None:
        """Called by the resolver only when it must compute: a peer or index hit never starts Spark."""
        starting = self._ensure_worker()
        if not starting.done():
            emit("waiting", {"for": "spark worker to start"})
        try:
            await asyncio.shield(starting)
        except CairnError:
            raise
        except Exception as e:
            raise CairnError(f"the Spark worker could not start: {e}") from None

    def spark_state(self) -> str:
        if self._worker_start is None:
            return "down"
        if not self._worker_start.done():
            return "starting"
        if self._worker_start.cancelled() or self._worker_start.exception() is not None:
            return "failed"
        return "up" if self.worker is not None and self.worker.alive() else "restarting"

    # -- queries ----------------------------------------------------------------------------

    async def query(
        self,
        sql: str,
        inputs: dict[str, str],
        *,
        limit: int | None = None,
        trust: str | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Answer a SQL query over named inputs: from the index, or computed on Spark and published."""
        assert self.resolver is not None
        answer = await self.resolver.resolve(sql, inputs, on_event, trust=trust)
        row = answer.execution
        # The execution's outputs are positional: remember the asker's names for /data (computed or fetched).
        self.index.set_output_names(row.execution, list(answer.output_names))  # type: ignore[union-attr]
        limit = self.settings.query.answer_rows if limit is None else limit
        try:
            arrow_schema, shown = await self.resolver.preview(row, limit)  # rendered by node.values
        except RenderError as e:  # the answer is recorded: say where it is, never lose it
            raise RenderError(
                f"{e.message} (execution {row.execution} is recorded: "
                f"GET /api/v0/executions/{row.execution}/data?format=parquet)"
            ) from None
        schema = [[n, canonical_type(f.type)] for n, f in zip(answer.output_names, arrow_schema)]
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
            "trust": answer.trust,  # how it was checked: docs/peers.md "Trust labels"
            "verified": answer.verified,  # only computed here, or a peer's answer recomputed here and agreed
            "profile": row.profile,  # ep_0 of the engine that computed it (None: a peer's, see its receipt)
        }

    def start_query(
        self, sql: str, inputs: dict[str, str], *, limit: int | None = None, trust: str | None = None
    ) -> dict[str, Any]:
        assert self.jobs is not None
        job = self.jobs.start(lambda emit: self.query(sql, inputs, limit=limit, trust=trust, on_event=emit))
        return {"job": job.id, "events": f"/api/v0/jobs/{job.id}/events"}

    async def execution(self, cid: CID) -> dict[str, Any]:
        from node.model import Receipt

        row = self.index.executions_by_cid(cid_str(cid)) if self.index else None  # type: ignore[union-attr]
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        receipt = decode_object(decode(await self._kubo().block_get(parse_cid(row.receipt))))
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
            ],  # type: ignore[union-attr]
        }

    async def execution_data(
        self, cid: CID, names: list[str] | None = None
    ) -> tuple[list[str] | None, AsyncIterator[Any]]:
        """An execution's column names (``names``, else those its asking query gave, else None for the
        positional ``_0, _1, …``) and its rows, slice by slice, read as they are sent."""
        assert self.index is not None and self.resolver is not None
        row = self.index.executions_by_cid(cid_str(cid))
        if row is None:
            raise NotFound(f"no execution {cid_str(cid)} in this node's index")
        return names or self.index.output_names(row.execution), self.resolver.iter_result(row)

    # -- peers and trust ------------------------------------------------------------------------

    def _network(self) -> Any:
        if self.network is None:
            raise Unavailable("the p2p host is not running (peers.enabled = false)")
        return self.network

    def peers(self) -> list[dict[str, Any]]:
        return self._network().host.peers()

    async def connect(self, addr: str) -> dict[str, Any]:
        from p2p.host import P2PError

        try:
            peer = await self._network().host.connect(addr)
        except P2PError as e:  # the message already names the address and the reason
            raise peer_failure(e) from None
        return {"peer": peer}

    def trust_add(self, key: str, community: str) -> None:
        from node.identity import public_key_from_did

        public_key_from_did(key)  # refuses anything but an ed25519 did:key
        self.index.trust_add(key, community)  # type: ignore[union-attr]

    def trust_rm(self, key: str, community: str | None) -> int:
        return self.index.trust_rm(key, community)  # type: ignore[union-attr]

    def trust_list(self) -> list[dict[str, str]]:
        return [{"key": k, "community": c} for k, c in self.index.trusted()]  # type: ignore[union-attr]

    def announcements(self, limit: int = 100) -> dict[str, Any]:
        assert self.index is not None
        claims = [
            {
                "invocation": c.invocation,
                "signer": c.signer,
                "peer": c.peer,
                "execution": c.execution,
                "receipt": c.receipt,
                "rows": c.rows,
                "logicalHash": c.logical_hash,
                "received": c.received,
                "status": c.status,
                "reason": c.reason,
                "signer_score": dict(zip(("accepted", "refused"), self.index.signer_score(c.signer))),
            }
            for c in self.index.claims(limit=limit)
        ]
        refused = [{"peer": p, "reason": r, "received": t} for p, r, t in self.index.refusals(limit)]
        return {"claims": claims, "refused_messages": refused}

    # -- objects ----------------------------------------------------------------------------

    async def put_block(self, block: Block, *, pin: bool = False) -> CID:
        codec = block.cid.codec.name
        return await self._kubo().block_put(block.data, codec=codec, pin=pin)

    async def dag_put(self, obj: Any, *, pin: bool = True) -> CID:
        """Validate an IPLD value (Holium/Cairn kinds by their ``typedVersion``), store it as one
        DAG-CBOR block and pin it. The CID is computed here first; Kubo must agree (DESIGN.md)."""
        decode_object(obj)
        data = encode(obj)
        block = Block(cid_for(data, "dag-cbor"), data)
        await self.put_block(block, pin=pin)
        return block.cid

    async def dag_get(self, cid: CID) -> Any:
        data = await self._kubo().block_get(cid)
        verify_block(cid, data)
        return decode(data, cid.codec.code) if cid.codec.name in ("dag-cbor", "cbor") else data

    async def holium_import(self, data: bytes, fmt: str) -> tuple[CID, int]:
        """Import JSON/CSV/CBOR as a Holium data tree; store every block, pin the root recursively."""
        importer = _HOLIUM_IMPORTERS.get(fmt)
        if importer is None:
            raise InvalidInput(f"unknown data format {fmt!r}: use {', '.join(_HOLIUM_IMPORTERS)}")
        root, blocks = importer(data)
        for block in blocks:  # children come before parents, so a crash never leaves a dangling parent
            await self.put_block(block)
        await self._kubo().pin_add(root, recursive=True)
        return root, len(blocks)

    # -- datasets ---------------------------------------------------------------------------

    async def add_dataset(
        self,
        source: Any,
        *,
        name: str,
        create: bool,
        options: ReadOptions,
        strategy: str = "append",
        primary_key: list[str] | None = None,
        info: dict[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Ingest a file as a new dataset (``create``) or a new version of one; ``progress`` gets
        (bytes read, rows read) as the input is consumed."""
        started = time.perf_counter()
        r = await self.datasets.add(
            source,
            name=name,
            create=create,
            options=options,
            strategy=strategy,
            primary_key=primary_key,
            info=info,
            progress=progress,
        )
        return {
            "name": r.name,
            "id": r.dataset_id,
            "head": cid_str(r.head),
            "previous": cid_str(r.previous) if r.previous else None,
            "rows_read": r.rows_read,
            "rows_added": r.rows_added,
            "schema_changed": r.schema_changed,
            "slices": [
                {"cid": cid_str(s.cid), "rows": s.rows, "size": s.size, "logicalHash": s.logical_hash} for s in r.slices
            ],
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
        }

    async def list_datasets(self) -> list[dict[str, Any]]:
        out = []
        for row in self.datasets.index.datasets():
            v = await self.datasets.version(parse_cid(row.head))
            out.append(
                {
                    "name": row.name,
                    "id": row.id,
                    "head": row.head,
                    "rows": v.rows,
                    "slices": len(v.slices),
                    "owned": bool(row.key_name),
                    "updated": row.updated,
                }
            )
        return out

    async def dataset(self, ref: str) -> dict[str, Any]:
        row, v = await self.datasets.resolve(ref)
        logical, rows = await self.datasets.version_hash(v)
        return {
            "name": row.name if row else None,
            "id": v.dataset_id,
            "head": cid_str(v.head),
            "ipns": row.ipns if row else None,
            "seq": v.seq,
            "rows": rows,
            "logicalHash": logical,
            "structure": cid_str(v.structure_cid) if v.structure_cid else None,
            "abstractStructure": cid_str(v.abstract_cid) if v.abstract_cid else None,
            "schema": [list(c) for c in v.structure.schema] if v.structure else [],
            "merge": v.merge,
            "info": v.info,
            "slices": [
                {
                    "cid": cid_str(s.cid),
                    "rows": s.rows,
                    "size": s.size,
                    "logicalHash": s.logical_hash,
                    "offset": s.offset,
                }
                for s in v.slices
            ],
        }

    async def dataset_log(self, ref: str) -> list[dict[str, Any]]:
        _, v = await self.datasets.resolve(ref)
        return [{"cid": cid_str(cid), "seq": b.seq, "time": b.time, "event": _plain(b.event)} for cid, b in v.blocks]

    async def dataset_version(self, ref: str) -> Version:
        return (await self.datasets.resolve(ref))[1]

    async def pull_dataset(self, source: str, name: str | None = None) -> dict[str, Any]:
        r = await pull(self.datasets, source, name=name, timeout=self.settings.datasets.pull_timeout)
        return {
            "name": r.name,
            "id": r.dataset_id,
            "head": cid_str(r.head),
            "blocks": r.blocks,
            "slices": r.slices,
            "bytes": r.bytes,
        }

    # -- transfer protocol and gateway --------------------------------------------------------

    async def odf_head(self, dataset: str) -> CID:
        return (await self.datasets.resolve(dataset))[1].head

    async def odf_block(self, dataset: str, cid: CID) -> bytes:
        return await block_of_dataset(self.datasets, dataset, cid)

    async def odf_data(self, dataset: str, cid: CID) -> Path:
        return await slice_of_dataset(self.datasets, dataset, cid)

    async def raw_block(self, cid: CID) -> bytes:
        """One block from Kubo, checked against its CID (the client re-hashes it)."""
        return await self._kubo().block_get(cid, timeout=self.settings.ipfs.timeout)

    def car_export(self, cid: CID) -> AsyncIterator[bytes]:
        """The DAG under ``cid`` as a CAR stream; every block is hash-checked as it passes."""
        return self._kubo().dag_export(cid, timeout=self.settings.ipfs.timeout, verify=True)

    def cat(self, cid: CID) -> AsyncIterator[bytes]:
        """A UnixFS file's bytes. Kubo re-hashes every block it reads (Datastore.HashOnRead on the managed
        Kubo) and bitswap checks every block it fetches."""
        return self._kubo().cat(cid, timeout=self.settings.ipfs.timeout)


def _socket_path(home: Path) -> Path:
    """The worker's Unix socket: in the home, unless that path is past the 107-byte limit of sun_path."""
    path = home / "spark.sock"
    if len(str(path).encode()) <= 100:
        return path
    import hashlib
    import tempfile

    return Path(tempfile.gettempdir()) / f"cairn-{hashlib.blake2b(str(home).encode(), digest_size=8).hexdigest()}.sock"


def _plain(value: Any) -> Any:
    """IPLD → JSON for display: links as CID strings."""
    if isinstance(value, CID):
        return cid_str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value
