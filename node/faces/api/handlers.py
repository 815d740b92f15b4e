"""The API's route handlers: each parses its request, calls ``Node``, and renders the answer (JSON, a stream, a
file); the route table that serves them, with who may call each, is ``node.faces.api.server.ROUTES``."""

from __future__ import annotations

import asyncio

from aiohttp import web

from node.domain.model import INT64_MAX, cid_str, dagjson, parse_cid
from node.faces.api import answer_schemas as S
from node.faces.api import bodies, export
from node.faces.api.access import LIMITS_KEY, has_token
from node.faces.api.answering import METRICS_KEY, OPENAPI_KEY, json_answer, node_of, stream_answer
from node.faces.api.bodies import QUERY_FIELDS
from node.faces.api.trustless_gateway import serve as serve_gateway
from node.services.resolve.resolver import accepts, valid_mode
from node.support import values
from node.support.errors import InvalidInput, NotFound, Unauthorized


async def healthz(request: web.Request) -> web.Response:
    health = await node_of(request).health()
    return web.json_response(health, status=200 if health["ok"] else 503)


async def node_info(request: web.Request) -> web.Response:
    return web.json_response(await node_of(request).info())


async def dag_put(request: web.Request) -> web.Response:
    pin = request.query.get("pin", "true")
    if pin not in ("true", "false"):  # anything else must be refused, not taken as true
        raise InvalidInput(f"pin must be true or false, got {pin[:40]!r}")
    obj = await asyncio.to_thread(dagjson.loads, await request.read())  # seconds for MBs: off the loop
    cid = await node_of(request).dag_put(obj, pin=pin == "true")
    return web.json_response(S.CidAnswer(cid=cid_str(cid)))


async def dag_get(request: web.Request) -> web.Response:
    cid = parse_cid(request.match_info["cid"])
    value = await node_of(request).dag_get(cid)
    if isinstance(value, bytes) and cid.codec.name not in ("dag-cbor", "cbor"):
        return web.Response(body=value, content_type="application/octet-stream")
    text = await asyncio.to_thread(dagjson.dumps, value)  # seconds for MBs: off the loop
    return web.Response(text=text, content_type="application/json")


async def holium_import(request: web.Request) -> web.Response:
    fmt = request.query.get("format", "")
    root, count = await node_of(request).holium_import(await request.read(), fmt)
    return web.json_response(S.HoliumImported(cid=cid_str(root), blocks=count))


async def datasets_list(request: web.Request) -> web.Response:
    return web.json_response(S.DatasetList(datasets=await node_of(request).data.listed()))


async def dataset_get(request: web.Request) -> web.Response:
    return web.json_response(await node_of(request).data.get(request.match_info["ref"]))


async def dataset_log(request: web.Request) -> web.Response:
    return web.json_response(S.DatasetLog(blocks=await node_of(request).data.log(request.match_info["ref"])))


async def dataset_data(request: web.Request) -> web.StreamResponse:
    fmt = request.query.get("format", "jsonl")
    limit_s = request.query.get("limit")
    try:
        limit = int(limit_s) if limit_s is not None else None
        if limit is not None and not 0 <= limit <= INT64_MAX:
            raise ValueError
    except ValueError:
        raise InvalidInput(f"limit must be a non-negative integer, got {limit_s!r}") from None
    version, tables = await node_of(request).data.rows(request.match_info["ref"])
    writer = export.writer_for(fmt)  # refuses an unknown format before anything is sent
    return await stream_answer(
        request,
        export.stream(tables, writer, limit),
        writer.content_type,
        {"X-Cairn-Version": cid_str(version.head)},
    )


async def pull(request: web.Request) -> web.Response:
    body = await bodies.PULL.read(request)
    return web.json_response(await node_of(request).data.pull(body["source"], body.get("name")))


# -- queries ----------------------------------------------------------------------------------


async def query(request: web.Request) -> web.Response:
    body = await bodies.QUERY.parse(request)
    _known_fields(body, request)
    bodies.QUERY.check(body)
    sql, inputs, limit, wait = body["sql"], body.get("inputs", {}), body.get("limit"), body.get("wait", True)
    trust, type_ref, retry = body.get("trust"), body.get("type"), body.get("retry", False)
    if type_ref is not None:  # the type the result must be a term of (docs/provenance.md "Types")
        type_ref = cid_str(parse_cid(type_ref))
    node = node_of(request)
    may_compute = has_token(request) or request.app[LIMITS_KEY].open_compute
    if not may_compute and _looser(trust, node.settings.peers.trust):
        raise Unauthorized(
            f"trust {trust!r} is looser than this node's {node.settings.peers.trust!r}: it needs the node's API token"
        )
    if wait is False:
        job = node.start_query(
            sql, inputs, limit=limit, trust=trust, may_compute=may_compute, type_ref=type_ref, retry=retry
        )
        return json_answer(job, status=202)
    answer = await node.query(
        sql, inputs, limit=limit, trust=trust, may_compute=may_compute, type_ref=type_ref, retry=retry
    )
    return json_answer(answer)


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
    body = await bodies.PIPELINE.read(request)
    spec, trust, wait = body.get("pipeline"), body.get("trust"), body.get("wait", True)
    source = body["text"] if spec is None else spec  # one of them (checked): the file's text, or its map
    node = node_of(request)
    if wait is False:
        return json_answer(node.provenance.start_pipeline(source, trust=trust), status=202)
    return json_answer(await node.provenance.run_pipeline(source, trust=trust))


async def pipeline_log(request: web.Request) -> web.Response:
    raw = request.query.get("limit", "20")
    if not raw.isdecimal() or not 1 <= len(raw) <= 4:
        raise InvalidInput("limit must be a number of runs from 1 to 1000")
    runs = await node_of(request).provenance.pipeline_log(request.match_info["name"], max(1, min(int(raw), 1000)))
    return json_answer(S.PipelineLog(runs=runs))


def _looser(asked: str | None, own: str) -> bool:
    """Whether mode ``asked`` accepts a trust label the node's own mode does not."""
    if asked is None or not valid_mode(asked) or not valid_mode(own):
        return False  # no mode asked, or an unknown one (the resolver refuses it with a 400)
    if asked.startswith("quorum:") and own in ("self", "verify"):
        return True  # it takes peers' answers, which these modes never do
    return not set(accepts(asked)) <= set(accepts(own))


async def job_get(request: web.Request) -> web.Response:
    return json_answer(node_of(request).job(request.match_info["id"]).view())


async def job_cancel(request: web.Request) -> web.Response:
    """DELETE /api/v0/jobs/{id}: cancel a wait:false query (and its Spark job); its state as GET gives it."""
    job = node_of(request).cancel_job(request.match_info["id"])
    if job.task is not None and not job.task.done():
        await asyncio.wait([job.task])  # the cancel lands: the job reads "failed", its Spark job is cancelled
    return json_answer(job.view())


async def job_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: every event of the job from its start, then live until it ends."""
    job = node_of(request).job(request.match_info["id"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    async for kind, data in job.follow():
        await resp.write(f"event: {kind}\ndata: {values.dumps(data)}\n\n".encode())
    if job.result is not None:
        await resp.write(f"event: result\ndata: {values.dumps(job.result)}\n\n".encode())
    await resp.write_eof()
    return resp


async def execution_get(request: web.Request) -> web.Response:
    return web.json_response(await node_of(request).execution(parse_cid(request.match_info["cid"])))


async def execution_data(request: web.Request) -> web.StreamResponse:
    """The whole result, streamed slice by slice. Columns are named by ``name=`` (repeated, one per column,
    any characters) or ``names=a,b``, else by the query that asked for the execution."""
    writer = export.writer_for(request.query.get("format", "csv"))
    names = (
        list(request.query.getall("name", [])) or [n for n in request.query.get("names", "").split(",") if n] or None
    )
    names, tables = await node_of(request).execution_data(parse_cid(request.match_info["cid"]), names)
    return await stream_answer(request, export.stream(tables, writer, names=names), writer.content_type)


# -- peers and trust --------------------------------------------------------------------------


async def peers_list(request: web.Request) -> web.Response:
    return web.json_response(S.PeerList(peers=node_of(request).peers.known()))


async def peers_connect(request: web.Request) -> web.Response:
    body = await bodies.CONNECT.read(request)
    return web.json_response(await node_of(request).peers.connect(body["addr"]))


async def trust_list(request: web.Request) -> web.Response:
    return web.json_response(S.TrustedList(trusted=node_of(request).peers.trust_list()))


async def trust_add(request: web.Request) -> web.Response:
    body = await bodies.TRUST_ADD.read(request)
    node_of(request).peers.trust_add(body["key"], body.get("community") or "default")
    return web.json_response(S.TrustedList(trusted=node_of(request).peers.trust_list()))


async def trust_rm(request: web.Request) -> web.Response:
    body = await bodies.TRUST_RM.read(request)
    removed = node_of(request).peers.trust_rm(body["key"], body.get("community"))
    if not removed:
        raise NotFound(f"{body['key']} is not in a trusted community")
    return web.json_response(S.Removed(removed=removed))


async def announcements(request: web.Request) -> web.Response:
    return web.json_response(node_of(request).peers.announcements())


# -- transfer protocol and gateway ------------------------------------------------------------


async def odf_head(request: web.Request) -> web.Response:
    head = await node_of(request).serving.odf_head(request.match_info["dataset"])
    return web.Response(text=cid_str(head), content_type="text/plain")


async def odf_block(request: web.Request) -> web.Response:
    cid = parse_cid(request.match_info["cid"])
    data = await node_of(request).serving.odf_block(request.match_info["dataset"], cid)
    return web.Response(body=data, content_type="application/octet-stream")


async def odf_data(request: web.Request) -> web.StreamResponse:
    cid = parse_cid(request.match_info["cid"])
    path = await node_of(request).serving.odf_data(request.match_info["dataset"], cid)
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def gateway(request: web.Request) -> web.StreamResponse:
    return await serve_gateway(request, node_of(request))


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
    node = node_of(request)
    return json_answer(await node.provenance.type_check(_param(request, "ref"), _param(request, "type")))


async def asset_check(request: web.Request) -> web.Response:
    return json_answer(await node_of(request).provenance.asset_check(_param(request, "cid")))


async def type_put(request: web.Request) -> web.Response:
    obj = await asyncio.to_thread(dagjson.loads, await request.read())
    return json_answer(await node_of(request).provenance.type_put(obj))


# -- provenance: lineage and offline verification (docs/provenance.md "Lineage", "Verify (offline)") ----------


async def lineage_get(request: web.Request) -> web.Response:
    from node.services.provenance.render import to_svg

    graph = await node_of(request).provenance.lineage(request.match_info["cid"])
    if "image/svg+xml" in request.headers.get("Accept", ""):
        return web.Response(text=to_svg(graph), content_type="image/svg+xml")
    return json_answer(graph)


async def verify_post(request: web.Request) -> web.Response:
    """Offline: the report (200). Recomputing: a job (202) whose events follow each step and whose result is the
    report; ``wait: true`` answers with the report itself (200) once every step ran."""
    body = await bodies.VERIFY.read(request)
    flags = {k: body.get(k, False) for k in ("offline", "recursive", "wait")}
    offline, recursive = flags["offline"] is True, flags["recursive"] is True
    node = node_of(request)
    if offline or flags["wait"]:
        return json_answer(await node.provenance.verify(body["cid"], offline=offline, recursive=recursive))
    return json_answer(await node.provenance.start_verify(body["cid"], recursive=recursive), status=202)


async def proof_get(request: web.Request) -> web.StreamResponse:
    data = request.query.get("data", "true")
    if data not in ("true", "false"):
        raise InvalidInput("data must be true or false")
    root, chunks = await node_of(request).provenance.export_proof(request.match_info["cid"], data=data == "true")
    headers = {"Content-Type": "application/vnd.ipld.car; version=1", "X-Ipfs-Roots": cid_str(root)}
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    async for chunk in chunks:  # a failure past this point cuts the stream: the file then fails to verify
        await resp.write(chunk)
    await resp.write_eof()
    return resp
