"""The JSON answers of the API routes, as JSON Schema (2020-12, OpenAPI 3.1): declared next to the route table.

Each route of ``node.api.server.ROUTES`` names its success answers here (``Route.returns``: status → schema);
``node.api.openapi`` puts them in the document, and schemathesis checks every answer of a running node against
them (tests/integration/test_api_contract.py). Objects list the fields a client may rely on, with their types;
they stay open (``additionalProperties``) so a field can be added without breaking clients.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
ANY: Schema = {}  # any JSON value (a DAG object, a result cell)
CID: Schema = {"type": "string", "description": "a CID, base32 (CIDv1) or base58 (CIDv0)"}


def maybe(schema: Schema) -> Schema:
    """``schema`` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with these fields (``optional`` ones may be absent)."""
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


_READINESS = obj({"state": STR, "ready": BOOL})
HEALTH = obj(
    {
        "ok": BOOL,  # the node and its Kubo serve: 200, else 503
        "ready": BOOL,  # and a miss would be computed at once: Spark up, p2p up (or disabled), not stopping
        "stopping": BOOL,
        "queries": INT,  # queries running now (what a stopping node waits for)
        "kubo": obj({"state": STR, "managed": BOOL}, {"restarts": INT, "error": STR}),
        "spark": _READINESS,
        # accepting: a new inbound connection gets the libp2p greeting now (measured; absent when p2p is disabled)
        "p2p": obj({"state": STR, "ready": BOOL}, {"accepting": BOOL, "error": STR}),
    },
)
NODE_INFO = obj(
    {
        "version": STR,
        "home": STR,
        "api": maybe(STR),
        "flight": maybe(STR),  # the Arrow Flight SQL endpoint, grpc://host:port (None: api.flight is off)
        "peer_id": STR,
        "node_key": STR,
        "p2p_addrs": array(STR),
        "addresses": obj({"cairn_connect": array(STR), "kubo_swarm": array(STR)}),
        "uptime_s": NUM,
        "spark": obj({"state": STR, "mode": STR, "master": STR, "pid": maybe(INT), "jobs": INT, "restarts": INT}),
        "kubo": obj(
            {"managed": BOOL, "state": STR, "api": STR},
            {"restarts": INT, "pid": maybe(INT), "version": STR, "peer_id": STR, "swarm": array(STR), "error": STR},
        ),
    }
)
CID_ANSWER = obj({"cid": CID})
HOLIUM_IMPORTED = obj({"cid": CID, "blocks": INT})
_SLICE = obj({"cid": CID, "rows": INT, "size": INT, "logicalHash": STR}, {"offset": INT})
INGESTED = obj(
    {
        "name": STR,
        "id": STR,
        "head": CID,
        "previous": maybe(CID),
        "rows_read": INT,
        "rows_added": INT,
        "schema_changed": BOOL,
        "slices": array(_SLICE),
        "elapsed_ms": NUM,
    }
)
DATASETS = obj(
    {
        "datasets": array(
            obj({"name": STR, "id": STR, "head": CID, "rows": INT, "slices": INT, "owned": BOOL, "updated": NUM})
        )
    }
)
DATASET = obj(
    {
        "name": maybe(STR),
        "id": STR,
        "head": CID,
        "ipns": maybe(STR),
        "seq": INT,
        "rows": INT,
        "logicalHash": STR,
        "structure": maybe(CID),
        "abstractStructure": maybe(CID),
        "schema": array(array(STR)),
        "merge": ANY,
        "info": ANY,
        "slices": array(_SLICE),
    }
)
DATASET_LOG = obj({"blocks": array(obj({"cid": CID, "seq": INT, "time": ANY, "event": ANY}))})
PULLED = obj({"name": STR, "id": STR, "head": CID, "blocks": INT, "slices": INT, "bytes": INT})
QUERY_ANSWER = obj(
    {
        "query": CID,
        "invocation": CID,
        "execution": CID,
        "receipt": CID,
        "source": {"type": "string", "enum": ["computed", "local", "peer"]},
        "elapsed_ms": NUM,
        "logicalHash": STR,
        "row_count": INT,
        "schema": array(array(STR)),
        "columns": array(STR),
        "rows": array(array(ANY)),
        "truncated": BOOL,
        "inputs": ANY,
        "slices": array(CID),
        "peer": maybe(STR),
        "quorum": maybe(obj({"agree": INT, "signers": array(STR), "dissent": array(STR)})),
        "trust": STR,
        "verified": BOOL,
        "profile": maybe(CID),
        "hints": array(STR),
    }
)
JOB_STARTED = obj({"job": STR, "events": STR})
_RUN_STEP = obj(
    {
        "name": STR,
        "vertex": INT,
        "source": {"type": "string", "enum": ["computed", "local", "peer", "failed", "skipped"]},
        "invocation": maybe(CID),
        "execution": maybe(CID),
        "receipt": maybe(CID),
        "version": maybe(CID),
        "error": maybe(STR),
    },
    {"rows": INT, "logicalHash": STR, "columns": array(STR), "trust": STR, "elapsed_ms": NUM},
)
PIPELINE_RUN = obj(
    {
        "name": STR,
        "run": CID,
        "pipeline": CID,
        "previous": maybe(CID),
        "status": {"type": "string", "enum": ["ok", "failed"]},
        "failed": maybe(obj({"step": STR, "error": STR})),
        "signer": STR,
        "time": STR,
        "computed": INT,
        "steps": array(_RUN_STEP),
    }
)
PIPELINE_LOG = obj({"runs": array(PIPELINE_RUN)})
_JOB_ERROR = obj({"type": STR, "message": STR, "status": INT})
EXECUTION = obj(
    {
        "execution": CID,
        "invocation": CID,
        "query": CID,
        "receipt": CID,
        "logicalHash": STR,
        "rows": INT,
        "structure": CID,
        "slices": array(CID),
        "source": STR,
        "trust": STR,
        "failure": maybe(obj({"class": STR, "sqlstate": STR, "message": STR})),
        "signer": STR,
        "time": STR,
        "engine": {"type": "object", "additionalProperties": STR},
        "timings": {"type": "object", "additionalProperties": NUM},
        "versions": array(CID),
        "profile": maybe(CID),
        "divergences": array(
            obj(
                {
                    "signer": STR,
                    "peer": maybe(STR),
                    "execution": CID,
                    "receipt": CID,
                    "profile": maybe(CID),
                    "logicalHash": STR,
                    "rows": INT,
                    "received": NUM,
                }
            )
        ),
    }
)
PEERS = obj(
    {
        "peers": array(
            obj({"peer_id": STR, "addrs": array(STR), "connected": BOOL, "last_seen": maybe(NUM), "source": STR})
        )
    }
)
CONNECTED = obj({"peer": STR})
TRUSTED = obj({"trusted": array(obj({"key": STR, "community": STR}))})
REMOVED = obj({"removed": INT})
ANNOUNCEMENTS = obj(
    {
        "claims": array(
            obj(
                {
                    "invocation": CID,
                    "signer": STR,
                    "peer": maybe(STR),
                    "execution": CID,
                    "receipt": CID,
                    "rows": INT,
                    "logicalHash": STR,
                    "received": NUM,
                    "status": STR,
                    "reason": maybe(STR),
                    "signer_score": obj({"accepted": INT, "refused": INT}),
                }
            )
        ),
        "refused_messages": array(obj({"peer": maybe(STR), "reason": STR, "received": NUM})),
    }
)
OPENAPI = obj({"openapi": STR, "info": obj({"title": STR, "version": STR}), "paths": {"type": "object"}})

# Transform.Storage types (docs/provenance.md "Types"): the spec's {result, code, protocol, protocol_version}
_VERDICT = {"result": BOOL, "code": maybe(STR), "protocol": STR, "protocol_version": STR}
TYPE_CHECKED = obj({**_VERDICT, "type": CID, "data": CID})
ASSET_CHECKED = obj({**_VERDICT, "asset": CID})
TYPE_STORED = obj({"cid": CID, "kind": {"enum": ["Type", "Asset", "Function", "series type"]}})

# -- provenance (docs/provenance.md "Lineage", "Verify (offline)") ------------------------------------------
_LINEAGE_NODE = obj(
    {"id": STR, "kind": STR, "cid": maybe(STR), "label": STR},
    {"signer": maybe(STR), "checks": {"type": "object"}, "source": STR},
)
LINEAGE = obj(
    {
        "start": STR,
        "nodes": array(_LINEAGE_NODE),
        "edges": array(obj({"from": STR, "to": STR, "label": STR, "via": STR})),
        "complete": BOOL,
        "cut": maybe(STR),
    }
)
_COUNTS = obj({"ok": INT, "failed": INT, "unchecked": INT})
_CHECK = obj({"check": STR, "subject": STR, "status": {"enum": ["ok", "failed", "unchecked"]}, "detail": STR})
_CHECKED = obj(
    {
        "cid": STR,
        "offline": BOOL,
        "recursive": BOOL,
        "ok": BOOL,
        "summary": _COUNTS,
        "executions": array(obj({"receipt": CID, "checks": array(_CHECK), "summary": _COUNTS})),
    }
)
_RESULT_FACTS = obj(
    {"execution": CID, "logicalHash": STR, "rows": INT, "engine": ANY, "profile": maybe(CID)}, {"receipt": CID}
)
RECOMPUTED = obj(  # docs/provenance.md "Verify (recompute)": a job's result, or the answer with wait: true
    {
        "cid": STR,
        "offline": BOOL,
        "recursive": BOOL,
        "ok": BOOL,
        "summary": obj({"reproduced": INT, "diverged": INT, "could not run": INT}),
        "executions": array(
            obj(
                {"receipt": CID, "status": {"enum": ["reproduced", "diverged", "could not run"]}},
                {
                    "reason": STR,
                    "signer": STR,
                    "invocation": CID,
                    "claimed": _RESULT_FACTS,
                    "recomputed": _RESULT_FACTS,
                    "same_execution": BOOL,
                    "verification": CID,
                },
            )
        ),
    }
)
VERIFIED = {"anyOf": [_CHECKED, RECOMPUTED]}
JOB = obj(
    {
        "id": STR,
        "state": {"type": "string", "enum": ["running", "done", "failed"]},
        # a query job's answer, a verify job's report or a pipeline job's run
        "result": {"anyOf": [QUERY_ANSWER, RECOMPUTED, PIPELINE_RUN, {"type": "null"}]},
        "error": maybe(_JOB_ERROR),
    }
)
