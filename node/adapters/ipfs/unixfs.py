"""The UnixFS CID of a file's bytes, computed here exactly as Kubo's ``add`` builds it with Cairn's parameters
(DESIGN.md "bulk data": CIDv1, BLAKE3, raw leaves, fixed 1 MiB chunks; balanced layout, 174 links per node).

So a fetched slice can be hashed while it streams in, before it enters the CID-keyed cache, with no second pass
over the file and no round trip to Kubo. ``tests/integration/test_slice_cache.py`` compares it with Kubo's
``add --only-hash`` over generated sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import blake3
from multiformats import CID

from node.domain.model.cid import blake3_cid, cid_for

CHUNK = 1 << 20  # node.adapters.ipfs.rpc_files.CHUNK_SIZE
MAX_LINKS = 174  # boxo's helpers.DefaultLinksPerBlock


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _cid(codec: str, data: bytes) -> CID:
    return cid_for(data, codec)


class _Node:
    """A built node: its CID, the file bytes under it, and its Tsize (encoded size of the whole sub-DAG)."""

    __slots__ = ("cid", "file_size", "tsize")

    def __init__(self, cid: CID, file_size: int, tsize: int) -> None:
        self.cid, self.file_size, self.tsize = cid, file_size, tsize


Sink = list[tuple[CID, bytes]] | None  # where the blocks built go, when they are wanted (not only the CID)


def _branch(children: list[_Node], sink: Sink = None) -> _Node:
    """A dag-pb UnixFS File node over ``children`` (PBNode: Links first, then Data; PBLink: Hash, Name "", Tsize)."""
    links = b"".join(_field(2, _field(1, bytes(c.cid)) + _field(2, b"") + b"\x18" + _varint(c.tsize)) for c in children)
    size = sum(c.file_size for c in children)
    data = b"\x08\x02" + b"\x18" + _varint(size) + b"".join(b"\x20" + _varint(c.file_size) for c in children)
    block = links + _field(1, data)
    cid = _cid("dag-pb", block)
    if sink is not None:
        sink.append((cid, block))
    return _Node(cid, size, len(block) + sum(c.tsize for c in children))


class UnixfsHasher:
    """Feed a file's bytes in any pieces; ``cid()`` gives the CID Kubo's ``add`` would."""

    def __init__(self) -> None:
        self._leaves: list[_Node] = []
        self._hasher = blake3.blake3()
        self._filled = 0

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            take = min(CHUNK - self._filled, len(view))
            self._hasher.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == CHUNK:
                self._cut()

    def _cut(self) -> None:
        digest = self._hasher.digest()
        self._leaves.append(_Node(blake3_cid(digest, "raw"), self._filled, self._filled))
        self._hasher, self._filled = blake3.blake3(), 0

    def cid(self) -> CID:
        if self._filled or not self._leaves:  # the last, partial chunk (an empty file is one empty raw leaf)
            self._cut()
        if len(self._leaves) == 1:
            return self._leaves[0].cid
        return _balanced(self._leaves).cid


def bytes_cid(data: bytes | memoryview) -> CID:
    """The UnixFS CID of ``data`` held in memory."""
    hasher = UnixfsHasher()
    hasher.update(data)
    return hasher.cid()


def read_cid(read: Callable[[int], bytes]) -> CID:
    """The UnixFS CID of what ``read(n)`` gives until it gives nothing (a file object's ``read``)."""
    hasher = UnixfsHasher()
    while piece := read(CHUNK):
        hasher.update(piece)
    return hasher.cid()


def file_cid(path: Path) -> CID:
    """The UnixFS CID of a local file (read in 1 MiB pieces: flat memory)."""
    with open(path, "rb") as f:
        return read_cid(f.read)


def _balanced(leaves: list[_Node], sink: Sink = None) -> _Node:
    """boxo's balanced layout: the smallest depth that holds every leaf, full subtrees filled left to right."""
    depth, capacity = 1, MAX_LINKS
    while capacity < len(leaves):
        depth, capacity = depth + 1, capacity * MAX_LINKS
    return _fill(leaves, 0, depth, sink)[0]


def _fill(leaves: list[_Node], start: int, depth: int, sink: Sink) -> tuple[_Node, int]:
    """The node of ``depth`` over leaves from ``start``, and the index after its last leaf."""
    children: list[_Node] = []
    i = start
    while len(children) < MAX_LINKS and i < len(leaves):
        if depth == 1:
            children.append(leaves[i])
            i += 1
        else:
            child, i = _fill(leaves, i, depth - 1, sink)
            children.append(child)
    return _branch(children, sink), i


def file_dag(data: bytes | memoryview) -> tuple[CID, int, list[tuple[CID, bytes]]]:
    """The UnixFS DAG Kubo's ``add`` builds over ``data``: its root, the root's Tsize (the ``Size`` Kubo reports:
    every block's bytes) and the blocks themselves, leaves first."""
    view = memoryview(data)
    blocks = [
        (cid_for(bytes(view[i : i + CHUNK]), "raw"), bytes(view[i : i + CHUNK])) for i in range(0, len(view), CHUNK)
    ]
    blocks = blocks or [(cid_for(b"", "raw"), b"")]  # an empty file is one empty raw leaf
    leaves = [_Node(c, len(b), len(b)) for c, b in blocks]
    root = leaves[0] if len(leaves) == 1 else _balanced(leaves, blocks)
    return root.cid, root.tsize, blocks
