"""KuboClient against real Kubo 0.42 daemons (fixtures in tests/fixtures/kubo.py)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import dag_cbor
import pytest
from multiformats import CID, multihash

from node.adapters.ipfs import CarVerifier, KuboClient, ManagedKubo
from node.support.errors import (
    InvalidInput,
    KuboCIDMismatch,
    KuboNotFound,
    KuboRPCError,
    KuboTimeout,
    KuboTruncated,
    KuboUnreachable,
)

pytestmark = pytest.mark.kubo

MiB = 1 << 20
HOLIUM_NULL = "bafir4idbvg7rb4h75xd5y52ytlrkwtfibmagzadomy3oig3aiegnr4f3yq"  # CBOR null as a 0x51 block


def blake3_cid(data: bytes, codec: str) -> CID:
    return CID("base32", 1, codec, multihash.get("blake3").digest(data, size=32))


async def collect(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


async def eventually(check: Callable[[], Awaitable[bool]], deadline: float = 10.0, what: str = "condition") -> None:
    end = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"{what} not met within {deadline} s")
        await asyncio.sleep(0.05)


# --- node -------------------------------------------------------------------------------


async def test_id_and_version(kubo_client: KuboClient, kubo_session: ManagedKubo) -> None:
    assert (await kubo_client.version()).version == "0.42.0"
    ident = await kubo_client.id()
    assert ident.id == kubo_session.peer_id
    assert ident.agent_version.startswith("kubo/0.42.0")
    assert all("/ip4/127.0.0.1/" in a for a in ident.addresses)


# --- blocks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "prefix"),
    [("raw", "bafkr4i"), ("cbor", "bafir4i"), ("dag-cbor", "bafyr4i")],
)
async def test_block_put_get_stat(kubo_client: KuboClient, codec: str, prefix: str) -> None:
    data = dag_cbor.encode({"nonce": uuid.uuid4().hex}) if codec != "raw" else os.urandom(100)
    cid = await kubo_client.block_put(data, codec)
    assert cid == blake3_cid(data, codec)
    assert str(cid).startswith(prefix)
    assert await kubo_client.block_get(cid) == data
    assert await kubo_client.block_get(str(cid), offline=True) == data
    stat = await kubo_client.block_stat(cid)
    assert (stat.cid, stat.size) == (cid, len(data))


async def test_block_put_reproduces_holium_cid(kubo_client: KuboClient) -> None:
    assert str(await kubo_client.block_put(dag_cbor.encode(None), "cbor")) == HOLIUM_NULL


async def test_block_put_pin(kubo_client: KuboClient) -> None:
    cid = await kubo_client.block_put(os.urandom(64), pin=True)
    assert await kubo_client.pin_ls(cid) == {cid: "recursive"}


async def test_a_write_behind_is_read_by_every_later_call(kubo_client: KuboClient) -> None:
    """``write_behind``: the write runs in the background, and any later call of the client waits for it (the node
    reads what it answered with); the write's own calls do not wait for themselves."""
    data = os.urandom(100)
    cid = blake3_cid(data, "raw")
    started, release = asyncio.Event(), asyncio.Event()

    async def put_later() -> list[CID]:
        started.set()
        await release.wait()  # still writing when the read below is made
        return await kubo_client.block_put_many([data], codec="raw")

    task = kubo_client.write_behind(put_later())
    await started.wait()
    asked = kubo_client.calls["block/get"]
    read = asyncio.ensure_future(kubo_client.block_get(cid, offline=True))
    await asyncio.sleep(0)  # the read's first step: up to its wait for the write (else up to Kubo's answer)
    assert not read.done() and kubo_client.calls["block/get"] == asked  # it has not asked Kubo
    release.set()
    assert await read == data
    assert task.done() and await task == [cid]


async def test_block_get_offline_missing_is_not_found(kubo_client: KuboClient) -> None:
    with pytest.raises(KuboNotFound, match="not found locally"):
        await kubo_client.block_get(blake3_cid(os.urandom(16), "raw"), offline=True)


# --- DAG --------------------------------------------------------------------------------


async def test_dag_put_get(kubo_client: KuboClient) -> None:
    doc = {"name": uuid.uuid4().hex, "n": 1}
    cid = await kubo_client.dag_put(json.dumps(doc).encode(), input_codec="dag-json")
    assert str(cid).startswith("bafyr4i")  # dag-cbor, blake3
    assert cid == blake3_cid(dag_cbor.encode(doc), "dag-cbor")  # Kubo's encoding is ours, byte for byte
    assert json.loads(await kubo_client.dag_get(cid)) == doc
    assert await kubo_client.dag_get(cid, output_codec="dag-cbor") == dag_cbor.encode(doc)
    assert await kubo_client.pin_ls(cid) == {cid: "recursive"}  # dag put pins by default here

    cbor = dag_cbor.encode({"x": uuid.uuid4().hex})
    assert await kubo_client.dag_put(cbor, pin=False) == blake3_cid(cbor, "dag-cbor")
    leaf = await kubo_client.dag_put(cbor, store_codec="cbor", pin=False)
    assert leaf == blake3_cid(cbor, "cbor")


async def test_dag_put_refuses_non_canonical_bytes(kubo_client: KuboClient) -> None:
    # {"b": 1, "a": 2} with keys out of DAG-CBOR order: Kubo re-encodes, so its CID is not the
    # hash of our bytes, and we say so rather than hand back a CID of bytes we never had.
    non_canonical = bytes.fromhex("a2616201616102")
    with pytest.raises(KuboCIDMismatch):
        await kubo_client.dag_put(non_canonical, pin=False)


async def test_cbor_leaf_under_dag_cbor_list(kubo: ManagedKubo) -> None:
    # Holium's shape: a plain-CBOR (0x51) scalar leaf linked from a DAG-CBOR (0x71) list.
    # Found on 0.42: Kubo follows the 0x71 link into the 0x51 block, so a recursive pin makes the
    # leaf "indirect", and `dag export` carries both blocks (the 0x51 block has no links to follow).
    # A fresh daemon: "indirect" needs every pinned DAG complete (see test_pin_over_incomplete_dag).
    async with kubo.client() as client:
        leaf_bytes = dag_cbor.encode({"v": uuid.uuid4().hex})
        leaf = await client.block_put(leaf_bytes, "cbor")
        root = await client.dag_put(dag_cbor.encode([leaf]), pin=True)
        assert str(leaf).startswith("bafir4i") and str(root).startswith("bafyr4i")
        assert await client.pin_ls(leaf) == {leaf: "indirect"}

        checker = CarVerifier(root)
        async for chunk in client.dag_export(root):
            checker.feed(chunk)
        summary = checker.finish()
        assert summary.roots == [root]
        assert summary.blocks == 2


async def test_dag_export_import_between_daemons(kubo_client: KuboClient, kubo: ManagedKubo) -> None:
    leaf = await kubo_client.block_put(dag_cbor.encode(uuid.uuid4().hex), "cbor")
    root = await kubo_client.dag_put(dag_cbor.encode({"items": [leaf, leaf]}))
    car = await collect(kubo_client.dag_export(root))

    async with kubo.client() as other:
        assert await other.dag_import(car) == [root]
        assert await other.block_get(leaf, offline=True) == await kubo_client.block_get(leaf)
        assert await other.pin_ls(root) == {root: "recursive"}  # pin-roots is on
        # and a CAR can go up as a stream of chunks too
        chunks = [car[i : i + 7] for i in range(0, len(car), 7)]

        async def gen() -> AsyncIterator[bytes]:
            for c in chunks:
                yield c

        assert await other.dag_import(gen(), pin_roots=False) == [root]


# --- files ------------------------------------------------------------------------------


async def test_add_3mib_and_cat(kubo_client: KuboClient, tmp_path: Path) -> None:
    data = os.urandom(3 * MiB)
    res = await kubo_client.add(data, filename="part-0.parquet")
    assert str(res.cid).startswith("bafyb4i")  # dag-pb root, blake3
    assert (res.name, res.file_size) == ("part-0.parquet", len(data))
    assert res.size > len(data)  # Kubo's Size counts the whole DAG
    node = json.loads(await kubo_client.dag_get(res.cid))
    leaves = [CID.decode(link["Hash"]["/"]) for link in node["Links"]]
    assert [str(c)[:7] for c in leaves] == ["bafkr4i"] * 3  # raw leaves, blake3
    assert leaves == [blake3_cid(data[i : i + MiB], "raw") for i in range(0, len(data), MiB)]

    assert await collect(kubo_client.cat(res.cid)) == data
    assert await collect(kubo_client.cat(res.cid, offset=MiB - 5, length=10)) == data[MiB - 5 : MiB + 5]

    # the same bytes from a file and from an async iterator give the same CID
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert (await kubo_client.add(path)).cid == res.cid

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 100_000):
            yield data[i : i + 100_000]

    assert (await kubo_client.add(pieces(), pin=False)).cid == res.cid


@pytest.mark.parametrize("size", [0, 1000, MiB])
async def test_add_single_chunk_is_raw_leaf(kubo_client: KuboClient, size: int) -> None:
    data = os.urandom(size)
    res = await kubo_client.add(data, pin=False)
    assert res.cid == blake3_cid(data, "raw")  # one chunk: the root is the leaf itself
    assert await collect(kubo_client.cat(res.cid)) == data


async def test_add_only_hash_stores_nothing(kubo_client: KuboClient) -> None:
    data = os.urandom(2 * MiB + 3)
    res = await kubo_client.add(data, only_hash=True)
    assert str(res.cid).startswith("bafyb4i")
    with pytest.raises(KuboNotFound):
        await kubo_client.block_stat(res.cid, offline=True)
    assert (await kubo_client.add(data, pin=False)).cid == res.cid


async def test_add_missing_file_is_invalid_input(kubo_client: KuboClient, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        await kubo_client.add(tmp_path / "nope.bin")


async def test_truncated_streams_are_detected(kubo: ManagedKubo) -> None:
    # Take the middle leaf out of the blockstore: Kubo starts answering (200, first MiB), then
    # waits for the block until its timeout and reports that only in an HTTP trailer.
    async with kubo.client() as client:
        data = os.urandom(3 * MiB)
        res = await client.add(data)
        await client.pin_rm(res.cid)
        middle = blake3_cid(data[MiB : 2 * MiB], "raw")
        await client.transport.rpc("block/rm", [("arg", str(middle))])

        received = bytearray()
        with pytest.raises(KuboTruncated, match=f"after {MiB} of {3 * MiB} bytes"):
            async for chunk in client.cat(res.cid, timeout=0.5):
                received += chunk
        assert bytes(received) == data[:MiB]

        with pytest.raises(KuboTruncated, match=str(middle)):
            await collect(client.dag_export(res.cid, timeout=0.5))


# --- pins -------------------------------------------------------------------------------


async def test_pin_add_rm_ls(kubo: ManagedKubo) -> None:
    async with kubo.client() as client:
        cid = await client.block_put(os.urandom(32))
        assert await client.pin_ls(cid) == {}
        assert await client.pin_add(cid) == [cid]
        assert await client.pin_ls(cid) == {cid: "recursive"}
        assert (await client.pin_ls(type="recursive"))[cid] == "recursive"
        assert await client.pin_rm(cid) == [cid]
        assert await client.pin_ls(cid) == {}
        with pytest.raises(KuboNotFound, match="not pinned"):
            await client.pin_rm(cid)
        assert await client.pin_add(cid, recursive=False) == [cid]
        assert await client.pin_ls(cid) == {cid: "direct"}
        await client.pin_rm(cid, recursive=False)
        # Pinned recursively (by another node sharing this Kubo), then directly: it is pinned, not an error.
        await client.pin_add(cid)
        assert await client.pin_add(cid, recursive=False) == [cid]
        assert await client.pin_ls(cid) == {cid: "recursive"}
        await client.pin_rm(cid)


async def test_pin_add_of_missing_cid_times_out(kubo_client: KuboClient) -> None:
    with pytest.raises(KuboTimeout):
        await kubo_client.pin_add(blake3_cid(os.urandom(8), "raw"), timeout=0.3)


async def test_repo_gc(kubo: ManagedKubo) -> None:
    async with kubo.client() as client:
        kept = await client.block_put(os.urandom(10), pin=True)
        dropped = await client.block_put(os.urandom(10))
        removed = await client.blocks.gc()
        assert dropped in removed and kept not in removed
        with pytest.raises(KuboNotFound):
            await client.block_get(dropped, offline=True)


async def test_pin_over_incomplete_dag(kubo: ManagedKubo) -> None:
    # Found on 0.42: `dag put --pin` pins a root whose linked dag-cbor block is absent, at once and
    # without fetching it. Such a pin makes `repo gc` abort, and Kubo's own `pin ls <cid>` for any
    # other CID walks it over the network until its timeout (offline or not); our pin_ls answers at
    # once: exactly for recursive/direct pins, with an error when "indirect" cannot be known. Its calls are given
    # an hour: a walk of the absent block would hold them until the 60 s bound below (only a hang fails it).
    async with kubo.client(timeout=3600) as client, asyncio.timeout(60):
        absent = blake3_cid(os.urandom(8), "dag-cbor")
        root = await client.dag_put(dag_cbor.encode({"child": absent}), pin=True)
        assert await client.pin_ls(root) == {root: "recursive"}
        other = await client.block_put(os.urandom(8))
        assert await client.pin_ls(other, type="recursive") == {}
        with pytest.raises(KuboRPCError, match="a pinned DAG is incomplete"):
            await client.pin_ls(other)  # is it pinned indirectly? cannot be known
        with pytest.raises(KuboRPCError, match="garbage collection aborted"):
            await client.blocks.gc()
        with pytest.raises(KuboTimeout):  # a real pin add wants every block
            await client.pin_add(root, timeout=0.3)


# --- keys and IPNS ----------------------------------------------------------------------


async def test_key_gen_list(kubo_client: KuboClient) -> None:
    name = f"ds-{uuid.uuid4().hex[:8]}"
    key = await kubo_client.keys.gen(name)
    assert key.name == name and key.id.startswith("k51")
    keys = await kubo_client.keys.ls()
    assert key in keys and any(k.name == "self" for k in keys)
    with pytest.raises(KuboRPCError, match="already exists"):
        await kubo_client.keys.gen(name)


async def test_name_publish_resolve(kubo_client: KuboClient) -> None:
    key = await kubo_client.keys.gen(f"ds-{uuid.uuid4().hex[:8]}")
    v1 = await kubo_client.dag_put(dag_cbor.encode({"v": 1, "n": uuid.uuid4().hex}))
    published = await kubo_client.name_publish(v1, key=key.name, lifetime="1h")
    assert (published.name, published.value) == (key.id, f"/ipfs/{v1}")
    assert await kubo_client.names.resolve(key.id) == f"/ipfs/{v1}"
    v2 = await kubo_client.dag_put(dag_cbor.encode({"v": 2, "n": uuid.uuid4().hex}))
    await kubo_client.name_publish(v2, key=key.name, lifetime=3600)
    assert await kubo_client.names.resolve(f"/ipns/{key.id}", nocache=True) == f"/ipfs/{v2}"


async def test_name_resolve_unknown_is_not_found(kubo: ManagedKubo) -> None:
    async with kubo.client() as client:
        stranger = (await client.keys.gen("stranger")).id
        with pytest.raises(KuboNotFound, match="could not resolve name"):
            await client.names.resolve(stranger, timeout=5)


# --- swarm and routing between two daemons ----------------------------------------------


async def test_swarm_provide_findprovs_between_two_daemons(
    kubo: ManagedKubo, kubo_factory: Callable[..., Awaitable[ManagedKubo]]
) -> None:
    other = await kubo_factory()
    async with kubo.client() as a, other.client() as b:
        data = os.urandom(2 * MiB)
        res = await a.add(data)
        with pytest.raises(KuboRPCError, match="no connected peers"):
            await a.routing_provide(res.cid)

        await b.swarm_connect(kubo.swarm_addrs[0])
        assert [p.id for p in await b.swarm_peers()] == [kubo.peer_id]
        assert [p.id for p in await a.swarm_peers()] == [other.peer_id]

        assert await a.routing_provide(res.cid) == 1
        assert await a.routing_provide(res.cid, recursive=True) == 3  # root + 2 leaves

        async def b_finds_a() -> bool:
            return kubo.peer_id in [p.id for p in await b.routing_findprovs(res.cid, num=1, timeout=2)]

        await eventually(b_finds_a, what="provider record reaching the other daemon")
        # and the bytes come over bitswap
        assert await collect(b.cat(res.cid, timeout=10)) == data
        nobody = blake3_cid(os.urandom(8), "raw")
        assert await b.routing_findprovs(nobody, timeout=1) == []


# --- errors -----------------------------------------------------------------------------


async def test_malformed_cid(kubo_client: KuboClient) -> None:
    with pytest.raises(InvalidInput, match="invalid CID"):  # typed methods check CIDs before asking
        await kubo_client.block_get("bafy-not-a-cid")
    with pytest.raises(KuboRPCError, match='Kubo dag/get: invalid path "notacid"') as info:
        await kubo_client.transport.rpc("dag/get", [("arg", "notacid")])
    assert info.value.kubo_message.startswith("invalid path")
    assert info.value.code == 0 and info.value.status == 502


async def test_missing_cid_times_out(kubo_session: ManagedKubo) -> None:
    """A call's own timeout ends it, not the client's (an hour here; 60 s is a bound only a hang fails)."""
    missing = blake3_cid(os.urandom(16), "raw")
    async with kubo_session.client(timeout=3600) as client, asyncio.timeout(60):
        with pytest.raises(KuboTimeout) as info:
            await client.block_get(missing, timeout=0.3)
    assert info.value.status == 504 and info.value.timeout == 0.3 and "within 0.3 s" in info.value.message


async def test_unknown_endpoint(kubo_client: KuboClient) -> None:
    with pytest.raises(KuboRPCError, match="unknown endpoint") as info:
        await kubo_client.transport.rpc("no/such/thing")
    assert info.value.http_status == 404


async def test_closed_port_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with KuboClient(f"/ip4/127.0.0.1/tcp/{port}") as client:
        with pytest.raises(KuboUnreachable, match=f"127.0.0.1:{port}") as info:
            await client.id()
    assert "is the Kubo daemon running" in str(info.value)


async def test_api_url_can_move(kubo: ManagedKubo) -> None:
    """As after a managed Kubo's restart on another port: the same client (and secret) follows it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with kubo.client() as client:
        client.api_url = f"http://127.0.0.1:{port}"
        with pytest.raises(KuboUnreachable):
            await client.id()
        client.api_url = kubo.api_url
        assert (await client.id()).id == kubo.peer_id
