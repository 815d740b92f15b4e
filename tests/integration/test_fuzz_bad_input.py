"""No 500s for bad input: each input a user or a source can send is a one-line 4xx on a real node
(in-process, the session's real Kubo), and nothing is lost: datasets already there stay, unchanged."""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, inprocess_node

NAMES_REFUSED = ["two\nlines", "esc\x1b[31mred", "nul\x00byte", "rtl\u202etxt.exe", "tab\there", "bidi\u2066x", " pad"]


async def _error(resp: Any, status: int) -> str:
    body = await resp.json()
    assert resp.status == status, body
    message = body["error"]["message"]
    assert message and "\n" not in message and "Traceback" not in message
    return str(message)


async def _datasets(client: TestClient[Any, Any]) -> list[tuple[str, str]]:
    resp = await client.get("/api/v0/datasets")
    assert resp.status == 200
    return sorted((d["name"], d["head"]) for d in (await resp.json())["datasets"])


async def _keeper(client: TestClient[Any, Any]) -> list[tuple[str, str]]:
    """A dataset that must outlive every bad request of a test."""
    resp = await client.post("/api/v0/datasets?name=keep&format=csv", data=b"a,b\n1,x\n2,y\n")
    assert resp.status == 201, await resp.text()
    return await _datasets(client)


async def test_query_limit_beyond_int64_is_400(inode: InNode) -> None:
    _, client = inode
    before = await _keeper(client)
    for limit in (10**30, 2**63, -1):
        resp = await client.post(
            "/api/v0/query", json={"sql": "SELECT a FROM t", "inputs": {"t": "keep"}, "limit": limit}
        )
        assert "limit" in await _error(resp, 400)
    resp = await client.get("/api/v0/datasets/keep/data", params={"limit": str(10**30)})
    assert "limit" in await _error(resp, 400)
    assert await _datasets(client) == before


@pytest.mark.parametrize("path", ["/api/v0/query", "/api/v0/pull", "/api/v0/trust", "/api/v0/peers/connect"])
async def test_deeply_nested_json_body_is_400(inode: InNode, path: str) -> None:
    _, client = inode
    before = await _keeper(client)
    deep = "[" * 10_000 + "]" * 10_000
    resp = await client.post(path, data=deep, headers={"Content-Type": "application/json"})
    await _error(resp, 400 if path != "/api/v0/peers/connect" else resp.status)
    assert resp.status < 500 and await _datasets(client) == before


async def test_trust_key_that_is_not_a_did_key_is_400(inode: InNode) -> None:
    _, client = inode
    for key in ("hello", "did:web:example.com", "did:key:", "did:key:z\u202e", "x" * 5000):
        resp = await client.post("/api/v0/trust", json={"key": key})
        await _error(resp, 400)
    assert (await (await client.get("/api/v0/trust")).json())["trusted"] == []


@pytest.fixture
async def garbage_source() -> AsyncIterator[str]:
    """A real HTTP server on loopback answering random bytes (not UTF-8) for every path of the transfer protocol."""
    noise = bytes(random.Random(15).randrange(128, 256) for _ in range(4096))

    async def answer(request: web.Request) -> web.Response:
        status = 500 if request.path.endswith("/fail/refs/head") else 200
        return web.Response(body=noise, status=status, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("")).rstrip("/")


async def test_pull_from_a_source_answering_garbage_is_refused(inode: InNode, garbage_source: str) -> None:
    _, client = inode
    before = await _keeper(client)
    for source in (f"{garbage_source}/odf/x", f"{garbage_source}/fail"):
        resp = await client.post("/api/v0/pull", json={"source": source})
        # The source's fault, not the caller's: PullRefused, the node's 502 for a bad upstream (was a 500).
        await _error(resp, 502)  # (that the foreign bytes are never echoed: test_confine.py)
    assert await _datasets(client) == before


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_bytes_uploaded_as_csv_or_jsonl_are_4xx(inode: InNode, seed: int) -> None:
    _, client = inode
    before = await _keeper(client)
    noise = random.Random(seed).randbytes(20_000)
    for fmt in ("csv", "jsonl"):
        resp = await client.post(f"/api/v0/datasets?name=noise{fmt}&format={fmt}", data=noise)
        if resp.status == 201:  # random bytes that read as one text column are a valid CSV: that is fine
            continue
        await _error(resp, resp.status)
        assert 400 <= resp.status < 500
    got = await _datasets(client)
    assert [d for d in got if d[0] == "keep"] == [d for d in before if d[0] == "keep"]
    assert not [p for p in os.listdir(inode[0].home.path / "tmp") if p.startswith(("ingest-", "upload-"))]


async def test_dag_object_over_the_block_limit_is_413(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    big = {"s": "x" * (5 << 20)}
    # Default caps: the JSON body cap (api.max_json_bytes, 1 MiB) refuses it before it is read.
    async with inprocess_node(tmp_path / "a", kubo_session) as (_, client):
        assert "api.max_json_bytes" in await _error(await client.post("/api/v0/dag", json=big), 413)
    # A node that takes larger JSON bodies still refuses a block Kubo would refuse (once a 502).
    async with inprocess_node(tmp_path / "b", kubo_session, **{"api.max_json_bytes": 16 << 20}) as (_, client):
        assert "block limit" in await _error(await client.post("/api/v0/dag", json=big), 413)
        resp = await client.post("/api/v0/dag", json={"s": "x" * 1000})  # a small one still goes in
        assert resp.status == 200, await resp.text()


@pytest.mark.parametrize("name", NAMES_REFUSED)
async def test_dataset_names_with_control_or_bidi_characters_are_400(inode: InNode, name: str) -> None:
    _, client = inode
    before = await _keeper(client)
    resp = await client.post("/api/v0/datasets", params={"name": name, "format": "csv"}, data=b"a\n1\n")
    message = await _error(resp, 400)
    assert "dataset name" in message and message.isprintable()
    resp = await client.post("/api/v0/pull", json={"source": "bafkqaaa", "name": name})
    assert "dataset name" in await _error(resp, 400)
    assert await _datasets(client) == before


async def test_deeply_nested_jsonl_upload_is_400(inode: InNode) -> None:
    """Found by the ingest fuzzer: 5,000 nested arrays were a RecursionError (500) after ~7 s in pyarrow."""
    _, client = inode
    before = await _keeper(client)
    deep = b'{"a": 1}\n{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    resp = await client.post("/api/v0/datasets?name=deep&format=jsonl", data=deep)
    assert "nest more than" in await _error(resp, 400)
    assert await _datasets(client) == before
