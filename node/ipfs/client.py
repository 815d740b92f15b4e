"""Async client of Kubo's RPC API (aiohttp).

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
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import blake3
from multiformats import CID

from node.errors import (
    ConfigError,
    KuboCIDMismatch,
    KuboError,
    KuboNotFound,
    KuboRPCError,
    KuboTimeout,
    KuboTruncated,
    KuboUnreachable,
    one_line,
)
from node.ipfs.addr import api_base_url, unix_socket_path
from node.ipfs.behind import WritesBehind
from node.ipfs.car import CarHeaderReader, CarVerifier, check_block
from node.ipfs.sources import chunks_of
from node.model.cid import CODECS, blake3_cid, cid_for, cid_str, parse_cid, same_cid
from node.ports.block_store import (
    AddResult,
    BlockStat,
    BlockStore,
    KeyInfo,
    KuboVersion,
    NamePublished,
    NodeIdentity,
    PeerInfo,
    Source,
)

DEFAULT_API = "http://127.0.0.1:5001"
CHUNK_SIZE = 1 << 20  # UnixFS leaves: fixed 1 MiB chunks (DESIGN.md, bulk data)
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


def _go_duration(seconds: float) -> str:
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


class KuboClient:
    """One aiohttp session per client; every method is one RPC call (or a stream of one)."""

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
        self._provide_path: str | None = None  # learnt on first use: provide/once, else routing/provide
        self.calls: Counter[str] = Counter()  # RPC calls by path (metrics: cairn_kubo_calls_total)
        self.errors: Counter[str] = Counter()  # …of which failed (cairn_kubo_errors_total)
        self._writes = WritesBehind()  # writes still running in the background (write_behind)

    # --- plumbing -------------------------------------------------------------------------

    def write_behind(self, write: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``write`` (calls of this client) in the background: every call made on this client after this
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

    async def __aenter__(self) -> KuboClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
    async def _post(
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
        query.append(("timeout", _go_duration(limit)))
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

    async def _json(self, path: str, params: Iterable[tuple[str, Any]] = (), **kw: Any) -> Any:
        """The answer of a call that returns one JSON object."""
        objs = await self._json_lines(path, params, **kw)
        if not objs:
            raise KuboRPCError(path, "empty answer")
        return objs[-1]

    async def _json_lines(self, path: str, params: Iterable[tuple[str, Any]] = (), **kw: Any) -> list[Any]:
        """All objects of an NDJSON answer (add, pin ls --stream, provide once …)."""
        async with self._post(path, params, **kw) as resp:
            text = (await resp.read()).decode()
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as e:
            raise KuboRPCError(path, f"unreadable answer: {text[:200]}") from e

    async def _ndjson(self, path: str, params: Iterable[tuple[str, Any]] = (), **kw: Any) -> AsyncIterator[Any]:
        async with self._post(path, params, stream=True, **kw) as resp:
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)

    async def rpc(
        self, path: str, params: Iterable[tuple[str, Any]] = (), *, timeout: float | None = None
    ) -> list[Any]:
        """Escape hatch for endpoints without a method here (pubsub, p2p, block/rm …): the JSON
        objects of the answer, one per NDJSON line. Arguments go to Kubo unchecked."""
        return await self._json_lines(path, params, timeout=timeout)

    # --- node ----------------------------------------------------------------------------

    async def id(self, peer: str | None = None, *, timeout: float | None = None) -> NodeIdentity:
        obj = await self._json("id", [("arg", peer)], timeout=timeout)
        return NodeIdentity(
            id=obj["ID"],
            public_key=obj.get("PublicKey") or "",
            addresses=tuple(obj.get("Addresses") or ()),
            agent_version=obj.get("AgentVersion") or "",
            protocols=tuple(obj.get("Protocols") or ()),
        )

    async def repo_size(self, *, timeout: float | None = None) -> int:
        """Bytes Kubo's repo holds (pinned blocks and cached ones: ``repo/stat --size-only``)."""
        obj = await self._json("repo/stat", [("size-only", True)], timeout=timeout)
        return int(obj.get("RepoSize", 0))

    async def version(self, *, timeout: float | None = None) -> KuboVersion:
        obj = await self._json("version", timeout=timeout)
        return KuboVersion(
            version=obj.get("Version", ""),
            commit=obj.get("Commit", ""),
            repo=obj.get("Repo", ""),
            system=obj.get("System", ""),
            golang=obj.get("Golang", ""),
        )

    # --- blocks --------------------------------------------------------------------------

    async def block_put(
        self, data: bytes, codec: str = "raw", pin: bool = False, *, timeout: float | None = None
    ) -> CID:
        """Store one block under a CIDv1 ``codec`` + BLAKE3-256; Kubo's CID must equal ours."""
        expected = cid_for(bytes(data), codec)
        params = [("cid-codec", codec), ("mhtype", "blake3"), ("mhlen", 32), ("pin", pin)]
        obj = await self._json("block/put", params, body=_multipart(bytes(data)), timeout=timeout)
        got = parse_cid(obj["Key"])
        if not same_cid(got, expected):
            raise KuboCIDMismatch(expected, got)
        return expected

    async def block_put_many(
        self, blocks: Sequence[bytes], codec: str = "raw", *, timeout: float | None = None
    ) -> list[CID]:
        """Store several blocks of one ``codec`` in one call (one part each); every CID Kubo gives must be ours."""
        if not blocks:
            return []
        expected = [cid_for(bytes(d), codec) for d in blocks]
        writer = aiohttp.MultipartWriter("form-data")
        for d in blocks:
            part = writer.append(bytes(d), {"Content-Type": "application/octet-stream"})
            part.set_content_disposition("form-data", name="file", filename="data")
        params = [("cid-codec", codec), ("mhtype", "blake3"), ("mhlen", 32)]
        objs = await self._json_lines("block/put", params, body=writer, timeout=timeout)
        got = [parse_cid(o["Key"]) for o in objs if isinstance(o, dict) and "Key" in o]
        if len(got) != len(expected):
            raise KuboRPCError("block/put", f"stored {len(got)} of {len(expected)} blocks")
        keys = {bytes(c) for c in got}
        for want in expected:
            if bytes(want) not in keys:
                raise KuboCIDMismatch(want, None)
        return expected

    async def block_get(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> bytes:
        """The block's bytes, checked against the CID's multihash."""
        c = parse_cid(cid)
        params = [("arg", c), ("offline", offline or None)]
        async with self._post("block/get", params, timeout=timeout) as resp:
            data = await resp.read()
        check_block(c, data)
        return data

    async def block_stat(self, cid: CID | str, *, timeout: float | None = None, offline: bool = False) -> BlockStat:
        obj = await self._json("block/stat", [("arg", parse_cid(cid)), ("offline", offline or None)], timeout=timeout)
        return BlockStat(cid=parse_cid(obj["Key"]), size=int(obj["Size"]))

    async def block_rm(self, cids: Sequence[CID], *, timeout: float | None = None) -> list[CID]:
        """Remove blocks from the repo: the CIDs removed. Kubo keeps a pinned block (directly, recursively or under
        a pin) and one it lacks, and says so per block: those are not errors here."""
        if not cids:
            return []
        lines = await self._json_lines("block/rm", [("arg", c) for c in cids], timeout=timeout)
        return [parse_cid(o["Hash"]) for o in lines if o.get("Hash") and not o.get("Error")]

    async def refs(self, cid: CID | str, *, timeout: float | None = None) -> list[CID]:
        """Every CID under ``cid`` (its whole DAG, each once) that the repo holds: offline, the walk never fetches
        and stops at a block the repo lacks."""
        params = [("arg", parse_cid(cid)), ("recursive", True), ("unique", True), ("offline", True)]
        lines = await self._json_lines("refs", params, timeout=timeout)
        return [parse_cid(o["Ref"]) for o in lines if o.get("Ref")]

    async def forget(self, roots: Iterable[CID], *, timeout: float | None = None) -> list[CID]:
        """Remove the DAGs under ``roots`` from the repo (what a refused fetch brought in: never served or pinned
        later), except the blocks a pin holds: the CIDs removed."""
        cids: dict[bytes, CID] = {}
        for root in roots:
            for c in [root, *await self.refs(root, timeout=timeout)]:
                cids.setdefault(bytes(c), c)
        return await self.block_rm(list(cids.values()), timeout=timeout)

    # --- DAG -----------------------------------------------------------------------------

    async def dag_put(
        self,
        data: bytes,
        input_codec: str = "dag-cbor",
        store_codec: str = "dag-cbor",
        hash: str = "blake3",
        pin: bool = True,
        *,
        timeout: float | None = None,
    ) -> CID:
        """Kubo decodes ``data`` and stores it re-encoded as ``store_codec``; the CID is checked.

        Careful with ``pin``: Kubo 0.42 pins the root recursively at once even when blocks it links
        to are absent, and such an incomplete pin makes ``repo gc`` abort and ``pin ls <cid>`` wait
        on the network. Put children first, or pin the root (``pin_add``) once the DAG is whole.
        """
        params = [("input-codec", input_codec), ("store-codec", store_codec), ("hash", hash), ("pin", pin)]
        obj = await self._json("dag/put", params, body=_multipart(bytes(data)), timeout=timeout)
        got = parse_cid(obj["Cid"]["/"])
        if got.hashfun.name != hash or got.codec.name != store_codec:
            raise KuboCIDMismatch(f"a {store_codec} CID hashed with {hash}", got)
        if input_codec == store_codec and store_codec in CODECS:
            # Same codec in and out: Kubo must store our bytes as they are. A different CID means
            # they were not in canonical form and Kubo re-encoded them.
            expected = cid_for(bytes(data), store_codec, hash)
            if not same_cid(got, expected):
                raise KuboCIDMismatch(expected, got)
        return got

    async def dag_get(
        self, cid: CID | str, output_codec: str = "dag-json", *, timeout: float | None = None, offline: bool = False
    ) -> bytes:
        """The node re-encoded as ``output_codec`` (not hash-checked: use block_get for verified bytes)."""
        params = [("arg", parse_cid(cid)), ("output-codec", output_codec), ("offline", offline or None)]
        async with self._post("dag/get", params, timeout=timeout) as resp:
            return await resp.read()

    async def dag_export(
        self, cid: CID | str, *, timeout: float | None = None, offline: bool = False, verify: bool = True
    ) -> AsyncIterator[bytes]:
        """CARv1 of the DAG under ``cid``, streamed; with ``verify`` every block is hash-checked and a
        cut-short stream raises KuboTruncated at its end (after the chunks already yielded)."""
        root = parse_cid(cid)
        checker = CarVerifier(root) if verify else None
        async with self._post(
            "dag/export", [("arg", root), ("offline", offline or None)], timeout=timeout, stream=True
        ) as resp:
            async for chunk in resp.content.iter_any():
                if checker is not None:
                    checker.feed(chunk)
                yield chunk
        if checker is not None:
            checker.finish()

    async def dag_import(self, source: Source, *, pin_roots: bool = True, timeout: float | None = None) -> list[CID]:
        """Import a CAR (bytes, a file path, or an async iterator of chunks); returns the roots its
        header names (Kubo lists roots only when it pins them, so we read the header on the way up)."""
        header = CarHeaderReader()

        async def watched(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
            async for chunk in chunks:
                header.feed(chunk)
                yield chunk

        body = _multipart(watched(chunks_of(source)), "car")
        lines = await self._json_lines(
            "dag/import", [("pin-roots", pin_roots)], body=body, timeout=timeout, stream=True
        )
        for obj in lines:
            root = obj.get("Root") or {}
            if root.get("PinErrorMsg"):
                raise KuboRPCError("dag/import", f"pinning root {root['Cid']['/']} failed: {root['PinErrorMsg']}")
        if header.roots is None:
            raise KuboTruncated("dag/import: the CAR ended before its header")
        return list(header.roots)

    # --- files (UnixFS) ------------------------------------------------------------------

    async def add(
        self,
        source: Source,
        *,
        filename: str | None = None,
        pin: bool = True,
        only_hash: bool = False,
        timeout: float | None = None,
    ) -> AddResult:
        """Add one file as UnixFS: CIDv1, BLAKE3, raw leaves, fixed 1 MiB chunks. Streamed, never held whole."""
        name = filename or (Path(source).name if isinstance(source, (str, os.PathLike)) else "data")
        meter = _Meter()
        params = [
            ("cid-version", 1),
            ("hash", "blake3"),
            ("raw-leaves", True),
            ("chunker", f"size-{CHUNK_SIZE}"),
            ("pin", pin),
            ("only-hash", only_hash),
            ("progress", False),
        ]
        body = _multipart(meter.wrap(chunks_of(source)), name)
        lines = await self._json_lines("add", params, body=body, timeout=timeout, stream=True)
        entries = [o for o in lines if "Hash" in o]
        if not entries:
            raise KuboRPCError("add", f"no result in Kubo's answer {lines!r:.200}")
        entry = entries[-1]
        got = parse_cid(entry["Hash"])
        if got.version != 1 or got.hashfun.name != "blake3":
            raise KuboCIDMismatch("a CIDv1 hashed with blake3", got)
        if meter.size <= CHUNK_SIZE:
            # One chunk: the root is the raw leaf itself, which we can compute here.
            expected = blake3_cid(meter.digest(), "raw")
            if not same_cid(got, expected):
                raise KuboCIDMismatch(expected, got)
        return AddResult(cid=got, size=int(entry.get("Size") or 0), name=entry.get("Name", name), file_size=meter.size)

    async def cat(
        self,
        cid: CID | str,
        offset: int | None = None,
        length: int | None = None,
        *,
        timeout: float | None = None,
        offline: bool = False,
        on_length: Callable[[int], None] | None = None,
    ) -> AsyncIterator[bytes]:
        """The file's bytes, streamed; raises KuboTruncated if fewer than Kubo announced arrive. ``on_length`` is
        told how many bytes Kubo announced (its ``X-Content-Length``) before the first byte is yielded."""
        params = [("arg", parse_cid(cid)), ("offset", offset), ("length", length), ("offline", offline or None)]
        async with self._post("cat", params, timeout=timeout, stream=True) as resp:
            announced = resp.headers.get("X-Content-Length")
            if on_length is not None and announced is not None:
                on_length(int(announced))
            received = 0
            async for chunk in resp.content.iter_any():
                received += len(chunk)
                yield chunk
        if announced is not None and received != int(announced):
            raise KuboTruncated(
                f"Kubo cat of {cid} ended after {received} of {announced} bytes "
                "(its timeout fired or a block could not be fetched)"
            )

    # --- pins ----------------------------------------------------------------------------

    async def pin_add(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        """Pin ``cid``; a direct pin of a CID already pinned recursively is done (Kubo refuses it as an error,
        which made a peer's answer fail when two nodes share one Kubo and the other had pinned it)."""
        try:
            obj = await self._json("pin/add", [("arg", parse_cid(cid)), ("recursive", recursive)], timeout=timeout)
        except KuboRPCError as e:
            if recursive or "already pinned recursively" not in e.kubo_message:
                raise
            return [parse_cid(cid)]
        return [parse_cid(p) for p in obj.get("Pins") or ()]

    async def pin_rm(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        obj = await self._json("pin/rm", [("arg", parse_cid(cid)), ("recursive", recursive)], timeout=timeout)
        return [parse_cid(p) for p in obj.get("Pins") or ()]

    async def pin_ls(
        self,
        cid: CID | str | None = None,
        *,
        type: str = "all",
        timeout: float | None = None,
    ) -> dict[CID, str]:
        """Pinned CIDs -> "recursive" | "direct" | "indirect"; a CID asked for and not pinned gives {}.

        Never fetches. A pinned DAG may be incomplete (``dag put --pin`` pins a root whose linked
        blocks are absent); Kubo's own ``pin ls <cid>`` then walks it over the network until its
        timeout, even offline. So a single CID is asked about as recursive, then direct (both
        instant, no walk), and only then looked up in the offline listing of indirect pins. That
        listing (and ``type="all"``/``"indirect"`` without a CID) raises KuboRPCError when a pinned
        DAG is incomplete: the answer cannot be known, and we ask unstreamed so Kubo can say so
        (a streamed listing would just stop short, its error lost in a trailer).
        """
        if cid is None:
            return await self._pin_listing(type, timeout)
        c = parse_cid(cid)
        for kind in ("recursive", "direct"):
            if type in (kind, "all"):
                try:
                    await self._json("pin/ls", [("arg", c), ("type", kind)], timeout=timeout)
                except KuboNotFound as e:
                    if "not pinned" not in e.kubo_message:
                        raise
                    continue
                return {c: kind}
        if type in ("indirect", "all") and c in await self._pin_listing("indirect", timeout):
            return {c: "indirect"}
        return {}

    async def _pin_listing(self, kind: str, timeout: float | None) -> dict[CID, str]:
        # offline: the walk of pinned DAGs must never wait for a block the repo lacks.
        params = [("type", kind), ("offline", True)]
        try:
            obj = await self._json("pin/ls", params, timeout=timeout)
        except KuboNotFound as e:
            raise KuboRPCError(
                "pin/ls",
                f"cannot list {kind} pins, a pinned DAG is incomplete: {e.kubo_message}",
                e.code,
                e.http_status,
            ) from e
        # Asked about one CID, Kubo says "indirect through <root>": we keep the kind only.
        return {parse_cid(k): v["Type"].split()[0] for k, v in (obj.get("Keys") or {}).items()}

    # --- routing and swarm ---------------------------------------------------------------

    async def routing_provide(self, cid: CID | str, recursive: bool = False, *, timeout: float | None = None) -> int:
        """Announce ``cid`` to the DHT (queued: returns at once). Needs a connected peer.

        0.42 deprecates ``routing/provide`` for ``provide/once``; we use the latter and fall back to
        the former on a Kubo that lacks it (HTTP 404). Returns how many CIDs were queued (0 if unknown).
        """
        params = [("arg", parse_cid(cid)), ("recursive", recursive)]
        for path in [self._provide_path] if self._provide_path else ["provide/once", "routing/provide"]:
            try:
                lines = await self._json_lines(path, params, timeout=timeout)
            except KuboRPCError as e:
                if e.http_status == 404 and path == "provide/once":
                    continue
                raise
            self._provide_path = path
            return sum(1 for o in lines if isinstance(o, dict) and "Queued" in o)
        raise KuboRPCError("routing/provide", "no provide endpoint answered")

    async def iter_findprovs(
        self, cid: CID | str, num: int = 20, *, timeout: float | None = None
    ) -> AsyncGenerator[PeerInfo, None]:
        """Providers of ``cid`` as the DHT finds them (Kubo's event stream, Type 4 = provider)."""
        seen: set[str] = set()
        params = [("arg", parse_cid(cid)), ("num-providers", num)]
        async for event in self._ndjson(
            "routing/findprovs", params, timeout=timeout if timeout is not None else self.timeout
        ):
            if event.get("Type") != 4:
                continue
            for r in event.get("Responses") or ():
                if r.get("ID") and r["ID"] not in seen:
                    seen.add(r["ID"])
                    yield PeerInfo(id=r["ID"], addrs=tuple(r.get("Addrs") or ()))

    async def routing_findprovs(self, cid: CID | str, num: int = 20, *, timeout: float | None = None) -> list[PeerInfo]:
        """Up to ``num`` providers found within ``timeout`` (a timeout just ends the search)."""
        found: list[PeerInfo] = []
        try:
            async with aclosing(self.iter_findprovs(cid, num, timeout=timeout)) as peers:
                async for peer in peers:
                    found.append(peer)
                    if len(found) >= num:
                        break
        except KuboTimeout:
            pass
        return found

    async def swarm_connect(self, addr: str, *, timeout: float | None = None) -> None:
        await self._json("swarm/connect", [("arg", addr)], timeout=timeout)

    async def swarm_peers(self, *, timeout: float | None = None) -> list[PeerInfo]:
        obj = await self._json("swarm/peers", timeout=timeout)
        return [PeerInfo(id=p["Peer"], addrs=(p["Addr"],) if p.get("Addr") else ()) for p in obj.get("Peers") or ()]

    # --- keys and IPNS -------------------------------------------------------------------

    async def key_gen(self, name: str, type: str = "ed25519", *, timeout: float | None = None) -> KeyInfo:
        obj = await self._json("key/gen", [("arg", name), ("type", type)], timeout=timeout)
        return KeyInfo(name=obj["Name"], id=obj["Id"])

    async def key_import(self, name: str, pem: bytes, *, timeout: float | None = None) -> str:
        """Import a PKCS#8 PEM private key under ``name``; returns its IPNS name (k51…)."""
        params = [("arg", name), ("format", "pem-pkcs8-cleartext")]
        obj = await self._json("key/import", params, body=_multipart(bytes(pem), "key.pem"), timeout=timeout)
        return str(obj["Id"])

    async def key_list(self, *, timeout: float | None = None) -> list[KeyInfo]:
        obj = await self._json("key/list", timeout=timeout)
        return [KeyInfo(name=k["Name"], id=k["Id"]) for k in obj.get("Keys") or ()]

    async def name_publish(
        self,
        target: CID | str,
        key: str = "self",
        lifetime: str | float = "48h",
        *,
        ttl: str | float | None = None,
        allow_offline: bool = True,
        resolve: bool = True,
        timeout: float | None = None,
    ) -> NamePublished:
        """Point the IPNS name of ``key`` at ``target`` (a CID, or an /ipfs/ or /ipns/ path)."""
        path = (
            target
            if isinstance(target, str) and target.startswith(("/ipfs/", "/ipns/"))
            else f"/ipfs/{cid_str(target, keep_v0=True)}"
        )
        params = [
            ("arg", path),
            ("key", key),
            ("lifetime", _duration(lifetime)),
            ("ttl", _duration(ttl) if ttl is not None else None),
            ("allow-offline", allow_offline),
            ("resolve", resolve),
        ]
        obj = await self._json("name/publish", params, timeout=timeout)
        return NamePublished(name=obj["Name"], value=obj["Value"])

    async def name_resolve(
        self, name: str, *, recursive: bool = True, nocache: bool = False, timeout: float | None = None
    ) -> str:
        """The path an IPNS name points to (``/ipfs/<cid>``); KuboNotFound if it cannot be resolved."""
        params = [("arg", name), ("recursive", recursive), ("nocache", nocache or None)]
        obj = await self._json("name/resolve", params, timeout=timeout)
        return str(obj["Path"])

    # --- repo ----------------------------------------------------------------------------

    async def repo_gc(self, *, timeout: float | None = None) -> list[CID]:
        """Remove unpinned blocks; returns the CIDs removed."""
        try:
            lines = await self._json_lines("repo/gc", timeout=timeout if timeout is not None else self.stream_timeout)
        except KuboNotFound as e:
            # "could not retrieve links for …": a pinned DAG lacks a block, and Kubo aborts the whole GC.
            raise KuboRPCError("repo/gc", e.kubo_message, e.code, e.http_status) from e
        errors = [o["Error"] for o in lines if o.get("Error")]
        if errors:
            raise KuboRPCError("repo/gc", errors[0])
        return [parse_cid(o["Key"]["/"]) for o in lines if o.get("Key")]


def _duration(value: str | float) -> str:
    return value if isinstance(value, str) else _go_duration(float(value))


def _multipart(payload: Any, filename: str = "data") -> aiohttp.MultipartWriter:
    """A one-part form body; Kubo takes any field name. Async iterables go out chunked, as they come."""
    writer = aiohttp.MultipartWriter("form-data")
    part = writer.append(payload, {"Content-Type": "application/octet-stream"})
    part.set_content_disposition("form-data", name="file", filename=filename)
    return writer


class _Meter:
    """Counts the bytes going up and hashes the first chunk's worth (enough to check a one-leaf file)."""

    def __init__(self) -> None:
        self.size = 0
        self._hasher = blake3.blake3()

    async def wrap(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            if self.size <= CHUNK_SIZE:
                self._hasher.update(chunk)
            self.size += len(chunk)
            yield chunk

    def digest(self) -> bytes:
        return self._hasher.digest()


def _conforms(client: KuboClient) -> BlockStore:
    """Checked by mypy: the client is a BlockStore (the in-memory twin's check: node/ipfs/memory.py)."""
    return client
