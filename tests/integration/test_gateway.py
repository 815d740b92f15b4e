"""The trustless gateway at /ipfs/ (docs/gateway.md), on a real Kubo and a real node.

Two kinds of tests, over fixtures made here with the pinned Kubo's own CLI (a chunked file, a directory, a
HAMT-sharded directory, DAG-CBOR linking them, a CIDv0 file), imported into one Kubo whose gateway is configured as
the managed Kubo's is:
- the oracle: Kubo's own gateway (which passes the IPFS gateway-conformance suite) answers the same requests as the
  node's /ipfs/, and status, the headers that matter, raw bytes, and the CAR's roots and block order must be equal;
- one test per MUST and SHOULD of the spec's block and CAR responses (specs.ipfs.tech/http-gateways/
  trustless-gateway/, path-gateway/ for the headers it refers to), against the node alone.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import subprocess
import time
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import dag_cbor
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient
from multiformats import CID, multihash

from node.adapters.ipfs import CarVerifier, ManagedKubo, read_car
from node.adapters.ipfs.car import check_block
from node.core import Node
from node.domain.model import block_of, cid_str, parse_cid
from tests.fixtures.inprocess import add_csv, inprocess_node

pytestmark = pytest.mark.asyncio(loop_scope="module")

# As node.core configures the managed Kubo: what the oracle must share with the node's own gateway
GATEWAY_CONFIG = {"Datastore.HashOnRead": True, "Gateway.NoFetch": True, "Gateway.AllowCodecConversion": True}
RAW, CAR = "application/vnd.ipld.raw", "application/vnd.ipld.car"
# The response headers the spec names (Trustless Gateway "Response Headers", Path Gateway for the shared ones)
COMPARED = (
    "Content-Type",
    "Content-Length",
    "Content-Range",
    "Content-Disposition",
    "Content-Location",
    "Etag",
    "Cache-Control",
    "Last-Modified",
    "Location",
    "Accept-Ranges",
    "X-Ipfs-Path",
    "X-Ipfs-Roots",
    "X-Content-Type-Options",
    "Access-Control-Allow-Origin",
)


@dataclass(frozen=True)
class Fixtures:
    car: Path  # every fixture block, one CAR (root: the DAG-CBOR node linking the rest)
    file: str  # a 300 kB file in 1 KiB chunks: a two-level balanced DAG with raw leaves
    leaf: str  # one raw leaf of it
    dir: str  # dir/{big.bin, sub/hello.txt, with space.txt}
    hamt: str  # a HAMT-sharded directory of 60 files
    cbor: str  # DAG-CBOR: {"file": link, "dir": link, "nested": {"hamt": link}, "n": 1}
    v0: str  # a small file with a CIDv0


def _make_fixtures(binary: Path, base: Path) -> Fixtures:
    base.mkdir(parents=True)
    env = {**os.environ, "IPFS_PATH": str(base / "repo"), "IPFS_TELEMETRY": "off"}

    def ipfs(*args: str, stdin: str | None = None) -> str:
        out = subprocess.run([str(binary), *args], env=env, input=stdin, capture_output=True, text=True, check=False)
        assert out.returncode == 0, (args, out.stderr)
        return out.stdout.strip()

    ipfs("init", "--profile=test")  # no daemon: the CLI works on the repo itself, offline
    d = base / "dir"
    (d / "sub").mkdir(parents=True)
    (d / "big.bin").write_bytes(random.Random(19).randbytes(300_000))
    (d / "sub" / "hello.txt").write_text("hello from a subdirectory\n")
    (d / "with space.txt").write_text("a name with a space\n")
    add = ("add", "-Q", "--cid-version=1", "--chunker=size-1024")
    file = ipfs(*add, str(d / "big.bin"))
    leaf = ipfs("refs", file).splitlines()[0]
    directory = ipfs(*add, "-r", str(d))
    h = base / "hamt"
    h.mkdir()
    for i in range(60):
        (h / f"file-{i:02}.txt").write_text(f"entry {i}\n")
    ipfs("config", "Import.UnixFSHAMTDirectorySizeThreshold", "1KiB")  # a small directory sharded all the same
    hamt = ipfs(*add, "-r", str(h))
    v0 = ipfs("add", "-Q", "--cid-version=0", str(d / "sub" / "hello.txt"))
    node = {"file": {"/": file}, "dir": {"/": directory}, "nested": {"hamt": {"/": hamt}, "v0": {"/": v0}}, "n": 1}
    cbor = ipfs("dag", "put", stdin=json.dumps(node))
    car = base / "fixtures.car"
    with open(car, "wb") as f:
        subprocess.run([str(binary), "dag", "export", cbor], env=env, stdout=f, check=True)
    return Fixtures(car, file, leaf, directory, hamt, cbor, v0)


@dataclass
class Gateways:
    fx: Fixtures
    node: Node
    client: TestClient[Any, Any]  # the node's API
    kubo: ManagedKubo  # the oracle


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(kubo_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateways]:
    base = tmp_path_factory.mktemp("gateway")
    fx = _make_fixtures(kubo_binary, base / "fx")
    kubo = ManagedKubo(base / "kubo", kubo_binary, config=GATEWAY_CONFIG)
    await kubo.start()
    try:
        async with kubo.client() as k:
            await k.dag_import(fx.car)
        assert kubo.gateway_url is not None
        settings = {"ipfs.gateway": kubo.gateway_url}
        async with inprocess_node(base / "node", kubo, **settings) as (node, client):
            yield Gateways(fx, node, client, kubo)
    finally:
        await kubo.stop()


@dataclass
class Got:
    status: int
    headers: dict[str, str]
    body: bytes


async def _cairn(gw: Gateways, method: str, path: str, headers: dict[str, str] | None = None) -> Got:
    async with gw.client.request(method, path, headers=headers or {}, allow_redirects=False) as resp:
        return Got(resp.status, dict(resp.headers.items()), await resp.read())


async def _kubo(gw: Gateways, method: str, path: str, headers: dict[str, str] | None = None) -> Got:
    async with (
        aiohttp.ClientSession(trust_env=False) as http,
        http.request(method, f"{gw.kubo.gateway_url}{path}", headers=headers or {}, allow_redirects=False) as resp,
    ):
        return Got(resp.status, dict(resp.headers.items()), await resp.read())


def _blocks(car: bytes) -> tuple[list[str], list[tuple[str, bytes]]]:
    """Roots and blocks (in order) of a CAR, every block hash-checked; a partial DAG is fine (dag-scope)."""
    blocks: list[tuple[str, bytes]] = []
    v = CarVerifier(on_block=lambda c, b: blocks.append((cid_str(c, keep_v0=True), bytes(b))))
    v.feed(car)
    assert v.pending == 0, "the CAR ends inside a block"
    return [cid_str(r, keep_v0=True) for r in v.summary.roots], blocks


def _requests(fx: Fixtures) -> list[tuple[str, str, dict[str, str]]]:
    raw, car = {"Accept": RAW}, {"Accept": CAR}
    out: list[tuple[str, str, dict[str, str]]] = []
    for cid in (fx.file, fx.leaf, fx.dir, fx.hamt, fx.cbor, fx.v0):
        out += [("GET", f"/ipfs/{cid}?format=raw", {}), ("GET", f"/ipfs/{cid}", raw), ("GET", f"/ipfs/{cid}", car)]
        out += [("HEAD", f"/ipfs/{cid}?format=raw", {}), ("HEAD", f"/ipfs/{cid}?format=car", {})]
        out += [("GET", f"/ipfs/{cid}?format=car&dag-scope={s}", {}) for s in ("all", "entity", "block")]
    for rng in ("0:1023", "1000:5000", "299000:*", "-2048:*", "100:-100", "0:0"):
        out.append(("GET", f"/ipfs/{fx.file}?format=car&dag-scope=entity&entity-bytes={rng}", {}))
    for params in ("car-order=dfs", "car-order=unk", "car-dups=y", "car-dups=n", "car-version=1"):
        out.append(("GET", f"/ipfs/{fx.dir}?format=car&{params}", {}))
    for accept in ("version=1; order=dfs; dups=y", "version=1; order=unk; dups=n", "version=2", "order=foo"):
        out.append(("GET", f"/ipfs/{fx.dir}", {"Accept": f"{CAR}; {accept}"}))
    out += [
        ("GET", f"/ipfs/{fx.dir}?format=raw", car),  # ?format= wins over Accept
        ("GET", f"/ipfs/{fx.dir}/sub/hello.txt?format=raw", {}),
        ("GET", f"/ipfs/{fx.dir}/sub/hello.txt?format=car", {}),
        ("GET", f"/ipfs/{fx.dir}/with%20space.txt?format=raw", {}),
        ("GET", f"/ipfs/{fx.dir}/big.bin?format=car&dag-scope=entity&entity-bytes=0:2047", {}),
        ("GET", f"/ipfs/{fx.dir}/sub?format=car&dag-scope=entity", {}),
        ("GET", f"/ipfs/{fx.dir}/absent.txt?format=raw", {}),
        ("GET", f"/ipfs/{fx.hamt}/file-17.txt?format=raw", {}),
        ("GET", f"/ipfs/{fx.hamt}/file-17.txt?format=car&dag-scope=block", {}),
        ("GET", f"/ipfs/{fx.hamt}?format=car&dag-scope=entity", {}),
        ("GET", f"/ipfs/{fx.cbor}/file?format=raw", {}),
        ("GET", f"/ipfs/{fx.cbor}/nested/hamt/file-03.txt?format=car", {}),
        ("GET", f"/ipfs/{fx.cbor}/dir/sub/hello.txt?format=raw", {}),
        ("GET", f"/ipfs/{fx.cbor}", {"Accept": "application/json"}),
        ("GET", f"/ipfs/{fx.cbor}", {}),
        ("GET", f"/ipfs/{fx.file}", {}),  # a file's bytes (deserialized)
        ("GET", f"/ipfs/{fx.file}", {"Range": "bytes=1000-2999"}),
        ("GET", f"/ipfs/{fx.leaf}?format=raw", {"If-None-Match": f'"{fx.leaf}.raw"'}),
        ("GET", f"/ipfs/{fx.leaf}", {"Accept": "application/vnd.ipld.foo"}),
        ("GET", f"/ipfs/{fx.leaf}?format=foo", {}),
        ("GET", f"/ipfs/{fx.dir}?format=car&dag-scope=nope", {}),
        ("GET", f"/ipfs/{fx.dir}?format=car&entity-bytes=a:b", {}),
        ("GET", f"/ipfs/{fx.leaf}?format=raw", {"Cache-Control": "only-if-cached"}),
        ("GET", f"/ipfs/{cid_str(block_of(b'not cached 19', 'cbor').cid)}", {"Cache-Control": "only-if-cached"}),
        ("GET", f"/ipfs/{fx.file}", {"Range": "bytes=9999999-"}),
        ("GET", f"/ipfs/{fx.dir}/sub", {}),  # a directory without its trailing slash: Kubo's redirect
        ("GET", f"/ipfs/{cid_str(block_of(b'nobody has this block 19', 'cbor').cid)}?format=raw", {}),
        ("GET", "/ipfs/bafyinvalid?format=raw", {}),
    ]
    return out


async def test_the_node_answers_as_kubos_own_gateway(gw: Gateways) -> None:
    """Status, the spec's headers, raw bytes, and the CAR's roots and block order equal Kubo's, for every request."""
    checked = 0
    for method, path, headers in _requests(gw.fx):
        ours, theirs = await _cairn(gw, method, path, headers), await _kubo(gw, method, path, headers)
        what = (method, path, headers, theirs.status, theirs.body[:200])
        assert ours.status == theirs.status, (*what, ours.body[:300])
        if theirs.status >= 400:  # error bodies are free text (spec): ours is the node's one-line JSON error
            assert json.loads(ours.body)["error"]["message"], what
            continue
        for name in COMPARED:
            if name == "X-Content-Type-Options":  # the node says nosniff on every answer (a file's bytes too)
                assert ours.headers.get(name) == "nosniff", what
            elif name != "Content-Length" or name in theirs.headers:
                assert ours.headers.get(name) == theirs.headers.get(name), (*what, name)
        if theirs.headers.get("Content-Type", "").startswith(CAR) and method == "GET":
            assert _blocks(ours.body) == _blocks(theirs.body), what
        else:
            assert ours.body == theirs.body, what
        checked += 1
    assert checked > 60


# -- the spec, one test per MUST / SHOULD of the block and CAR responses -------------------------------------------


async def test_raw_block_is_the_block_and_hashes_to_its_cid(gw: Gateways) -> None:
    """Trustless: "a gateway MUST support … application/vnd.ipld.raw" and the answer is the block's bytes."""
    for cid in (gw.fx.leaf, gw.fx.file, gw.fx.cbor, gw.fx.v0):
        got = await _cairn(gw, "GET", f"/ipfs/{cid}?format=raw")
        assert got.status == 200 and got.headers["Content-Type"] == RAW
        check_block(parse_cid(cid), got.body)


async def test_car_is_verifiable_and_names_its_root(gw: Gateways) -> None:
    """Trustless: "MUST support … application/vnd.ipld.car"; CAR roots: the CID of the requested path."""
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}?format=car")
    assert got.status == 200 and got.headers["Content-Type"].startswith(f"{CAR}; version=1")
    roots, blocks = _blocks(got.body)
    assert roots == [gw.fx.dir] and blocks[0][0] == gw.fx.dir and len(blocks) == 300  # 4 + the file: 293 leaves, 1 root


async def test_format_wins_over_accept(gw: Gateways) -> None:
    """Path Gateway "format (request query parameter)": when both are present, ?format= takes precedence."""
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.leaf}?format=raw", {"Accept": CAR})
    assert got.status == 200 and got.headers["Content-Type"] == RAW


async def test_dag_scope_block_entity_all(gw: Gateways) -> None:
    """Trustless "dag-scope": block = only the path's last block; entity = the file's blocks; all = the whole DAG."""
    counts = {}
    for scope in ("block", "entity", "all"):
        got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}/sub?format=car&dag-scope={scope}")
        assert got.status == 200
        counts[scope] = len(_blocks(got.body)[1])
    assert counts["block"] == 2  # dir and sub: the blocks needed to resolve the path, and sub itself
    assert counts["entity"] == counts["block"]  # a plain directory is one block
    assert counts["all"] == 3  # and hello.txt


async def test_entity_bytes_sends_only_the_blocks_of_the_range(gw: Gateways) -> None:
    """Trustless "entity-bytes": only the blocks needed for the byte range, and it MUST be verifiable."""
    whole = len(_blocks((await _cairn(gw, "GET", f"/ipfs/{gw.fx.file}?format=car")).body)[1])
    part = await _cairn(gw, "GET", f"/ipfs/{gw.fx.file}?format=car&dag-scope=entity&entity-bytes=0:1023")
    assert part.status == 200 and 1 < len(_blocks(part.body)[1]) < whole


async def test_car_order_and_dups_are_in_the_content_type(gw: Gateways) -> None:
    """Trustless "Content-Type": the answer SHOULD name the order and dups it used."""
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}", {"Accept": f"{CAR}; version=1; order=dfs; dups=y"})
    assert got.status == 200 and "order=dfs" in got.headers["Content-Type"] and "dups=y" in got.headers["Content-Type"]


async def test_immutable_cache_headers_and_etag(gw: Gateways) -> None:
    """Path Gateway "Cache-Control" for /ipfs/: public, max-age=29030400, immutable; Etag for conditional GETs."""
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.leaf}?format=raw")
    assert got.headers["Cache-Control"] == "public, max-age=29030400, immutable"
    assert got.headers["Etag"] == f'"{gw.fx.leaf}.raw"'
    again = await _cairn(gw, "GET", f"/ipfs/{gw.fx.leaf}?format=raw", {"If-None-Match": got.headers["Etag"]})
    assert again.status == 304 and again.body == b""


async def test_ipfs_path_roots_nosniff_and_disposition(gw: Gateways) -> None:
    """X-Ipfs-Path, X-Ipfs-Roots (every CID along the path), X-Content-Type-Options: nosniff and a
    Content-Disposition: attachment for raw and CAR answers."""
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}/sub/hello.txt?format=raw")
    assert got.headers["X-Ipfs-Path"] == f"/ipfs/{gw.fx.dir}/sub/hello.txt"
    roots = got.headers["X-Ipfs-Roots"].split(",")
    assert roots[0] == gw.fx.dir and len(roots) == 3
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert got.headers["Content-Disposition"].startswith("attachment;")
    check_block(parse_cid(roots[-1]), got.body)  # the block at the end of the path


async def test_vary_and_content_location_when_accept_chose(gw: Gateways) -> None:
    """The format chosen by Accept: Content-Location names the URL with ?format= (Kubo), and the node adds
    Vary: Accept (Kubo's gateway sends none) so a shared cache never serves a CAR for a raw request."""
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}", {"Accept": f"{CAR}; version=1; dups=y"})
    assert got.status == 200 and got.headers["Vary"] == "Accept"
    assert got.headers["Content-Location"] == f"/ipfs/{gw.fx.dir}?car-dups=y&car-version=1&format=car"
    assert got.headers["Content-Type"] == f"{CAR}; version=1; order=dfs; dups=y"
    assert got.headers["Etag"].startswith(f'W/"{gw.fx.dir}.car.')  # weak: the same blocks may be sent differently


async def test_head_is_get_without_a_body(gw: Gateways) -> None:
    """HTTP: HEAD gives the headers GET would, and no body."""
    for query in ("format=raw", "format=car"):
        get = await _cairn(gw, "GET", f"/ipfs/{gw.fx.file}?{query}")
        head = await _cairn(gw, "HEAD", f"/ipfs/{gw.fx.file}?{query}")
        assert head.status == get.status == 200 and head.body == b""
        for name in ("Content-Type", "Etag", "X-Ipfs-Roots", "Cache-Control"):
            assert head.headers.get(name) == get.headers.get(name)


async def test_status_400_404(gw: Gateways) -> None:
    """Trustless/Path Gateway errors: 400 a bad CID or parameter (an unsupported car-version too, as Kubo answers),
    404 content the node does not hold (at once: it does not search the network)."""
    assert (await _cairn(gw, "GET", "/ipfs/not-a-cid?format=raw")).status == 400
    assert (await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}?format=car&dag-scope=nope")).status == 400
    # Each 404 says what is absent, from what the node holds: a search of the network would end at the RPC
    # timeout in a 504 instead.
    absent = cid_str(block_of(os.urandom(16), "cbor").cid)
    got = await _cairn(gw, "GET", f"/ipfs/{absent}?format=raw")
    error = json.loads(got.body)["error"]
    assert got.status == 404 and error["type"] == "NotFound", got
    assert error["message"].startswith(f"this node does not hold {absent}"), error  # asked offline
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}/absent.txt?format=raw")
    assert got.status == 404 and 'no link named "absent.txt"' in json.loads(got.body)["error"]["message"], got
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}", {"Accept": f"{CAR}; version=2"})  # Kubo: 400, not 406
    assert got.status == 400 and "only version=1" in json.loads(got.body)["error"]["message"]


async def test_a_browser_may_fetch_a_car(gw: Gateways) -> None:
    """A page of another origin may read a CAR (open data, GET): CORS lets it, and it verifies."""
    headers = {"Origin": "https://example.org", "Sec-Fetch-Mode": "cors", "Accept": CAR}
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.cbor}", headers)
    assert got.status == 200 and got.headers["Access-Control-Allow-Origin"] == "*"
    assert _blocks(got.body)[0] == [gw.fx.cbor]


async def test_a_foreign_host_is_still_refused(gw: Gateways) -> None:
    """node.faces.api.access: a Host that is not the node's (DNS rebinding) is 421 on /ipfs/ too."""
    got = await _cairn(gw, "GET", f"/ipfs/{gw.fx.leaf}?format=raw", {"Host": "evil.example:80"})
    assert got.status == 421


# -- a node with its own managed Kubo: the configuration, Cairn's kinds, and what a corrupt block gives ----------


def _block_file(repo: Path, cid: str) -> Path:
    """Where Kubo's flatfs keeps a block: blocks/<next-to-last two>/<base32 multihash>.data (repo default)."""
    key = base64.b32encode(bytes(parse_cid(cid).digest)).decode().rstrip("=")
    return repo / "blocks" / key[-3:-1] / f"{key}.data"


async def test_a_managed_node_serves_its_datasets_as_verifiable_cars(
    kubo_binary: Path, kubo_session: ManagedKubo, tmp_path: Path
) -> None:
    async with inprocess_node(tmp_path / "n", None, **{"ipfs.binary": str(kubo_binary)}) as (node, client):
        assert node.managed is not None and node.gateway.url == node.managed.gateway_url
        assert node.gateway.url is not None and node.gateway.url.startswith("http://127.0.0.1:")
        config = json.loads((node.managed.repo / "config").read_text())
        assert config["Gateway"]["NoFetch"] is True and config["Datastore"]["HashOnRead"] is True
        info = await add_csv(client, "sales", b"region,amount\nnorth,10\nsouth,7\n")
        head, piece = info["head"], info["slices"][0]["cid"]
        resp = await client.get(f"/ipfs/{head}?format=car")
        car = await resp.read()
        assert resp.status == 200 and resp.headers["X-Ipfs-Roots"] == head
        roots, blocks = read_car(car)  # every block hash-checked, the whole DAG there
        assert [cid_str(r) for r in roots] == [head] and piece in {cid_str(c) for c, _ in blocks}
        async with kubo_session.client() as plain:  # a plain Kubo takes it as it is
            assert [cid_str(r) for r in await plain.dag_import(car, pin_roots=False)] == [head]
        # a corrupt block on disk is never served: Kubo re-hashes what it reads (HashOnRead)
        path = _block_file(node.managed.repo, piece)
        assert path.is_file(), path
        path.write_bytes(b"not the block" + path.read_bytes()[13:])
        resp = await client.get(f"/ipfs/{piece}?format=raw")
        assert resp.status >= 500 and "different hash" in (await resp.json())["error"]["message"]
        resp = await client.get(f"/ipfs/{head}?format=car")
        _, served = _blocks(await resp.read()) if resp.status == 200 else ([], [])
        assert piece not in {c for c, _ in served}  # cut before it; whatever came is checked


async def test_a_managed_node_answers_404_for_what_it_does_not_hold(kubo_binary: Path, tmp_path: Path) -> None:
    """Kubo's gateway answers a CAR of a CID it lacks with 200 and a CAR of no block, cacheable for a year: the node
    answers 404 (412 for only-if-cached), and what it holds keeps the spec's headers (docs/gateway.md)."""
    async with inprocess_node(tmp_path / "n", None, **{"ipfs.binary": str(kubo_binary)}) as (node, client):
        assert node.managed is not None
        absent = cid_str(block_of(os.urandom(16), "cbor").cid)
        asked = [(f"/ipfs/{absent}?format=car", {}), (f"/ipfs/{absent}", {"Accept": CAR})]
        asked += [(f"/ipfs/{absent}/a/b?format=car", {}), (f"/ipfs/{absent}?format=raw", {})]
        for path, headers in asked:
            for method in ("GET", "HEAD"):
                async with client.request(method, path, headers=headers) as resp:
                    assert resp.status == 404 and "Cache-Control" not in resp.headers, (method, path, resp.headers)
                    if method == "GET":
                        assert (await resp.json())["error"]["type"] == "NotFound"
        resp = await client.get(f"/ipfs/{absent}?format=car", headers={"Cache-Control": "only-if-cached"})
        assert resp.status == 412
        info = await add_csv(client, "held", b"region,amount\nnorth,10\n")
        for fmt, kind in (("car", CAR), ("raw", RAW)):
            resp = await client.get(f"/ipfs/{info['head']}?format={fmt}")
            body, h = await resp.read(), resp.headers
            assert resp.status == 200 and h["Content-Type"].startswith(kind) and h["X-Ipfs-Roots"] == info["head"]
            assert h["Cache-Control"] == "public, max-age=29030400, immutable" and h["Etag"]
            assert h["Content-Disposition"].startswith("attachment;") and h["X-Content-Type-Options"] == "nosniff"
            assert sandboxed(dict(h))
            if fmt == "car":
                assert [cid_str(r) for r in read_car(body)[0]] == [info["head"]]
            else:
                check_block(parse_cid(info["head"]), body)


async def test_the_documented_curl_examples_run(gw: Gateways, tmp_path: Path) -> None:
    """Every `$ curl` line of docs/gateway.md, with $API this node and $HEAD, $SLICE, $DIR its content."""
    info = await add_csv(gw.client, "doc", b"region,amount\nnorth,10\nsouth,7\n")
    env = {
        **os.environ,
        "API": str(gw.client.make_url("")).rstrip("/"),
        "HEAD": info["head"],
        "SLICE": info["slices"][0]["cid"],
        "DIR": gw.fx.dir,
    }
    text = (Path(__file__).parents[2] / "docs" / "gateway.md").read_text()
    lines = re.findall(r"^\$ (curl .+?)(?:\s+#.*)?$", text, re.M)
    assert len(lines) >= 10, lines
    for line in lines:
        # not subprocess.run: the node answering curl runs on this loop
        proc = await asyncio.create_subprocess_exec("bash", "-c", line, env=env, cwd=tmp_path, stdout=PIPE, stderr=PIPE)
        stdout, stderr = await proc.communicate()
        assert proc.returncode == 0, (line, stderr)
        if "%{http_code}" in line:
            assert stdout.decode().strip() == "404", (line, stdout)
    assert (tmp_path / "hello.car").is_file() and read_car((tmp_path / "dataset.car").read_bytes())[0]
    check_block(parse_cid(info["head"]), (tmp_path / "head.block").read_bytes())


async def test_an_external_kubo_without_a_gateway_serves_blocks_and_whole_cars(gw: Gateways, tmp_path: Path) -> None:
    """ipfs.api set, ipfs.gateway empty: one block, a whole-DAG CAR, a file from the RPC API, hash-checked;
    501 GatewayUnavailable for what only a gateway gives (docs/gateway.md "With an external Kubo")."""
    async with inprocess_node(tmp_path / "n", gw.kubo) as (node, client):
        assert node.gateway.url is None
        resp = await client.get(f"/ipfs/{gw.fx.leaf}?format=raw", headers={"Accept": CAR})  # format wins
        assert resp.status == 200 and resp.headers["Content-Type"] == RAW
        check_block(parse_cid(gw.fx.leaf), await resp.read())
        resp = await client.get(f"/ipfs/{gw.fx.dir}", headers={"Accept": CAR})
        assert resp.status == 200 and resp.headers["Cache-Control"] == "public, max-age=29030400, immutable"
        roots, blocks = read_car(await resp.read())
        assert [cid_str(r) for r in roots] == [gw.fx.dir] and len(blocks) == 300
        head = await client.head(f"/ipfs/{gw.fx.leaf}?format=raw")
        assert head.status == 200 and await head.read() == b"" and head.headers["X-Ipfs-Roots"] == gw.fx.leaf
        for path in (f"{gw.fx.dir}/sub", f"{gw.fx.dir}?format=car&dag-scope=block", f"{gw.fx.file}?format=tar"):
            resp = await client.get(f"/ipfs/{path}")
            assert resp.status == 501 and (await resp.json())["error"]["type"] == "GatewayUnavailable", path
        assert (await client.get(f"/ipfs/{cid_str(block_of(b'absent 19', 'cbor').cid)}?format=raw")).status == 404


# -- bytes anyone put in Kubo, and paths that make Kubo work ------------------------------------------------------

# Pages that would read the web page's token (node/faces/api/web/api.js keeps it in the tab's sessionStorage)
HTML = b"<html><script>document.title='ran '+sessionStorage.getItem('cairn.api-token')</script></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>document.title="ran"</script></svg>'
IDLE = 0.25  # CPU seconds in one second: Kubo at rest uses next to none


def identity_cid(data: bytes) -> str:
    """A CID whose bytes are in the CID itself (nothing stored: every IPFS node "holds" it)."""
    return cid_str(CID("base32", 1, "raw", multihash.get("identity").wrap(data)))


def sandboxed(headers: dict[str, str]) -> bool:
    """The answer's policy sandboxes a document without scripts and without the node's origin."""
    policy = [d.split() for d in headers.get("Content-Security-Policy", "").split(";")]
    tokens = next((d[1:] for d in policy if d and d[0].lower() == "sandbox"), None)
    return tokens is not None and not {"allow-scripts", "allow-same-origin"} & {t.lower() for t in tokens}


async def test_files_anyone_added_never_run_on_the_nodes_origin(gw: Gateways) -> None:
    """HTML and SVG (with scripts) that Kubo serves inline come from the node as attachments, sandboxed, nosniff:
    a browser saves them and, shown anyway, they run no script and have an origin of their own."""
    async with gw.kubo.client() as k:
        svg = cid_str((await k.add(SVG, pin=False)).cid)
    html = identity_cid(HTML)
    paths = (f"/ipfs/{html}", f"/ipfs/{html}?filename=page.html", f"/ipfs/{html}?download=false", f"/ipfs/{svg}")
    for path in paths:
        theirs = await _kubo(gw, "GET", path)  # what a browser would show, and run, from Kubo's own gateway
        assert theirs.headers["Content-Type"] in ("text/html", "image/svg+xml"), path
        assert not theirs.headers.get("Content-Disposition", "inline").startswith("attachment"), path
        for method in ("GET", "HEAD"):
            ours = await _cairn(gw, method, path)
            assert ours.status == 200 and ours.headers["Content-Type"] == theirs.headers["Content-Type"], path
            assert ours.headers["Content-Disposition"].startswith("attachment"), (method, path, ours.headers)
            assert sandboxed(ours.headers) and ours.headers["X-Content-Type-Options"] == "nosniff", (method, path)
            assert ours.body == (theirs.body if method == "GET" else b"")  # the bytes as they are
    listing = await _cairn(gw, "GET", f"/ipfs/{gw.fx.dir}/")  # the page Kubo writes (names escaped): shown, sandboxed
    assert listing.status == 200 and listing.headers["Content-Type"] == "text/html" and sandboxed(listing.headers)
    assert "Content-Disposition" not in listing.headers and b"big.bin" in listing.body
    # and every other answer of the node: raw and CAR, a dataset's slice over /odf/, an error
    info = await add_csv(gw.client, "sandboxed", b"a,b\n<script>x</script>,1\n")
    others = [f"/ipfs/{gw.fx.leaf}?format=raw", f"/ipfs/{gw.fx.dir}?format=car", "/ipfs/not-a-cid"]
    others += [f"/odf/sandboxed/data/{info['slices'][0]['cid']}", f"/odf/sandboxed/blocks/{info['head']}"]
    for path in others:
        got = await _cairn(gw, "GET", path)
        assert sandboxed(got.headers) and got.headers["X-Content-Type-Options"] == "nosniff", (path, got.headers)


async def _chain(gw: Gateways, n: int) -> list[str]:
    """A DAG-CBOR chain of ``n`` blocks, each linking the one before as ``prev``: its CIDs, oldest first."""
    blocks, prev = [], None
    for i in range(n):
        blocks.append(block_of({"i": i, "prev": prev}))
        prev = blocks[-1].cid
    async with gw.kubo.client() as k:
        await k.block_put_many([b.data for b in blocks], codec="dag-cbor")
    return [cid_str(b.cid) for b in blocks]


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used: /proc/PID/stat fields 14 and 15."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _settles(pid: int, deadline: float = 30.0) -> list[float]:
    """The process's CPU seconds in each one-second window, until one is under IDLE or ``deadline`` passes."""
    windows: list[float] = []
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        before = _cpu(pid)
        await asyncio.sleep(1.0)
        windows.append(round(_cpu(pid) - before, 2))
        if windows[-1] < IDLE:
            break
    return windows


async def test_a_deep_path_is_refused_before_kubo_works_on_it(gw: Gateways) -> None:
    """/ipfs/<tip>/prev/…: Kubo's gateway time grows with the square of the depth and goes on when the client has
    gone (1,000 segments: about 18 s of CPU each). Six such requests are refused (400) without Kubo doing anything:
    Kubo is at rest right after; a path as deep as api.gateway_max_path_segments is served, and Kubo rests again."""
    most = gw.node.settings.api.gateway_max_path_segments
    chain = await _chain(gw, 1100)
    tip = chain[-1]
    deep = f"/ipfs/{tip}" + "/prev" * 1000 + "?format=raw"
    answers = await asyncio.gather(*(_cairn(gw, "GET", deep) for _ in range(6)))
    pid = gw.kubo.pid
    assert pid is not None
    windows = await _settles(pid)
    assert windows[-1] < IDLE, f"Kubo still busy after the deep paths: CPU s per second {windows}"
    for got in answers:
        assert got.status == 400, (got.status, got.body[:300])
        assert "api.gateway_max_path_segments" in json.loads(got.body)["error"]["message"]
    at = await _cairn(gw, "GET", f"/ipfs/{tip}" + "/prev" * most + "?format=raw")
    assert at.status == 200 and at.headers["X-Ipfs-Roots"].split(",")[-1] == chain[-1 - most]
    check_block(parse_cid(chain[-1 - most]), at.body)
    windows = await _settles(pid)
    assert windows[-1] < IDLE, f"Kubo still busy after a path at the bound: {windows}"


async def test_a_path_of_long_cids_is_served_not_a_500(gw: Gateways) -> None:
    """X-Ipfs-Roots names every CID along the path: 64 segments through identity CIDs of 126 bytes make it 8.7 KB,
    over aiohttp's 8 KiB default, which made the node's relay fail (500). It is read, and the block served."""
    blocks, prev = [], None
    for _ in range(33):  # each block links an identity CID whose inline map links the block before
        inner = dag_cbor.encode({"n": prev, "pad": "x" * 76} if prev else {"pad": "x" * 76})
        blocks.append(block_of({"next": CID("base32", 1, "dag-cbor", multihash.get("identity").wrap(inner))}))
        prev = blocks[-1].cid
    async with gw.kubo.client() as k:
        await k.block_put_many([b.data for b in blocks], codec="dag-cbor")
    url = gw.client.make_url(f"/ipfs/{cid_str(blocks[-1].cid)}" + "/next/n" * 32 + "?format=raw")
    async with (  # as a browser or curl reads it: aiohttp's own client stops at 8 KiB too
        aiohttp.ClientSession(trust_env=False, max_line_size=1 << 16, max_field_size=1 << 16) as http,
        http.get(url) as resp,
    ):
        body = await resp.read()
        assert resp.status == 200, body[:300]
        assert len(resp.headers["X-Ipfs-Roots"]) > 8192
        check_block(blocks[0].cid, body)
