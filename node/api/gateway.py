"""``GET``/``HEAD /ipfs/{cid}[/path]``: the IPFS Trustless Gateway (docs/gateway.md) of what this node holds.

With a Kubo gateway (the managed Kubo's, on loopback; or ``ipfs.gateway``) the request goes there through
node.ipfs.gateway, which checks the hash of every block it relays; its status and the spec's headers come back as
Kubo gave them, and an error's text becomes the node's one-line JSON error with Kubo's status (the spec leaves
error bodies free). Without one (an external Kubo, ``ipfs.gateway`` empty), the node answers the parts it can
from the RPC API (one block, a whole-DAG CARv1, a file, a DAG-CBOR block as DAG-JSON) and 501 to the rest.
Why a relay: docs/architecture.md "The gateway".
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web
from multiformats import CID

from node.core import Node
from node.errors import CairnError, GatewayRefused, GatewayUnavailable, NotFound
from node.ipfs.gateway import CAR, RAW
from node.model import cid_str, dagjson, parse_cid

log = logging.getLogger("cairn.api")

IMMUTABLE = "public, max-age=29030400, immutable"
# The query parameters of a CAR request the RPC API cannot honour, with the value it can (Trustless Gateway spec)
_CAR_DEFAULTS = {"dag-scope": ("all",), "entity-bytes": (), "car-version": ("1",), "car-order": ("dfs", "unk")}


async def serve(request: web.Request, node: Node) -> web.StreamResponse:
    raw_path = request.rel_url.raw_path.removeprefix("/ipfs/")
    cid = parse_cid(request.match_info["cid"])  # 400 for a string that is no CID, before anything else
    if node.gateway.url is None:
        return await _from_rpc(request, node, cid)
    if node.managed is None:  # an external Kubo's gateway may search the network: a CID not held is a 404 now
        try:
            await node.gateway_held(cid)
        except NotFound as e:
            if "only-if-cached" in request.headers.get("Cache-Control", ""):  # Path Gateway spec: then a 412
                raise GatewayRefused(e.message, 412) from e
            raise
    async with node.gateway_open(request.method, raw_path, request.rel_url.raw_query_string, request.headers) as ans:
        resp = web.StreamResponse(status=ans.status)
        for name, value in ans.headers:
            resp.headers.add(name, value)
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
    await node.gateway_held(cid)  # local only: an absent CID is a prompt 404, not a network search
    wanted = _wanted(request)
    for name, allowed in _CAR_DEFAULTS.items():
        if wanted == CAR and name in request.query and request.query[name] not in allowed:
            raise GatewayUnavailable(f"{name}={request.query[name]} needs a Kubo gateway: set ipfs.gateway")
    headers = {"X-Ipfs-Path": f"/ipfs/{request.match_info['cid']}", "X-Ipfs-Roots": cid_str(cid)}
    headers |= {"Cache-Control": IMMUTABLE, "X-Content-Type-Options": "nosniff", "Vary": "Accept"}
    headers["Access-Control-Allow-Origin"] = "*"  # open data: a page of any origin may read it, as from Kubo's
    if wanted == RAW:
        body = b"" if request.method == "HEAD" else await node.raw_block(cid)
        return web.Response(body=body, content_type=RAW, headers=headers | {"Etag": f'"{cid_str(cid)}.raw"'})
    if wanted == CAR:
        chunks = node.car_export(cid)
        content_type = "application/vnd.ipld.car; version=1; order=dfs; dups=n"
    elif cid.codec.name in ("dag-cbor", "cbor"):
        text = await asyncio.to_thread(dagjson.dumps, await node.dag_get(cid))  # off the loop (issue 15)
        return web.Response(text=text, content_type="application/json", headers=headers)
    else:
        chunks = node.cat(cid)
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
