"""Datasets end to end on two in-process nodes (each its own Kubo), driven over HTTP and by the `cairn` CLI:
ingest, chains, merges, reads, pull, tamper."""

from __future__ import annotations

import base64
import csv
import gzip
import io
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import pytest_asyncio
from aiohttp import web

from node.adapters.ipfs import ManagedKubo
from node.domain.model import cid_str, parse_cid
from tests.fixtures.inprocess import Served, inprocess_node

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the two nodes live for the module

CSV = b"id,city,pop\n1,Paris,2100000\n2,Lyon,520000\n3,Nice,340000\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nodes(
    kubo_session: ManagedKubo, kubo_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Served, Served]]:
    base = tmp_path_factory.mktemp("ds")
    # B has a Kubo of its own: it must fetch what A holds (over HTTP or bitswap), never find it already there.
    kubo_b = ManagedKubo(base / "kubo-b", kubo_binary, log_path=base / "kubo-b.log")
    await kubo_b.start()
    try:
        async with inprocess_node(base / "a", kubo_session) as a, inprocess_node(base / "b", kubo_b) as b:
            yield Served(*a), Served(*b)
    finally:
        await kubo_b.stop()


async def add(node: Served, path: Path, *args: str, ok: bool = True) -> Any:
    r = await node.cli("add", str(path), "--json", *args)
    if ok:
        assert r.returncode == 0, r.stderr.decode()
        return json.loads(r.stdout)
    assert r.returncode != 0
    return r.stderr.decode().strip()


async def info(node: Served, ref: str) -> dict[str, Any]:
    status, body = await node.get(f"/api/v0/datasets/{quote(ref, safe='')}")
    assert status == 200, body
    return body


async def rows(node: Served, ref: str) -> list[dict[str, Any]]:
    r = await node.cli("get", ref, "--format", "jsonl")
    assert r.returncode == 0, r.stderr.decode()
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def write(tmp: Path, name: str, data: bytes) -> Path:
    p = tmp / name
    p.write_bytes(data)
    return p


async def test_csv_jsonl_parquet_ingest_and_same_logical_hash(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    table = pacsv.read_csv(io.BytesIO(CSV))
    jsonl = b"".join(json.dumps(r).encode() + b"\n" for r in table.to_pylist())
    pq_path = tmp_path / "cities.parquet"
    pq.write_table(table, pq_path, compression="snappy", row_group_size=1)  # another encoding entirely
    outs = {
        "csv": await add(a, write(tmp_path, "cities.csv", CSV), "--name", "c-csv", "--upload"),  # through HTTP
        "gz": await add(a, write(tmp_path, "cities.csv.gz", gzip.compress(CSV)), "--name", "c-gz"),
        "jsonl": await add(a, write(tmp_path, "cities.jsonl", jsonl), "--name", "c-jsonl"),
        "parquet": await add(a, pq_path, "--name", "c-parquet"),
    }
    assert all(o["rows_added"] == 3 for o in outs.values())
    infos = {k: await info(a, o["name"]) for k, o in outs.items()}
    assert len({i["logicalHash"] for i in infos.values()}) == 1
    assert len({i["structure"] for i in infos.values()}) == 1
    assert len({i["slices"][0]["cid"] for i in infos.values()}) == 1  # same rows → same slice bytes
    assert len({i["id"] for i in infos.values()}) == 4  # but four datasets, four keys
    assert await rows(a, "c-parquet") == table.to_pylist()
    listed = {d["name"] for d in (await a.get("/api/v0/datasets"))[1]["datasets"]}
    assert {"c-csv", "c-gz", "c-jsonl", "c-parquet"} <= listed


async def test_two_nodes_same_file_same_cids(nodes: Any, tmp_path: Path) -> None:
    a, b = nodes
    p = write(tmp_path, "same.csv", CSV + b"4,Lille,230000\n")
    ia, ib = (
        await info(a, (await add(a, p, "--name", "same"))["name"]),
        await info(b, (await add(b, p, "--name", "same"))["name"]),
    )
    assert [s["cid"] for s in ia["slices"]] == [s["cid"] for s in ib["slices"]]
    assert (ia["structure"], ia["abstractStructure"]) == (ib["structure"], ib["abstractStructure"])
    assert ia["logicalHash"] == ib["logicalHash"] and ia["id"] != ib["id"]


async def test_append_chain_and_frozen_versions(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    first = await add(a, write(tmp_path, "v1.csv", CSV), "--name", "grow", "--title", "Cities")
    second = await add(a, write(tmp_path, "v2.csv", b"id,city,pop\n4,Lille,230000\n"), "--to", "grow")
    assert second["previous"] == first["head"] and second["rows_added"] == 1
    log = json.loads((await a.cli("log", "grow", "--json")).stdout)
    kinds = [b["event"]["kind"] for b in log]
    assert kinds == ["AddData", "SetInfo", "AddData", "SetDataSchema", "Seed"]  # newest first
    assert [b["seq"] for b in log] == [4, 3, 2, 1, 0]
    assert log[0]["event"]["offsets"] == [3, 3] and log[2]["event"]["offsets"] == [0, 2]
    # A block CID is a frozen version: it still reads as it was.
    assert len(await rows(a, first["head"])) == 3
    assert len(await rows(a, "grow")) == 4
    assert (await info(a, "grow"))["info"]["title"] == "Cities"
    assert await rows(a, (await info(a, "grow"))["id"]) == await rows(a, "grow")  # by dataset id


async def test_an_appended_versions_hash_resumes_from_the_older_ones(nodes: Any, tmp_path: Path) -> None:
    """A version that only appends to one whose hash is known is hashed over the new slices,
    resuming the older version's hasher; its logical hash is the one of all its rows hashed from the first (the
    oracle: node b ingests the same rows as one file)."""
    a, b = nodes
    more = [b"id,city,pop\n4,Lille,230000\n5,Metz,120000\n", b"id,city,pop\n6,Brest,140000\n"]
    heads = [(await add(a, write(tmp_path, "r0.csv", CSV), "--name", "resume"))["head"]]
    for i, data in enumerate(more, 1):
        heads.append((await add(a, write(tmp_path, f"r{i}.csv", data), "--to", "resume"))["head"])
    whole = CSV + b"".join(m.split(b"\n", 1)[1] for m in more)
    oracle = await info(b, (await add(b, write(tmp_path, "whole.csv", whole), "--name", "resume-whole"))["name"])
    got = await info(a, heads[-1])
    assert (got["logicalHash"], got["rows"]) == (oracle["logicalHash"], oracle["rows"]) == (got["logicalHash"], 6)
    assert set(heads) <= set(a.node.datasets.hashes._hashers)  # each version's hasher kept for the next to resume


async def test_added_column_allowed_other_schema_changes_refused(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    head = (await add(a, write(tmp_path, "s1.csv", CSV), "--name", "evolve"))["head"]
    err = await add(a, write(tmp_path, "s2.csv", b"id,city\n9,Metz\n"), "--to", "evolve", ok=False)
    assert "column 'pop' is missing" in err
    err = await add(a, write(tmp_path, "s3.csv", b"id,city,pop\n9,Metz,many\n"), "--to", "evolve", ok=False)
    assert "column 'pop' would change type" in err
    assert (await info(a, "evolve"))["head"] == head
    out = await add(a, write(tmp_path, "s4.csv", b"id,city,pop,region\n9,Metz,120000,GE\n"), "--to", "evolve")
    assert out["schema_changed"] is True
    got = await rows(a, "evolve")
    assert got[0]["region"] is None and got[-1]["region"] == "GE"


async def test_malformed_csv_names_the_line_and_keeps_head(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    head = (await add(a, write(tmp_path, "ok.csv", CSV), "--name", "strict"))["head"]
    bad = write(tmp_path, "bad.csv", b"id,city,pop\n5,Brest,140000\n6,Caen\n7,Tours,130000\n")
    err = await add(a, bad, "--to", "strict", ok=False)
    assert err.startswith("error: ") and "line 3" in err, err
    assert (await info(a, "strict"))["head"] == head


async def test_ledger_skips_seen_rows(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    await add(a, write(tmp_path, "l1.csv", CSV), "--name", "ledger", "--merge", "ledger", "--primary-key", "id")
    out = await add(
        a,
        write(tmp_path, "l2.csv", b"id,city,pop\n3,Nice,1\n4,Lille,230000\n4,Lille,2\n"),
        "--to",
        "ledger",
        "--merge",
        "ledger",
        "--primary-key",
        "id",
    )
    assert (out["rows_read"], out["rows_added"]) == (3, 1)
    assert [r["id"] for r in await rows(a, "ledger")] == [1, 2, 3, 4]
    log = json.loads((await a.cli("log", "ledger", "--json")).stdout)
    assert log[0]["event"]["merge"] == {"strategy": "ledger", "primaryKey": ["id"]}


async def test_snapshot_records_changes_with_odf_op_codes(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    await add(a, write(tmp_path, "n1.csv", CSV), "--name", "snap", "--merge", "snapshot", "--primary-key", "id")
    # Lyon corrected, Nice gone, Lille new, Paris unchanged.
    out = await add(
        a,
        write(tmp_path, "n2.csv", b"id,city,pop\n1,Paris,2100000\n2,Lyon,530000\n4,Lille,230000\n"),
        "--to",
        "snap",
        "--merge",
        "snapshot",
        "--primary-key",
        "id",
    )
    assert out["rows_added"] == 4
    got = await rows(a, "snap")
    assert [(r["op"], r["id"]) for r in got[:3]] == [(0, 1), (0, 2), (0, 3)]
    assert [(r["op"], r["id"], r["pop"]) for r in got[3:]] == [
        (2, 2, 520000),
        (3, 2, 530000),
        (0, 4, 230000),
        (1, 3, 340000),
    ]


async def test_merge_needs_a_primary_key(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    err = await add(a, write(tmp_path, "k.csv", CSV), "--name", "nokey", "--merge", "ledger", ok=False)
    assert "primary key" in err
    assert (await a.get("/api/v0/datasets/nokey"))[0] == 404


async def test_pull_verifies_and_serves_same_bytes(nodes: Any, tmp_path: Path) -> None:
    a, b = nodes
    await add(a, write(tmp_path, "p1.csv", CSV), "--name", "shared")
    await add(a, write(tmp_path, "p2.csv", b"id,city,pop\n4,Lille,230000\n"), "--to", "shared")
    r = await b.cli("pull", f"{a.api}/odf/shared", "--json")
    assert r.returncode == 0, r.stderr.decode()
    out = json.loads(r.stdout)
    assert out["name"] == "shared" and out["slices"] == 2
    ia, ib = await info(a, "shared"), await info(b, "shared")
    assert ia["head"] == ib["head"] and ia["logicalHash"] == ib["logicalHash"]
    assert await rows(a, "shared") == await rows(b, "shared")
    # Pulling again after A appends fast-forwards.
    await add(a, write(tmp_path, "p3.csv", b"id,city,pop\n5,Brest,140000\n"), "--to", "shared")
    assert (await b.cli("pull", f"{a.api}/odf/shared")).returncode == 0
    assert (await info(b, "shared"))["head"] == (await info(a, "shared"))["head"]


async def test_gateway_serves_verified_raw_and_car(nodes: Any, tmp_path: Path) -> None:
    from node.adapters.ipfs.car import read_car
    from node.domain.model import cid_for, cid_str

    a, _ = nodes
    await add(a, write(tmp_path, "g.csv", CSV), "--name", "gw")
    i = await info(a, "gw")
    head = i["head"]
    raw = await (await a.client.get(f"/ipfs/{head}", headers={"Accept": "application/vnd.ipld.raw"})).read()
    assert cid_str(cid_for(raw, "dag-cbor")) == head
    car = await (await a.client.get(f"/ipfs/{head}", headers={"Accept": "application/vnd.ipld.car"})).read()
    roots, blocks = read_car(car)
    cids = {cid_str(c) for c, _ in blocks}
    assert cid_str(roots[0]) == head and i["slices"][0]["cid"] in cids and i["structure"] in cids
    data = await (await a.client.get(f"/ipfs/{i['slices'][0]['cid']}")).read()
    assert pq.read_table(io.BytesIO(data)).num_rows == 3
    assert (await a.client.get("/ipfs/not-a-cid")).status == 400


async def test_upload_needs_the_token(nodes: Any) -> None:
    a, _ = nodes
    resp = await a.client.post("/api/v0/datasets", params={"name": "x"}, data=CSV, headers={"Authorization": ""})
    assert resp.status == 401


async def test_oversized_upload_is_refused_and_nothing_changes(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "small", kubo_session, **{"api.max_upload_bytes": 1000}) as pair:
        n = Served(*pair)
        ok = await add(n, write(tmp_path, "fits.csv", CSV), "--name", "small")
        big = write(tmp_path, "big.csv", b"id,city,pop\n" + b"".join(b"%d,X,1\n" % i for i in range(500)))
        err = await add(n, big, "--to", "small", "--upload", ok=False)  # the CLI's upload, refused by the node
        assert "larger than api.max_upload_bytes" in err, err
        assert (await info(n, "small"))["head"] == ok["head"]
        assert not any((n.home / "tmp").iterdir())  # the partial upload is gone


@pytest.mark.parametrize("what", ["head block", "structure", "slice"])
async def test_pull_refuses_a_tampered_block(nodes: Any, tmp_path: Path, free_port: int, what: str) -> None:
    a, b = nodes
    name = "tamper-" + what.replace(" ", "-")
    unique = CSV + f"9,{name},1\n".encode()  # content B has never seen, so B must fetch every piece
    await add(a, write(tmp_path, "t.csv", unique), "--name", name)
    i = await info(a, name)
    victim = {"head block": i["head"], "structure": i["structure"], "slice": i["slices"][0]["cid"]}[what]

    async def run() -> str:
        async def relay(request: web.Request) -> web.Response:
            body = await (await a.client.get(request.path)).read()
            if victim in request.path:
                body = body[:-1] + bytes([body[-1] ^ 1])  # one bit flipped
            return web.Response(body=body)

        app = web.Application()
        app.router.add_get("/{tail:.*}", relay)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", free_port).start()
        try:
            r = await b.cli("pull", f"http://127.0.0.1:{free_port}/odf/{name}", "--name", "tampered")
            assert r.returncode == 1
            return r.stderr.decode().strip()
        finally:
            await runner.cleanup()

    had = await b.node.serving.holds(
        parse_cid(victim)
    )  # a structure B pulled before (same columns) is legitimately there
    err = await run()
    assert victim in err and "does not match its CID" in err, err
    assert (await b.get("/api/v0/datasets/tampered"))[0] == 404
    assert not list((b.home / "cache" / "slices").glob(f"{i['slices'][0]['cid']}*"))  # nothing kept
    named = set(re.findall(r"\bbaf[a-z2-7]{20,}", err))  # the refused bytes' own CID too, for a slice
    assert len(named) == (2 if what == "slice" else 1), err
    for cid in named - ({victim} if had else set()):  # nothing refused stays in B's Kubo, nor is served by it
        assert not await b.node.serving.holds(parse_cid(cid)), cid
        assert (await b.client.get(f"/ipfs/{cid}")).status == 404, cid
    assert await b.node.serving.holds(parse_cid(victim)) == had  # and what B held before, it still holds


async def test_a_refused_pull_by_cid_leaves_nothing_in_kubo(nodes: Any, kubo_session: ManagedKubo) -> None:
    """B pulls a CID that is no dataset head (a page someone added to A's Kubo): B's Kubo fetches it by bitswap,
    the pull is refused, and B neither keeps it nor serves it from its gateway."""
    a, b = nodes
    from node.adapters.ipfs import KuboClient

    page = b"<html><script>document.title='ran'</script>" + os.urandom(8).hex().encode() + b"</html>"
    async with kubo_session.client() as ka:
        cid = (await ka.add(page, pin=False)).cid
    kb = (await b.get("/api/v0/node"))[1]["kubo"]
    async with KuboClient(kb["api"], auth=b.node.settings.ipfs.api_auth) as kubo:
        await kubo.swarm_connect((await a.get("/api/v0/node"))[1]["kubo"]["swarm"][0])
    r = await b.cli("pull", cid_str(cid), "--name", "not-a-head")
    assert r.returncode == 1 and "not a valid object" in r.stderr.decode(), r.stderr.decode()
    assert not await b.node.serving.holds(cid)
    assert (await b.client.get(f"/ipfs/{cid_str(cid)}")).status == 404
    assert (await b.get("/api/v0/datasets/not-a-head"))[0] == 404


async def test_pull_by_cid_over_ipfs(nodes: Any, tmp_path: Path) -> None:
    """B's Kubo fetches the chain and slices from A's Kubo by CID (bitswap), then verifies them."""
    a, b = nodes
    await add(a, write(tmp_path, "c.csv", CSV), "--name", "by-cid")
    head = (await info(a, "by-cid"))["head"]
    ka, kb = (await a.get("/api/v0/node"))[1]["kubo"], (await b.get("/api/v0/node"))[1]["kubo"]

    from node.adapters.ipfs import KuboClient

    async with KuboClient(kb["api"], auth=b.node.settings.ipfs.api_auth) as kubo:  # B's Kubo wants its secret
        await kubo.swarm_connect(ka["swarm"][0])
    r = await b.cli("pull", head, "--name", "fetched-by-cid", "--json")
    assert r.returncode == 0, r.stderr.decode()
    assert (await info(b, "fetched-by-cid"))["logicalHash"] == (await info(a, "by-cid"))["logicalHash"]
    assert await rows(b, "fetched-by-cid") == await rows(a, "by-cid")


async def test_stdin_compressed_input(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    await add(a, write(tmp_path, "plain.csv", CSV), "--name", "from-file")
    r = await a.cli("add", "-", "--name", "piped", "--format", "csv", "--json", input=gzip.compress(CSV))
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["rows_added"] == 3
    assert (await info(a, "piped"))["logicalHash"] == (await info(a, "from-file"))["logicalHash"]


async def test_get_writes_csv_and_parquet_files(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    await add(a, write(tmp_path, "src.csv", CSV), "--name", "to-get")
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"out.{fmt}"
        r = await a.cli("get", "to-get", "-o", str(out))
        assert r.returncode == 0, r.stderr.decode()
        table = pacsv.read_csv(out) if fmt == "csv" else pq.read_table(out)
        assert table.to_pylist() == pacsv.read_csv(io.BytesIO(CSV)).to_pylist()
    r = await a.cli("get", "to-get", "--limit", "2")
    assert len(r.stdout.decode().splitlines()) == 2
    r = await a.cli("get", "nope")
    assert r.returncode == 1 and "nope" in r.stderr.decode()


# -- text encodings and dialects -------------------------------------------------------------

LATIN1 = "id,city,pop\n1,Orléans,116000\n2,Besançon,117000\n3,Saint-Étienne,173000\n".encode("latin-1")


async def upload(node: Served, query: str, body: bytes) -> tuple[int, Any]:
    """POST /api/v0/datasets with the node's token: the HTTP route, without the CLI."""
    resp = await node.client.post(f"/api/v0/datasets?{query}", data=body)
    return resp.status, await resp.json()


async def test_latin1_round_trips_through_get_csv(nodes: Any, tmp_path: Path) -> None:
    import pandas as pd

    a, _ = nodes
    src = write(tmp_path, "latin1.csv", LATIN1)
    err = await add(a, src, "--name", "latin", ok=False)  # not UTF-8: refused, naming where
    bad = LATIN1.index(b"\xe9")
    assert f"line 2, byte offset {bad}: not UTF-8" in err and "--encoding" in err
    assert (await a.get("/api/v0/datasets/latin"))[0] == 404  # nothing was created
    await add(a, src, "--name", "latin", "--encoding", "latin-1")
    r = await a.cli("get", "latin", "--format", "csv")
    assert r.returncode == 0, r.stderr.decode()
    got = pd.read_csv(io.BytesIO(r.stdout), encoding="utf-8")  # what we serve is UTF-8
    assert got.to_dict("records") == pd.read_csv(io.BytesIO(LATIN1), encoding="latin-1").to_dict("records")
    # Over HTTP (the upload route takes the same options as query parameters): same rows, same hash.
    await add(a, src, "--name", "latin-up", "--encoding", "latin-1", "--upload")
    status, body = await upload(a, "name=latin-http&encoding=latin-1&filename=x.csv", LATIN1)
    assert status == 201, body
    assert (
        (await info(a, "latin-up"))["logicalHash"]
        == (await info(a, "latin-http"))["logicalHash"]
        == (await info(a, "latin"))["logicalHash"]
    )


async def test_undecodable_input_is_a_400_naming_line_and_byte(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    junk = b"id,city\n1,ok\n" + bytes(range(128, 256)) * 4
    status, body = await upload(a, "name=junk", junk)
    assert status == 400 and body["error"]["message"] == (
        "upload: line 3, byte offset 13: not UTF-8 (80: invalid start byte); give the file's encoding"
        " with --encoding, e.g. --encoding latin-1"
    )
    status, body = await upload(a, "name=junk&encoding=nope", CSV)
    assert status == 400 and "unknown encoding 'nope'" in body["error"]["message"]
    status, body = await upload(a, "name=junk&encoding=utf-16-le", b"ab\n")  # an odd number of bytes
    assert status == 400 and "byte offset 2: cannot decode 0a as utf-16-le" in body["error"]["message"]
    for name, data in (("empty.csv", b""), ("nul.csv", b"a,b\n1,\x00\n"), ("rand.jsonl", bytes(range(256)))):
        err = await add(a, write(tmp_path, name, data), "--name", "junk", ok=False)
        assert err.startswith("error: ") and ("byte offset" in err or "empty" in err), err
    assert (await a.get("/api/v0/datasets/junk"))[0] == 404


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
async def test_delimiters_are_sniffed_end_to_end(nodes: Any, tmp_path: Path, delimiter: str) -> None:
    a, _ = nodes
    name = "sniff-" + {";": "semi", "\t": "tab", "|": "pipe"}[delimiter]
    data = CSV.replace(b",", delimiter.encode())
    await add(a, write(tmp_path, name + ".csv", data), "--name", name)
    assert (await info(a, name))["schema"] == [["id", "int64"], ["city", "utf8"], ["pop", "int64"]]
    await add(a, write(tmp_path, "comma.csv", CSV), "--name", name + "-comma")
    assert (await info(a, name))["logicalHash"] == (await info(a, name + "-comma"))["logicalHash"]


async def test_binary_asked_for_is_served_as_base64_in_csv(nodes: Any, tmp_path: Path) -> None:
    # One rendering for every face (docs/queries.md "Answers: how values are written"): binary is base64.
    a, _ = nodes
    await add(a, write(tmp_path, "bin.csv", b"id,blob\n1,abc\n2,\n"), "--name", "bin", "--type", "blob=binary")
    r = await a.cli("get", "bin", "--format", "csv")
    assert r.returncode == 0, r.stderr.decode()
    rows = list(csv.reader(io.StringIO(r.stdout.decode(), newline="")))
    assert rows[0] == ["id", "blob"]
    assert rows[1] == ["1", base64.b64encode(b"abc").decode()]
    assert rows[2][0] == "2" and rows[2][1] in ("", base64.b64encode(b"").decode())
