"""The CAR stream check that makes up for the trailer aiohttp drops."""

from __future__ import annotations

import dag_cbor
import pytest
from multiformats import CID, multihash

from node.adapters.ipfs import CarVerifier
from node.adapters.ipfs.car import CarHeaderReader, dag_pb_links
from node.support.errors import KuboCIDMismatch, KuboTruncated


def cid_of(data: bytes, codec: str, hashfun: str = "blake3") -> CID:
    size = 32 if hashfun == "blake3" else None
    return CID("base32", 1, codec, multihash.get(hashfun).digest(data, size=size))


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def section(payload: bytes) -> bytes:
    return varint(len(payload)) + payload


def car(roots: list[CID], blocks: list[tuple[CID, bytes]]) -> bytes:
    out = section(dag_cbor.encode({"roots": roots, "version": 1}))
    return out + b"".join(section(bytes(c) + data) for c, data in blocks)


def graph() -> tuple[CID, list[tuple[CID, bytes]]]:
    leaf = dag_cbor.encode("scalar")
    leaf_cid = cid_of(leaf, "cbor")
    raw = b"x" * 5000
    raw_cid = cid_of(raw, "raw", "sha2-256")
    root = dag_cbor.encode([leaf_cid, {"data": raw_cid}])
    root_cid = cid_of(root, "dag-cbor")
    return root_cid, [(root_cid, root), (leaf_cid, leaf), (raw_cid, raw)]


def verify(stream: bytes, root: CID, step: int = 1 << 16) -> CarVerifier:
    checker = CarVerifier(root)
    for i in range(0, len(stream), step):
        checker.feed(stream[i : i + step])
    return checker


@pytest.mark.parametrize("step", [1, 7, 1 << 16])
def test_whole_dag_passes_however_chunked(step: int) -> None:
    root, blocks = graph()
    summary = verify(car([root], blocks), root, step).finish()
    assert summary.roots == [root] and summary.blocks == 3


def test_missing_linked_block() -> None:
    root, blocks = graph()
    with pytest.raises(KuboTruncated, match=str(blocks[2][0])):
        verify(car([root], blocks[:2]), root).finish()


def test_cut_inside_a_block() -> None:
    root, blocks = graph()
    with pytest.raises(KuboTruncated, match="inside a block"):
        verify(car([root], blocks)[:-10], root).finish()


def test_no_header() -> None:
    with pytest.raises(KuboTruncated, match="before its header"):
        CarVerifier().finish()


def test_wrong_root() -> None:
    root, blocks = graph()
    with pytest.raises(KuboTruncated, match="do not include"):
        verify(car([blocks[1][0]], blocks), root)


def test_corrupt_block() -> None:
    root, blocks = graph()
    leaf_cid, _ = blocks[1]
    with pytest.raises(KuboCIDMismatch, match="do not hash"):
        verify(car([root], [blocks[0], (leaf_cid, b"\xf5"), blocks[2]]), root)


def test_dag_pb_links() -> None:
    a, b = cid_of(b"a", "raw"), cid_of(b"b", "raw")
    link = lambda c, size: (  # noqa: E731 -- PBLink{Hash=1, Name=2, Tsize=3}
        b"\x0a" + varint(len(bytes(c))) + bytes(c) + b"\x12\x00" + b"\x18" + varint(size)
    )
    links = [link(a, 1), link(b, 300)]
    node = b"".join(b"\x12" + varint(len(lk)) + lk for lk in links) + b"\x0a\x04\x08\x02\x18\x02"
    assert dag_pb_links(node) == [a, b]
    root = cid_of(node, "dag-pb")
    summary = verify(car([root], [(root, node), (a, b"a"), (b, b"b")]), root).finish()
    assert summary.blocks == 3
    with pytest.raises(KuboTruncated):
        verify(car([root], [(root, node), (a, b"a")]), root).finish()


def test_header_reader() -> None:
    root, blocks = graph()
    stream = car([root], blocks)
    reader = CarHeaderReader()
    for i in range(len(stream)):
        reader.feed(stream[i : i + 1])
    assert reader.roots == [root]
