"""A client of a Kubo gateway (the managed Kubo's, bound to loopback, or ``ipfs.gateway``): the node's ``/ipfs/``
route streams its trustless answers through here (docs/gateway.md, docs/architecture.md "The gateway").

Why a relay and not our own traversals: Kubo's gateway (boxo) implements the whole Trustless Gateway spec (dag-scope,
entity-bytes, car-order/dups, pathing through UnixFS, HAMT shards and DAG-CBOR) and passes the IPFS conformance
suite; the node adds its access checks in front and a hash check of every block it relays:

- ``application/vnd.ipld.raw`` (one block, at most ``MAX_BLOCK`` bytes): read whole, hashed against the CID Kubo
  names last in ``X-Ipfs-Roots``, then sent; a mismatch is a 502, nothing of the block is sent.
- ``application/vnd.ipld.car``: each block is hashed against its CID as it passes; a block's bytes go out only once
  it is whole and checked (at most one block is held), so a bad block cuts the stream before any byte of it.
- anything else (a file's bytes, ranges, directory listings): Kubo re-hashes every block it reads from its
  blockstore (``Datastore.HashOnRead``, set on the managed Kubo) and ``Gateway.NoFetch`` keeps it off the network.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

import aiohttp
from multiformats import CID
from yarl import URL

from node.adapters.ipfs.car import CarVerifier, check_block
from node.domain.model.cid import parse_cid
from node.support.errors import GatewayRefused, KuboError, KuboTimeout, KuboTruncated, KuboUnreachable

MAX_HEADER = 64 << 10  # a header line Kubo's gateway may send (X-Ipfs-Roots of a long path of long CIDs)
MAX_BLOCK = 4 << 20  # Kubo refuses blocks over 2 MiB (bitswap's limit); twice that is not a block
# Request headers the spec gives a meaning to (Trustless Gateway, Path Gateway "Request Headers"); others stay here.
FORWARDED = ("Accept", "Range", "If-None-Match", "If-Modified-Since", "Cache-Control")
# Hop-by-hop headers, and those aiohttp sets itself for what it sends.
DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "date", "server", "content-length"})
RAW, CAR = "application/vnd.ipld.raw", "application/vnd.ipld.car"


@dataclass
class Answer:
    """A gateway answer: its status, the headers to pass on, and (GET) its body as checked chunks."""

    status: int
    headers: list[tuple[str, str]]
    length: int | None  # Content-Length Kubo gave, or None (chunked)
    body: AsyncIterator[bytes]


class GatewayClient:
    """One HTTP session on the gateway ``url()`` names now (a restarted managed Kubo may listen elsewhere).

    ``start_timeout`` bounds the wait for the answer's status and headers (Kubo resolves the path before it
    answers): past it the connection is closed and the request is a 504. Closing it does not stop Kubo's gateway
    (measured on 0.42: a 1,000-segment path kept resolving about 10 s after the client had gone), so the depth of
    a path is bounded before it is relayed (node.faces.api.trustless_gateway); ``timeout`` bounds each wait for body
    bytes."""

    def __init__(self, url: Callable[[], str | None], timeout: float, start_timeout: float | None = None) -> None:
        self._url = url
        self.timeout = timeout
        self.start_timeout = start_timeout if start_timeout is not None else timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str | None:
        return self._url()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # sock_read bounds every wait for bytes (headers included): content Kubo cannot find is a 504, not a hang
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=self.timeout)
            self._session = aiohttp.ClientSession(
                timeout=timeout,
                trust_env=False,
                auto_decompress=False,
                # X-Ipfs-Roots names every CID along the path: over aiohttp's 8 KiB default at about 140 segments
                max_line_size=MAX_HEADER,
                max_field_size=MAX_HEADER,
            )
        return self._session

    @contextlib.asynccontextmanager
    async def open(self, method: str, path: str, query: str, headers: Mapping[str, str]) -> AsyncIterator[Answer]:
        """The gateway's answer to ``method /ipfs/path?query``; a status of 400 or more is raised as GatewayRefused
        with Kubo's text (the spec leaves error bodies free). The body iterator raises KuboCIDMismatch or
        KuboTruncated when a block does not check out, after the checked bytes before it."""
        base = self._url()
        if base is None:
            raise KuboUnreachable("the Kubo gateway is not running")
        sent = {k: headers[k] for k in FORWARDED if k in headers}
        # As the client spelled it (already percent-encoded): Kubo's X-Ipfs-Path and Etag name what was asked
        url = URL(f"{base}/ipfs/{path}" + (f"?{query}" if query else ""), encoded=True)
        resp = await self._start(method, url, sent, path)
        try:
            if resp.status >= 400:
                text = (await resp.content.read(2000)).decode("utf-8", "replace").strip()
                raise GatewayRefused(text or resp.reason or f"HTTP {resp.status}", resp.status)
            kept = [(k, v) for k, v in resp.headers.items() if k.lower() not in DROPPED]
            body = _checked(resp) if method == "GET" else _nothing()
            yield Answer(resp.status, kept, resp.content_length, body)
        except TimeoutError as e:
            raise KuboTimeout(f"gateway /ipfs/{path}", self.timeout) from e
        except aiohttp.ClientConnectionError as e:
            raise KuboUnreachable(f"the Kubo gateway at {base} is unreachable: {e}") from e
        finally:
            resp.release()  # an answer not read to its end closes its connection (aiohttp never pools it)

    async def _start(self, method: str, url: URL, headers: Mapping[str, str], path: str) -> aiohttp.ClientResponse:
        """The answer's status and headers, within ``start_timeout`` (the connection is closed past it)."""
        try:
            request = self._http().request(method, url, headers=headers, allow_redirects=False)
            return await asyncio.wait_for(request, self.start_timeout)
        except TimeoutError as e:
            raise KuboTimeout(f"gateway /ipfs/{path}", self.start_timeout) from e
        except aiohttp.ClientConnectionError as e:
            raise KuboUnreachable(f"the Kubo gateway at {self._url()} is unreachable: {e}") from e
        except aiohttp.ClientResponseError as e:  # an answer aiohttp cannot parse (a header over MAX_HEADER)
            raise KuboError(f"the Kubo gateway's answer to /ipfs/{path} could not be read: {e.message}") from e


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""


def _checked(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    media = resp.content_type
    if resp.status == 200 and media == RAW:
        return _raw_checked(resp)
    if resp.status == 200 and media == CAR:
        return _car_checked(resp)
    return _relayed(resp)


async def _relayed(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    async for chunk in resp.content.iter_any():
        yield chunk


async def _raw_checked(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    roots = resp.headers.get("X-Ipfs-Roots", "")
    cid: CID = parse_cid(roots.split(",")[-1].strip())  # the block's own CID: the last of the path's
    data = bytearray()
    async for chunk in resp.content.iter_any():  # read(n) would stop at what has arrived so far
        data += chunk
        if len(data) > MAX_BLOCK:
            raise KuboTruncated(f"the gateway sent more than {MAX_BLOCK} bytes for the block {cid}")
    check_block(cid, bytes(data))
    yield bytes(data)


async def _car_checked(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    verifier = CarVerifier()  # per-block checks only: dag-scope and entity-bytes send part of a DAG on purpose
    held = bytearray()
    async for chunk in resp.content.iter_any():
        held += chunk
        verifier.feed(chunk)
        ready = len(held) - verifier.pending
        if ready:
            yield bytes(held[:ready])
            del held[:ready]
    if held:
        raise KuboTruncated(f"the gateway's CAR ended inside a block ({len(held)} bytes held back)")
