"""The composition root: every part of a node built from its settings, started in order, and handed to ``Node``.

``open_node`` starts Kubo (or checks the external one), the index, datasets, the Spark worker handle, the
resolver, jobs and, when peers are enabled, the p2p network; a part that fails to start stops those before it.
The built ``Node`` owns what was started: its ``close()`` stops all of it, last first.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from config import Settings
from node.adapters.home import Home
from node.adapters.identity import Identity
from node.adapters.index import Index
from node.adapters.ipfs import HOME_SECRET, KuboClient, ManagedKubo, api_url_from_address, find_kubo_binary
from node.adapters.ipfs.gateway_client import GatewayClient
from node.core.node import Node, Services
from node.core.processes import KuboWatch, WorkerStart
from node.domain.sql.sandbox import Sandbox
from node.services.datasets import Datasets, InputLimits
from node.services.resolve import Jobs, Resolver, SparkWorker
from node.services.resolve.resolver import Options
from node.services.resolve.staging import Staging
from node.services.type_checks import TypeChecks

if TYPE_CHECKING:
    from node.services.peers import Network  # imported at run time only when peers are enabled (libp2p is heavy)

log = logging.getLogger("cairn.node")


async def open_node(settings: Settings) -> Node:
    """Start every part in order, then build the node; a part that fails to start stops those before it."""
    home = Home(settings.home)
    if home.init():
        log.info("initialised node home", extra={"home": str(home.path)})
    identity = home.identity()
    async with AsyncExitStack() as stack:
        kubo, managed = await _open_kubo(settings, home, stack)
        index = Index(home.path / "index.sqlite")
        stack.callback(index.close)
        datasets = Datasets(kubo, index.catalog, home.path, settings.datasets.rows_per_slice, _input_limits(settings))
        spark = WorkerStart(_worker(settings, home))
        stack.push_async_callback(spark.stop)
        resolver = _resolver(settings, datasets, kubo, index, spark, identity)
        stack.push_async_callback(resolver.canonicalizer.close)
        stack.push_async_callback(resolver.stop_pins)
        resolver.drain_pins()  # pins owed by answers given before a crash or stop (docs/peers.md)
        jobs = Jobs(settings.api.max_jobs, settings.api.job_keep_seconds)
        stack.push_async_callback(jobs.close)
        network = await _open_network(settings, home, identity, resolver, index, kubo, stack)
        # /ipfs/: the managed Kubo's loopback gateway (its port may change on a restart), else ipfs.gateway
        gateway = GatewayClient(_gateway_url(settings, managed), settings.ipfs.timeout, settings.api.gateway_timeout)
        stack.push_async_callback(gateway.close)
        watch = KuboWatch(kubo, managed)
        watch.start()
        stack.push_async_callback(watch.stop)  # before anything else stops: a stopped Kubo is not restarted
        services = Services(
            settings=settings,
            home=home,
            identity=identity,
            kubo=kubo,
            kubo_watch=watch,
            index=index,
            datasets=datasets,
            spark=spark,
            resolver=resolver,
            jobs=jobs,
            network=network,
            types=TypeChecks(kubo, datasets, settings.ipfs.timeout),
            gateway=gateway,
        )
        node = Node(services, stack.pop_all())
    if settings.spark.autostart:
        spark.ensure()
    log.info("node started", extra={"peer_id": identity.peer_id, "kubo": kubo.api_url})
    return node


async def _open_kubo(settings: Settings, home: Home, stack: AsyncExitStack) -> tuple[KuboClient, ManagedKubo | None]:
    """A client on the external Kubo (``ipfs.api``, checked reachable now), else on a Kubo started here."""
    ipfs = settings.ipfs
    if ipfs.api:
        kubo = KuboClient(api_url_from_address(ipfs.api), timeout=ipfs.timeout, auth=ipfs.api_auth or None)
        stack.push_async_callback(kubo.close)
        await kubo.version()  # fail now, clearly, if the external Kubo is unreachable or refuses our secret
        return kubo, None
    managed = _managed_kubo(settings, home)
    stack.push_async_callback(managed.stop)
    await managed.start()
    kubo = managed.client(timeout=ipfs.timeout)
    stack.push_async_callback(kubo.close)
    return kubo, managed


def _managed_kubo(settings: Settings, home: Home) -> ManagedKubo:
    ipfs = settings.ipfs
    if ipfs.api_port:
        log.warning(
            "ipfs.api_port is set: the managed Kubo's RPC API listens on 127.0.0.1:%d instead of its unix socket, "
            "where its /debug paths answer any local process without the secret",
            ipfs.api_port,
        )
    return ManagedKubo(
        home.kubo_repo,
        find_kubo_binary(ipfs.binary or None),
        # 0 (the default): a unix socket in a 0700 dir, the only way no other local process reaches Kubo's
        # /debug paths (which ignore API.Authorizations); a port: loopback TCP, as the user asked.
        api_port=ipfs.api_port or None,
        gateway_port=ipfs.gateway_port,
        swarm_port=ipfs.swarm_port,
        swarm_host=ipfs.swarm_host,
        bootstrap=list(ipfs.bootstrap),
        log_path=home.logs / "kubo.log",
        # Re-hash every block read from the blockstore: what we serve is checked against its CID.
        # Gateway.NoFetch: /ipfs/ serves what the node holds, an absent block is a prompt 404;
        # AllowCodecConversion: Accept: application/json gives a DAG-CBOR block as DAG-JSON (docs/gateway.md).
        config={
            "Datastore.HashOnRead": True,
            "Gateway.NoFetch": True,
            "Gateway.AllowCodecConversion": True,
            "Addresses.Announce": list(ipfs.swarm_announce),  # set at every start: [] clears an old one
            "Addresses.NoAnnounce": list(ipfs.swarm_no_announce),
        },
        secret_path=home.path / HOME_SECRET,  # its RPC API's secret, 0600 like api.token
    )


def _gateway_url(settings: Settings, managed: ManagedKubo | None) -> Callable[[], str | None]:
    def url() -> str | None:
        if managed is not None:
            return managed.gateway_url
        return settings.ipfs.gateway.rstrip("/") or None

    return url


def _worker(settings: Settings, home: Home) -> SparkWorker:
    sp = settings.spark
    return SparkWorker(
        _socket_path(home.path),
        master=sp.master,
        mode=sp.mode,
        remote=sp.remote,
        token=sp.token,
        conf=dict(c.split("=", 1) for c in sp.conf if "=" in c),
        log_path=home.logs / "spark.log",
        scratch=home.path / "spark-scratch",  # in the home even when the socket is not (a long home path)
        start_timeout=sp.start_timeout,
        max_jobs=sp.max_concurrent_jobs,
        max_queued=sp.max_queued_jobs,
        stall_timeout=sp.stall_timeout,
        jit_rows=sp.warmup_rows,
        limits={"rows": sp.max_result_rows, "bytes": sp.max_result_bytes, "plan_bytes": sp.max_plan_bytes},
    )


def _resolver(
    settings: Settings, datasets: Datasets, kubo: KuboClient, index: Index, spark: WorkerStart, identity: Identity
) -> Resolver:
    peers = settings.peers
    options = Options(
        datasets.tmp_dir,
        settings.datasets.rows_per_slice,
        settings.spark.query_timeout,
        trust_mode=peers.trust,
        community=peers.community or None,
        fetch_timeout=peers.fetch_timeout,
        resolve_timeout=peers.resolve_timeout,
        fetch_ahead_bytes=peers.fetch_ahead_bytes,
        from_supersets=settings.query.answer_from_supersets,
        from_peer_supersets=settings.query.answer_from_peer_supersets,
    )
    return Resolver(
        datasets,
        kubo,
        index,
        spark.worker,
        identity,
        options,
        worker_ready=spark.ready,
        canonicalizer=Sandbox(settings.query.canonicalize_timeout),
        staging=Staging(settings.spark.staging) if settings.spark.staging else None,
    )


async def _open_network(
    settings: Settings,
    home: Home,
    identity: Identity,
    resolver: Resolver,
    index: Index,
    kubo: KuboClient,
    stack: AsyncExitStack,
) -> Network | None:
    if not settings.peers.enabled:
        return None
    from node.services.peers import Network  # libp2p is imported only by nodes that run it

    network = Network(settings.peers, identity, resolver, index, kubo, home.path / "peers.json")
    await network.start()
    stack.push_async_callback(network.stop)
    return network


def _input_limits(settings: Settings) -> InputLimits:
    """The caps every ingest and pull reads its input under (docs/datasets.md "Limits")."""
    ds = settings.datasets
    return InputLimits(
        max_input_bytes=ds.max_input_bytes,
        max_ratio=ds.max_decompression_ratio,
        max_columns=ds.max_columns,
        max_rows=ds.max_rows,
    )


def _socket_path(home: Path) -> Path:
    """The worker's Unix socket: in the home, unless that path is past the 107-byte limit of sun_path."""
    path = home / "spark.sock"
    if len(str(path).encode()) <= 100:
        return path
    return Path(tempfile.gettempdir()) / f"cairn-{hashlib.blake2b(str(home).encode(), digest_size=8).hexdigest()}.sock"
