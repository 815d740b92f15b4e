"""KuboClient's wire behaviour and error mapping, against a small in-process stand-in for Kubo.

The real daemon is exercised in tests/integration/test_kubo_client.py; here we provoke what a
healthy Kubo will not do on demand: wrong CIDs, corrupt bytes, short streams, a missing endpoint.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from multiformats import CID, multihash

from node.adapters.ipfs import KuboClient
from node.support.errors import KuboCIDMismatch, KuboNotFound, KuboRPCError, KuboTimeout, KuboTruncated

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def blake3_cid(data: bytes, codec: str = "raw") -> CID:
    return CID("base32", 1, codec, multihash.get("blake3").digest(data, size=32))


def kubo_error(message: str, code: int = 0) -> web.Response:
    return web.json_response({"Message": message, "Code": code, "Type": "error"}, status=500)


@dataclass
class FakeKubo:
    routes: dict[str, Handler] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str], dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        path = request.path.removeprefix("/api/v0/")
        self.seen.append((request.method, path, dict(request.query), dict(request.headers), body))
        handler = self.routes.get(path)
        if handler is None:
            return web.Response(status=404, text="404 page not found")
        return await handler(request)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeKubo, KuboClient]]:
    kubo = FakeKubo()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", kubo.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with KuboClient(f"http://127.0.0.1:{port}", timeout=2.0) as client:
        yield kubo, client
    await runner.cleanup()


def json_answer(obj: object) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        return web.json_response(obj)

    return handler


async def test_requests_are_posts_without_origin_and_carry_timeout(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake
    data = b"hello"
    kubo.routes["block/put"] = json_answer({"Key": str(blake3_cid(data)), "Size": 5})
    assert await client.block_put(data) == blake3_cid(data)
    method, path, query, headers, body = kubo.seen[-1]
    assert (method, path) == ("POST", "block/put")
    assert "Origin" not in headers
    assert query == {"cid-codec": "raw", "mhtype": "blake3", "mhlen": "32", "pin": "false", "timeout": "2000ms"}
    assert headers["Content-Type"].startswith("multipart/form-data")
    assert b"hello" in body


async def test_block_put_cid_mismatch(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake
    # What a misspelled parameter gets you: Kubo's default sha2-256 instead of blake3.
    sha = CID("base32", 1, "raw", multihash.get("sha2-256").digest(b"hello"))
    kubo.routes["block/put"] = json_answer({"Key": str(sha), "Size": 5})
    with pytest.raises(KuboCIDMismatch, match=str(blake3_cid(b"hello"))):
        await client.block_put(b"hello")


async def test_dag_put_checks_the_hash_function(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake
    sha = CID("base32", 1, "dag-cbor", multihash.get("sha2-256").digest(b"\xf6"))
    kubo.routes["dag/put"] = json_answer({"Cid": {"/": str(sha)}})
    with pytest.raises(KuboCIDMismatch, match="blake3"):
        await client.dag_put(b"\xf6")
    assert kubo.seen[-1][2]["hash"] == "blake3"


async def test_block_get_verifies_bytes(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake

    async def corrupt(_: web.Request) -> web.Response:
        return web.Response(body=b"not the block")

    kubo.routes["block/get"] = corrupt
    with pytest.raises(KuboCIDMismatch, match="do not hash"):
        await client.block_get(blake3_cid(b"the block"))


@pytest.mark.parametrize(
    ("message", "code", "error"),
    [
        ("context deadline exceeded", 0, KuboTimeout),
        ("block was not found locally (offline): ipld: could not find bafk", 0, KuboNotFound),
        ("could not resolve name", 0, KuboNotFound),
        ("something odd", 3, KuboNotFound),
        ('invalid path "x": path does not have enough components', 0, KuboRPCError),
    ],
)
async def test_error_mapping(
    fake: tuple[FakeKubo, KuboClient], message: str, code: int, error: type[Exception]
) -> None:
    kubo, client = fake

    async def fail(_: web.Request) -> web.Response:
        return kubo_error(message + "\n  with a second line", code)

    kubo.routes["name/resolve"] = fail
    with pytest.raises(error) as info:
        await client.names.resolve("k51x")
    text = str(info.value)
    assert "\n" not in text
    if error is not KuboTimeout:
        assert text.startswith(f"Kubo name/resolve: {message}")
        assert info.value.code == code  # type: ignore[attr-defined]


async def test_plain_text_400(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake

    async def bad(_: web.Request) -> web.Response:
        return web.Response(status=400, text='argument "key" is required')

    kubo.routes["key/gen"] = bad
    with pytest.raises(KuboRPCError, match='argument "key" is required') as info:
        await client.keys.gen("x")
    assert info.value.http_status == 400


async def test_provide_falls_back_to_routing_provide(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake
    kubo.routes["routing/provide"] = json_answer({})
    cid = blake3_cid(b"x")
    assert await client.routing_provide(cid) == 0
    assert [p for _, p, *_ in kubo.seen] == ["provide/once", "routing/provide"]
    await client.routing_provide(cid)  # remembered: straight to the endpoint that works
    assert [p for _, p, *_ in kubo.seen][-1] == "routing/provide" and len(kubo.seen) == 3


async def test_cat_short_stream_is_truncated(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake

    async def short(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"X-Content-Length": "100", "X-Stream-Output": "1"})
        await resp.prepare(request)
        await resp.write(b"x" * 60)
        await resp.write_eof()  # Kubo would put its error in a trailer here
        return resp

    kubo.routes["cat"] = short
    got = bytearray()
    with pytest.raises(KuboTruncated, match="after 60 of 100 bytes"):
        async for chunk in client.cat(blake3_cid(b"f")):
            got += chunk
    assert len(got) == 60


async def test_client_side_timeout(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake

    release = asyncio.Event()

    async def hang(_: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    kubo.routes["id"] = hang
    client.transport.timeout, client.transport.slack = (
        0.05,
        0.05,
    )  # our deadline is Kubo's plus a slack (2 s by default)
    try:
        with pytest.raises(KuboTimeout, match="Kubo id did not answer"):
            await client.id()
    finally:
        release.set()


async def test_findprovs_reads_the_event_stream(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for event in [
            {"Type": 0, "ID": "Q", "Responses": None},
            {"Type": 4, "ID": "", "Responses": [{"ID": "peerA", "Addrs": ["/ip4/127.0.0.1/tcp/1"]}]},
            {"Type": 1, "ID": "Q", "Responses": []},
            {"Type": 4, "ID": "", "Responses": [{"ID": "peerA", "Addrs": []}, {"ID": "peerB", "Addrs": None}]},
        ]:
            await resp.write(json.dumps(event).encode() + b"\n")
        await resp.write_eof()
        return resp

    kubo.routes["routing/findprovs"] = events
    peers = await client.routing_findprovs(blake3_cid(b"x"), num=5)
    assert [(p.id, p.addrs) for p in peers] == [("peerA", ("/ip4/127.0.0.1/tcp/1",)), ("peerB", ())]
    assert kubo.seen[-1][2]["num-providers"] == "5"
    assert [p.id for p in await client.routing_findprovs(blake3_cid(b"x"), num=1)] == ["peerA"]


async def test_add_parameters(fake: tuple[FakeKubo, KuboClient]) -> None:
    kubo, client = fake
    data = b"small file"

    async def added(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps({"Name": "f.txt", "Hash": str(blake3_cid(data)), "Size": "10"}) + "\n")

    kubo.routes["add"] = added
    res = await client.add(data, filename="f.txt", pin=False)
    assert (res.cid, res.size, res.name, res.file_size) == (blake3_cid(data), 10, "f.txt", 10)
    query = kubo.seen[-1][2]
    assert {k: query[k] for k in ("cid-version", "hash", "raw-leaves", "chunker", "pin", "only-hash")} == {
        "cid-version": "1",
        "hash": "blake3",
        "raw-leaves": "true",
        "chunker": "size-1048576",
        "pin": "false",
        "only-hash": "false",
    }
    assert b'filename="f.txt"' in kubo.seen[-1][4]
