"""Holium data trees in a real Kubo: 0x51 scalar leaves under 0x71 lists pin recursively and export as CAR."""

from __future__ import annotations

import json
from pathlib import Path

import dag_cbor
import pytest

from node.ipfs.car import read_car
from node.model import cid_str, holium_data, parse_cid
from tests.fixtures.nodes import NodeProcess

SAMPLES = {
    "people.json": json.dumps(
        [{"name": "Ada", "age": 36, "tags": ["math", None]}, {"name": "Émile", "age": -1.5}]
    ).encode(),
    "rows.csv": b"city,pop\nParis,2100000\nLyon,520000\n",
    "tree.cbor": dag_cbor.encode({"k": [True, False, b"\x00\x01", 2**40]}),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_import_matches_local_tree_and_pins_recursively(cairn_node: NodeProcess, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(SAMPLES[name])
    r = cairn_node.cli("holium", "import", str(path))
    assert r.returncode == 0, r.stderr
    root = r.stdout.decode().strip()

    local_root, blocks = holium_data.import_file(path)
    assert root == cid_str(local_root)
    codecs = {b.cid.codec.code for b in blocks}
    assert codecs == {0x51, 0x71}  # both kinds of block in one graph

    import asyncio

    from node.ipfs import KuboClient

    info = cairn_node.get("/api/v0/node")[1]

    async def check() -> None:
        async with KuboClient(info["kubo"]["api"]) as kubo:
            pins = await kubo.pin_ls(parse_cid(root))
            assert pins, "root not pinned"
            car = b"".join([chunk async for chunk in kubo.dag_export(parse_cid(root))])
        roots, car_blocks = read_car(car)
        assert [cid_str(c) for c in roots] == [root]
        assert {cid_str(b.cid) for b in blocks} == {cid_str(c) for c, _ in car_blocks}
        assert {c.codec.code for c, _ in car_blocks} == {0x51, 0x71}
        for c, data in car_blocks:  # every exported block is what we computed
            assert data == next(b.data for b in blocks if b.cid == c)

    asyncio.run(check())


def test_null_leaf_has_holium_published_cid() -> None:
    root, blocks = holium_data.data_tree(None)
    assert cid_str(root) == "bafir4idbvg7rb4h75xd5y52ytlrkwtfibmagzadomy3oig3aiegnr4f3yq"
