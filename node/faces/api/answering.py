"""What every route handler uses: the node the app serves, JSON answers, and answers streamed as they are made."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from node.core import Node
from node.faces.api.metrics import Metrics
from node.support import values

NODE_KEY = web.AppKey("node", Node)
METRICS_KEY = web.AppKey("metrics", Metrics)
OPENAPI_KEY = web.AppKey("openapi", dict)


def node_of(request: web.Request) -> Node:
    return request.app[NODE_KEY]


def json_answer(obj: object, status: int = 200) -> web.Response:
    """A JSON answer; strict (node.support.values.dumps): never a bare NaN, whatever a result holds."""
    return web.json_response(obj, status=status, dumps=values.dumps)


async def stream_answer(
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
