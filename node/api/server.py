"""The HTTP face: aiohttp routes that parse a request, call ``Node``, and render JSON.

Write endpoints need ``Authorization: Bearer <token>`` (the token in ``$CAIRN_HOME/api.token``).
Every error is ``{"error": {"type": …, "message": …}}`` with the status its exception carries.
"""

from __future__ import annotations

import hmac
import logging
from typing import Awaitable, Callable

from aiohttp import web

from node.core import Node
from node.errors import CairnError, InvalidInput, Unauthorized
from node.model import cid_str, dagjson, parse_cid

log = logging.getLogger("cairn.api")

NODE_KEY = web.AppKey("node", Node)
TOKEN_KEY = web.AppKey("token", str)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except CairnError as e:
        return _error(e.status, type(e).__name__, e.message)
    except web.HTTPRequestEntityTooLarge as e:
        return _error(413, "TooLarge", e.text or "request body too large")
    except web.HTTPException:
        raise
    except Exception as e:  # a bug: say so without leaking internals, keep the trace in the log
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _error(500, "InternalError", f"internal error: {type(e).__name__}")


def require_token(handler: Handler) -> Handler:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        given = header[7:].strip() if header.startswith("Bearer ") else ""
        if not given or not hmac.compare_digest(given.encode(), request.app[TOKEN_KEY].encode()):
            raise Unauthorized("this endpoint needs the node's API token (Authorization: Bearer <token>)")
        return await handler(request)

    return wrapped


def _node(request: web.Request) -> Node:
    return request.app[NODE_KEY]


async def healthz(request: web.Request) -> web.Response:
    health = await _node(request).health()
    return web.json_response(health, status=200 if health["ok"] else 503)


async def node_info(request: web.Request) -> web.Response:
    return web.json_response(await _node(request).info())


async def dag_put(request: web.Request) -> web.Response:
    obj = dagjson.loads(await request.read())
    cid = await _node(request).dag_put(obj, pin=request.query.get("pin", "true") != "false")
    return web.json_response({"cid": cid_str(cid)})


async def dag_get(request: web.Request) -> web.Response:
    cid = parse_cid(request.match_info["cid"])
    value = await _node(request).dag_get(cid)
    if isinstance(value, bytes) and cid.codec.name not in ("dag-cbor", "cbor"):
        return web.Response(body=value, content_type="application/octet-stream")
    return web.Response(text=dagjson.dumps(value), content_type="application/json")


async def holium_import(request: web.Request) -> web.Response:
    fmt = request.query.get("format", "")
    root, count = await _node(request).holium_import(await request.read(), fmt)
    return web.json_response({"cid": cid_str(root), "blocks": count})


def create_app(node: Node, token: str, max_body: int) -> web.Application:
    app = web.Application(middlewares=[errors_middleware], client_max_size=max_body)
    app[NODE_KEY] = node
    app[TOKEN_KEY] = token
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v0/node", node_info)
    app.router.add_post("/api/v0/dag", require_token(dag_put))
    app.router.add_get("/api/v0/dag/{cid}", dag_get)
    app.router.add_post("/api/v0/holium/import", require_token(holium_import))
    return app

