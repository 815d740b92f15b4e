"""The node's web page (docs/web.md): ``GET /`` and its static files under ``GET /ui/{file}``.

The files are plain HTML, CSS and ES modules shipped in the package (``node/faces/api/web/``, package data): no build
step, nothing fetched from elsewhere, so the page works offline. Only the files named in ``FILES`` are served, each
with its content type and a Content-Security-Policy that allows nothing but this node (``default-src 'self'``):
the page renders data with ``textContent`` only, and the policy stops any script or style it did not ship.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from aiohttp import web

from node.support.errors import NotFound

WEB_DIR = Path(__file__).resolve().with_name("web")
FILES = {
    "index.html": "text/html",
    "app.css": "text/css",
    "app.js": "text/javascript",
    "api.js": "text/javascript",
    "dom.js": "text/javascript",
    "views.js": "text/javascript",
    "query.js": "text/javascript",
    "execution.js": "text/javascript",
    "lineage.js": "text/javascript",
    "icon.svg": "image/svg+xml",
}
CSP = "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # small files: always revalidated, so a node upgraded under an open page serves its new files at once
    "Cache-Control": "no-cache",
}


@cache
def _read(name: str) -> bytes:
    return (WEB_DIR / name).read_bytes()


def _file(name: str) -> web.Response:
    if name not in FILES:
        raise NotFound(f"no web page file {name[:100]!r}: the page's files are {', '.join(sorted(FILES))}")
    return web.Response(body=_read(name), content_type=FILES[name], charset="utf-8", headers=HEADERS)


async def page(request: web.Request) -> web.Response:
    """``GET /``: the page (its views are routed in the browser: ``#/execution/CID`` is a shareable address)."""
    return _file("index.html")


async def asset(request: web.Request) -> web.Response:
    """``GET /ui/{file}``: one of the page's files."""
    return _file(request.match_info["file"])
