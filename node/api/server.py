"""The HTTP face: aiohttp routes that parse a request, call ``Node``, and render JSON.

Every route is declared once in ``ROUTES`` (method, path, handler, who may call it, body): ``create_app`` serves
exactly those, each behind its checks (node.api.access), and ``GET /api/v0/openapi.json`` is generated from the
same table. Write endpoints need ``Authorization: Bearer <token>`` (the token in ``$CAIRN_HOME/api.token``).
Every error is ``{"error": {"type": …, "message": …}}`` with the status its exception carries (docs/api.md).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, NoReturn

from aiohttp import BodyPartReader, web
from multidict import MultiMapping

from node import __version__, values
from node.api import export, openapi, webui
from node.api import shapes as S
from node.api.access import (
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
    has_token,
    host_middleware,
    limits_from,
)
from node.api.gateway import serve as serve_gateway
from node.api.local_files import open_local
from node.api.metrics import Metrics
from node.core import Node
from node.core.results import Ingested
from node.datasets import ReadOptions
from node.errors import (
    CairnError,
    IngestCancelled,
    InsufficientStorage,
    InvalidInput,
    NotFound,
    TooLarge,
    Unauthorized,
)
from node.model import INT64_MAX, cid_str, dagjson, parse_cid
from node.resolve.resolver import TRUST_MODES, accepts, valid_mode

log = logging.getLogger("cairn.api")

NODE_KEY = web.AppKey("node", Node)
METRICS_KEY = web.AppKey("metrics", Metrics)
OPENAPI_KEY = web.AppKey("openapi", dict)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(obj: object, status: int = 200) -> web.Response:
    """A JSON answer; strict (node.values.dumps): never a bare NaN, whatever a result holds."""
    return web.json_response(obj, status=status, dumps=values.dumps)


def _error(status: int, kind: str, message: str) -> web.Response:
    return _json({"error": {"type": kind, "message": message}}, status=status)


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


def _node(request: web.Request) -> Node:
    return request.app[NODE_KEY]


async def healthz(request: web.Request) -> web.Response:
    health = await _node(request).health()
    return web.json_response(health, status=200 if health["ok"] else 503)


async def node_info(request: web.Request) -> web.Response:
    return web.json_response(await _node(request).info())


async def dag_put(request: web.Request) -> web.Response:
    pin = request.query.get("pin", "true")
    if pin not in ("true", "false"):  # anything else must be refused, not taken as true
        raise InvalidInput(f"pin must be true or false, got {pin[:40]!r}")
    obj = await asyncio.to_thread(dagjson.loads, await request.read())  # seconds for MBs: off the loop
    cid = await _node(request).dag_put(obj, pin=pin == "true")
    return web.json_response(S.CidAnswer(cid=cid_str(cid)))


async def dag_get(request: web.Request) -> web.Response:
    cid = parse_cid(request.match_info["cid"])
    value = await _node(request).dag_get(cid)
    if isinstance(value, bytes) and cid.codec.name not in ("dag-cbor", "cbor"):
        return web.Response(body=value, content_type="application/octet-stream")
    text = await asyncio.to_thread(dagjson.dumps, value)  # seconds for MBs: off the loop
    return web.Response(text=text, content_type="application/json")


async def holium_import(request: web.Request) -> web.Response:
    fmt = request.query.get("format", "")
    root, count = await _node(request).holium_import(await request.read(), fmt)
    return web.json_response(S.HoliumImported(cid=cid_str(root), blocks=count))


# -- datasets ---------------------------------------------------------------------------------


def _read_options(q: MultiMapping[str]) -> ReadOptions:
    overrides: dict[str, str] = {}
    for spec in q.getall("type", []):
        col, sep, typ = spec.partition("=")
        if not sep or not col or not typ:
            raise InvalidInput(f"type override {spec!r} must look like COLUMN=TYPE")
        overrides[col] = typ
    header = q.get("header", "true").lower()
    if header not in ("true", "false"):
        raise InvalidInput("header must be true or false")
    columns = q.get("columns")
    return ReadOptions(
        format=q.get("format") or None,
        compression=q.get("compression") or None,
        delimiter=q.get("delimiter") or None,
        encoding=q.get("encoding") or None,
        header=header == "true",
        column_names=columns.split(",") if columns else None,
        schema_overrides=overrides,
        event_time=q.get("event_time") or None,
    )


def _info(q: MultiMapping[str]) -> dict[str, object] | None:
    info: dict[str, object] = {k: q[k] for k in ("title", "description", "license") if q.get(k)}
    if q.getall("keyword", []):
        info["keywords"] = list(q.getall("keyword"))
    return info or None


async def _spool(chunks: AsyncIterator[bytes], dest: Path, limit: int) -> int:
    """Stream ``chunks`` to ``dest``, never holding them whole; refuse past ``limit`` bytes."""
    size = 0
    try:
        with open(dest, "wb") as f:  # noqa: ASYNC230  local disk, 1 MiB at a time: brief, cheaper than a thread hop
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"upload larger than api.max_upload_bytes ({limit} bytes): refused")
                f.write(chunk)
    except OSError as e:  # a full disk is the node's state, not a bug: 507, and the caller removes `dest`
        if InsufficientStorage.is_disk_full(e):
            raise InsufficientStorage("the upload", "under $CAIRN_HOME/tmp") from None
        raise
    return size


def _local_file(request: web.Request, node: Node, path: str) -> BinaryIO:
    """``path=``: ingest a file on the node's machine in place (the CLI does for its own node). Only for clients on
    this machine (loopback), only under ``api.ingest_dirs``, never under ``$CAIRN_HOME`` (node.api.local_files)."""
    import ipaddress

    try:
        loopback = ipaddress.ip_address((request.remote or "").split("%")[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise Unauthorized("path= is only for clients on the node's own machine; upload the file instead")
    return open_local(path, node.home.path, node.settings.api.ingest_dirs)


async def _file_part(request: web.Request) -> BodyPartReader:
    """The first part of a multipart/form-data body that carries a file (``curl -F file=@x.csv``)."""
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if isinstance(part, BodyPartReader) and part.filename is not None:
                return part
            if isinstance(part, BodyPartReader):
                await part.release()  # a plain form field: skipped
    except (ValueError, AssertionError):  # aiohttp's words for a body that does not match its boundary
        raise InvalidInput("malformed multipart/form-data body") from None
    raise InvalidInput("the multipart body has no file part: send the file as -F file=@PATH, or the bytes as the body")


async def _part_chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while chunk := await part.read_chunk(1 << 20):
        yield chunk


async def _receive(request: web.Request, node: Node) -> tuple[Path, str]:
    """Spool the upload (the raw body, or the file part of a multipart body) to a fresh file under the home's tmp;
    the spool file (named with the upload's extensions, which tell the reader its format) and the name errors give
    it (the client's file name, never the spool path)."""
    tmp = node.home.path / "tmp"
    tmp.mkdir(exist_ok=True)
    fd, spool = tempfile.mkstemp(prefix="upload-", dir=tmp)
    os.close(fd)
    path, name = Path(spool), request.query.get("filename", "")
    try:
        cap = node.settings.api.max_upload_bytes
        if request.content_type == "multipart/form-data":
            part = await _file_part(request)
            name = name or part.filename or ""
            await _spool(_part_chunks(part), path, cap)
        else:
            await _spool(request.content.iter_chunked(1 << 20), path, cap)
        suffix = "".join(Path(name).suffixes[-2:])
        if re.fullmatch(r"(\.[A-Za-z0-9]{1,10}){1,2}", suffix):
            path = path.rename(path.with_name(path.name + suffix))  # noqa: ASYNC240  one rename, instant
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, Path(name).name or "upload"


async def datasets_add(request: web.Request) -> web.StreamResponse:
    """Upload a file (the body, or a multipart/form-data file part; streamed to disk, size-limited), then ingest it.
    With ``progress=true`` the answer is NDJSON: ``{"bytes", "rows"}`` lines while ingesting, then ``{"result": …}``
    or ``{"error": …}``."""
    q = request.query
    name, to = q.get("name"), q.get("to")
    if bool(name) == bool(to):
        raise InvalidInput("give exactly one of name= (create a dataset) or to= (append to one)")
    node = _node(request)
    options = _read_options(q)  # refuses bad options before the body is read
    source: Path | BinaryIO
    if q.get("path"):
        source = _local_file(request, node, q["path"])
    else:
        source, label = await _receive(request, node)
        options = replace(options, label=label)  # errors name the client's file, never the spool file
    task: asyncio.Future[Ingested] | None = None
    stop = threading.Event()
    try:
        state = {"bytes": 0, "rows": 0}

        def progress(nbytes: int, rows: int) -> None:  # called from the ingest thread: plain stores only
            state["bytes"], state["rows"] = nbytes, rows

        ingest = node.data.add(
            source,
            name=name or to or "",
            create=bool(name),
            options=options,
            strategy=q.get("merge", "append"),
            primary_key=[c for c in q.get("primary_key", "").split(",") if c],
            info=_info(q),
            progress=progress,
            stop=stop,
        )
        # The ingest runs as its own task, never cut at an arbitrary await: a client that goes away sets its `stop`
        # (below), which ends it at its next read, before its commit, with nothing kept.
        task = asyncio.ensure_future(ingest)
        if q.get("progress") != "true":
            await _while_connected(request, task)
            return web.json_response(task.result(), status=201 if name else 200)
        return await _progress_stream(request, task, state)
    finally:
        if task is None or task.done():
            _release(source)
        else:
            stop.set()  # the handler left before the ingest ended: its client went away
            task.add_done_callback(functools.partial(_after_stopped, source))


async def _while_connected(request: web.Request, task: asyncio.Future[Ingested]) -> None:
    """Wait for ``task``; IngestCancelled as soon as the client's connection closes (the caller stops the ingest).
    Watched here too: a server without aiohttp's handler_cancellation (a test server) never cancels the handler."""
    while not task.done():
        await asyncio.wait([task], timeout=_CONNECTION_CHECK_S)
        if not task.done() and _client_gone(request):
            raise IngestCancelled("the client went away: the ingest is stopped and nothing is kept")


_CONNECTION_CHECK_S = 0.25


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _after_stopped(source: Path | BinaryIO, task: asyncio.Future[Ingested]) -> None:
    """An ingest whose client went away has ended (stopped, or committed if it was past its last check)."""
    _release(source)
    error = None if task.cancelled() else task.exception()  # retrieved: nobody else will
    how = "kept" if error is None else error.message if isinstance(error, CairnError) else type(error).__name__
    log.info("an ingest whose client went away ended: %s", how)


def _release(source: Path | BinaryIO) -> None:
    """After the ingest: remove our spool file, or close the ``path=`` file."""
    if isinstance(source, Path):
        source.unlink(missing_ok=True)
    else:
        source.close()


async def _progress_stream(
    request: web.Request, task: asyncio.Future[Ingested], state: dict[str, int]
) -> web.StreamResponse:
    """NDJSON progress lines every 0.25 s while ``task`` runs, then its result or its error."""
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    while not task.done():
        await asyncio.wait([task], timeout=0.25)
        if _client_gone(request):  # the caller stops the ingest; nothing is left to write to
            raise IngestCancelled("the client went away: the ingest is stopped and nothing is kept")
        await resp.write(json.dumps(state).encode() + b"\n")
    try:
        final: dict[str, object] = {"result": task.result()}
    except CairnError as e:
        final = {"error": {"type": type(e).__name__, "message": e.message, "status": e.status}}
    except Exception as e:  # the stream has begun: a bug is reported in-band, its trace logged
        log.exception("ingest failed")
        final = {"error": {"type": "InternalError", "message": f"internal error: {type(e).__name__}", "status": 500}}
    await resp.write(json.dumps(final).encode() + b"\n")
    await resp.write_eof()
    return resp


async def datasets_list(request: web.Request) -> web.Response:
    return web.json_response(S.DatasetList(datasets=await _node(request).data.listed()))


async def dataset_get(request: web.Request) -> web.Response:
    return web.json_response(await _node(request).data.get(request.match_info["ref"]))


async def dataset_log(request: web.Request) -> web.Response:
    return web.json_response(S.DatasetLog(blocks=await _node(request).data.log(request.match_info["ref"])))


async def dataset_data(request: web.Request) -> web.StreamResponse:
    fmt = request.query.get("format", "jsonl")
    limit_s = request.query.get("limit")
    try:
        limit = int(limit_s) if limit_s is not None else None
        if limit is not None and not 0 <= limit <= INT64_MAX:
            raise ValueError
    except ValueError:
        raise InvalidInput(f"limit must be a non-negative integer, got {limit_s!r}") from None
    version, tables = await _node(request).data.rows(request.match_info["ref"])
    writer = export.writer_for(fmt)  # refuses an unknown format before anything is sent
    return await _stream(
        request,
        export.stream(tables, writer, limit),
        writer.content_type,
        {"X-Cairn-Version": cid_str(version.head)},
    )


async def pull(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        source, name = body["source"], body.get("name")
        if not isinstance(source, str) or (name is not None and not isinstance(name, str)):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested too deep
        raise InvalidInput('body must be JSON {"source": URL or CID, "name": optional local name}') from None
    return web.json_response(await _node(request).data.pull(source, name))


# -- queries ----------------------------------------------------------------------------------


async def query(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise TypeError
    except (ValueError, TypeError, RecursionError):  # RecursionError: JSON nested too deep
        raise InvalidInput(
            'body must be JSON {"sql": …, "inputs": {"alias": "dataset"}, "limit": n, "wait": bool}'
        ) from None
    _known_fields(body, request)
    sql, inputs, limit, wait = body.get("sql"), body.get("inputs", {}), body.get("limit"), body.get("wait", True)
    trust, type_ref, retry = body.get("trust"), body.get("type"), body.get("retry", False)
    if not isinstance(retry, bool):  # a recorded failure computed again (docs/queries.md "Recorded failures")
        raise InvalidInput('"retry" must be true or false')
    if type_ref is not None:  # the type the result must be a term of (docs/provenance.md "Types")
        type_ref = cid_str(parse_cid(type_ref)) if isinstance(type_ref, str) else _not_a_type_cid()
    # Checked here, not in the job: a bad mode or a non-boolean "wait" is a 400 now, not a job that fails.
    if trust is not None and not (isinstance(trust, str) and valid_mode(trust)):
        raise InvalidInput(f'"trust" must be one of {", ".join(TRUST_MODES)}, or quorum:K[:communities]')
    if not isinstance(wait, bool):
        raise InvalidInput('"wait" must be true or false')
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidInput('"sql" must be a non-empty string')
    if not isinstance(inputs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
        raise InvalidInput('"inputs" must map input names to dataset references (name, id or block CID)')
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= INT64_MAX):
        raise InvalidInput(f'"limit" must be an integer from 0 to {INT64_MAX}')  # a larger one would overflow
    node = _node(request)
    may_compute = has_token(request) or request.app[LIMITS_KEY].open_compute
    if not may_compute and _looser(trust, node.settings.peers.trust):
        raise Unauthorized(
            f"trust {trust!r} is looser than this node's {node.settings.peers.trust!r}: it needs the node's API token"
        )
    if wait is False:
        job = node.start_query(
            sql, inputs, limit=limit, trust=trust, may_compute=may_compute, type_ref=type_ref, retry=retry
        )
        return _json(job, status=202)
    answer = await node.query(
        sql, inputs, limit=limit, trust=trust, may_compute=may_compute, type_ref=type_ref, retry=retry
    )
    return _json(answer)


def _known_fields(body: dict[str, object], request: web.Request) -> None:
    """A body field the query route does not read is refused, not ignored: ``"format": "csv"`` once gave JSON without
    a word. So is ``?format=`` (other routes take it); other query parameters are ignored, as on every route. CSV
    (or JSONL, Parquet…) of an answer is the execution's data route."""
    extra = sorted(set(body) - set(QUERY_FIELDS)) + (["?format"] if "format" in request.query else [])
    if not extra:
        return
    hint = ""
    if "format" in body or "format" in request.query:
        hint = "; a result as CSV, JSONL or Parquet: GET /api/v0/executions/{execution}/data?format=csv"
    raise InvalidInput(f"unknown field {extra[0]!r}: the body takes {', '.join(QUERY_FIELDS)}{hint}")


# -- pipelines (docs/provenance.md "Pipelines") ------------------------------------------------------------


async def pipelines_post(request: web.Request) -> web.Response:
    """POST /api/v0/pipelines: run a pipeline (its file's text as ``text``, or the map as ``pipeline``)."""
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise TypeError
    except (ValueError, TypeError, RecursionError):
        raise InvalidInput(
            'body must be JSON {"text": the YAML or JSON file, or "pipeline": {…}, "trust": mode, "wait": bool}'
        ) from None
    text, spec, trust, wait = body.get("text"), body.get("pipeline"), body.get("trust"), body.get("wait", True)
    source = text if spec is None else spec
    if (text is None) == (spec is None) or not isinstance(source, (str, dict)):
        raise InvalidInput('give the pipeline as "text" (the file, YAML or JSON) or as "pipeline" (a map), not both')
    if trust is not None and not (isinstance(trust, str) and valid_mode(trust)):
        raise InvalidInput(f'"trust" must be one of {", ".join(TRUST_MODES)}, or quorum:K[:communities]')
    if not isinstance(wait, bool):
        raise InvalidInput('"wait" must be true or false')
    node = _node(request)
    if wait is False:
        return _json(node.provenance.start_pipeline(source, trust=trust), status=202)
    return _json(await node.provenance.run_pipeline(source, trust=trust))


async def pipeline_log(request: web.Request) -> web.Response:
    raw = request.query.get("limit", "20")
    if not raw.isdecimal() or not 1 <= len(raw) <= 4:
        raise InvalidInput("limit must be a number of runs from 1 to 1000")
    runs = await _node(request).provenance.pipeline_log(request.match_info["name"], max(1, min(int(raw), 1000)))
    return _json(S.PipelineLog(runs=runs))


def _not_a_type_cid() -> NoReturn:
    raise InvalidInput('"type" must be the CID of a Transform.Storage type, as a string')


def _looser(asked: str | None, own: str) -> bool:
    """Whether mode ``asked`` accepts a trust label the node's own mode does not."""
    if asked is None or not valid_mode(asked) or not valid_mode(own):
        return False  # no mode asked, or an unknown one (the resolver refuses it with a 400)
    if asked.startswith("quorum:") and own in ("self", "verify"):
        return True  # it takes peers' answers, which these modes never do
    return not set(accepts(asked)) <= set(accepts(own))


async def job_get(request: web.Request) -> web.Response:
    return _json(_node(request).job(request.match_info["id"]).view())


async def job_cancel(request: web.Request) -> web.Response:
    """DELETE /api/v0/jobs/{id}: cancel a wait:false query (and its Spark job); its state as GET gives it."""
    job = _node(request).cancel_job(request.match_info["id"])
    if job.task is not None and not job.task.done():
        await asyncio.wait([job.task])  # the cancel lands: the job reads "failed", its Spark job is cancelled
    return _json(job.view())


async def job_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: every event of the job from its start, then live until it ends."""
    job = _node(request).job(request.match_info["id"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    async for kind, data in job.follow():
        await resp.write(f"event: {kind}\ndata: {values.dumps(data)}\n\n".encode())
    if job.result is not None:
        await resp.write(f"event: result\ndata: {values.dumps(job.result)}\n\n".encode())
    await resp.write_eof()
    return resp


async def execution_get(request: web.Request) -> web.Response:
    return web.json_response(await _node(request).execution(parse_cid(request.match_info["cid"])))


async def execution_data(request: web.Request) -> web.StreamResponse:
    """The whole result, streamed slice by slice. Columns are named by ``name=`` (repeated, one per column,
    any characters) or ``names=a,b``, else by the query that asked for the execution."""
    writer = export.writer_for(request.query.get("format", "csv"))
    names = (
        list(request.query.getall("name", [])) or [n for n in request.query.get("names", "").split(",") if n] or None
    )
    names, tables = await _node(request).execution_data(parse_cid(request.match_info["cid"]), names)
    return await _stream(request, export.stream(tables, writer, names=names), writer.content_type)


async def _stream(
    request: web.Request, chunks: AsyncIterator[bytes], content_type: str, headers: dict[str, str] | None = None
) -> web.StreamResponse:
    """Send ``chunks``; the first is made before the answer starts, so a bad request or a value that cannot
    be rendered is still a clean 4xx rather than a cut stream."""
    first = await anext(chunks, b"")
    resp = web.StreamResponse(headers={"Content-Type": content_type, **(headers or {})})
    await resp.prepare(request)
    await resp.write(first)
    async for chunk in chunks:
        await resp.write(chunk)
    await resp.write_eof()
    return resp


# -- peers and trust --------------------------------------------------------------------------


async def _json_body(request: web.Request, *keys: str) -> dict[str, object]:
    try:
        body = await request.json()
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in keys):
            raise TypeError
    except (ValueError, TypeError, RecursionError):  # RecursionError: JSON nested too deep
        raise InvalidInput(f"body must be a JSON object with string fields {', '.join(keys)}") from None
    return body


async def peers_list(request: web.Request) -> web.Response:
    return web.json_response(S.PeerList(peers=_node(request).peers.known()))


async def peers_connect(request: web.Request) -> web.Response:
    body = await _json_body(request, "addr")
    return web.json_response(await _node(request).peers.connect(str(body["addr"])))


async def trust_list(request: web.Request) -> web.Response:
    return web.json_response(S.TrustedList(trusted=_node(request).peers.trust_list()))


async def trust_add(request: web.Request) -> web.Response:
    body = await _json_body(request, "key")
    community = body.get("community") or "default"
    _node(request).peers.trust_add(str(body["key"]), str(community))
    return web.json_response(S.TrustedList(trusted=_node(request).peers.trust_list()))


async def trust_rm(request: web.Request) -> web.Response:
    body = await _json_body(request, "key")
    community = body.get("community")
    if community is not None and not isinstance(community, str):
        raise InvalidInput('"community" must be a string')
    removed = _node(request).peers.trust_rm(str(body["key"]), community)
    if not removed:
        raise NotFound(f"{body['key']} is not in a trusted community")
    return web.json_response(S.Removed(removed=removed))


async def announcements(request: web.Request) -> web.Response:
    return web.json_response(_node(request).peers.announcements())


# -- transfer protocol and gateway ------------------------------------------------------------


async def odf_head(request: web.Request) -> web.Response:
    head = await _node(request).serving.odf_head(request.match_info["dataset"])
    return web.Response(text=cid_str(head), content_type="text/plain")


async def odf_block(request: web.Request) -> web.Response:
    cid = parse_cid(request.match_info["cid"])
    data = await _node(request).serving.odf_block(request.match_info["dataset"], cid)
    return web.Response(body=data, content_type="application/octet-stream")


async def odf_data(request: web.Request) -> web.StreamResponse:
    cid = parse_cid(request.match_info["cid"])
    path = await _node(request).serving.odf_data(request.match_info["dataset"], cid)
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def gateway(request: web.Request) -> web.StreamResponse:
    return await serve_gateway(request, _node(request))


async def metrics_get(request: web.Request) -> web.Response:
    return await request.app[METRICS_KEY].handler(request)


async def openapi_get(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI_KEY])


# -- Transform.Storage types (docs/provenance.md "Types") ----------------------------------------------------


def _param(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if not value.strip():
        raise InvalidInput(f"missing query parameter {name}=")
    return value


async def type_check(request: web.Request) -> web.Response:
    node = _node(request)
    return _json(await node.provenance.type_check(_param(request, "ref"), _param(request, "type")))


async def asset_check(request: web.Request) -> web.Response:
    return _json(await _node(request).provenance.asset_check(_param(request, "cid")))


async def type_put(request: web.Request) -> web.Response:
    obj = await asyncio.to_thread(dagjson.loads, await request.read())
    return _json(await _node(request).provenance.type_put(obj))


# -- provenance: lineage and offline verification (docs/provenance.md "Lineage", "Verify (offline)") ----------


async def lineage_get(request: web.Request) -> web.Response:
    from node.provenance.render import to_svg

    graph = await _node(request).provenance.lineage(request.match_info["cid"])
    if "image/svg+xml" in request.headers.get("Accept", ""):
        return web.Response(text=to_svg(graph), content_type="image/svg+xml")
    return _json(graph)


async def verify_post(request: web.Request) -> web.Response:
    """Offline: the report (200). Recomputing: a job (202) whose events follow each step and whose result is the
    report; ``wait: true`` answers with the report itself (200) once every step ran."""
    body = await _json_body(request, "cid")
    flags = {k: body.get(k, False) for k in ("offline", "recursive", "wait")}
    if not all(isinstance(v, bool) for v in flags.values()) or not isinstance(body["cid"], str):
        raise InvalidInput("cid must be a string; offline, recursive and wait true or false")
    offline, recursive = flags["offline"] is True, flags["recursive"] is True
    node = _node(request)
    if offline or flags["wait"]:
        return _json(await node.provenance.verify(str(body["cid"]), offline=offline, recursive=recursive))
    return _json(await node.provenance.start_verify(str(body["cid"]), recursive=recursive), status=202)


async def proof_get(request: web.Request) -> web.StreamResponse:
    data = request.query.get("data", "true")
    if data not in ("true", "false"):
        raise InvalidInput("data must be true or false")
    root, chunks = await _node(request).provenance.export_proof(request.match_info["cid"], data=data == "true")
    headers = {"Content-Type": "application/vnd.ipld.car; version=1", "X-Ipfs-Roots": cid_str(root)}
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    async for chunk in chunks:  # a failure past this point cuts the stream: the file then fails to verify
        await resp.write(chunk)
    await resp.write_eof()
    return resp


# -- the route table: each route once; docs/api.md ----------------------------------------------------------

_STR = {"type": "string"}
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
QUORUM = r"^quorum:[0-9]+(:communities)?$"  # docs/peers.md "Quorum"
_QUERY_PROPERTIES: dict[str, object] = {
    "sql": {"type": "string", "pattern": r"\S"},  # not blank
    "inputs": {"type": "object", "additionalProperties": _STR},
    "limit": {"type": ["integer", "null"], "minimum": 0, "maximum": INT64_MAX},  # null: query.answer_rows
    "wait": {"type": "boolean"},
    "trust": {
        "anyOf": [{"enum": [*TRUST_MODES, None]}, {"type": "string", "pattern": QUORUM}]
    },  # null: the node's own mode (peers.trust), as when absent
    "type": {"type": ["string", "null"]},  # the CID of the type the result must be a term of
    "retry": {"type": "boolean"},  # compute again a recorded failure (docs/queries.md "Recorded failures")
}
QUERY_FIELDS = tuple(_QUERY_PROPERTIES)
QUERY_BODY = {
    "type": "object",
    "required": ["sql"],  # "inputs" defaults to {}: tables not declared are datasets of their names
    "additionalProperties": False,  # refused with a 400 (``_known_fields``), not ignored
    "properties": _QUERY_PROPERTIES,
}

PIPELINE_BODY = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},  # the pipeline file as written (YAML or JSON)
        "pipeline": {"type": "object"},  # or its map
        "trust": {"anyOf": [{"enum": [*TRUST_MODES, None]}, {"type": "string", "pattern": QUORUM}]},
        "wait": {"type": "boolean"},
    },
}


def _strings(*required: str, optional: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "type": "object",
        "required": list(required),
        "properties": dict.fromkeys((*required, *optional), _STR),
    }


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
        _strings("source", optional=("name",)),
        returns={200: S.PULLED},
    ),
    Route(
        "POST",
        "/api/v0/query",
        query,
        TOKEN_TO_COMPUTE,
        "answer a SQL query (the token is needed to compute a miss or to ask with a looser trust); 202 for wait: false",
        JSON,
        QUERY_BODY,
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
        PIPELINE_BODY,
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
        _strings("addr"),
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
        _strings("key", optional=("community",)),
        returns={200: S.TRUSTED},
    ),
    Route(
        "DELETE",
        "/api/v0/trust",
        trust_rm,
        TOKEN,
        "stop trusting a signer",
        JSON,
        _strings("key", optional=("community",)),
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
        {
            "type": "object",
            "required": ["cid"],
            "properties": {
                "cid": _STR,
                "offline": {"type": "boolean"},
                "recursive": {"type": "boolean"},
                "wait": {"type": "boolean"},
            },
        },
        errors=(400, 404, 422),
        returns={200: S.VERIFIED, 202: S.JOB_STARTED},
    ),
)


def create_app(node: Node, token: str, max_body: int | None = None) -> web.Application:
    """The node's API: every route of ``ROUTES`` behind its checks; ``max_body`` overrides api.max_upload_bytes."""
    limits = limits_from(node.settings.api, token, max_body)
    metrics = Metrics(node)
    # Bodies are capped per route (node.api.access): this is only the default for a request no route caps.
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
    """Every answer but the web page's own files (which carry their policy, node.api.webui) holds bytes that
    others chose: a dataset's cells, a peer's block, a gateway file. None may run as a page on the node's origin,
    where the API and the page's token are: ``sandbox`` gives such a page no script and an origin of its own, and
    ``nosniff`` keeps a browser to the declared type (node.api.gateway.confine adds ``attachment`` for HTML)."""
    response.headers.setdefault("Content-Security-Policy", "sandbox")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")


async def _stop_pulls(app: web.Application) -> None:
    """Before the server waits for its requests to end: a pull from a slow source ends now (503), it does not hold
    the node's shutdown."""
    await app[NODE_KEY].stop_pulls()
