"""BlockStore contract (node.domain.ports.block_store): a real Kubo (the session's daemon, or fresh ones where the test
needs a store of its own) and the in-memory twin (node.adapters.ipfs.memory_blocks) answer alike.

The session Kubo is shared by the whole run: every test here uses fresh random bytes, fresh key names, and asks
about the CIDs it made only."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import dag_cbor
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from multiformats import CID

from node.adapters.ipfs import ManagedKubo
from node.adapters.ipfs.dag_walk import car_header, car_section
from node.adapters.ipfs.memory_blocks import MemoryBlockStore, MemorySwarm, ipns_name
from node.adapters.ipfs.unixfs import file_dag
from node.domain.model.cid import blake3_cid, cid_for, cid_str
from node.domain.ports.block_store import BlockStore
from node.support.errors import KuboCIDMismatch, KuboNotFound, KuboRPCError, KuboTimeout, KuboTruncated

MiB = 1 << 20
NOBODY = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"  # a well-formed peer id no store has
KuboFactory = Callable[..., Awaitable[ManagedKubo]]


@pytest_asyncio.fixture(params=["kubo", "memory"])
async def store(request: pytest.FixtureRequest, kubo_session: ManagedKubo) -> AsyncIterator[BlockStore]:
    """One store: the session's Kubo, then a fresh twin."""
    if request.param == "kubo":
        async with kubo_session.client(timeout=20.0) as client:
            yield client
    else:
        twin = MemoryBlockStore()
        yield twin
        await twin.close()


StoresOf = Callable[[int], Awaitable[list[BlockStore]]]


@pytest_asyncio.fixture(params=["kubo", "memory"])
async def fresh_stores(request: pytest.FixtureRequest, kubo_factory: KuboFactory) -> AsyncIterator[StoresOf]:
    """Stores of their own, with no peers yet: fresh Kubo daemons, or twins sharing one swarm."""
    swarm, made = MemorySwarm(), []

    async def make(n: int) -> list[BlockStore]:
        if request.param == "memory":
            stores: list[BlockStore] = [MemoryBlockStore(swarm) for _ in range(n)]
        else:
            stores = [d.client(timeout=20.0) for d in await asyncio.gather(*(kubo_factory() for _ in range(n)))]
        made.extend(stores)
        return stores

    yield make
    for s in made:
        await s.close()


def _missing() -> CID:
    return blake3_cid(os.urandom(32), "raw")


async def _read(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in stream])


async def _diamond(store: BlockStore) -> tuple[CID, CID, CID, CID]:
    """top = {"x": [mid, l2], "aa": l1}, mid = {"b": l2, "a": l1, "z": [l1, l2]}: shared leaves, keys out of order."""
    l1 = await store.block_put(os.urandom(10))
    l2 = await store.block_put(os.urandom(11))
    mid = await store.block_put(dag_cbor.encode({"b": l2, "a": l1, "z": [l1, l2]}), codec="dag-cbor")
    top = await store.block_put(dag_cbor.encode({"x": [mid, l2], "aa": l1}), codec="dag-cbor")
    return top, mid, l1, l2


# -- blocks ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "dag-cbor", "cbor"])
async def test_a_block_put_is_got_back_under_the_cid_the_node_computes(store: BlockStore, codec: str) -> None:
    data = os.urandom(40) if codec == "raw" else dag_cbor.encode({"n": uuid.uuid4().hex})
    cid = await store.block_put(data, codec=codec)
    assert cid == cid_for(data, codec)
    assert await store.block_get(cid, offline=True) == data
    assert await store.block_get(cid_str(cid)) == data
    stat = await store.block_stat(cid, offline=True)
    assert stat.cid == cid and stat.size == len(data)


async def test_many_blocks_in_one_put(store: BlockStore) -> None:
    blocks = [os.urandom(n) for n in (1, 20, 300)]
    assert await store.block_put_many(blocks) == [cid_for(b, "raw") for b in blocks]
    assert await store.block_put_many([]) == []
    assert [await store.block_get(cid_for(b, "raw"), offline=True) for b in blocks] == blocks


async def test_a_block_not_held_is_not_found_offline(store: BlockStore) -> None:
    with pytest.raises(KuboNotFound, match="not found locally"):
        await store.block_get(_missing(), offline=True)
    with pytest.raises(KuboNotFound):
        await store.block_stat(_missing(), offline=True)


async def test_a_block_nobody_has_is_a_timeout_online(store: BlockStore) -> None:
    with pytest.raises(KuboTimeout):
        await store.block_get(_missing(), timeout=1.0)


async def test_a_block_put_with_pin_is_pinned_recursively(store: BlockStore) -> None:
    cid = await store.block_put(os.urandom(64), pin=True)
    assert await store.pin_ls(cid) == {cid: "recursive"}
    unpinned = await store.block_put(os.urandom(64))
    assert await store.pin_ls(unpinned) == {}


async def test_a_write_behind_is_read_by_every_later_call(store: BlockStore) -> None:
    data = os.urandom(100)
    started = asyncio.Event()

    async def put_later() -> list[CID]:
        started.set()
        await asyncio.sleep(0.2)  # still writing when the read below is made
        return await store.block_put_many([data])

    task = store.write_behind(put_later())
    await started.wait()
    assert await store.block_get(cid_for(data, "raw"), offline=True) == data
    assert task.done() and await task == [cid_for(data, "raw")]


# -- DAGs, refs and CARs -------------------------------------------------------------------------------------------


async def test_dag_put_of_dag_json_stores_the_nodes_dag_cbor(store: BlockStore) -> None:
    leaf = await store.block_put(os.urandom(8))
    name = uuid.uuid4().hex
    text = '{"b":1,"a":{"/":"' + cid_str(leaf) + '"},"name":"' + name + '"}'
    cid = await store.dag_put(text.encode(), input_codec="dag-json", pin=False)
    assert cid == cid_for(dag_cbor.encode({"a": leaf, "b": 1, "name": name}), "dag-cbor")
    expected = '{"a":{"/":"' + cid_str(leaf) + '"},"b":1,"name":"' + name + '"}'  # keys sorted, no spaces
    assert await store.dag_get(cid) == expected.encode()
    assert await store.dag_get(cid, output_codec="dag-cbor") == dag_cbor.encode({"a": leaf, "b": 1, "name": name})


async def test_dag_put_keeps_canonical_bytes_and_refuses_others(store: BlockStore) -> None:
    data = dag_cbor.encode({"k": uuid.uuid4().hex})
    assert await store.dag_put(data, pin=False) == cid_for(data, "dag-cbor")
    sha = await store.dag_put(data, hash="sha2-256", pin=False)
    assert sha == cid_for(data, "dag-cbor", "sha2-256")
    with pytest.raises(KuboCIDMismatch):  # keys out of canonical order: stored re-encoded, under another CID
        await store.dag_put(bytes.fromhex("a2616201616100"), pin=False)


async def test_dag_put_pins_at_once_even_an_incomplete_dag(store: BlockStore) -> None:
    cid = await store.dag_put(dag_cbor.encode({"m": _missing(), "u": uuid.uuid4().hex}), pin=True)
    assert await store.pin_ls(cid) == {cid: "recursive"}
    await store.pin_rm(cid)  # an incomplete pin would stop listings of the shared daemon's pins


async def test_dag_get_of_a_raw_block_is_its_bytes_form(store: BlockStore) -> None:
    cid = await store.block_put(b"\x10L\xcb\x89eJqn\xfeR" + os.urandom(0))
    assert await store.dag_get(cid) == b'{"/":{"bytes":"EEzLiWVKcW7+Ug"}}'


async def test_refs_walk_depth_first_each_block_once(store: BlockStore) -> None:
    top, mid, l1, l2 = await _diamond(store)
    assert await store.refs(top) == [mid, l1, l2]
    assert await store.refs(l1) == []


async def test_refs_skip_what_is_not_held(store: BlockStore) -> None:
    l1 = await store.block_put(os.urandom(10))
    partial = await store.block_put(dag_cbor.encode({"k": _missing(), "j": l1}), codec="dag-cbor")
    assert await store.refs(partial) == [l1]


async def test_a_dag_exports_as_a_car_depth_first(store: BlockStore) -> None:
    top, mid, l1, l2 = await _diamond(store)
    blocks = [(c, await store.block_get(c, offline=True)) for c in (top, mid, l1, l2)]
    expected = car_header([top]) + b"".join(car_section(c, d) for c, d in blocks)
    assert await _read(store.dag_export(top, offline=True)) == expected


async def test_an_export_without_its_root_is_not_found_and_without_a_block_is_cut_short(store: BlockStore) -> None:
    with pytest.raises(KuboNotFound):
        await _read(store.dag_export(_missing(), offline=True))
    l1 = await store.block_put(os.urandom(10))
    gone = _missing()
    node = dag_cbor.encode({"k": gone, "j": l1})
    partial = await store.block_put(node, codec="dag-cbor")
    with pytest.raises(KuboTruncated, match=cid_str(gone)[:20]):
        await _read(store.dag_export(partial, offline=True))
    got = await _read(store.dag_export(partial, offline=True, verify=False))
    assert got == car_header([partial]) + car_section(partial, node) + car_section(l1, await store.block_get(l1))


def _car(roots: list[CID], blocks: list[tuple[CID, bytes]]) -> bytes:
    return car_header(roots) + b"".join(car_section(c, d) for c, d in blocks)


async def test_a_car_imports_and_its_roots_are_pinned(store: BlockStore) -> None:
    leaf = os.urandom(9)
    node = dag_cbor.encode({"a": cid_for(leaf, "raw")})
    root = cid_for(node, "dag-cbor")
    assert await store.dag_import(_car([root], [(root, node), (cid_for(leaf, "raw"), leaf)])) == [root]
    assert await store.pin_ls(root) == {root: "recursive"}
    assert await store.block_get(cid_for(leaf, "raw"), offline=True) == leaf
    other = dag_cbor.encode({"n": uuid.uuid4().hex})
    assert await store.dag_import(
        _car([cid_for(other, "dag-cbor")], [(cid_for(other, "dag-cbor"), other)]), pin_roots=False
    )
    assert await store.pin_ls(cid_for(other, "dag-cbor")) == {}
    await store.pin_rm(root)


async def test_an_incomplete_car_cannot_pin_its_root(store: BlockStore) -> None:
    node = dag_cbor.encode({"a": _missing(), "n": uuid.uuid4().hex})
    root = cid_for(node, "dag-cbor")
    with pytest.raises(KuboRPCError, match="pinning root"):
        await store.dag_import(_car([root], [(root, node)]), timeout=2.0)
    assert await store.pin_ls(root) == {}
    assert await store.block_get(root, offline=True) == node  # its blocks were kept


# -- UnixFS files --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 5, MiB, MiB + 1, 3 * MiB + 5])
async def test_add_makes_the_unixfs_cid_the_node_computes(store: BlockStore, size: int) -> None:
    data = os.urandom(size)
    root, tsize, _ = file_dag(data)
    added = await store.add(data, pin=False)
    assert (added.cid, added.size, added.name, added.file_size) == (root, tsize, "data", size)
    assert await _read(store.cat(added.cid, offline=True)) == data


async def test_add_reads_a_file_or_a_stream_and_only_hash_stores_nothing(store: BlockStore, tmp_path: Path) -> None:
    data = os.urandom(MiB + 100)
    path = tmp_path / "part.parquet"
    path.write_bytes(data)
    added = await store.add(path, pin=False)
    assert added.name == "part.parquet" and added.cid == file_dag(data)[0]

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 300_000):
            yield data[i : i + 300_000]

    assert (await store.add(pieces(), filename="x", pin=False)).cid == added.cid
    fresh = os.urandom(MiB + 7)
    hashed = await store.add(fresh, only_hash=True)
    assert hashed.cid == file_dag(fresh)[0]
    with pytest.raises(KuboNotFound):
        await store.block_stat(hashed.cid, offline=True)


async def test_cat_gives_a_range_and_says_its_length_first(store: BlockStore) -> None:
    data = os.urandom(3 * MiB + 5)
    cid = (await store.add(data, pin=False)).cid
    for offset, length, want in [(100, 2000, data[100:2100]), (len(data) - 10, None, data[-10:])]:
        told: list[int] = []
        assert await _read(store.cat(cid, offset, length, offline=True, on_length=told.append)) == want
        assert told == [len(want)]
    across = await _read(store.cat(cid, MiB - 3, 10, offline=True))
    assert across == data[MiB - 3 : MiB + 7]
    told = []
    assert await _read(store.cat(cid, len(data) + 10, on_length=told.append)) == b"" and told == [0]


async def test_cat_of_what_is_no_file(store: BlockStore) -> None:
    raw = os.urandom(10)
    assert await _read(store.cat(await store.block_put(raw))) == raw  # a raw block is a file
    node = await store.block_put(dag_cbor.encode({"n": uuid.uuid4().hex}), codec="dag-cbor")
    with pytest.raises(KuboRPCError, match="unknown node type"):
        await _read(store.cat(node))
    with pytest.raises(KuboNotFound):
        await _read(store.cat(_missing(), offline=True))


# -- pins ----------------------------------------------------------------------------------------------------------


async def test_pins_direct_recursive_and_indirect(store: BlockStore) -> None:
    top, mid, l1, _ = await _diamond(store)
    assert await store.pin_add(l1, recursive=False) == [l1]
    assert await store.pin_ls(l1) == {l1: "direct"}
    assert await store.pin_add(top) == [top]
    assert await store.pin_ls(l1) == {l1: "direct"}  # direct is said before indirect
    assert await store.pin_ls(mid) == {mid: "indirect"}
    assert await store.pin_ls(mid, type="recursive") == {}
    listed = await store.pin_ls(type="recursive")
    assert listed.get(top) == "recursive" and mid not in listed
    assert (await store.pin_ls(type="indirect")).get(mid) == "indirect"
    assert await store.pin_add(top, recursive=False) == [top]  # pinned recursively already: done
    assert await store.pin_rm(l1) == [l1]  # a direct pin goes with recursive=True too
    assert await store.pin_ls(l1) == {l1: "indirect"}
    await store.pin_rm(top)


async def test_a_recursive_pin_replaces_a_direct_one(store: BlockStore) -> None:
    leaf = await store.block_put(os.urandom(12))
    await store.pin_add(leaf, recursive=False)
    await store.pin_add(leaf, recursive=True)
    assert await store.pin_ls(leaf) == {leaf: "recursive"}
    await store.pin_rm(leaf)
    assert await store.pin_ls(leaf) == {}  # no direct pin left behind


async def test_unpinning_what_is_not_pinned_or_pinned_otherwise(store: BlockStore) -> None:
    top, mid, _, _ = await _diamond(store)
    with pytest.raises(KuboNotFound, match="not pinned"):
        await store.pin_rm(top)
    await store.pin_add(top)
    with pytest.raises(KuboNotFound, match="not pinned or pinned indirectly"):
        await store.pin_rm(mid)
    with pytest.raises(KuboRPCError, match="pinned recursively"):
        await store.pin_rm(top, recursive=False)
    await store.pin_rm(top)


async def test_a_recursive_pin_waits_for_a_missing_block(store: BlockStore) -> None:
    node = await store.block_put(dag_cbor.encode({"m": _missing(), "n": uuid.uuid4().hex}), codec="dag-cbor")
    with pytest.raises(KuboTimeout):
        await store.pin_add(node, timeout=1.0)
    assert await store.pin_ls(node) == {}


async def test_block_rm_keeps_pinned_blocks_and_forget_takes_the_rest(store: BlockStore) -> None:
    top, mid, l1, l2 = await _diamond(store)
    loose = await store.block_put(os.urandom(13))
    await store.pin_add(mid)
    assert await store.block_rm([loose, l1, _missing()]) == [loose]
    assert await store.forget([top]) == [top]  # mid and its leaves: pinned
    with pytest.raises(KuboNotFound):
        await store.block_get(top, offline=True)
    await store.pin_rm(mid)
    assert set(map(bytes, await store.forget([mid]))) == {bytes(c) for c in (mid, l1, l2)}


# -- the node, keys and IPNS ---------------------------------------------------------------------------------------


async def test_the_stores_identity_and_size(store: BlockStore) -> None:
    ident = await store.id()
    assert ident.id.startswith("12D3KooW") and ident.addresses
    assert all(a.endswith(f"/p2p/{ident.id}") for a in ident.addresses)
    assert (await store.version()).version
    await store.block_put(os.urandom(1000))
    assert await store.repo_size() >= 1000


async def test_an_imported_keys_ipns_name(store: BlockStore) -> None:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    name = f"k-{uuid.uuid4().hex}"
    ipns = await store.key_import(name, pem)
    assert ipns == ipns_name(key) and ipns.startswith("k51")
    with pytest.raises(KuboRPCError, match="already exists"):
        await store.key_import(name, pem)
    assert await store.key_import(name + "-again", pem) == ipns  # one key under two names
    head = await store.block_put(dag_cbor.encode({"h": name}), codec="dag-cbor")
    published = await store.name_publish(head, key=name, allow_offline=True)
    assert (published.name, published.value) == (ipns, f"/ipfs/{cid_str(head)}")
    with pytest.raises(KuboNotFound, match="no key"):
        await store.name_publish(head, key=f"none-{uuid.uuid4().hex}")


def test_a_known_key_has_kubos_ipns_name() -> None:
    """Measured on Kubo 0.42: the key of bytes 0..31 imports as this name."""
    assert ipns_name(Ed25519PrivateKey.from_private_bytes(bytes(range(32)))) == (
        "k51qzi5uqu5dg9ufswxt229ntzdy7p4125xzv5rtyjso89ajdujg6csfxcj260"
    )


# -- several stores: the swarm, fetching, routing ------------------------------------------------------------------


async def test_alone_a_store_cannot_provide(fresh_stores: StoresOf) -> None:
    (alone,) = await fresh_stores(1)
    cid = await alone.block_put(os.urandom(20))
    with pytest.raises(KuboRPCError, match="no connected peers"):
        await alone.routing_provide(cid, timeout=5.0)
    assert await alone.swarm_peers() == []
    with pytest.raises(KuboRPCError, match="failure"):  # nobody there
        await alone.swarm_connect(f"/ip4/127.0.0.1/tcp/1/p2p/{NOBODY}", timeout=5.0)


async def test_connected_stores_fetch_and_find_each_others_blocks(
    fresh_stores: StoresOf,
) -> None:
    a, b = await fresh_stores(2)
    b_id = await b.id()
    await a.swarm_connect(b_id.addresses[0])
    assert [p.id for p in await a.swarm_peers()] == [b_id.id]
    assert [p.id for p in await b.swarm_peers()] == [(await a.id()).id]
    top, mid, l1, l2 = await _diamond(a)
    assert await a.routing_provide(top) == 1
    assert await a.routing_provide(top, recursive=True) == 4
    with pytest.raises(KuboNotFound, match="not found locally"):
        await a.routing_provide(_missing())
    assert await b.routing_findprovs(_missing(), timeout=1.0) == []  # who provides what else: see below
    with pytest.raises(KuboNotFound):
        await b.block_get(top, offline=True)
    assert await b.block_get(top, timeout=10.0) == await a.block_get(top)
    assert await b.block_get(top, offline=True) == await a.block_get(top)  # kept once fetched
    assert await b.pin_ls(top) == {}
    await b.pin_add(top, timeout=10.0)  # the rest of the DAG comes over too
    assert await b.refs(top) == [mid, l1, l2]


async def test_twins_find_the_providers_of_a_cid_in_their_swarm() -> None:
    """The twin's routing, documented in node.adapters.ipfs.memory_blocks (Kubo's DHT answers when its queries converge,
    which a
    test on two daemons cannot wait for reliably): a store's ``routing_provide`` is found by every store of the
    swarm, and a block fetched online comes from a connected store or a provider."""
    swarm = MemorySwarm()
    a, b, c = MemoryBlockStore(swarm), MemoryBlockStore(swarm), MemoryBlockStore(swarm)
    await a.swarm_connect((await b.id()).addresses[0])
    top, mid, _, _ = await _diamond(a)
    assert await c.routing_findprovs(top) == []
    await a.routing_provide(top, recursive=True)
    assert [p.id for p in await c.routing_findprovs(mid)] == [a.peer_id]
    assert [p.addrs for p in await c.routing_findprovs(mid)] == [(a.address,)]
    assert await c.routing_findprovs(mid, num=0) == []
    assert await c.block_get(mid) == await a.block_get(mid)  # c is connected to nobody: a provides it
    other = await b.block_put(os.urandom(5))
    with pytest.raises(KuboTimeout):
        await c.block_get(other, timeout=1.0)  # held by b, which c is not connected to and which provided nothing
