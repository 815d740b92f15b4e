"""The node in the test's own process: ``Node.open`` builds every part or nothing, ``close``
stops what it started, and the HTTP app (node/faces/api/server.py) over the built node, driven by an in-process
client. Real Kubo (the session's, or a managed one), no subprocess node; oracles: pandas on the same bytes,
dag_cbor and Kubo's own block store, py-libp2p-free.
"""

from __future__ import annotations

import io
import json
import os
import socket
from pathlib import Path
from typing import Any

import dag_cbor
import pandas as pd
import pytest
from aiohttp import ClientSession

from node.adapters.ipfs import KuboClient, ManagedKubo
from node.adapters.ipfs.car import read_car
from node.core import Node
from node.domain.model import cid_str, parse_cid
from node.support.errors import CairnError
from tests.fixtures.inprocess import InNode, add_csv, inprocess_node, node_settings

CSV = b"city,pop,area\nParis,2100000,105.4\nLyon,520000,47.9\nNice,340000,71.9\n"
NO_TOKEN = {"Authorization": ""}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- Node life cycle ----------------------------------------------------------------------------


async def test_open_builds_every_part_and_close_stops_them(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    node = await Node.open(node_settings(tmp_path / "n", kubo_session))
    try:
        info = await node.info()
        assert info["peer_id"] == node.identity.peer_id and info["kubo"]["state"] == "up"
        assert info["kubo"]["api"] == kubo_session.api_url and not info["kubo"]["managed"]
        assert node.network is None and node.managed is None and node.spark_state() == "down"
        assert (await node.health())["ok"]
    finally:
        await node.close()
    assert node.kubo_state == "down"
    with pytest.raises(Exception, match="closed"):  # the index's sqlite connection is closed
        node.index.count("datasets")
    assert kubo_session.pid is not None and not _gone(kubo_session.pid)  # an external Kubo is left running


async def test_open_refuses_an_unreachable_kubo_and_leaves_nothing(tmp_path: Path, free_port: int) -> None:
    settings = node_settings(tmp_path / "n", f"http://127.0.0.1:{free_port}")
    with pytest.raises(CairnError) as e:
        await Node.open(settings)
    assert "\n" not in e.value.message and str(free_port) in e.value.message
    assert not (tmp_path / "n" / "index.sqlite").exists()  # failed before building anything past Kubo


async def test_managed_kubo_is_started_and_stopped_by_the_node(tmp_path: Path, kubo_binary: Path) -> None:
    settings = node_settings(tmp_path / "n", "", **{"ipfs.binary": str(kubo_binary)})
    async with Node.running(settings) as node:
        assert node.managed is not None and node.managed.pid is not None
        pid = node.managed.pid
        assert (await node.info())["kubo"]["pid"] == pid and not _gone(pid)
    assert _gone(pid) or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


# -- objects ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [{"a": [1, -2, None, True]}, {"nested": {"x": "é", "b": [[], {}]}}, {"n": 2**40, "f": 1.5}]
)
async def test_dag_put_stores_what_kubo_returns(inode: InNode, kubo_client: KuboClient, value: Any) -> None:
    _, client = inode
    resp = await client.post("/api/v0/dag", json=value)
    assert resp.status == 200, await resp.text()
    cid = (await resp.json())["cid"]
    assert dag_cbor.decode(await kubo_client.block_get(cid)) == value  # Kubo holds it, decoded independently
    assert await kubo_client.pin_ls(parse_cid(cid))
    got = await client.get(f"/api/v0/dag/{cid}")
    assert json.loads(await got.text()) == value


async def test_writes_need_the_token_and_store_nothing_without(inode: InNode) -> None:
    node, client = inode
    resp = await client.post("/api/v0/datasets", params={"name": "x"}, data=CSV, headers=NO_TOKEN)
    body = await resp.json()
    assert resp.status == 401 and body["error"]["type"] == "Unauthorized"
    assert node.index.count("datasets") == 0


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/v0/dag/not-a-cid", 400),
        ("GET", "/ipfs/not-a-cid", 400),
        ("GET", "/api/v0/jobs/job-nope", 404),
        ("GET", "/api/v0/executions/bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy", 404),
        ("GET", "/api/v0/datasets/nope", 404),
        ("GET", "/api/v0/datasets/nope/data?limit=-1", 400),
        ("POST", "/api/v0/query", 400),
        ("POST", "/api/v0/pull", 400),
        ("POST", "/api/v0/trust", 400),
        ("DELETE", "/api/v0/trust", 400),
        ("GET", "/api/v0/peers", 409),
    ],
)
async def test_bad_requests_get_one_line_4xx(inode: InNode, method: str, path: str, status: int) -> None:
    _, client = inode
    resp = await client.request(method, path, data=b"{not json", headers={"Content-Type": "application/json"})
    body = await resp.json()
    assert resp.status == status, body
    assert "\n" not in body["error"]["message"] and body["error"]["type"]


# -- datasets -----------------------------------------------------------------------------------


async def test_added_csv_reads_back_as_pandas_reads_it(inode: InNode) -> None:
    _, client = inode
    added = await add_csv(client, "cities", CSV)
    assert added["rows_added"] == 3 and added["previous"] is None
    resp = await client.get("/api/v0/datasets/cities/data", params={"format": "jsonl"})
    assert resp.status == 200 and resp.headers["X-Cairn-Version"] == added["head"]
    got = pd.read_json(io.StringIO(await resp.text()), lines=True)
    pd.testing.assert_frame_equal(got, pd.read_csv(io.BytesIO(CSV)), check_dtype=False)
    listed = (await (await client.get("/api/v0/datasets")).json())["datasets"]
    assert [(d["name"], d["head"], d["rows"]) for d in listed] == [("cities", added["head"], 3)]
    by_id = await (await client.get(f"/api/v0/datasets/{added['id']}")).json()
    assert by_id["head"] == added["head"] and by_id["schema"][0][0] == "city"


async def test_append_chains_versions_and_log_shows_them(inode: InNode) -> None:
    _, client = inode
    first = await add_csv(client, "grow", CSV)
    resp = await client.post("/api/v0/datasets", params={"to": "grow", "filename": "more.csv"}, data=CSV)
    second = await resp.json()
    assert resp.status == 200 and second["previous"] == first["head"] and second["rows_added"] == 3
    log = (await (await client.get("/api/v0/datasets/grow/log")).json())["blocks"]
    seq = {b["cid"]: b["seq"] for b in log}
    assert seq[second["head"]] > seq[first["head"]] and seq[second["head"]] == max(seq.values())
    old = await client.get(f"/api/v0/datasets/{first['head']}/data", params={"format": "csv"})
    assert pd.read_csv(io.StringIO(await old.text())).shape == (3, 3)  # a version stays as it was


async def test_progress_stream_ends_with_the_result(inode: InNode) -> None:
    _, client = inode
    resp = await client.post(
        "/api/v0/datasets", params={"name": "p", "filename": "p.csv", "progress": "true"}, data=CSV
    )
    lines = [json.loads(x) for x in (await resp.text()).splitlines()]
    assert resp.status == 200 and "result" in lines[-1]
    head = (await (await client.get("/api/v0/datasets/p")).json())["head"]
    assert lines[-1]["result"]["head"] == head


async def test_bad_upload_is_400_and_loses_nothing(inode: InNode) -> None:
    node, client = inode
    before = await add_csv(client, "keep", CSV)
    resp = await client.post("/api/v0/datasets", params={"to": "keep", "filename": "bad.csv"}, data=b"\xff\xfe\x00junk")
    body = await resp.json()
    assert resp.status == 400 and "bad.csv" in body["error"]["message"]  # named as the client sent it
    assert (await (await client.get("/api/v0/datasets/keep")).json())["head"] == before["head"]
    assert list((node.home.path / "tmp").glob("upload-*")) == []  # the spool file is gone


async def test_oversized_upload_is_413_and_creates_nothing(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "n", kubo_session, **{"api.max_upload_bytes": 1000}) as (node, client):
        resp = await client.post("/api/v0/datasets", params={"name": "big", "filename": "b.csv"}, data=CSV * 100)
        body = await resp.json()
        assert resp.status == 413 and "\n" not in body["error"]["message"], body
        assert node.index.count("datasets") == 0
        assert list((node.home.path / "tmp").glob("upload-*")) == []


async def test_gateway_and_odf_serve_what_kubo_holds(inode: InNode, kubo_client: KuboClient) -> None:
    _, client = inode
    added = await add_csv(client, "gw", CSV)
    head, slice_cid = added["head"], added["slices"][0]["cid"]
    raw = await client.get(f"/ipfs/{head}", headers={"Accept": "application/vnd.ipld.raw"})
    assert await raw.read() == await kubo_client.block_get(head)
    car = await client.get(f"/ipfs/{head}", headers={"Accept": "application/vnd.ipld.car"})
    roots, blocks = read_car(await car.read())
    assert [cid_str(r) for r in roots] == [head] and slice_cid in {cid_str(c) for c, _ in blocks}
    for c, data in blocks:  # every block of the CAR is the one Kubo stores under that CID
        assert data == await kubo_client.block_get(c)
    assert await (await client.get("/odf/gw/refs/head")).text() == head
    block = await client.get(f"/odf/gw/blocks/{head}")
    assert await block.read() == await kubo_client.block_get(head)
    data = await client.get(f"/odf/gw/data/{slice_cid}")
    assert pd.read_parquet(io.BytesIO(await data.read())).shape[0] == 3


async def test_pull_between_two_in_process_nodes(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with (
        inprocess_node(tmp_path / "a", kubo_session) as (a, ca),
        inprocess_node(tmp_path / "b", kubo_session) as (_, cb),
    ):
        added = await add_csv(ca, "shared", CSV)
        resp = await cb.post("/api/v0/pull", json={"source": f"{a.api_url}/odf/shared", "name": "copy"})
        pulled = await resp.json()
        assert resp.status == 200 and pulled["head"] == added["head"], pulled
        rows_a = await (await ca.get("/api/v0/datasets/shared/data")).text()
        rows_b = await (await cb.get("/api/v0/datasets/copy/data")).text()
        assert rows_a == rows_b and len(rows_b.splitlines()) == 3


# -- trust --------------------------------------------------------------------------------------


async def test_trust_add_list_rm(inode: InNode) -> None:
    node, client = inode
    key = node.identity.node_key
    resp = await client.post("/api/v0/trust", json={"key": "did:key:nope"})
    assert resp.status == 400
    resp = await client.post("/api/v0/trust", json={"key": key, "community": "lab"})
    assert (await resp.json())["trusted"] == [{"key": key, "community": "lab"}]
    assert node.index.trust.trusted() == [(key, "lab")]
    bad = await client.delete("/api/v0/trust", json={"key": key, "community": 3})
    assert bad.status == 400 and node.index.trust.trusted() == [(key, "lab")]
    assert (await (await client.delete("/api/v0/trust", json={"key": key})).json())["removed"] == 1
    assert (await client.delete("/api/v0/trust", json={"key": key})).status == 404


async def test_metrics_count_what_the_index_holds(inode: InNode) -> None:
    _, client = inode
    await add_csv(client, "m", CSV)
    text = await (await client.get("/metrics")).text()
    assert "cairn_datasets 1.0" in text and "cairn_kubo_up 1.0" in text


async def test_the_app_listens_on_a_real_socket(inode: InNode) -> None:
    node, _ = inode  # the in-process client is a real HTTP server on loopback: any client can reach it
    assert node.api_url is not None
    async with ClientSession() as s, s.get(node.api_url + "/healthz") as r:
        assert r.status == 200
    host, port = node.api_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5):
        pass
