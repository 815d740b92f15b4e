"""Holium data trees in a real Kubo, through an in-process node:
0x51 scalar leaves under 0x71 lists pin recursively and export as CAR."""

from __future__ import annotations

import json
from pathlib import Path

import dag_cbor
import pytest

from node.adapters.ipfs import KuboClient
from node.adapters.ipfs.car import read_car
from node.domain.model import cid_str, holium_data, parse_cid
from tests.fixtures.inprocess import InNode, cli

SAMPLES = {
    "people.json": json.dumps(
        [{"name": "Ada", "age": 36, "tags": ["math", None]}, {"name": "Émile", "age": -1.5}]
    ).encode(),
    "rows.csv": b"city,pop\nParis,2100000\nLyon,520000\n",
    "tree.cbor": dag_cbor.encode({"k": [True, False, b"\x00\x01", 2**40]}),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
async def test_import_matches_local_tree_and_pins_recursively(
    inode: InNode, kubo_client: KuboClient, tmp_path: Path, name: str
) -> None:
    node, _ = inode
    path = tmp_path / name
    path.write_bytes(SAMPLES[name])
    rc, out, err = await cli(node, "holium", "import", str(path))  # the CLI face, against the in-process node
    assert rc == 0, err.decode()
    root = out.decode().strip()

    local_root, blocks = holium_data.import_file(path)
    assert root == cid_str(local_root)
    codecs = {b.cid.codec.code for b in blocks}
    assert codecs == {0x51, 0x71}  # both kinds of block in one graph

    # What the node's Kubo holds, asked of Kubo directly.
    assert await kubo_client.pin_ls(parse_cid(root)), "root not pinned"
    car = b"".join([chunk async for chunk in kubo_client.dag_export(parse_cid(root))])
    roots, car_blocks = read_car(car)
    assert [cid_str(c) for c in roots] == [root]
    assert {cid_str(b.cid) for b in blocks} == {cid_str(c) for c, _ in car_blocks}
    assert {c.codec.code for c, _ in car_blocks} == {0x51, 0x71}
    for c, data in car_blocks:  # every exported block is what we computed
        assert data == next(b.data for b in blocks if b.cid == c)


async def test_import_over_http_refuses_an_unknown_format(inode: InNode) -> None:
    _, client = inode
    resp = await client.post("/api/v0/holium/import", params={"format": "xml"}, data=b"<a/>")
    body = await resp.json()
    assert resp.status == 400 and "xml" in body["error"]["message"]
    resp = await client.post("/api/v0/holium/import", params={"format": "json"}, data=SAMPLES["people.json"])
    root, _ = holium_data.import_json(SAMPLES["people.json"])
    assert resp.status == 200 and (await resp.json())["cid"] == cid_str(root)


def test_null_leaf_has_holium_published_cid() -> None:
    root, _ = holium_data.data_tree(None)
    assert cid_str(root) == "bafir4idbvg7rb4h75xd5y52ytlrkwtfibmagzadomy3oig3aiegnr4f3yq"
