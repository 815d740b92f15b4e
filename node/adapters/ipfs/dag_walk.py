"""Reading DAGs as Kubo does, IO-free: a block's links in order, a UnixFS node's bytes and children, CAR sections.

The in-memory block store (``node.adapters.ipfs.memory_blocks``) walks with these, so that its ``refs``, ``dag export``,
``cat`` and
pins see the same blocks in the same order as Kubo's (depth first, each block once, links in the order the block
holds them: a DAG-CBOR map's in its encoded key order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import dag_cbor
from multiformats import CID

from node.adapters.ipfs.car import DAG_CBOR, DAG_PB, RAW, _pb_fields, dag_pb_links, read_varint


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def links(cid: CID, data: bytes) -> list[CID]:
    """The CIDs ``data`` links to, in its order (identity CIDs carry their data: no block, not listed)."""
    code = cid.codec.code
    if code == DAG_PB:
        found = dag_pb_links(data)
    elif code == DAG_CBOR:
        found = list(_cbor_links(dag_cbor.decode(data)))
    else:
        found = []
    return [c for c in found if c.hashfun.name != "identity"]


def _cbor_links(value: Any) -> Iterator[CID]:
    if isinstance(value, CID):
        yield value
    elif isinstance(value, dict):
        for v in value.values():  # decoded in the block's key order
            yield from _cbor_links(v)
    elif isinstance(value, list):
        for v in value:
            yield from _cbor_links(v)


def walk(root: CID, get: Callable[[CID], bytes | None]) -> Iterator[tuple[CID, bytes | None]]:
    """Depth first from ``root``, each block once (by multihash, as a blockstore keys them): (cid, bytes), bytes
    None for a block ``get`` lacks (whose links then stay unknown)."""
    seen: set[bytes] = set()
    stack = [root]
    while stack:
        cid = stack.pop()
        if bytes(cid.digest) in seen:
            continue
        seen.add(bytes(cid.digest))
        data = get(cid)
        yield cid, data
        if data is not None:
            stack.extend(reversed(links(cid, data)))


def unixfs_node(cid: CID, data: bytes) -> tuple[bytes, list[CID]] | None:
    """A UnixFS node's own bytes and its children in order; None when it is no UnixFS file node."""
    code = cid.codec.code
    if code == RAW:
        return data, []
    if code != DAG_PB:
        return None
    inline = b"".join(bytes(d) for pb in _pb_fields(data, 1) for d in _pb_fields(pb, 2))
    return inline, dag_pb_links(data)


def unixfs_size(cid: CID, data: bytes) -> int | None:
    """The file size a UnixFS node says it holds (what Kubo announces before reading the leaves); None when it
    is no UnixFS file node."""
    if cid.codec.code == RAW:
        return len(data)
    if cid.codec.code != DAG_PB:
        return None
    for pb in _pb_fields(data, 1):
        fields = _pb_varints(pb)
        if 3 in fields:
            return fields[3]
        return sum(len(d) for d in _pb_fields(pb, 2))
    return None


def _pb_varints(msg: memoryview) -> dict[int, int]:
    """The varint fields of a protobuf message (the first of each number): what ``_pb_fields`` skips."""
    out: dict[int, int] = {}
    pos = 0
    while pos < len(msg):
        r = read_varint(msg, pos)
        if r is None:
            break
        key, pos = r
        number, wire = key >> 3, key & 7
        if wire == 0:
            r = read_varint(msg, pos)
            if r is None:
                break
            out.setdefault(number, r[0])
            pos = r[1]
        elif wire == 2:
            r = read_varint(msg, pos)
            if r is None:
                break
            pos = r[1] + r[0]
        else:
            pos += 8 if wire == 1 else 4
    return out


def car_header(roots: list[CID]) -> bytes:
    fields: dict[str, Any] = {"roots": roots, "version": 1}
    header = dag_cbor.encode(fields)
    return _varint(len(header)) + header


def car_section(cid: CID, data: bytes) -> bytes:
    section = bytes(cid) + data
    return _varint(len(section)) + section
