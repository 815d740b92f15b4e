"""The HTTP face: the route table and the app that serves it (its handlers parse a request, call ``Node``, and
render JSON: node.faces.api.handlers, node.faces.api.uploads).

Every route is declared once in ``ROUTES`` (method, path, handler, who may call it, body): ``create_app`` serves
exactly those, each behind its checks (node.faces.api.access), and ``GET /api/v0/openapi.json`` is generated from the
same table. Write endpoints need ``Authorization: Bearer <token>`` (the token in ``$CAIRN_HOME/api.token``).
Every error is ``{"error": {"type": …, "message": …}}`` with the status its exception carries (docs/api.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from node import __version__
from node.core import Node
from node.faces.api import answer_schemas as S
from node.faces.api import bodies, export, openapi, webui
from node.faces.api.access import (
    FILE_UPLOAD,
    JSON,
    LIMITS_KEY,
    OPEN,
    TOKEN,
    TOKEN_TO_COMPUTE,
    UPLOAD,
    Param,
    Route,
    guard,
    host_middleware,
    limits_from,
)
from node.faces.api.answering import METRICS_KEY, NODE_KEY, OPENAPI_KEY, json_answer
from node.faces.api.handlers import (
    announcements,
    asset_check,
    dag_get,
    dag_put,
    dataset_data,
    dataset_get,
    dataset_log,
    datasets_list,
    execution_data,
    execution_get,
    gateway,
    healthz,
    holium_import,
    job_cancel,
    job_events,
    job_get,
    lineage_get,
    metrics_get,
    node_info,
    odf_block,
    odf_data,
    odf_head,
    openapi_get,
    peers_connect,
    peers_list,
    pipeline_log,
    pipelines_post,
    proof_get,
    pull,
    query,
    trust_add,
    trust_list,
    trust_rm,
    type_check,
    type_put,
    verify_post,
)
from node.faces.api.metrics import Metrics
from node.faces.api.uploads import datasets_add
from node.support.errors import CairnError

log = logging.getLogger("cairn.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, kind: str, message: str) -> web.Response:
    return json_answer({"error": {"type": kind, "message": message}}, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except CairnError as e:
        return _error(e.status, type(e).__name__, e.message)
    except web.HTTPRequestEntityTooLarge as e:
        return _error(413, "TooLarge", e.text or "request body too large")
    except web.HTTPException as e:
        if e.status < 400 or not request.path.startswith("/api/"):
            raise
        return _route_error(request, e)
    except Exception as e:  # a bug: say so without leaking internals, keep the trace in the log
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _error(500, "InternalError", f"internal error: {type(e).__name__}")


def _route_error(request: web.Request, e: web.HTTPException) -> web.Response:
    """An API path no route answers (404) or not with this method (405): the API's own error shape, as every other
    refusal, not aiohttp's plain text (``Allow`` kept)."""
    if e.status == 405:
        allowed = e.headers.get("Allow", "")
        resp = _error(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.path}: use {allowed}")
        resp.headers["Allow"] = allowed
        return resp
    if e.status == 404:
        return _error(404, "NotFound", f"no API route {request.method} {request.path}: see GET /api/v0/openapi.json")
    return _error(e.status, type(e).__name__.removeprefix("HTTP"), e.reason)


# -- the route table: each route once; docs/api.md ----------------------------------------------------------

_REF = Param("ref", "dataset name, id or block CID")
_FORMATS = tuple(export.WRITERS)
_DATA_TYPES = tuple(w.content_type.split(";")[0] for w in export.WRITERS.values())
_GATEWAY_TYPES = (
    "application/vnd.ipld.raw",
    "application/vnd.ipld.car",
    "application/octet-stream",
    "application/vnd.ipld.dag-cbor",
    "application/json",
    "text/plain",
    "text/html",
    "*/*",  # a file's bytes, with the type Kubo's gateway sniffs (application/vnd.apache.parquet for a slice)
)
_GATEWAY_PARAMS = (
    Param("format", "response format; wins over Accept", enum=("raw", "car", "dag-json", "dag-cbor", "json", "cbor")),
    Param("dag-scope", "CAR: the blocks under the path (default all)", enum=("all", "entity", "block")),
    Param("entity-bytes", "CAR: a byte range of a file, FROM:TO (TO may be * or negative)"),
    Param("car-version", "CAR version (1)", enum=("1",)),
    Param("car-order", "CAR block order", enum=("dfs", "unk")),
    Param("car-dups", "CAR: repeat a block each time it is met (y) or not (n)", enum=("y", "n")),
)
_UPLOAD_PARAMS = (
    Param("name", "create a dataset of this name"),
    Param("to", "append to this dataset"),
    Param("filename", "the uploaded file's name (its extension tells the format)"),
    Param(
        "path",
        "ingest this absolute path on the node's machine instead of the body (loopback clients only, under "
        "api.ingest_dirs, never under $CAIRN_HOME)",
    ),
    Param("format", "csv, jsonl, json, parquet, … (else from the extension)"),
    Param("compression", "gzip, zstd, … (else from the extension)"),
    Param("delimiter", "CSV delimiter"),
    Param("encoding", "text encoding"),
    Param("header", "whether a CSV has a header line", enum=("true", "false")),
    Param("columns", "column names, comma-separated (CSV without header)"),
    Param("type", "COLUMN=TYPE override", repeated=True),
    Param("event_time", "the event-time column"),
    Param("merge", "merge strategy of an append"),
    Param("primary_key", "primary-key columns, comma-separated"),
    Param("title", "dataset title"),
    Param("description", "dataset description"),
    Param("license", "dataset license"),
    Param("keyword", "a keyword", repeated=True),
    Param("progress", "answer NDJSON progress lines, then the result", enum=("true", "false")),
)


ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/healthz",
        healthz,
        OPEN,
        "liveness (ok: the node and Kubo serve) and readiness (ready: Spark and p2p can take a miss)",
        errors=(),
        returns={200: S.HEALTH, 503: S.HEALTH},
    ),
    Route("GET", "/metrics", metrics_get, OPEN, "Prometheus metrics", produces=("text/plain",), errors=()),
    Route("GET", "/api/v0/openapi.json", openapi_get, OPEN, "this document", errors=(), returns={200: S.OPENAPI}),
    # the web page (docs/web.md): static files shipped in the package, each with a Content-Security-Policy
    Route("GET", "/", webui.page, OPEN, "the node's web page (docs/web.md)", produces=("text/html",), errors=()),
    Route(
        "GET",
        "/ui/{file}",
        webui.asset,
        OPEN,
        "one of the web page's files (its scripts and style sheet; any other name is 404)",
        produces=("text/javascript", "text/css", "text/html", "image/svg+xml"),
        errors=(404,),
    ),
    Route(
        "GET",
        "/api/v0/node",
        node_info,
        OPEN,
        "the node's identity, addresses and state",
        errors=(),
        returns={200: S.NODE_INFO},
    ),
    Route(
        "POST",
        "/api/v0/dag",
        dag_put,
        TOKEN,
        "store a DAG-JSON object",
        JSON,
        {"description": "any DAG-JSON value"},
        (Param("pin", "pin it (default true)", enum=("true", "false")),),
        returns={200: S.CID_ANSWER},
    ),
    Route(
        "GET",
        "/api/v0/dag/{cid}",
        dag_get,
        OPEN,
        "an IPLD object (DAG-JSON), or a raw block's bytes",
        produces=("application/json", "application/octet-stream"),
        returns={200: S.ANY},
    ),
    Route(
        "POST",
        "/api/v0/holium/import",
        holium_import,
        TOKEN,
        "import a Holium data tree",
        UPLOAD,
        params=(Param("format", "the body's format", enum=("json", "csv", "cbor", "bin")),),
        returns={200: S.HOLIUM_IMPORTED},
    ),
    Route(
        "POST",
        "/api/v0/datasets",
        datasets_add,
        TOKEN,
        "upload and ingest a file (201 for name=, 200 for to=)",
        FILE_UPLOAD,
        params=_UPLOAD_PARAMS,
        produces=("application/json", "application/x-ndjson"),
        ok=201,
        errors=(400, 404, 409),
        returns={200: S.INGESTED, 201: S.INGESTED},
    ),
    Route("GET", "/api/v0/datasets", datasets_list, OPEN, "the datasets", errors=(), returns={200: S.DATASETS}),
    Route("GET", "/api/v0/datasets/{ref}", dataset_get, OPEN, "one dataset", returns={200: S.DATASET}),
    Route("GET", "/api/v0/datasets/{ref}/log", dataset_log, OPEN, "a dataset's blocks", returns={200: S.DATASET_LOG}),
    Route(
        "GET",
        "/api/v0/datasets/{ref}/data",
        dataset_data,
        OPEN,
        "a dataset's rows",
        params=(
            Param("format", "output format", enum=_FORMATS),
            Param("limit", "at most this many rows", type="integer"),
        ),
        produces=_DATA_TYPES,
    ),
    Route(
        "POST",
        "/api/v0/pull",
        pull,
        TOKEN,
        "pull a dataset from a URL or CID (by CID: from the connected peers that hold it, 404 when none does)",
        JSON,
        bodies.PULL.schema,
        returns={200: S.PULLED},
    ),
    Route(
        "POST",
        "/api/v0/query",
        query,
        TOKEN_TO_COMPUTE,
        "answer a SQL query (the token is needed to compute a miss or to ask with a looser trust); 202 for wait: false",
        JSON,
        bodies.QUERY.schema,
        errors=(400, 404, 409, 422, 429),
        returns={200: S.QUERY_ANSWER, 202: S.JOB_STARTED},
    ),
    Route(
        "POST",
        "/api/v0/pipelines",
        pipelines_post,
        TOKEN,
        "run a pipeline of SQL steps in dependency order and record the run (pr_0); 202 for wait: false",
        JSON,
        bodies.PIPELINE.schema,
        errors=(400, 404, 409, 422, 429),
        returns={200: S.PIPELINE_RUN, 202: S.JOB_STARTED},
    ),
    Route(
        "GET",
        "/api/v0/pipelines/{name}",
        pipeline_log,
        OPEN,
        "the runs of a pipeline, latest first",
        params=(Param("limit", "at most this many runs (default 20)", type="integer"),),
        returns={200: S.PIPELINE_LOG},
    ),
    Route("GET", "/api/v0/peers", peers_list, OPEN, "connected peers", errors=(409,), returns={200: S.PEERS}),
    Route(
        "POST",
        "/api/v0/peers/connect",
        peers_connect,
        TOKEN,
        "connect to a peer: kept only if it speaks Cairn's protocols (a Kubo swarm address is refused, 400)",
        JSON,
        bodies.CONNECT.schema,
        errors=(400, 409),
        returns={200: S.CONNECTED},
    ),
    Route("GET", "/api/v0/trust", trust_list, OPEN, "trusted signers", errors=(), returns={200: S.TRUSTED}),
    Route(
        "POST",
        "/api/v0/trust",
        trust_add,
        TOKEN,
        "trust a signer",
        JSON,
        bodies.TRUST_ADD.schema,
        returns={200: S.TRUSTED},
    ),
    Route(
        "DELETE",
        "/api/v0/trust",
        trust_rm,
        TOKEN,
        "stop trusting a signer",
        JSON,
        bodies.TRUST_RM.schema,
        returns={200: S.REMOVED},
    ),
    Route(
        "GET",
        "/api/v0/announcements",
        announcements,
        OPEN,
        "announcements received",
        errors=(),
        returns={200: S.ANNOUNCEMENTS},
    ),
    Route("GET", "/api/v0/jobs/{id}", job_get, OPEN, "a query job", returns={200: S.JOB}),
    Route("GET", "/api/v0/jobs/{id}/events", job_events, OPEN, "a query job's events", produces=("text/event-stream",)),
    Route(
        "DELETE",
        "/api/v0/jobs/{id}",
        job_cancel,
        TOKEN,
        "cancel a query job and its Spark job",
        errors=(404,),
        returns={200: S.JOB},
    ),
    Route(
        "GET",
        "/api/v0/executions/{cid}",
        execution_get,
        OPEN,
        "an execution and its receipt",
        returns={200: S.EXECUTION},
    ),
    Route(
        "GET",
        "/api/v0/executions/{cid}/data",
        execution_data,
        OPEN,
        "an execution's whole result",
        params=(
            Param("format", "output format", enum=_FORMATS),
            Param("name", "a column name, one per column", repeated=True),
            Param("names", "column names, comma-separated"),
        ),
        produces=_DATA_TYPES,
        errors=(400, 404, 422),
    ),
    Route("GET", "/odf/{dataset}/refs/head", odf_head, OPEN, "a dataset's head block", produces=("text/plain",)),
    Route(
        "GET", "/odf/{dataset}/blocks/{cid}", odf_block, OPEN, "a dataset block", produces=("application/octet-stream",)
    ),
    Route(
        "GET", "/odf/{dataset}/data/{cid}", odf_data, OPEN, "a dataset slice", produces=("application/octet-stream",)
    ),
    *(
        Route(
            method,
            path,
            gateway,
            OPEN,
            f"{method}: the IPFS Trustless Gateway of what this node holds (docs/gateway.md): a block "
            "(?format=raw, Accept: application/vnd.ipld.raw), a CAR (?format=car; dag-scope, entity-bytes, car-order, "
            "car-dups), a file; paths through UnixFS, HAMT and DAG-CBOR; 404 at once for what it does not hold",
            params=_GATEWAY_PARAMS,
            produces=_GATEWAY_TYPES,
            errors=(400, 404, 406, 412, 416, 501, 504),
            returns={200: S.ANY},
        )
        for method in ("GET", "HEAD")
        for path in ("/ipfs/{cid}", "/ipfs/{cid}/{path:.*}")
    ),
    # Transform.Storage types: a check answers 200 whether the data is a term or not (result, code)
    Route(
        "GET",
        "/api/v0/types/check",
        type_check,
        OPEN,
        "is the data REF names a term of a Transform.Storage type (Algorithm 3)",
        params=(Param("ref", "dataset name, id or block CID"), Param("type", "the type's CID")),
        returns={200: S.TYPE_CHECKED},
    ),
    Route(
        "GET",
        "/api/v0/types/asset",
        asset_check,
        OPEN,
        "is a Transform.Storage asset valid (Algorithm 4)",
        params=(Param("cid", "the asset's CID"),),
        returns={200: S.ASSET_CHECKED},
    ),
    Route(
        "POST",
        "/api/v0/types",
        type_put,
        TOKEN,
        "check and store a Transform.Storage Type, Asset, Function or series type (DAG-JSON)",
        JSON,
        {"description": "a Type, Asset or Function map, or an array of types (DAG-JSON)"},
        returns={200: S.TYPE_STORED},
    ),
    # Provenance (docs/provenance.md): a lineage may fetch missing blocks by CID (bounded); verify reads only
    Route(
        "GET",
        "/api/v0/lineage/{cid}",
        lineage_get,
        OPEN,
        "the lineage of a result, slice or dataset back to its root datasets (JSON; SVG with Accept: image/svg+xml)",
        produces=("application/json", "image/svg+xml"),
        returns={200: S.LINEAGE},
    ),
    Route(
        "GET",
        "/api/v0/proof/{cid}",
        proof_get,
        OPEN,
        "a result's proof: one CAR (root: the receipt) with every block its offline checks read, and its slices",
        params=(Param("data", "include the input and output slices (default true)", enum=("true", "false")),),
        produces=("application/vnd.ipld.car",),
        returns={200: S.ANY},
    ),
    Route(
        "POST",
        "/api/v0/verify",
        verify_post,
        TOKEN,
        "check a result without computing it (offline: true), or by recomputing it here (a job, or wait: true)",
        JSON,
        bodies.VERIFY.schema,
        errors=(400, 404, 422),
        returns={200: S.VERIFIED, 202: S.JOB_STARTED},
    ),
)


def create_app(node: Node, token: str, max_body: int | None = None) -> web.Application:
    """The node's API: every route of ``ROUTES`` behind its checks; ``max_body`` overrides api.max_upload_bytes."""
    limits = limits_from(node.settings.api, token, max_body)
    metrics = Metrics(node)
    # Bodies are capped per route (node.faces.api.access): this is only the default for a request no route caps.
    app = web.Application(
        middlewares=[metrics.middleware, errors_middleware, host_middleware], client_max_size=limits.max_json_bytes
    )
    app[NODE_KEY] = node
    app[LIMITS_KEY] = limits
    app[METRICS_KEY] = metrics
    app[OPENAPI_KEY] = openapi.document(ROUTES, limits, __version__)
    for route in ROUTES:
        app.router.add_route(route.method, route.path, guard(route))
    app.on_response_prepare.append(_no_documents)
    app.on_shutdown.append(_stop_pulls)
    return app


async def _no_documents(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer but the web page's own files (which carry their policy, node.faces.api.webui) holds bytes that
    others chose: a dataset's cells, a peer's block, a gateway file. None may run as a page on the node's origin,
    where the API and the page's token are: ``sandbox`` gives such a page no script and an origin of its own, and
    ``nosniff`` keeps a browser to the declared type (node.faces.api.trustless_gateway.confine adds ``attachment`` for
    HTML)."""
    response.headers.setdefault("Content-Security-Policy", "sandbox")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")


async def _stop_pulls(app: web.Application) -> None:
    """Before the server waits for its requests to end: a pull from a slow source ends now (503), it does not hold
    the node's shutdown."""
    await app[NODE_KEY].stop_pulls()
