"""Token holders and peers must not reach too far: what ``path=`` may read and what a pull source can do.

Real nodes (in-process, the session's real Kubo; a `cairn node start` process where the process is the subject)
and real aiohttp servers on 127.0.0.1 acting as hostile pull sources. docs/api.md "Ingesting a local file" and
"Pulling from a peer" state the rules these tests show.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, cli, inprocess_node, wait_for
from tests.fixtures.nodes import NodeProcess

CSV = b"id,city,pop,share\n1,Paris,2100000,0.5\n2,Lyon,520000,0.25\n3,Nantes,320000,\n"
MARKER = "HOSTILE-MARKER-7f3a"  # a hostile source's bytes: never to be seen in an error


async def _refused(resp: Any, status: int, *not_in: str) -> str:
    """The one-line error of ``resp``, which must have ``status`` and hold none of ``not_in``."""
    body = await resp.json()
    assert resp.status == status, body
    message = str(body["error"]["message"])
    assert message and "\n" not in message, message
    for secret in not_in:
        assert secret not in message, message
    return message


async def _names(client: TestClient[Any, Any]) -> list[str]:
    resp = await client.get("/api/v0/datasets")
    return sorted(d["name"] for d in (await resp.json())["datasets"])


async def _rows(client: TestClient[Any, Any], name: str) -> pd.DataFrame:
    resp = await client.get(f"/api/v0/datasets/{name}/data", params={"format": "csv"})
    assert resp.status == 200, await resp.text()
    return pd.read_csv(io.BytesIO(await resp.read()))


def _same(got: pd.DataFrame, path: Path) -> None:
    """The node's rows equal pandas reading the same file (the independent engine)."""
    want = pd.read_csv(path)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False)


# -- path= ------------------------------------------------------------------------------------------------


@pytest.fixture
async def confined(inode: InNode, tmp_path: Path) -> tuple[InNode, Path]:
    """A node whose ``api.ingest_dirs`` holds ``tmp_path`` (the in-process fixture's default: the system's temporary
    directory), which also holds the node's home: the home must stay out of reach even so."""
    assert inode[0].home.path.parent == tmp_path
    return inode, tmp_path  # pytest's temporary directories are resolved already


async def _add_path(client: TestClient[Any, Any], path: str, name: str = "x") -> Any:
    return await client.post("/api/v0/datasets", params={"name": name, "path": path})


@pytest.mark.parametrize("secret", ["node.key", "api.token", "config.toml", "index.sqlite"])
async def test_path_never_reads_the_nodes_home(confined: tuple[InNode, Path], secret: str) -> None:
    (node, client), _ = confined
    target = node.home.path / secret
    assert target.is_file()
    before = await _names(client)
    token = node.home.token()
    message = await _refused(await _add_path(client, str(target)), 403, token)
    assert "home" in message, message
    assert await _names(client) == before


async def test_a_symlink_into_the_home_is_refused(confined: tuple[InNode, Path]) -> None:
    (node, client), allowed = confined
    for secret, link in (("node.key", "key.csv"), ("api.token", "token.csv")):
        (allowed / link).symlink_to(node.home.path / secret)
        await _refused(await _add_path(client, str(allowed / link)), 403, node.home.token())
    # A link to the home's directory itself, then a file through it.
    (allowed / "home-link").symlink_to(node.home.path)
    await _refused(await _add_path(client, str(allowed / "home-link" / "api.token")), 403, node.home.token())
    assert await _names(client) == []


async def test_a_hard_link_into_the_home_is_refused(confined: tuple[InNode, Path]) -> None:
    (node, client), allowed = confined
    os.link(node.home.path / "api.token", allowed / "token.csv")
    message = await _refused(await _add_path(client, str(allowed / "token.csv")), 403, node.home.token())
    assert "hard link" in message, message


async def test_dotdot_traversal_out_of_the_allowed_dirs_is_refused(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "data.csv").write_bytes(CSV)
    (allowed / "data.csv").write_bytes(CSV)
    async with inprocess_node(tmp_path / "node", kubo_session, **{"api.ingest_dirs": [str(allowed)]}) as (node, c):
        for path in (
            f"{allowed}/../outside/data.csv",
            f"{allowed}/../node/api.token",
            f"{allowed}/./../../{tmp_path.name}/outside/data.csv",
            f"{allowed}/../allowed-not/data.csv",  # a sibling whose name starts like the allowed one
        ):
            message = await _refused(await _add_path(c, path), 403, node.home.token())
            assert "api.ingest_dirs" in message or "home" in message, message
        # ".." that stays inside is fine: resolved first, then checked.
        resp = await _add_path(c, f"{allowed}/sub/../data.csv", "inside")
        assert resp.status == 201, await resp.text()
        assert await _names(c) == ["inside"]


async def test_a_file_outside_the_allowed_dirs_is_refused_without_touching_it(
    kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    (other / "data.csv").write_bytes(CSV)
    async with inprocess_node(tmp_path / "node", kubo_session, **{"api.ingest_dirs": [str(allowed)]}) as (_, c):
        existing = await _refused(await _add_path(c, str(other / "data.csv")), 403)
        absent = await _refused(await _add_path(c, str(other / "absent.csv")), 403)
        # The same answer whether the file exists or not: no oracle for what lies outside.
        assert existing.replace("data.csv", "") == absent.replace("absent.csv", ""), (existing, absent)
        assert "api.ingest_dirs" in existing


async def test_path_is_off_without_ingest_dirs(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_bytes(CSV)
    async with inprocess_node(tmp_path / "node", kubo_session, **{"api.ingest_dirs": []}) as (_, c):
        message = await _refused(await _add_path(c, str(data)), 403)
        assert "api.ingest_dirs" in message, message
        assert await _names(c) == []


async def test_only_regular_files_are_ingested_in_place(confined: tuple[InNode, Path]) -> None:
    (_, client), allowed = confined
    os.mkfifo(allowed / "pipe.csv")  # a FIFO nobody writes: opening it must not hang the node
    (allowed / "dir.csv").mkdir()
    for name in ("pipe.csv", "dir.csv"):
        message = await _refused(await _add_path(client, str(allowed / name)), 403)
        assert "regular file" in message, message
    await _refused(await _add_path(client, "relative/data.csv"), 400)
    assert (await client.get("/healthz")).status == 200


async def test_an_allowed_file_ingests_in_place_and_matches_pandas(confined: tuple[InNode, Path]) -> None:
    (_, client), allowed = confined
    data = allowed / "cities.csv"
    data.write_bytes(
        CSV + b"".join(b"%d,Town%d,%d,%s\n" % (i, i, i * 1000, b"0.1" if i % 2 else b"") for i in range(4, 60))
    )
    (allowed / "link.csv").symlink_to(data)  # a link that stays inside the allowed directory is followed
    resp = await _add_path(client, str(allowed / "link.csv"), "cities")
    assert resp.status == 201, await resp.text()
    _same(await _rows(client, "cities"), data)


async def test_cli_add_of_a_local_file_works_with_and_without_ingest_dirs(
    kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    data = tmp_path / "data" / "cities.csv"
    data.parent.mkdir()
    data.write_bytes(CSV)
    for dirs in ([], [str(data.parent)]):  # not allowed: the CLI uploads; allowed: the node reads it in place
        async with inprocess_node(tmp_path / f"node{len(dirs)}", kubo_session, **{"api.ingest_dirs": dirs}) as n:
            rc, out, err = await cli(n[0], "add", str(data), "--name", "cities", "--json")
            assert rc == 0, err.decode()
            assert json.loads(out)["rows_added"] == 3
            _same(await _rows(n[1], "cities"), data)
            assert not list((n[0].home.path / "tmp").glob("upload-*"))  # no spool file left either way


# -- pull from hostile sources ----------------------------------------------------------------------------


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _serve(handler: Handler) -> TestServer:
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


def _url(server: TestServer, path: str = "") -> str:
    return str(server.make_url(path))


async def _pull(client: TestClient[Any, Any], source: str, **body: Any) -> Any:
    return await client.post("/api/v0/pull", json={"source": source, **body})


async def test_a_redirect_to_another_origin_is_refused(inode: InNode) -> None:
    _, client = inode
    hits: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="bafkqaaa")

    other = await _serve(elsewhere)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(_url(other, request.path))  # same host, another port

    source = await _serve(redirect)
    try:
        message = await _refused(await _pull(client, _url(source, "/odf/x")), 502)
        assert "another origin" in message, message
        assert hits == []  # the other origin was never asked
    finally:
        await source.close()
        await other.close()


async def test_a_same_origin_redirect_is_followed_and_the_pull_checks_out(
    kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    src_data = tmp_path / "cities.csv"
    src_data.write_bytes(CSV)
    async with (
        inprocess_node(tmp_path / "a", kubo_session) as (_, ca),
        inprocess_node(tmp_path / "b", kubo_session) as (_, cb),
    ):
        resp = await ca.post("/api/v0/datasets", params={"name": "shared", "path": str(src_data)})
        assert resp.status == 201, await resp.text()

        async def relay(request: web.Request) -> web.StreamResponse:
            if request.path.startswith("/moved/"):  # every answer moved, within the same origin
                raise web.HTTPTemporaryRedirect("/odf/" + request.path.removeprefix("/moved/"))
            answer = await ca.get(request.path)
            return web.Response(body=await answer.read(), status=answer.status)

        server = await _serve(relay)
        try:
            resp = await _pull(cb, _url(server, "/moved/shared"), name="copy")
            assert resp.status == 200, await resp.text()
        finally:
            await server.close()
        pd.testing.assert_frame_equal(await _rows(cb, "copy"), await _rows(ca, "shared"))
        _same(await _rows(cb, "copy"), src_data)


async def test_a_source_answering_garbage_is_never_echoed(inode: InNode) -> None:
    _, client = inode
    noise = (MARKER + " <html>" + "\x00\x1b[31m" + MARKER).encode() + os.urandom(64)

    async def garbage(request: web.Request) -> web.Response:
        status = 500 if "/fail/" in request.path else 200
        return web.Response(body=noise, status=status, headers={"X-Why": MARKER}, reason=f"Bad {MARKER}")

    server = await _serve(garbage)
    try:
        for path in ("/fail/x", "/odf/x"):  # an error status first: its body was once echoed
            message = await _refused(await _pull(client, _url(server, path)), 502, MARKER, "<html>")
            assert "not a CID" in message or "HTTP 500" in message, message
    finally:
        await server.close()
    assert await _names(client) == []


async def test_a_source_sending_more_than_its_cap_is_cut_off(inode: InNode) -> None:
    _, client = inode
    sent = [0]

    async def flood(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # no Content-Length: the cap must hold while reading
        await resp.prepare(request)
        chunk = b"b" * (64 << 10)
        try:
            for _ in range(10_000):  # 640 MiB if nobody stopped reading
                await resp.write(chunk)
                sent[0] += len(chunk)
        except (ConnectionError, RuntimeError):
            pass  # the puller hung up: what this test wants
        return resp

    server = await _serve(flood)
    try:
        message = await _refused(await _pull(client, _url(server, "/odf/x")), 502)
        assert "more than 4096 bytes" in message, message
    finally:
        await server.close()
    assert sent[0] < 64 << 20, sent  # it stopped reading long before the flood ended


async def test_a_slice_longer_than_its_block_claims_is_cut_off(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A relay in front of a real node pads every slice answer (streamed, no Content-Length): the pull stops
    reading at the size the AddData block claims, and nothing is kept."""
    src_data = tmp_path / "cities.csv"
    src_data.write_bytes(CSV)
    padded: list[int] = []
    async with (
        inprocess_node(tmp_path / "a", kubo_session) as (_, ca),
        inprocess_node(tmp_path / "b", kubo_session) as (nb, cb),
    ):
        resp = await ca.post("/api/v0/datasets", params={"name": "shared", "path": str(src_data)})
        assert resp.status == 201, await resp.text()

        async def pad(request: web.Request) -> web.StreamResponse:
            body = await (await ca.get(request.path)).read()
            out = web.StreamResponse()
            await out.prepare(request)
            await out.write(body)
            if "/data/" in request.path:
                padded.append(len(body))
                try:
                    for _ in range(1000):  # up to 64 MiB more than the slice
                        await out.write(b"\0" * (64 << 10))
                except (ConnectionError, RuntimeError):
                    pass  # the puller hung up
            return out

        server = await _serve(pad)
        try:
            message = await _refused(await _pull(cb, _url(server, "/odf/shared"), name="copy"), 502)
        finally:
            await server.close()
        assert padded and f"sent more than {padded[0]} bytes" in message, message
        assert await _names(cb) == []
        assert not list((nb.home.path / "tmp").glob("pull-*"))


def _drip(started: asyncio.Event) -> Handler:
    """A source that answers one byte every half second, for ever (each read well within datasets.pull_timeout)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        started.set()
        try:
            for _ in range(100_000):
                await resp.write(b"b")
                await asyncio.sleep(0.5)
        except (ConnectionError, RuntimeError):
            pass  # the puller hung up
        return resp

    return handler


async def test_a_slow_drip_source_ends_at_the_pull_deadline(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    started = asyncio.Event()
    server = await _serve(_drip(started))
    settings = {"datasets.pull_deadline": 2.0, "datasets.pull_timeout": 60.0}
    try:
        async with inprocess_node(tmp_path / "node", kubo_session, **settings) as (node, client):
            # Generous bound: only "it ended", with the deadline's 504 (without it, it would drip for 14 hours).
            resp = await asyncio.wait_for(_pull(client, _url(server, "/odf/x")), timeout=120)
            message = await _refused(resp, 504)
            assert "datasets.pull_deadline" in message, message
            assert started.is_set()
            assert not list((node.home.path / "tmp").glob("pull-*"))  # its work directory is gone
    finally:
        await server.close()


async def test_a_stopping_node_ends_a_slow_pull_at_once(tmp_path: Path, kubo_session: ManagedKubo) -> None:
    """`cairn node start` gets SIGTERM while a pull drips: the pull answers 503 and the process exits, well before
    aiohttp's 60 s grace for open requests (which it used to wait out) or the pull's own deadline."""
    started = asyncio.Event()
    server = await _serve(_drip(started))
    proc = NodeProcess(tmp_path / "node")
    proc.start(
        env={
            "CAIRN_IPFS_API": kubo_session.api_url,
            "CAIRN_IPFS_API_AUTH": kubo_session.auth,
            "CAIRN_PEERS_ENABLED": "false",
        }
    )
    token = (proc.home / "api.token").read_text().strip()
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            pulling = asyncio.ensure_future(
                http.post(f"{proc.api}/api/v0/pull", json={"source": _url(server, "/odf/x")})
            )
            await asyncio.wait_for(started.wait(), timeout=60)
            assert proc.proc is not None
            proc.proc.send_signal(signal.SIGTERM)
            resp = await asyncio.wait_for(pulling, timeout=60)
            message = await _refused(resp, 503)
            assert "stopping" in message, message
            # Generous: the old code waited out aiohttp's 60 s grace before it even began to stop.
            await wait_for(lambda: _exited(proc), timeout=40, what="the node to exit")
    finally:
        proc.stop()
        await server.close()
    assert not list((proc.home / "tmp").glob("pull-*"))


async def _exited(proc: NodeProcess) -> bool:
    return proc.proc is not None and proc.proc.poll() is not None
