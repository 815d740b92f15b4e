"""``GET``/``HEAD /ipfs/{cid}[/path]``: the IPFS Trustless Gateway (docs/gateway.md) of what this node holds.

With a Kubo gateway (the managed Kubo's, on loopback; or ``ipfs.gateway``) the request goes there through
node.adapters.ipfs.gateway_client, which checks the hash of every block it relays; its status and the spec's headers
come back as
Kubo gave them, and an error's text becomes the node's one-line JSON error with Kubo's status (the spec leaves
error bodies free). Without one (an external Kubo, ``ipfs.gateway`` empty), the node answers the parts it can
from the RPC API (one block, a whole-DAG CARv1, a file, a DAG-CBOR block as DAG-JSON) and 501 to the rest.
Why a relay: docs/architecture.md "The gateway". What it serves is others' choice, on the node's origin: active
types go out as attachments (``confine``), and a path's depth is bounded before Kubo sees it (docs/gateway.md
"Content others chose", "Paths that make Kubo work").
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from multiformats import CID

from node.adapters.ipfs.gateway_client import CAR, RAW
from node.core import Node
from node.domain.model import cid_str, dagjson, parse_cid
from node.support.errors import CairnError, GatewayRefused, GatewayUnavailable, InvalidInput, NotFound

log = logging.getLogger("cairn.api")

IMMUTABLE = "public, max-age=29030400, immutable"
# Media types a browser shows as a document that may run script (SVG and XML too: <script>, XHTML, XSLT)
ACTIVE = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "text/xsl",
        "application/pdf",
        "multipart/x-mixed-replace",
    }
)
KUBO_PAGES = ('"DirIndex-', '"DagIndex-')  # Etags of the pages Kubo's gateway writes itself: never a file's
# The query parameters of a CAR request the RPC API cannot honour, with the value it can (Trustless Gateway spec)
_CAR_DEFAULTS = {"dag-scope": ("all",), "entity-bytes": (), "car-version": ("1",), "car-order": ("dfs", "unk")}


def confine(status: int, headers: CIMultiDict[str]) -> None:
    """What a browser gets of bytes anyone may have put in Kubo: never a document that runs on the node's origin,
    beside the API and the web page's token. Every answer of the API says ``Content-Security-Policy: sandbox``
    (node.faces.api.server); here a type a browser renders as an active document (HTML, SVG, XML, PDF) is also sent as
    ``attachment``, even when the request asked ``?filename=`` (Kubo then says ``inline``), so it is saved, not
    shown. The pages Kubo's gateway writes itself (directory listings, redirects; escaped) stay inline, sandboxed."""
    media = headers.get("Content-Type", "").split(";")[0].strip().lower()
    active = media in ACTIVE or media.endswith("+xml")
    if not 200 <= status < 300 or not active or headers.get("Etag", "").startswith(KUBO_PAGES):
        return
    disposition = headers.get("Content-Disposition", "")
    params = disposition[disposition.index(";") :] if ";" in disposition else ""
    headers["Content-Disposition"] = "attachment" + params


def _check_depth(request: web.Request, most: int) -> None:
    """Kubo's gateway spends time growing with the square of a path's depth, and goes on when the client has gone:
    a path deeper than ``most`` segments is refused before Kubo sees it. Counted on the decoded path, as Kubo
    splits it (an encoded ``%2F`` is a separator there too); empty segments count, erring on the safe side."""
    path = request.match_info.get("path", "")
    depth = len(path.split("/")) if path else 0
    if depth > most:
        raise InvalidInput(
            f"the path under the CID has {depth} segments, more than api.gateway_max_path_segments ({most}): refused"
        )


async def _held(request: web.Request, node: Node, cid: CID) -> None:
    """The CID the path starts from is held here, or a 404 now: Kubo's gateway answers a CAR of a CID it lacks with
    200 and a CAR of no block (cacheable for a year), and an external Kubo's may search the network."""
    try:
        await node.serving.held(cid)
    except NotFound as e:
        if "only-if-cached" in request.headers.get("Cache-Control", ""):  # Path Gateway spec: then a 412
            raise GatewayRefused(e.message, 412) from e
        raise


async def serve(request: web.Request, node: Node) -> web.StreamResponse:
    raw_path = request.rel_url.raw_path.removeprefix("/ipfs/")
    cid = parse_cid(request.match_info["cid"])  # 400 for a string that is no CID, before anything else
    _check_depth(request, node.settings.api.gateway_max_path_segments)
    if node.serving.gateway_url() is None:
        return await _from_rpc(request, node, cid)
    await _held(request, node, cid)
    async with node.serving.gateway_open(
        request.method, raw_path, request.rel_url.raw_query_string, request.headers
    ) as ans:
        resp = web.StreamResponse(status=ans.status)
        for name, value in ans.headers:
            resp.headers.add(name, value)
        confine(ans.status, resp.headers)
        if ans.length is not None:
            resp.content_length = ans.length
        if "Vary" not in resp.headers:  # one URL, answers that differ by Accept: caches must key on it too
            resp.headers["Vary"] = "Accept"
        first = await anext(ans.body, b"")  # a raw block is checked whole here: a mismatch is still a clean 502
        await resp.prepare(request)
        await resp.write(first)
        try:
            async for chunk in ans.body:
                await resp.write(chunk)
        except ConnectionResetError:  # the client left: nothing to answer
            return resp
        except (CairnError, aiohttp.ClientError, TimeoutError) as e:  # a block failed its check, or Kubo stopped
            log.warning("gateway stream of /ipfs/%s cut: %s", raw_path, getattr(e, "message", repr(e)))
            if request.transport is not None:
                request.transport.abort()  # no clean end: a client reading it sees a short, failed answer
            return resp
        await resp.write_eof()
        return resp


def _wanted(request: web.Request) -> str:
    """The response format: ``?format=`` wins over ``Accept`` (Trustless Gateway spec, "format" parameter)."""
    fmt = request.query.get("format", "")
    if fmt:
        kinds = {"raw": RAW, "car": CAR}
        if fmt not in kinds:
            raise GatewayUnavailable(f"?format={fmt} needs a Kubo gateway (ipfs.gateway): this node gives raw or car")
        return kinds[fmt]
    accept = request.headers.get("Accept", "")
    return RAW if RAW in accept else CAR if CAR in accept else ""


async def _from_rpc(request: web.Request, node: Node, cid: CID) -> web.StreamResponse:
    """No Kubo gateway: what the RPC API gives, hash-checked (block/get, dag export); 501 for the rest."""
    if request.match_info.get("path"):
        raise GatewayUnavailable("a path under a CID needs a Kubo gateway: set ipfs.gateway")
    await node.serving.held(cid)  # local only: an absent CID is a prompt 404, not a network search
    wanted = _wanted(request)
    for name, allowed in _CAR_DEFAULTS.items():
        if wanted == CAR and name in request.query and request.query[name] not in allowed:
            raise GatewayUnavailable(f"{name}={request.query[name]} needs a Kubo gateway: set ipfs.gateway")
    headers = {"X-Ipfs-Path": f"/ipfs/{request.match_info['cid']}", "X-Ipfs-Roots": cid_str(cid)}
    headers |= {"Cache-Control": IMMUTABLE, "X-Content-Type-Options": "nosniff", "Vary": "Accept"}
    headers["Access-Control-Allow-Origin"] = "*"  # open data: a page of any origin may read it, as from Kubo's
    if wanted == RAW:
        body = b"" if request.method == "HEAD" else await node.serving.raw_block(cid)
        return web.Response(body=body, content_type=RAW, headers=headers | {"Etag": f'"{cid_str(cid)}.raw"'})
    if wanted == CAR:
        chunks = node.serving.car_export(cid)
        content_type = "application/vnd.ipld.car; version=1; order=dfs; dups=n"
    elif cid.codec.name in ("dag-cbor", "cbor"):
        text = await asyncio.to_thread(dagjson.dumps, await node.dag_get(cid))  # seconds for MBs: off the loop
        return web.Response(text=text, content_type="application/json", headers=headers)
    else:
        chunks = node.serving.cat(cid)
        content_type = "application/octet-stream"
    resp = web.StreamResponse(headers=headers | {"Content-Type": content_type})
    if request.method == "HEAD":
        await resp.prepare(request)
        return resp
    first = await anext(chunks, b"")  # errors (absent CID, timeout) still become a clean error answer
    await resp.prepare(request)
    await resp.write(first)
    async for chunk in chunks:  # a failure past this point cuts the stream: the client sees it short
        await resp.write(chunk)
    await resp.write_eof()
    return resp
