"""Access and limits, declared once per route, and the OpenAPI document generated from the same table (what the
API contract fuzzing reads). Every test runs against a real node (in-process, on the session's real Kubo);
each hole found in access has a test that failed on the code that had it:

- ``POST /api/v0/query`` computed, signed and pinned for anyone: a miss without the token is refused (401) and
  nothing is computed; a looser trust than the node's needs the token;
- text/plain and form bodies were accepted (CORS simple requests): 415;
- the ``Host`` header was not checked (DNS rebinding): 421; a foreign ``Origin`` cannot write: 403;
- JSON bodies were read up to 1 GiB and a 2 GiB ``Content-Length`` upload was spooled: 413 before reading;
- ``wait: false`` jobs were unbounded: 429 beyond ``api.max_jobs``.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from aiohttp.test_utils import TestClient

from node.adapters.ipfs import ManagedKubo
from node.services.resolve.jobs import Jobs
from node.support.errors import NotFound
from tests.fixtures.inprocess import InNode, add_csv, inprocess_node, wait_for

CSV = b"city,pop\nParis,2100000\nLyon,520000\nNice,340000\n"
NO_TOKEN = {"Authorization": ""}
TOKENS = {"missing": NO_TOKEN, "wrong": {"Authorization": "Bearer wrong"}, "not bearer": {"Authorization": "x"}}
MISS = {"sql": "SELECT city FROM c WHERE pop > 400000", "inputs": {"c": "cities"}}


async def _doc(client: TestClient[Any, Any]) -> dict[str, Any]:
    resp = await client.get("/api/v0/openapi.json")
    assert resp.status == 200
    return dict(await resp.json())


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), p, op) for p, ops in doc["paths"].items() for m, op in ops.items()]


def _concrete(path: str) -> str:
    path = path.replace("{cid}", "bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy")
    return re.sub(r"\{(\w+)\}", r"x\1", path)


def _body(op: dict[str, Any]) -> dict[str, Any]:
    """A request body of the kind the document declares (JSON or bytes), for probing the checks."""
    content = op.get("requestBody", {}).get("content", {})
    if "application/json" in content:
        return {"json": {}}
    return {"data": b"a,b\n1,2\n"} if content else {}


# -- the document is the route table -----------------------------------------------------------------------


async def test_openapi_lists_exactly_the_apps_routes(inode: InNode) -> None:
    _, client = inode
    doc = await _doc(client)
    assert doc["openapi"].startswith("3.1")
    routes = [(r.method, r.resource.canonical) for r in client.server.app.router.routes() if r.resource is not None]
    served = {(m, p) for m, p in routes if m != "HEAD"}  # aiohttp adds a HEAD to every GET: not documented
    documented = {(m, p) for m, p, _ in _operations(doc)}
    assert {(m, p) for m, p in documented if m != "HEAD"} == served
    assert {(m, p) for m, p in documented if m == "HEAD"} <= set(routes)  # a documented HEAD (the gateway's)
    token = doc["components"]["securitySchemes"]["token"]
    assert (token["type"], token["scheme"]) == ("http", "bearer")
    for method, path, op in _operations(doc):
        assert op["x-cairn-access"] in ("open", "token", "token-to-compute"), (method, path)
        # A route that changes anything is never open: a new write route cannot skip the token.
        assert method in ("GET", "HEAD") or op["x-cairn-access"] != "open", (method, path)
        assert "5XX" in op["responses"] and "421" in op["responses"]
        declared = {q["name"] for q in op["parameters"] if q["in"] == "path"}
        assert declared == set(re.findall(r"\{(\w+)\}", path)), (method, path)
    ids = [op["operationId"] for _, _, op in _operations(doc)]
    assert len(ids) == len(set(ids))
    # Every reference points at something the document holds.
    for ref in re.findall(r'"\$ref": "#/([^"]+)"', json.dumps(doc)):
        node: Any = doc
        for part in ref.split("/"):
            node = node[part]


async def test_every_write_route_refuses_a_missing_or_wrong_token(inode: InNode) -> None:
    node, client = inode
    await add_csv(client, "cities", CSV)
    writes = [(m, p, op) for m, p, op in _operations(await _doc(client)) if op["x-cairn-access"] != "open"]
    assert {p for _, p, _ in writes} >= {"/api/v0/query", "/api/v0/datasets", "/api/v0/dag", "/api/v0/trust"}
    before = (node.index.count("datasets"), node.index.count("executions"), len(node.index.trust.trusted()))
    for method, path, op in writes:
        for label, headers in TOKENS.items():
            body = {"json": MISS} if op["x-cairn-access"] == "token-to-compute" else _body(op)
            resp = await client.request(method, _concrete(path), headers=headers, params={"name": "y"}, **body)
            got = await resp.json()
            assert resp.status == 401, (method, path, label, got)
            assert got["error"]["type"] == "Unauthorized" and "token" in got["error"]["message"]
    after = (node.index.count("datasets"), node.index.count("executions"), len(node.index.trust.trusted()))
    assert after == before and node.resolver.computed == 0  # nothing stored, nothing computed


async def test_a_miss_without_the_token_computes_nothing(inode: InNode) -> None:
    node, client = inode
    await add_csv(client, "cities", CSV)
    resp = await client.post("/api/v0/query", json=MISS, headers=NO_TOKEN)
    body = await resp.json()
    assert resp.status == 401 and "needs the node's API token" in body["error"]["message"], body
    # A job without the token: accepted, then it ends saying the same, having computed nothing.
    resp = await client.post("/api/v0/query", json={**MISS, "wait": False}, headers=NO_TOKEN)
    assert resp.status == 202
    job = (await resp.json())["job"]

    async def ended() -> dict[str, Any] | None:
        view = await (await client.get(f"/api/v0/jobs/{job}")).json()
        return dict(view) if view["state"] != "running" else None

    view = await wait_for(ended, 60, "the job to end")
    assert view["state"] == "failed" and view["error"]["status"] == 401, view
    assert node.resolver.computed == 0 and node.index.count("executions") == 0
    assert node.spark_state() == "down"  # not even started


async def test_looser_trust_needs_the_token(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    bad_sql = {"sql": "SELECT nope(", "inputs": {"c": "cities"}}  # refused after the access check: no Spark
    async with inprocess_node(tmp_path / "n", kubo_session, **{"peers.trust": "community"}) as (_, client):
        for trust in ("any",):
            resp = await client.post("/api/v0/query", json={**bad_sql, "trust": trust}, headers=NO_TOKEN)
            assert resp.status == 401 and "looser" in (await resp.json())["error"]["message"]
        for trust in ("self", "verify", "community"):  # not looser: no token needed to ask
            resp = await client.post("/api/v0/query", json={**bad_sql, "trust": trust}, headers=NO_TOKEN)
            assert resp.status in (400, 404), await resp.text()
        resp = await client.post("/api/v0/query", json={**bad_sql, "trust": "any"})  # with the token
        assert resp.status in (400, 404)
    async with inprocess_node(tmp_path / "o", kubo_session, **{"api.open_compute": True}) as (_, client):
        resp = await client.post("/api/v0/query", json={**bad_sql, "trust": "any"}, headers=NO_TOKEN)
        assert resp.status in (400, 404), await resp.text()


# -- content type, Host, Origin ------------------------------------------------------------------------------


async def test_json_routes_refuse_text_and_form_bodies(inode: InNode) -> None:
    node, client = inode
    json_routes = [
        (m, p)
        for m, p, op in _operations(await _doc(client))
        if "application/json" in op.get("requestBody", {}).get("content", {})
    ]
    assert ("POST", "/api/v0/query") in json_routes and len(json_routes) >= 5
    text = json.dumps({**MISS, "key": "k", "addr": "a", "source": "s"})
    for method, path in json_routes:
        for headers, data in (
            ({"Content-Type": "text/plain"}, text),
            ({"Content-Type": "application/x-www-form-urlencoded"}, "sql=SELECT+1"),
            ({}, text.encode()),
        ):
            resp = await client.request(method, path, data=data, headers=headers)
            body = await resp.json()
            assert resp.status == 415 and body["error"]["type"] == "UnsupportedMediaType", (method, path, body)
    assert len(node.index.trust.trusted()) == 0


async def test_unknown_api_routes_and_methods_answer_in_the_error_shape(inode: InNode) -> None:
    """A mistyped path or method under /api/ gets the API's one-line JSON error (404, 405 with Allow), like every
    other refusal; paths outside the API (the gateway's, the page's) keep aiohttp's own answers."""
    _, client = inode
    resp = await client.get("/api/v0/quer")
    body = await resp.json()
    assert resp.status == 404 and body["error"]["type"] == "NotFound", body
    assert "/api/v0/quer" in body["error"]["message"] and "\n" not in body["error"]["message"]
    resp = await client.delete("/api/v0/query")
    body = await resp.json()
    assert resp.status == 405 and body["error"]["type"] == "MethodNotAllowed", body
    assert "POST" in resp.headers["Allow"] and "POST" in body["error"]["message"]
    resp = await client.get("/no-such-page")
    assert resp.status == 404 and resp.content_type == "text/plain"


async def test_a_foreign_host_is_refused(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    allowed = {"api.allowed_hosts": ["node.example.org", "proxy.example.org:8443"]}
    async with inprocess_node(tmp_path / "n", kubo_session, **allowed) as (_, client):
        port = client.server.port
        for host in ("rebind.evil.example", f"rebind.evil.example:{port}", "localhost:1", "node.example.org:1"):
            resp = await client.get("/api/v0/datasets", headers={"Host": host})
            body = await resp.json()
            assert resp.status == 421 and body["error"]["type"] == "MisdirectedRequest", (host, body)
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"node.example.org:{port}", "proxy.example.org:8443"):
            resp = await client.get("/api/v0/datasets", headers={"Host": host})
            assert resp.status == 200, host
        resp = await client.post("/api/v0/dag", json={"a": 1}, headers={"Host": "rebind.evil.example"})
        assert resp.status == 421


async def test_a_foreign_origin_cannot_write(inode: InNode) -> None:
    _, client = inode
    own = f"http://127.0.0.1:{client.server.port}"
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{client.server.port + 1}"):
        resp = await client.post("/api/v0/dag", json={"a": 1}, headers={"Origin": origin})
        body = await resp.json()
        assert resp.status == 403 and body["error"]["type"] == "Forbidden", (origin, body)
        resp = await client.post("/api/v0/query", json=MISS, headers={"Origin": origin, **NO_TOKEN})
        assert resp.status == 403
    resp = await client.get("/api/v0/datasets", headers={"Origin": "http://evil.example"})
    assert resp.status == 200  # reading open data: no CORS header is sent, a page cannot read the answer anyway
    resp = await client.post("/api/v0/dag", json={"a": 1}, headers={"Origin": own})
    assert resp.status == 200, await resp.text()


# -- body caps -----------------------------------------------------------------------------------------------


async def _raw(client: TestClient[Any, Any], head: str) -> tuple[int, dict[str, Any]]:
    """Send only a request's head (its body never comes) and read the answer: a cap checked up front answers."""
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    try:
        writer.write(head.replace("\n", "\r\n").encode() + b"\r\n")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout=30)
        headers = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        length = int(next(h.split(b":")[1] for h in headers.split(b"\r\n") if h.lower().startswith(b"content-length")))
        body = await asyncio.wait_for(reader.readexactly(length), timeout=30)
        return int(status_line.split()[1]), json.loads(body)
    finally:
        writer.close()


async def test_bodies_over_their_cap_are_refused_before_reading(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    caps = {"api.max_json_bytes": 4096, "api.max_upload_bytes": 1 << 20}
    async with inprocess_node(tmp_path / "n", kubo_session, **caps) as (node, client):
        token = node.home.token()
        host = f"127.0.0.1:{client.server.port}"
        status, body = await _raw(
            client,
            f"POST /api/v0/query HTTP/1.1\nHost: {host}\nContent-Type: application/json\nContent-Length: {2 << 20}\n",
        )
        assert status == 413 and "api.max_json_bytes" in body["error"]["message"], body
        status, body = await _raw(
            client,
            f"POST /api/v0/datasets?name=big&filename=b.csv HTTP/1.1\nHost: {host}\nAuthorization: Bearer {token}\n"
            f"Content-Type: application/octet-stream\nContent-Length: {2 << 30}\n",
        )
        assert status == 413 and "api.max_upload_bytes" in body["error"]["message"], body
        assert list((node.home.path / "tmp").glob("upload-*")) == []  # nothing spooled
        # A JSON body that does not say its length is cut at the cap as it is read.

        async def chunks() -> Any:
            yield b'{"sql": "' + b"x" * 8192 + b'", "inputs": {}}'

        resp = await client.post("/api/v0/query", data=chunks(), headers={"Content-Type": "application/json"})
        assert resp.status == 413, await resp.text()
        ok = await client.post("/api/v0/query", json={"sql": "SELECT 1", "inputs": {}})
        assert ok.status == 400  # under the cap: read and judged (no input)


# -- bounded job table ---------------------------------------------------------------------------------------


async def test_query_jobs_beyond_max_jobs_get_429(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "n", kubo_session, **{"api.max_jobs": 2}) as (node, client):
        release = asyncio.Event()

        async def held(emit: Any) -> dict[str, Any]:
            await release.wait()
            return {}

        jobs = [node.jobs.start(held) for _ in range(2)]
        bad = {"sql": "SELECT nope(", "inputs": {"c": "cities"}, "wait": False}
        resp = await client.post("/api/v0/query", json=bad)
        body = await resp.json()
        assert resp.status == 429 and body["error"]["type"] == "TooManyJobs", body
        release.set()

        async def ended() -> bool:
            return all(j.done for j in jobs)

        await wait_for(ended, 30, "held jobs to end")
        resp = await client.post("/api/v0/query", json=bad)
        assert resp.status == 202, await resp.text()


async def test_finished_jobs_expire() -> None:
    jobs = Jobs(max_live=4, keep_seconds=0.05)

    async def quick(emit: Any) -> dict[str, Any]:
        return {"n": 1}

    first = jobs.start(quick)

    async def gone() -> bool:
        jobs.start(quick)  # expiry runs as jobs start
        try:
            jobs.get(first.id)
        except NotFound:
            return True
        return False

    await wait_for(gone, 10, "the finished job to expire")
    await jobs.close()


@pytest.mark.parametrize("n", [300])
async def test_finished_jobs_are_kept_within_max_kept(n: int) -> None:
    jobs = Jobs(max_live=1, keep_seconds=3600)

    async def quick(emit: Any) -> dict[str, Any]:
        return {}

    for _ in range(n):
        job = jobs.start(quick)

        async def done(job: Any = job) -> bool:
            return bool(job.done)

        await wait_for(done, 10, "a job to end")
    assert len(jobs) <= jobs.max_kept + 1
    await jobs.close()


async def test_an_index_hit_answers_without_the_token(inode: InNode) -> None:
    """Computed once with the token (real Spark), the same question is answered to anyone from the index; the
    oracle for the rows is the CSV itself read by pandas."""
    node, client = inode
    await add_csv(client, "cities", CSV)
    resp = await client.post("/api/v0/query", json=MISS)  # the fixture's client sends the token
    first = await resp.json()
    assert resp.status == 200 and first["source"] == "computed", first
    expected = pd.read_csv(io.BytesIO(CSV)).query("pop > 400000")["city"].tolist()
    for trust in (None, "self", "verify", "community"):
        body = {**MISS, **({"trust": trust} if trust else {})}
        resp = await client.post("/api/v0/query", json=body, headers=NO_TOKEN)
        got = await resp.json()
        assert resp.status == 200 and got["source"] == "local", (trust, got)
        assert got["execution"] == first["execution"] and sorted(r[0] for r in got["rows"]) == sorted(expected)
    computed = node.resolver.computed
    other = {"sql": "SELECT city FROM c WHERE pop < 400000", "inputs": {"c": "cities"}, "trust": "verify"}
    resp = await client.post("/api/v0/query", json=other, headers=NO_TOKEN)
    assert resp.status == 401 and node.resolver.computed == computed


async def test_an_unverified_row_is_served_only_to_askers_that_accept_it(
    inode: InNode, kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    """A peer's answer taken under ``trust: any`` is stored as the resolver stores it (label ``unverified``, source
    ``peer``): a ``community`` asker never gets it as ``local, verified``; without the token it is a miss that may
    not compute (401), with it the ``any`` asker gets it labelled ``unverified``."""
    a, a_client = inode
    await add_csv(a_client, "cities", CSV)
    resp = await a_client.post("/api/v0/query", json=MISS)
    assert resp.status == 200, await resp.text()
    computed = a.index.results.execution((await resp.json())["invocation"])
    assert computed is not None
    async with inprocess_node(tmp_path / "b", kubo_session) as (b, b_client):
        await add_csv(b_client, "cities", CSV)  # same bytes: same invocation
        b.index.results.add_execution(replace(computed, source="peer", trust="unverified"))
        resp = await b_client.post("/api/v0/query", json={**MISS, "trust": "community"}, headers=NO_TOKEN)
        assert resp.status == 401, await resp.text()
        resp = await b_client.post("/api/v0/query", json={**MISS, "trust": "any"})
        got = await resp.json()
        assert resp.status == 200 and (got["trust"], got["verified"]) == ("unverified", False), got
        assert got["execution"] == computed.execution and b.resolver.computed == 0
