"""Incremental CARv1 check for ``dag export`` streams.

Why: when Kubo fails in the middle of a streamed answer (a block it cannot fetch, its ``timeout=``
firing) it has already sent ``200 OK``, so it reports the error only in the ``X-Stream-Error`` HTTP
trailer, and aiohttp drops trailers: the body just ends early. Kubo's maintainers say it is up to the
client to verify a CAR (ipfs/kubo#9333). So we check the stream as it passes: every block must hash
to its CID, and when it ends every block linked from the root (dag-cbor and dag-pb links) must have
come, else the export was cut short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dag_cbor
from multiformats import CID

from node.domain.model.cid import cid_str, same_cid, verify_block
from node.support.errors import HashMismatch, InvalidCID, KuboCIDMismatch, KuboTruncated

RAW, CBOR, DAG_PB, DAG_CBOR = 0x55, 0x51, 0x70, 0x71
NO_LINKS = {RAW, CBOR}


def check_block(cid: CID, data: bytes) -> None:
    """Raise KuboCIDMismatch unless ``data`` hashes to ``cid``: the model's check, in this layer's error."""
    try:
        verify_block(cid, data)
    except HashMismatch:
        why = f"Kubo returned {len(data)} bytes for {cid} that do not hash to it"
        raise KuboCIDMismatch(cid, None, message=why) from None
    except InvalidCID as e:  # a hash function we cannot run
        raise KuboCIDMismatch(cid, None, message=f"cannot verify the block {cid}: {e}") from None


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int] | None:
    """(value, next position), or None when the buffer ends inside the varint."""
    value = shift = 0
    while pos < len(buf):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise KuboTruncated("malformed CAR: varint too long")
    return None


def cid_length(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Byte length of the binary CID starting at ``pos`` (the whole CID is in ``buf``)."""
    if buf[pos] == 0x12 and pos + 1 < len(buf) and buf[pos + 1] == 0x20:
        return 34  # CIDv0: a bare sha2-256 multihash
    p = pos
    for _ in range(3):  # version, codec, multihash code
        r = read_varint(buf, p)
        if r is None:
            raise KuboTruncated("malformed CAR: cut inside a CID")
        p = r[1]
    r = read_varint(buf, p)
    if r is None:
        raise KuboTruncated("malformed CAR: cut inside a CID")
    return r[1] + r[0] - pos


def dag_pb_links(block: bytes) -> list[CID]:
    """Hashes of the Links of a dag-pb node (PBNode field 2, PBLink field 1), protobuf read by hand."""
    return [CID.decode(bytes(h)) for link in _pb_fields(block, 2) for h in _pb_fields(link, 1)]


def _pb_fields(msg: bytes | memoryview, wanted: int) -> list[memoryview]:
    view, pos, out = memoryview(msg), 0, []
    while pos < len(view):
        r = read_varint(view, pos)
        if r is None:
            raise KuboTruncated("malformed dag-pb block")
        key, pos = r
        number, wire = key >> 3, key & 7
        if wire == 0:
            r = read_varint(view, pos)
            if r is None:
                raise KuboTruncated("malformed dag-pb block")
            pos = r[1]
        elif wire == 2:
            r = read_varint(view, pos)
            if r is None or r[1] + r[0] > len(view):
                raise KuboTruncated("malformed dag-pb block")
            length, pos = r
            if number == wanted:
                out.append(view[pos : pos + length])
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise KuboTruncated("malformed dag-pb block")
    return out


def dag_cbor_links(block: bytes) -> list[CID]:
    out: list[CID] = []
    stack: list[Any] = [dag_cbor.decode(block)]
    while stack:
        v = stack.pop()
        if isinstance(v, CID):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


def parse_header(section: bytes) -> list[CID]:
    """Roots of a CARv1 header section (its bytes after the length varint)."""
    try:
        header = dag_cbor.decode(section)
    except Exception as e:
        raise KuboTruncated(f"malformed CAR header: {e}") from e
    if not isinstance(header, dict) or header.get("version") != 1:
        raise KuboTruncated(f"not a CARv1 header: {header!r:.80}")
    roots = header.get("roots") or []
    cids = [r for r in roots if isinstance(r, CID)] if isinstance(roots, list) else []
    if not isinstance(roots, list) or len(cids) != len(roots):
        raise KuboTruncated("malformed CAR header: roots are not a list of CIDs")
    return cids


class CarHeaderReader:
    """Watches the first bytes of a CAR going by and keeps its roots (``roots`` is None until seen)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.roots: list[CID] | None = None

    def feed(self, chunk: bytes) -> None:
        if self.roots is not None:
            return
        self._buf += chunk
        r = read_varint(self._buf, 0)
        if r is not None and len(self._buf) - r[1] >= r[0]:
            self.roots = parse_header(bytes(self._buf[r[1] : r[1] + r[0]]))
            self._buf = bytearray()


@dataclass
class CarSummary:
    roots: list[CID]
    blocks: int = 0
    bytes: int = 0
    unchecked_codecs: set[str] = field(default_factory=set)  # blocks whose links we cannot read


def read_car(data: bytes) -> tuple[list[CID], list[tuple[CID, bytes]]]:
    """A whole CARv1 in memory → (roots, [(cid, block bytes)] in stream order), every block hash-checked."""
    blocks: list[tuple[CID, bytes]] = []
    verifier = CarVerifier(on_block=lambda cid, block: blocks.append((cid, block)))
    verifier.feed(data)
    summary = verifier.finish()
    return summary.roots, blocks


class CarVerifier:
    """Feed it the chunks of a CARv1 stream; ``finish()`` says whether the DAG under ``root`` arrived whole."""

    def __init__(self, root: CID | None = None, on_block: Callable[[CID, bytes], None] | None = None) -> None:
        self.root = root
        self._on_block = on_block  # called with each block once its bytes are checked
        self._buf = bytearray()
        self._header_done = False
        self._seen: set[bytes] = set()
        self._linked: dict[bytes, CID] = {}
        self.summary = CarSummary(roots=[])

    @property
    def pending(self) -> int:
        """Bytes fed but not yet checked: the start of a block whose end has not come (a relay holds them back)."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        self.summary.bytes += len(chunk)
        pos = 0
        while True:
            r = read_varint(self._buf, pos)
            if r is None:
                break
            length, start = r
            if len(self._buf) - start < length:
                break  # the section is not all here yet
            section = bytes(self._buf[start : start + length])
            pos = start + length
            if not self._header_done:
                self._header(section)
            else:
                self._block(section)
        if pos:
            del self._buf[:pos]

    def _header(self, section: bytes) -> None:
        roots = parse_header(section)
        self.summary.roots = roots
        if self.root is not None and not any(same_cid(self.root, r) for r in roots):
            named = [cid_str(r, keep_v0=True) for r in roots]
            raise KuboTruncated(f"CAR roots {named} do not include {cid_str(self.root, keep_v0=True)}")
        self._header_done = True

    def _block(self, section: bytes) -> None:
        n = cid_length(section, 0)
        cid = CID.decode(section[:n])
        data = section[n:]
        check_block(cid, data)  # KuboCIDMismatch when the bytes are not the block
        if self._on_block is not None:
            self._on_block(cid, data)
        self._seen.add(bytes(cid.digest))
        self.summary.blocks += 1
        code = cid.codec.code
        if code in NO_LINKS:
            return
        if code == DAG_CBOR:
            links = dag_cbor_links(data)
        elif code == DAG_PB:
            links = dag_pb_links(data)
        else:
            self.summary.unchecked_codecs.add(cid.codec.name)
            return
        for link in links:
            if link.hashfun.name != "identity":  # inline CIDs carry their data, no block
                self._linked.setdefault(bytes(link.digest), link)

    def finish(self) -> CarSummary:
        """Raise KuboTruncated unless the stream ended on a section boundary with every linked block present."""
        if not self._header_done:
            raise KuboTruncated("CAR stream ended before its header")
        if self._buf:
            raise KuboTruncated(f"CAR stream ended inside a block ({len(self._buf)} stray bytes)")
        # Blocks are keyed by multihash: that is how Kubo's blockstore keeps them too.
        wanted = [self.root] if self.root is not None else list(self.summary.roots)
        missing = [c for c in wanted if bytes(c.digest) not in self._seen]
        missing += [c for d, c in self._linked.items() if d not in self._seen]
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise KuboTruncated(f"CAR stream ended without block {cid_str(missing[0], keep_v0=True)}{more}")
        return self.summary
