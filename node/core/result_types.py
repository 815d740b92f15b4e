"""What the core's operations return, as typed dicts: JSON as the faces send it, and the one description of it
(node/faces/api/answer_schemas.py makes the HTTP answer schemas of the OpenAPI document from these types).

A field's order here is its order in the schema; a ``NotRequired`` field may be absent. ``CidText`` is a CID as
text. Answers the services make are typed where they are made (node.services.pipelines, node.services.provenance,
node.services.type_checks,
p2p), and re-exported here.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from node.domain.model import CidText
from node.domain.model.typecheck import VerdictJson
from node.services.pipelines.run import PipelineRunView
from node.services.provenance.lineage import LineageGraph
from node.services.provenance.recompute import Recomputed
from node.services.provenance.verify import Checked
from node.services.resolve.jobs import Job
from node.services.type_checks.checker import AssetChecked, Kind, ResultChecked, TypeChecked
from p2p.peers import PeerEntry

__all__ = [
    "AssetChecked",
    "Checked",
    "LineageGraph",
    "PeerEntry",
    "PipelineRunView",
    "Recomputed",
    "ResultChecked",
    "TypeChecked",
    "VerdictJson",
]

# -- the node's state (/healthz, /api/v0/node) ---------------------------------------------------------------


class Readiness(TypedDict):
    state: str
    ready: bool


class KuboHealth(TypedDict):
    state: str
    managed: bool
    restarts: NotRequired[int]  # a managed Kubo's
    error: NotRequired[str]  # why it does not answer


class P2pHealth(TypedDict):
    state: str
    ready: bool
    # a new inbound connection gets the libp2p greeting now (measured; absent when p2p is disabled)
    accepting: NotRequired[bool]
    error: NotRequired[str]


class Health(TypedDict):
    ok: bool  # the node and its Kubo serve: 200, else 503
    ready: bool  # and a miss would be computed at once: Spark up, p2p up (or disabled), not stopping
    stopping: bool
    queries: int  # queries running now (what a stopping node waits for)
    kubo: KuboHealth
    spark: Readiness
    p2p: P2pHealth


class Addresses(TypedDict):
    cairn_connect: list[str]  # the p2p host's: what `cairn connect` takes
    kubo_swarm: list[str]


class SparkInfo(TypedDict):
    state: str
    mode: str
    master: str
    pid: int | None
    jobs: int
    restarts: int


class KuboInfo(TypedDict):
    managed: bool
    state: str
    api: str
    restarts: NotRequired[int]
    pid: NotRequired[int | None]
    version: NotRequired[str]
    peer_id: NotRequired[str]
    swarm: NotRequired[list[str]]
    error: NotRequired[str]


class NodeInfo(TypedDict):
    version: str
    home: str
    api: str | None
    flight: str | None  # the Arrow Flight SQL endpoint, grpc://host:port (None: api.flight is off)
    peer_id: str
    node_key: str
    p2p_addrs: list[str]
    addresses: Addresses
    uptime_s: float
    spark: SparkInfo
    kubo: KuboInfo


# -- queries, jobs and executions -------------------------------------------------------------------------


class Quorum(TypedDict):
    agree: int
    signers: list[str]
    dissent: list[str]


class QueryAnswer(TypedDict):
    query: CidText
    invocation: CidText
    execution: CidText
    receipt: CidText
    source: Annotated[str, {"enum": ["computed", "local", "peer"]}]
    elapsed_ms: float
    logicalHash: str
    row_count: int
    schema: list[list[str]]
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    inputs: Any  # alias → the dataset version read
    slices: list[CidText]
    peer: dict[str, Any] | None  # for a peer's answer: which peer, signer, mode, receipt (docs/peers.md)
    quorum: Quorum | None  # quorum:K: how many agree, who, and who differs; null in other modes
    trust: str  # how it was checked: docs/peers.md "Trust labels"
    verified: bool  # only computed here, or a peer's answer recomputed here and agreed
    profile: CidText | None  # ep_0 of the engine that computed it (None: a peer's, see its receipt)
    hints: list[str]  # what the asker could do to reuse peers' answers


class TypedQueryAnswer(QueryAnswer):
    """The answer to a query that declared the type its result must be a term of."""

    type: ResultChecked


class JobStarted(TypedDict):
    job: str
    events: str  # where its events are followed (server-sent events)


def job_started(job: Job) -> JobStarted:
    return {"job": job.id, "events": f"/api/v0/jobs/{job.id}/events"}


FailureJson = TypedDict("FailureJson", {"class": str, "sqlstate": str, "message": str})


class Divergence(TypedDict):
    signer: str
    peer: str | None
    execution: CidText
    receipt: CidText
    profile: CidText | None
    logicalHash: str
    rows: int
    received: float


class Execution(TypedDict):
    execution: CidText
    invocation: CidText
    query: CidText
    receipt: CidText
    logicalHash: str
    rows: int
    structure: CidText
    slices: list[CidText]
    source: str
    trust: str
    failure: FailureJson | None  # a recorded failure (docs/queries.md "Recorded failures"); null for a result
    signer: str
    time: str
    engine: dict[str, str]
    timings: dict[str, float]
    versions: list[CidText]
    profile: CidText | None
    divergences: list[Divergence]  # peers' answers for the same invocation that disagree with this one


# -- objects and datasets --------------------------------------------------------------------------------------


class SliceFacts(TypedDict):
    cid: CidText
    rows: int
    size: int
    logicalHash: str
    offset: NotRequired[int]


class Ingested(TypedDict):
    name: str
    id: str
    head: CidText
    previous: CidText | None
    rows_read: int
    rows_added: int
    schema_changed: bool
    slices: list[SliceFacts]
    elapsed_ms: float


class DatasetEntry(TypedDict):
    name: str
    id: str
    head: CidText
    rows: int
    slices: int
    owned: bool
    updated: float


class Dataset(TypedDict):
    name: str | None
    id: str
    head: CidText
    ipns: str | None
    seq: int
    rows: int
    logicalHash: str
    structure: CidText | None
    abstractStructure: CidText | None
    schema: list[list[str]]
    merge: Any
    info: Any
    slices: list[SliceFacts]


class LogBlock(TypedDict):
    cid: CidText
    seq: int
    time: Any
    event: Any


class Pulled(TypedDict):
    name: str
    id: str
    head: CidText
    blocks: int
    slices: int
    bytes: int


class TypeStored(TypedDict):
    cid: CidText
    kind: Kind


# -- peers and trust --------------------------------------------------------------------------------------------


class Connected(TypedDict):
    peer: str


class Trusted(TypedDict):
    key: str
    community: str


class SignerScore(TypedDict):
    accepted: int
    refused: int


class ClaimSeen(TypedDict):
    invocation: CidText
    signer: str
    peer: str | None
    execution: CidText
    receipt: CidText
    rows: int
    logicalHash: str
    received: float
    status: str
    reason: str | None
    signer_score: SignerScore


class RefusedMessage(TypedDict):
    peer: str | None
    reason: str
    received: float


class Announcements(TypedDict):
    claims: list[ClaimSeen]
    refused_messages: list[RefusedMessage]
