"""The node's counts at one moment (``Node.stats``): what ``/metrics`` renders, read from the services in one place."""

from __future__ import annotations

from dataclasses import dataclass

from node.support.tally import Timings


@dataclass(frozen=True)
class PeerStats:
    """The p2p network's counts (absent when peers are disabled)."""

    connected: int  # peers connected now
    accepted: int  # announcements checked and stored
    refused: dict[str, int]  # inbound peer input refused, by kind (docs/peers.md "Floods and quotas")
    claims: dict[str, int]  # peers' claims stored, by status: pending, accepted, refused
    fetched_ahead: int  # trusted signers' claims whose blocks were fetched before being asked


@dataclass(frozen=True)
class NodeStats:
    kubo_up: bool
    kubo_restarts: int | None  # None: an external Kubo, never restarted by the node
    kubo_repo_bytes: int | None  # None: Kubo did not say in time
    kubo_calls: dict[str, int]  # Kubo RPC calls by call
    kubo_errors: dict[str, int]  # …of which failed
    spark_jobs: int  # jobs sent to the Spark worker
    spark_restarts: int
    spark_job_times: Timings  # Spark jobs by outcome
    staged: dict[str, int]  # input slices in spark.staging: written, reused
    executions: int  # rows of the index
    datasets: int
    divergences: int
    derived: int  # answers computed from a cached superset's result since start
    forwarded: int  # answers brought forward over appended slices since start
    query_times: Timings  # queries by source (local, peer, computed) and refused ones
    jobs_running: int  # query, verify and pipeline jobs
    peers: PeerStats | None  # None: peers.enabled = false
