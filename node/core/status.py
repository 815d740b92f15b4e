"""What a node says of itself: its health (``/healthz``), its identity and state (``/api/v0/node``) and its counts
(``/metrics``), read from its parts in one place."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING

from node import __version__
from node.core.result_types import Health, KuboHealth, KuboInfo, NodeInfo, P2pHealth, Readiness, SparkInfo
from node.core.stats import NodeStats, PeerStats
from node.support.errors import CairnError, KuboError

if TYPE_CHECKING:
    from node.core.node import Node
    from node.services.peers import Network


async def health(node: Node) -> Health:
    kubo: KuboHealth = {"state": node.kubo_state, "managed": node.managed is not None}
    if node.managed is not None:
        kubo["restarts"] = node.managed.restarts
    if node.kubo_state == "up":
        try:
            await node.kubo.version(timeout=2.0)
        except KuboError as e:
            kubo["state"] = "down"
            kubo["error"] = e.message
    spark_state = node.spark_state()
    spark: Readiness = {"state": spark_state, "ready": spark_state == "up"}  # up: the worker takes a job now
    p2p: P2pHealth = {"state": "disabled", "ready": True}  # no p2p host: nothing to wait for
    if node.network is not None:
        p2p = await _p2p_health(node.network)
    ok = kubo["state"] == "up"
    # ok: the node and its Kubo serve (what the HTTP status says); ready: a miss would be computed at once.
    ready = ok and spark["ready"] and p2p["ready"] and not node.stopping
    return {
        "ok": ok,
        "ready": ready,
        "stopping": node.stopping,
        "queries": node.running_queries(),
        "kubo": kubo,
        "spark": spark,
        "p2p": p2p,
    }


async def _p2p_health(network: Network) -> P2pHealth:
    """The p2p host's part of ``/healthz``: its thread running, and a new inbound connection accepted now (measured
    by a probe connection, ``P2PHost.accepting``: a host that runs but accepts no peer is not ready)."""
    host = network.host
    if not host.running:
        return {"state": "down", "ready": False, "accepting": False}
    reason = await host.accepting()
    if reason is None:
        return {"state": "up", "ready": True, "accepting": True}
    return {"state": "up", "ready": False, "accepting": False, "error": f"p2p host accepts no connection: {reason}"}


async def info(node: Node) -> NodeInfo:
    kubo = await _kubo_info(node)
    spark_settings = node.settings.spark
    spark: SparkInfo = {
        "state": node.spark_state(),
        "mode": spark_settings.mode,
        "master": spark_settings.remote if spark_settings.mode == "connect" else spark_settings.master,
        "pid": node.worker.pid,
        "jobs": node.worker.jobs_sent,
        "restarts": node.worker.restarts,
    }
    p2p_addrs = node.network.host.addrs() if node.network else []
    return {
        "version": __version__,
        "home": str(node.home.path),
        "spark": spark,
        "api": node.api_url,
        "flight": node.flight_url,  # Arrow Flight SQL (docs/flight-sql.md); None: api.flight is off
        "peer_id": node.identity.peer_id,
        "node_key": node.identity.node_key,
        "p2p_addrs": p2p_addrs,
        # Two hosts, two address lists, easily confused: which one `cairn connect` takes.
        "addresses": {"cairn_connect": p2p_addrs, "kubo_swarm": kubo.get("swarm", [])},
        "kubo": kubo,
        "uptime_s": round(time.time() - node.started_at, 3),
    }


async def _kubo_info(node: Node) -> KuboInfo:
    kubo: KuboInfo = {"managed": node.managed is not None, "state": node.kubo_state, "api": node.kubo.api_url}
    if node.managed is not None:
        kubo["restarts"] = node.managed.restarts
        kubo["pid"] = node.managed.pid
    try:
        version = await node.kubo.version(timeout=5.0)
        ident = await node.kubo.id(timeout=5.0)
        kubo["version"], kubo["peer_id"], kubo["swarm"] = version.version, ident.id, list(ident.addresses)
    except KuboError as e:
        kubo["state"] = "down"
        kubo["error"] = e.message
    return kubo


async def stats(node: Node) -> NodeStats:
    """The node's counts now, for ``/metrics``; Kubo's repo size is asked with a short deadline."""
    try:
        repo_bytes: int | None = await node.kubo.repo_size(timeout=2.0)
    except CairnError:  # Kubo down or slow: cairn_kubo_up says why
        repo_bytes = None
    staging = node.resolver.staging
    return NodeStats(
        kubo_up=node.kubo_state == "up",
        kubo_restarts=node.managed.restarts if node.managed is not None else None,
        kubo_repo_bytes=repo_bytes,
        kubo_calls=dict(node.kubo.calls),
        kubo_errors=dict(node.kubo.errors),
        spark_jobs=node.worker.jobs_sent,
        spark_restarts=node.worker.restarts,
        spark_job_times=copy.deepcopy(node.worker.job_times),
        staged={"written": 0, "reused": 0, **(staging.counts if staging is not None else {})},
        executions=node.index.count("executions"),
        datasets=node.index.count("datasets"),
        divergences=node.index.count("divergences"),
        derived=node.resolver.derived,
        forwarded=node.resolver.forwarded,
        query_times=copy.deepcopy(node.query_times),
        jobs_running=node.jobs.live(),
        peers=_peer_stats(node),
    )


def _peer_stats(node: Node) -> PeerStats | None:
    if node.network is None:
        return None
    return PeerStats(
        connected=len(node.network.host.connected_peers()),
        accepted=node.network.accepted,
        refused=node.network.counters(),
        # refused: failed a check when used (node/services/resolve/claim_checks.py)
        claims={s: node.index.peer_claims.claim_count(status=s) for s in ("pending", "accepted", "refused")},
        fetched_ahead=node.resolver.ahead.fetched,
    )
