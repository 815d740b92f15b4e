"""The transport of the Kubo RPC client: one aiohttp session, Kubo's errors as typed exceptions, timeouts.

Facts this relies on (shared/NOTES.md, re-measured on Kubo 0.42.0):
- every call is ``POST /api/v0/<path>`` (GET gives 405); a foreign ``Origin`` header gives 403, and
  aiohttp sends none;
- errors are HTTP 500 with ``{"Message", "Code", "Type": "error"}`` (Code is 0 for nearly all of them,
  so "not found" is recognised by its text); a missing argument is a plain-text 400, an unknown
  endpoint a plain-text 404;
- misspelled query parameters are silently ignored, so every CID Kubo returns is checked against the
  one computed here;
- fetching a CID nobody has blocks forever while online, so every call carries Kubo's ``timeout=``;
- once a streamed answer has started (``200 OK``), Kubo reports failures only in an HTTP trailer that
  aiohttp drops: ``cat`` checks the byte count against ``X-Content-Length``, ``dag export`` checks the CAR;
- with ``API.Authorizations`` set, a call without the exact ``Authorization`` header of one of its secrets is a
  plain-text 403 on every path (``version`` too; a known secret always gets ``version``): the client sends its
  secret on every call;
- the API may listen on a unix domain socket (``unix:/path``, what the managed Kubo does): every call above works
  there alike (Kubo ignores the ``Host`` header; 200 ``block/get`` calls of a 4 KiB block: 0.58 ms each over the
  socket, 0.61 ms over loopback TCP, Kubo 0.42).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp
from multiformats import CID

from node.adapters.ipfs.addr import api_base_url, unix_socket_path
from node.adapters.ipfs.behind import WritesBehind
from node.domain.model.cid import cid_str
from node.support.errors import (
    ConfigError,
    KuboError,
    KuboNotFound,
    KuboRPCError,
    KuboTimeout,
    KuboUnreachable,
    one_line,
)

DEFAULT_API = "http://127.0.0.1:5001"
SLACK = 2.0  # our own deadline trails Kubo's, so Kubo's error (with its message) wins the race
T = TypeVar("T")

# Kubo's "Code" is 0 for almost every error; these texts are its "does not exist" answers.
_NOT_FOUND = (
    "not found",
    "could not find",
    "could not resolve name",
    "not pinned",
    "no link named",
    "no key by the given name",
)
_CODE_NOT_FOUND = 3  # go-ipfs-cmds ErrNotFound, in case a command uses it


def go_duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, CID):
        return cid_str(value, keep_v0=True)
    return str(value)


def auth_header(secret: str) -> str:
    """The ``Authorization`` header for a Kubo ``API.Authorizations`` secret, in Kubo's own ``AuthSecret`` format
    (``bearer:TOKEN``, ``basic:USER:PASS``, ``basic:BASE64``, or a bare token meaning bearer), converted as Kubo's
    ``config.ConvertAuthSecret`` does, since Kubo compares the whole header with that string."""
    kind, sep, value = secret.partition(":")
    if not sep:
        return f"Bearer {secret}"
    if kind == "bearer" and value:
        return f"Bearer {value}"
    if kind == "basic" and value:
        return "Basic " + (base64.b64encode(value.encode()).decode() if ":" in value else value)
    raise ConfigError("a Kubo API secret must be bearer:TOKEN, basic:USER:PASSWORD or basic:BASE64")


UNIX_HOST = "http://localhost"  # the URL a call over a unix socket is made to: the connector picks the socket


def rpc_url(api_url: str, path: str = "") -> str:
    """The URL of ``path`` (e.g. ``/api/v0/id``) on the Kubo at ``api_url`` (as ``api_base_url`` gives): over a
    unix socket it is sent to ``http://localhost`` through the session ``api_session`` makes."""
    return (UNIX_HOST if unix_socket_path(api_url) is not None else api_url) + path


def api_session(api_url: str, *, limit: int = 64, **kwargs: Any) -> aiohttp.ClientSession:
    """An aiohttp session that reaches the Kubo at ``api_url``, over TCP or its unix socket (``kwargs``: the
    session's, e.g. headers, timeout). trust_env=False: never send an API call through a proxy from the
    environment."""
    sock = unix_socket_path(api_url)
    connector = aiohttp.UnixConnector(sock, limit=limit) if sock is not None else aiohttp.TCPConnector(limit=limit)
    return aiohttp.ClientSession(connector=connector, trust_env=False, **kwargs)


def classify(path: str, message: str, code: int | None, http_status: int, timeout: float | None) -> KuboError:
    """Kubo's error answer -> the typed exception."""
    lower = message.lower()
    if http_status == 403 and "access denied" in lower:
        # API.Authorizations refused the secret (or its absence); the one-line text says what to check.
        why = "Kubo refused the call (HTTP 403): its API secret is missing or wrong (API.Authorizations; ipfs.api_auth)"
        return KuboRPCError(path, why, code, http_status)
    if "context deadline exceeded" in lower:
        return KuboTimeout(path, timeout, message)
    if http_status == 404 and code is None:
        return KuboRPCError(path, f"unknown endpoint /api/v0/{path} ({one_line(message)})", code, http_status)
    if code == _CODE_NOT_FOUND or any(p in lower for p in _NOT_FOUND):
        return KuboNotFound(path, message, code, http_status)
    return KuboRPCError(path, message, code, http_status)


def duration(value: str | float) -> str:
    """A Go duration for Kubo: a string as it is, seconds as milliseconds."""
    return value if isinstance(value, str) else go_duration(float(value))


def multipart(payload: Any, filename: str = "data") -> aiohttp.MultipartWriter:
    """A one-part form body; Kubo takes any field name. Async iterables go out chunked, as they come."""
    writer = aiohttp.MultipartWriter("form-data")
    part = writer.append(payload, {"Content-Type": "application/octet-stream"})
    part.set_content_disposition("form-data", name="file", filename=filename)
    return writer


class KuboTransport:
    """One aiohttp session reaching one Kubo's RPC API (that may move: ``api_url``); every call goes through ``post``,
    which waits for the writes running behind, counts the call, puts Kubo's ``timeout=`` on it and maps its errors."""

    def __init__(
        self,
        api_url: str = DEFAULT_API,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 600.0,
        connect_timeout: float = 5.0,
        auth: str | None = None,
    ) -> None:
        """``auth``: the Kubo ``API.Authorizations`` secret to send on every call (see ``auth_header``)."""
        self._api_url = api_base_url(api_url)
        self._headers = {"Authorization": auth_header(auth)} if auth else {}
        self.timeout = timeout  # default for calls answered in one piece
        self.stream_timeout = stream_timeout  # default for add / cat / dag export / dag import
        self.connect_timeout = connect_timeout
        self.slack = SLACK
        self._session: aiohttp.ClientSession | None = None
        self._session_for = ""  # the api_url the session's connector reaches
        self._retired: list[aiohttp.ClientSession] = []  # sessions of an earlier api_url, closed by close()
        self.calls: Counter[str] = Counter()  # RPC calls by path (metrics: cairn_kubo_calls_total)
        self.errors: Counter[str] = Counter()  # …of which failed (cairn_kubo_errors_total)
        self._writes = WritesBehind()  # writes still running in the background (write_behind)

    def write_behind(self, write: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``write`` (calls through this transport) in the background: every call made through it after this
        one waits for it first, so that this node reads its own writes; the write's own calls do not wait.
        Its failure is the caller's to handle (the task's result)."""
        return self._writes.start(write)

    @property
    def api_url(self) -> str:
        return self._api_url

    @api_url.setter
    def api_url(self, value: str) -> None:
        # A managed Kubo may come back on another port (or socket): _get_session follows.
        self._api_url = api_base_url(value)

    async def close(self) -> None:
        sessions, self._retired = [*self._retired, self._session], []
        self._session = None
        for session in sessions:
            if session is not None:
                await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is not None and self._session_for != self._api_url:
            # A unix socket's connector reaches one path only: a moved API needs a new session (calls still
            # running on the old one finish there; close() closes it).
            self._retired.append(self._session)
            self._session = None
        if self._session is None or self._session.closed:
            self._session = api_session(self._api_url, limit=64, headers=self._headers)
            self._session_for = self._api_url
        return self._session

    @asynccontextmanager
    async def post(
        self,
        path: str,
        params: Iterable[tuple[str, Any]] = (),
        *,
        body: Any = None,
        timeout: float | None = None,
        stream: bool = False,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        await self._writes.settle()
        limit = timeout if timeout is not None else (self.stream_timeout if stream else self.timeout)
        query = [(k, _param(v)) for k, v in params if v is not None]
        query.append(("timeout", go_duration(limit)))
        client_timeout = aiohttp.ClientTimeout(
            total=None if stream else limit + self.slack,
            sock_connect=self.connect_timeout,
            sock_read=limit + self.slack,
        )
        url = rpc_url(self._api_url, f"/api/v0/{path}")
        self.calls[path] += 1
        try:
            async with self._get_session().post(url, params=query, data=body, timeout=client_timeout) as resp:
                if resp.status != 200:
                    self.errors[path] += 1
                    raise await self._error(path, resp, limit)
                yield resp
        except aiohttp.ClientError as e:
            self.errors[path] += 1
            raise self._failed(path, limit, e) from e
        except TimeoutError as e:
            self.errors[path] += 1
            raise KuboTimeout(path, limit) from e

    def _failed(self, path: str, limit: float, e: aiohttp.ClientError) -> KuboError:
        """The node's error for a call that did not reach Kubo or got no answer."""
        if isinstance(e, aiohttp.ClientConnectorError):
            # asyncio's own text for a refused connect is "Connect call failed (...)": say it plainly.
            errno = getattr(e.os_error, "errno", None)
            why = (
                os.strerror(errno)
                if errno and errno > 0
                else (getattr(e.os_error, "strerror", None) or str(e.os_error))
            )
            return KuboUnreachable(self._api_url, why)
        if isinstance(e, aiohttp.ConnectionTimeoutError):
            return KuboUnreachable(self._api_url, f"no answer to connect within {self.connect_timeout:g} s")
        if isinstance(e, TimeoutError):  # aiohttp's ServerTimeoutError
            return KuboTimeout(path, limit)
        return KuboError(f"Kubo {path}: connection to {self._api_url} failed: {one_line(str(e))}")

    async def _error(self, path: str, resp: aiohttp.ClientResponse, timeout: float) -> KuboError:
        text = (await resp.read()).decode("utf-8", "replace").strip()
        message, code = text or f"HTTP {resp.status}", None
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "Message" in obj:
            message, code = str(obj["Message"]), obj.get("Code")
        return classify(path, message, code, resp.status, timeout)

    async def json_object(self, path: str, params: Iterable[tuple[str, Any]] = (), **kw: Any) -> Any:
        """The answer of a call that returns one JSON object."""
        objs = await self.json_lines(path, params, **kw)
        if not objs:
            raise KuboRPCError(path, "empty answer")
        return objs[-1]

    async def json_lines(self, path: str, params: Iterable[tuple[str, Any]] = (), **kw: Any) -> list[Any]:
        """All objects of an NDJSON answer (add, pin ls --stream, provide once …)."""
        async with self.post(path, params, **kw) as resp:
            text = (await resp.read()).decode()
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as e:
            raise KuboRPCError(path, f"unreadable answer: {text[:200]}") from e

    async def ndjson(self, path: str, params: Iterable[tuple[str, Any]] = (), **kw: Any) -> AsyncIterator[Any]:
        async with self.post(path, params, stream=True, **kw) as resp:
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)

    async def rpc(
        self, path: str, params: Iterable[tuple[str, Any]] = (), *, timeout: float | None = None
    ) -> list[Any]:
        """Escape hatch for endpoints the client has no method for (pubsub, p2p …): the JSON
        objects of the answer, one per NDJSON line. Arguments go to Kubo unchecked."""
        return await self.json_lines(path, params, timeout=timeout)
