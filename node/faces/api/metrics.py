"""``GET /metrics``: Prometheus text exposition of the node's counters (one registry per app)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from node.core import Node
from node.core.stats import NodeStats
from node.support.tally import Timings

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Metrics:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("cairn_http_requests", "HTTP requests answered", ["route", "status"], registry=r)
        self.latency = Histogram(
            "cairn_http_request_seconds",
            "HTTP request latency",
            ["route"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10, 60),
        )
        self.kubo_up = Gauge("cairn_kubo_up", "1 when the node's Kubo answers", registry=r)
        self.kubo_restarts = Gauge("cairn_kubo_restarts", "Restarts of the managed Kubo", registry=r)
        self.spark_jobs = Gauge("cairn_spark_jobs", "Jobs sent to the Spark worker", registry=r)
        self.spark_restarts = Gauge("cairn_spark_restarts", "Restarts of the Spark worker", registry=r)
        self.executions = Gauge("cairn_executions", "Executions in the index", registry=r)
        self.datasets = Gauge("cairn_datasets", "Datasets in the index", registry=r)
        self.divergences = Gauge("cairn_divergences", "Peers' answers that disagree with ours", registry=r)
        self.derived = Gauge(
            "cairn_answers_derived", "Answers computed from a cached superset's result since start", registry=r
        )
        self.forwarded = Gauge(
            "cairn_answers_forwarded",
            "Answers brought forward over appended slices from an older version's result since start",
            registry=r,
        )
        # Inbound peer input refused, by kind (docs/peers.md "Floods and quotas"), and peers' claims stored.
        self.peer_refused = Gauge("cairn_peer_refused", "Peer messages refused", ["kind"], registry=r)
        self.peer_claims = Gauge("cairn_peer_claims", "Peers' claims stored", ["status"], registry=r)
        self.repo_bytes = Gauge("cairn_kubo_repo_bytes", "Bytes in Kubo's repo (pinned and cached blocks)", registry=r)
        self.collector = _NodeCollector()
        r.register(self.collector)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            self.requests.labels(route, str(status)).inc()
            self.latency.labels(route).observe(time.perf_counter() - started)

    async def handler(self, request: web.Request) -> web.Response:
        stats = await self.node.stats()
        self.kubo_up.set(1 if stats.kubo_up else 0)
        if stats.kubo_restarts is not None:
            self.kubo_restarts.set(stats.kubo_restarts)
        self.spark_jobs.set(stats.spark_jobs)
        self.spark_restarts.set(stats.spark_restarts)
        self.executions.set(stats.executions)
        self.datasets.set(stats.datasets)
        self.divergences.set(stats.divergences)
        self.derived.set(stats.derived)
        self.forwarded.set(stats.forwarded)
        if stats.kubo_repo_bytes is not None:  # else the last value stays, cairn_kubo_up says why
            self.repo_bytes.set(stats.kubo_repo_bytes)
        if stats.peers is not None:
            for kind, count in stats.peers.refused.items():
                self.peer_refused.labels(kind).set(count)
            for status, count in stats.peers.claims.items():
                self.peer_claims.labels(status).set(count)
        self.collector.stats = stats
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _histogram(name: str, doc: str, label: str, t: Timings) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc, labels=[label])
    for value in sorted(t.counts):
        h.add_metric([value], t.cumulative(value), t.sums.get(value, 0.0))
    return h


def _counter(name: str, doc: str, label: str, counts: dict[str, int]) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc, labels=[label])
    for value, n in sorted(counts.items()):
        c.add_metric([value], n)
    return c


QUERY_SOURCES = ("local", "peer", "computed", "refused")


class _NodeCollector:
    """Families read from the node's counts of the scrape under way (``Node.stats``; node/support/tally.py)."""

    def __init__(self) -> None:
        self.stats: NodeStats | None = None

    def collect(self) -> list[Metric]:
        s = self.stats
        if s is None:  # registration, before any scrape
            return []
        q = s.query_times
        out: list[Metric] = [
            _counter(
                "cairn_queries",
                "Queries answered, by source (local, peer, computed) or refused",
                "source",
                {**dict.fromkeys(QUERY_SOURCES, 0), **q.counts},  # every source from the start: rates need a 0
            ),
            _histogram("cairn_query_seconds", "Query latency in the node, by source", "source", q),
            _counter("cairn_spark_jobs_run", "Spark jobs run, by outcome", "outcome", s.spark_job_times.counts),
            _histogram("cairn_spark_job_seconds", "Spark job wall time, by outcome", "outcome", s.spark_job_times),
            _counter(
                "cairn_spark_staged",
                "Input slices in spark.staging, by outcome: written there by this node, or reused (found, checked)",
                "outcome",
                s.staged,
            ),
            _counter("cairn_kubo_calls", "Kubo RPC calls, by call", "call", s.kubo_calls),
            _counter("cairn_kubo_errors", "Kubo RPC calls that failed, by call", "call", s.kubo_errors),
            GaugeMetricFamily("cairn_jobs_running", "Query, verify and pipeline jobs running", value=s.jobs_running),
        ]
        if s.peers is not None:
            peers = GaugeMetricFamily("cairn_peers", "Connected peers", value=s.peers.connected)
            ann = CounterMetricFamily("cairn_announcements", "Announcements received, by outcome", labels=["outcome"])
            ann.add_metric(["accepted"], s.peers.accepted)
            for kind, count in s.peers.refused.items():
                ann.add_metric([f"refused:{kind}"], count)
            ahead = CounterMetricFamily(
                "cairn_claims_fetched_ahead", "Trusted signers' claims whose blocks were fetched before being asked"
            )
            ahead.add_metric([], s.peers.fetched_ahead)
            out += [peers, ann, ahead]
        return out
