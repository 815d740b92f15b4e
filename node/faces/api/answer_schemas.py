"""The JSON answers of the API routes, as JSON Schema (2020-12, OpenAPI 3.1), made from the types the answers have.

Each answer is described once, by its type: the core's results (node/core/result_types.py, with the services' answer
types it re-exports) and the few wrappers the routes add here. ``schema_of`` turns a type into its schema; each
route of ``node.faces.api.server.ROUTES`` names its success answers with them (``Route.returns``: status → schema),
``node.faces.api.openapi`` puts them in the document, and schemathesis checks every answer of a running node against
them (tests/integration/test_api_contract.py). Objects list the fields a client may rely on, with their types;
they stay open (no ``additionalProperties: false``) so a field can be added without breaking clients.
"""

from __future__ import annotations

import types
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from node.core.result_types import (
    Announcements,
    AssetChecked,
    Checked,
    Connected,
    Dataset,
    DatasetEntry,
    Execution,
    Health,
    Ingested,
    JobStarted,
    LineageGraph,
    LogBlock,
    NodeInfo,
    PeerEntry,
    PipelineRunView,
    Pulled,
    QueryAnswer,
    Recomputed,
    Trusted,
    TypeChecked,
    TypeStored,
)
from node.domain.model import CidText

Schema = dict[str, Any]

_SCALARS: dict[Any, Schema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},  # any JSON value (a DAG object, a result cell)
}


def schema_of(tp: Any) -> Schema:
    """The JSON Schema of values of type ``tp``: a TypedDict is an object (its ``NotRequired`` fields optional),
    ``X | None`` an ``anyOf`` with null, ``list[X]`` an array, ``dict[str, X]`` an object of X values,
    ``Literal[...]`` an enum of strings; ``Annotated[X, text]`` adds a description, ``Annotated[X, {...}]`` the
    keywords given (an enum the value's type does not carry)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is None and tp in _SCALARS:
        return dict(_SCALARS[tp])
    if origin is Annotated:
        out = schema_of(args[0])
        for extra in tp.__metadata__:
            out |= {"description": extra} if isinstance(extra, str) else dict(extra)
        return out
    if origin is NotRequired:
        return schema_of(args[0])
    if origin in (Union, types.UnionType):
        return {"anyOf": [schema_of(a) for a in args]}
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": schema_of(args[0])}
    if origin is dict:
        value = schema_of(args[1])
        return {"type": "object", **({"additionalProperties": value} if value else {})}
    if is_typeddict(tp):
        return _object(tp)
    raise TypeError(f"no JSON Schema for {tp!r}")


def _object(typed_dict: type) -> Schema:
    """A TypedDict's schema: required fields first, then the optional ones, each in the order declared."""
    fields = get_type_hints(typed_dict, include_extras=True)
    optional = {k for k, t in fields.items() if get_origin(t) is NotRequired}
    order = [k for k in fields if k not in optional] + [k for k in fields if k in optional]
    return {
        "type": "object",
        "required": [k for k in order if k not in optional],
        "properties": {k: schema_of(fields[k]) for k in order},
    }


# -- what the routes wrap around the core's results (node/faces/api/handlers.py) ----------------------------------


class CidAnswer(TypedDict):
    cid: CidText


class HoliumImported(TypedDict):
    cid: CidText
    blocks: int


class DatasetList(TypedDict):
    datasets: list[DatasetEntry]


class DatasetLog(TypedDict):
    blocks: list[LogBlock]


class PipelineLog(TypedDict):
    runs: list[PipelineRunView]


class PeerList(TypedDict):
    peers: list[PeerEntry]


class TrustedList(TypedDict):
    trusted: list[Trusted]


class Removed(TypedDict):
    removed: int


class DocumentInfo(TypedDict):
    title: str
    version: str


class Document(TypedDict):
    openapi: str
    info: DocumentInfo
    paths: dict[str, Any]


class JobError(TypedDict):
    type: str
    message: str
    status: int


class JobView(TypedDict):
    """A job as node/services/resolve/jobs.py ``Job.view`` gives it: a query job's answer, a verify job's report or a
    pipeline job's run."""

    id: str
    state: Literal["running", "done", "failed"]
    result: QueryAnswer | Recomputed | PipelineRunView | None
    error: JobError | None


# -- the answers, by route ------------------------------------------------------------------------------------

ANY = schema_of(Any)
HEALTH = schema_of(Health)
NODE_INFO = schema_of(NodeInfo)
CID_ANSWER = schema_of(CidAnswer)
HOLIUM_IMPORTED = schema_of(HoliumImported)
INGESTED = schema_of(Ingested)
DATASETS = schema_of(DatasetList)
DATASET = schema_of(Dataset)
DATASET_LOG = schema_of(DatasetLog)
PULLED = schema_of(Pulled)
QUERY_ANSWER = schema_of(QueryAnswer)
JOB_STARTED = schema_of(JobStarted)
PIPELINE_RUN = schema_of(PipelineRunView)
PIPELINE_LOG = schema_of(PipelineLog)
EXECUTION = schema_of(Execution)
PEERS = schema_of(PeerList)
CONNECTED = schema_of(Connected)
TRUSTED = schema_of(TrustedList)
REMOVED = schema_of(Removed)
ANNOUNCEMENTS = schema_of(Announcements)
OPENAPI = schema_of(Document)
TYPE_CHECKED = schema_of(TypeChecked)
ASSET_CHECKED = schema_of(AssetChecked)
TYPE_STORED = schema_of(TypeStored)
LINEAGE = schema_of(LineageGraph)
RECOMPUTED = schema_of(Recomputed)
VERIFIED = schema_of(Checked | Recomputed)
JOB = schema_of(JobView)
