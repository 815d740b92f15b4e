"""Who may call a route, and with what body: the checks ``create_app`` wraps around every route of the table.

Access and limits are declared once per route, beside it, so that no handler can forget one. Each route of
``node.faces.api.server.ROUTES`` is a :class:`Route`; :func:`guard` turns it into the handler aiohttp runs, so a route
cannot be served without its checks. In order: the ``Host`` header (every request, :func:`host_middleware`: DNS
rebinding), the ``Origin`` (web pages other than the node's own may only read open data), the token, the content type
and the body cap.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from config import ApiSettings
from node.support.errors import Forbidden, MisdirectedRequest, TooLarge, Unauthorized, UnsupportedMediaType

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN = "open"  # anyone who reaches the API
TOKEN = "token"  # Authorization: Bearer <api.token>
TOKEN_TO_COMPUTE = "token-to-compute"  # open for answers the node has; computing (or a looser trust) needs the token
ACCESS = (OPEN, TOKEN, TOKEN_TO_COMPUTE)

JSON = "json"  # application/json only, capped at api.max_json_bytes
UPLOAD = "upload"  # any bytes, capped at api.max_upload_bytes (refused on Content-Length before reading)
FILE_UPLOAD = "file-upload"  # as UPLOAD, or a multipart/form-data body whose file part is taken (curl -F)
SAFE_METHODS = ("GET", "HEAD")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class Param:
    """A query parameter (path parameters come from the ``{name}`` in the path)."""

    name: str
    doc: str
    type: str = "string"  # JSON Schema type
    repeated: bool = False
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    access: str  # one of ACCESS
    summary: str
    body: str | None = None  # None, JSON, UPLOAD or FILE_UPLOAD
    body_schema: dict[str, Any] | None = None  # the JSON body's schema (JSON bodies)
    params: tuple[Param, ...] = ()
    produces: tuple[str, ...] = ("application/json",)  # the success answer's content types
    ok: int = 200
    errors: tuple[int, ...] = field(default=(400, 404))  # statuses the handler itself may answer
    # The JSON success answers, status -> JSON Schema (node.faces.api.answer_schemas); empty: ``ok`` with an undescribed
    # body
    returns: dict[int, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.access not in ACCESS or self.body not in (None, JSON, UPLOAD, FILE_UPLOAD):
            raise ValueError(f"route {self.method} {self.path}: bad access {self.access!r} or body {self.body!r}")


@dataclass(frozen=True)
class Limits:
    """The node's API settings the checks use (``api.*``)."""

    token: str
    max_json_bytes: int
    max_upload_bytes: int
    open_compute: bool
    names: tuple[str, ...]  # host names the node answers to, without port
    extra_hosts: tuple[str, ...]  # api.allowed_hosts entries that carry their own port


LIMITS_KEY = web.AppKey("limits", Limits)


def limits_from(api: ApiSettings, token: str, max_upload: int | None = None) -> Limits:
    """The checks' view of the node's ``api.*`` settings. The bound host is a name too, even 0.0.0.0: the CLI
    talks to the URL the node wrote in node.json, and an IP literal cannot be rebound to another site."""
    names = list(LOOPBACK_NAMES)
    bound = str(api.host)
    if bound:
        names.append(f"[{bound}]" if ":" in bound else bound)
    extra: list[str] = []
    for h in api.allowed_hosts:
        h = h.strip().lower()
        (extra if re.search(r":\d+$", h) and not h.endswith("]") else names).append(h)
    return Limits(
        token,
        api.max_json_bytes,
        max_upload if max_upload is not None else api.max_upload_bytes,
        api.open_compute,
        tuple(n.lower() for n in names),
        tuple(extra),
    )


def has_token(request: web.Request) -> bool:
    header = request.headers.get("Authorization", "")
    given = header[7:].strip() if header.startswith("Bearer ") else ""
    return bool(given) and hmac.compare_digest(given.encode(), request.app[LIMITS_KEY].token.encode())


def _hosts(request: web.Request) -> set[str]:
    """Every ``Host`` value this node answers to on the socket the request came in on."""
    lim = request.app[LIMITS_KEY]
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    port = sock[1] if sock else None
    names = set(lim.names)
    if sock:  # the socket's own address (reached by IP, e.g. bound to 0.0.0.0): an IP cannot be rebound
        names.add(f"[{sock[0]}]" if ":" in sock[0] else sock[0])
    hosts = {f"{n}:{port}" for n in names} | set(lim.extra_hosts)
    if port == 80:
        hosts |= names
    return hosts


@web.middleware
async def host_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a ``Host`` that is not the node's (a DNS-rebinding page sends its own name): 421."""
    host = request.headers.get("Host")
    if host is not None and host.strip().lower() not in _hosts(request):
        raise MisdirectedRequest(
            f"Host {host[:100]!r} is not one of this node's names: add it to api.allowed_hosts to serve it"
        )
    return await handler(request)


def _check_origin(request: web.Request, route: Route) -> None:
    """A browser names the page that sends a request in ``Origin``: only the node's own pages may write."""
    origin = request.headers.get("Origin")
    if origin is None or (route.access == OPEN and request.method in SAFE_METHODS):
        return
    own = {f"{scheme}://{h}" for h in _hosts(request) for scheme in ("http", "https")}
    if origin.strip().lower() not in own:
        raise Forbidden(f"requests from the web page {origin[:100]!r} are refused: it is not this node's")


def _check_body(request: web.Request, route: Route) -> web.Request:
    """Content type and size, before the body is read; the answer is a request whose reads stop at the cap."""
    lim = request.app[LIMITS_KEY]
    if route.body == JSON:
        if request.content_type != "application/json":
            raise UnsupportedMediaType(
                f"{route.method} {route.path} takes a JSON body: send Content-Type: application/json"
            )
        cap, what = lim.max_json_bytes, "api.max_json_bytes"
    else:
        cap, what = lim.max_upload_bytes, "api.max_upload_bytes"
    if request.content_length is not None and request.content_length > cap:
        raise TooLarge(f"request body ({request.content_length} bytes) larger than {what} ({cap} bytes): refused")
    return request.clone(client_max_size=cap)


def guard(route: Route) -> Handler:
    """The handler aiohttp runs for ``route``: its checks, then its handler."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        _check_origin(request, route)
        if route.access == TOKEN and not has_token(request):
            raise Unauthorized("this endpoint needs the node's API token (Authorization: Bearer <token>)")
        if route.body is not None:
            request = _check_body(request, route)
        return await route.handler(request)

    guarded.__name__ = route.handler.__name__
    return guarded
