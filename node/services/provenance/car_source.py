"""A proof's CAR file as the block source of the offline checks, with no node and no network.

The file is read strictly before any check runs (docs/provenance.md "Proofs"): a CARv1 header that names exactly
one root; then sections to the last byte, each a minimal length varint, a CID and bytes that hash to that CID,
no CID twice; nothing cut and nothing after the last section. Only where each block lies is kept, so a proof with
big slices is not held in memory. Reading a block re-checks its bytes (the file may change under us).

A slice is a UnixFS file (dag-pb nodes over raw leaves, DESIGN.md "bulk data"): its bytes are put back together
from the CAR's blocks (``unixfs_bytes``) into a temporary file, hashed as they are written with the same
``UnixfsHasher`` a node uses, and compared with the slice's CID before Parquet reads them.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
from multiformats import CID

from node.adapters.ipfs.car import cid_length, parse_header, read_varint
from node.adapters.ipfs.unixfs import UnixfsHasher
from node.domain.model import cid_str
from node.domain.model.cid import verify_block
from node.services.provenance.verify import FAILED, UNCHECKED, Report, read_table
from node.support.errors import CairnError, InvalidInput, ProofLacks
from node.support.errors import ProofMalformed as BadCar

MAX_SECTION = 8 << 20  # a block is at most 2 MiB in Kubo (bitswap); anything far past that is not a block
MAX_DEPTH = 32  # a balanced UnixFS DAG of 174 links per node is 4 deep at 1 TiB
RAW, DAG_PB = 0x55, 0x70
UNIXFS_RAW, UNIXFS_FILE = 0, 2


@dataclass
class CarIndex:
    path: Path
    root: CID
    size: int
    blocks: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # CID bytes -> (offset, length) of data


def _varint(f: BinaryIO, pos: int, what: str) -> tuple[int, int]:
    """A minimal unsigned varint at ``pos`` (at most 10 bytes): (value, next position)."""
    value = 0
    for n in range(10):
        b = f.read(1)
        if not b:
            raise BadCar(f"the file ends inside the length of {what} (byte {pos + n})")
        value |= (b[0] & 0x7F) << (7 * n)
        if not b[0] & 0x80:
            if n and b[0] == 0:
                raise BadCar(f"the length of {what} at byte {pos} is not minimally encoded")
            return value, pos + n + 1
    raise BadCar(f"the length of {what} at byte {pos} is not a varint")


def index_car(path: Path) -> CarIndex:
    """Read the whole file strictly (see the module's doc); raise BadCar naming the first fault."""
    try:
        f = open(path, "rb")  # noqa: SIM115  closed below; a context manager would hide the OSError's place
    except OSError as e:
        raise BadCar(f"cannot read {path}: {e.strerror}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        length, pos = _varint(f, 0, "the header")
        header = f.read(length)
        if length == 0 or len(header) < length:
            raise BadCar("the file ends inside the CAR header")
        try:
            roots = parse_header(header)
        except CairnError as e:
            raise BadCar(e.message) from None
        if len(roots) != 1:
            raise BadCar(f"a proof's CAR header names exactly one root (the receipt), not {len(roots)}")
        index = CarIndex(path, roots[0], size)
        pos += length
        while pos < size:
            pos = _section(f, pos, index)
        return index


def _section(f: BinaryIO, pos: int, index: CarIndex) -> int:
    """Read the section at ``pos`` into ``index``; the position after it."""
    length, start = _varint(f, pos, f"the section at byte {pos}")
    if not 0 < length <= MAX_SECTION:
        raise BadCar(f"the section at byte {pos} claims {length} bytes (a block is 1 to {MAX_SECTION})")
    section = f.read(length)
    if len(section) < length:
        raise BadCar(f"the file ends inside the section at byte {pos} ({len(section)} of {length} bytes)")
    try:
        n = cid_length(section, 0)
        cid = CID.decode(section[:n])
        if n >= length:
            raise ValueError("no block after the CID")
    except (CairnError, ValueError, KeyError, IndexError) as e:
        raise BadCar(f"the section at byte {pos} does not start with a CID ({e})") from None
    try:
        verify_block(cid, section[n:])
    except CairnError as e:
        raise BadCar(f"the section at byte {pos}: {e.message}") from None
    key = bytes(cid)
    if key in index.blocks:
        raise BadCar(f"the block {cid_str(cid, keep_v0=True)} is in the file twice (byte {pos})")
    index.blocks[key] = (start + n, length - n)
    return start + length


class CarSource:
    """Blocks from an indexed proof file; ``read`` keeps every block the checks read (to find unused ones)."""

    absent = "not in the proof (exported with --no-data)"

    def __init__(self, index: CarIndex, tmp_dir: Path | None = None) -> None:
        self.index, self.tmp_dir = index, tmp_dir
        self.read: set[bytes] = set()
        # A proof with data holds every slice; one without holds none (its slices' checks are unchecked, never ok).
        # So a proof that holds some slice blocks and lacks a slice's root is cut, and that is a failure.
        self.carries_data = any(CID.decode(k).codec.code in (RAW, DAG_PB) for k in index.blocks)
        self._file = open(index.path, "rb")  # noqa: SIM115  closed by close()

    def close(self) -> None:
        self._file.close()

    def has(self, cid: CID) -> bool:
        return bytes(cid) in self.index.blocks

    def block_now(self, cid: CID) -> bytes:
        """The block's bytes, re-checked; ProofLacks (a failed check, not an unchecked one) if the proof lacks
        it: a proof must hold every block its checks read."""
        where = self.index.blocks.get(bytes(cid))
        if where is None:
            raise ProofLacks(f"the proof lacks the block {cid_str(cid, keep_v0=True)} that its checks read")
        self.read.add(bytes(cid))
        self._file.seek(where[0])
        data = self._file.read(where[1])
        verify_block(cid, data)  # HashMismatch: the file changed since it was indexed
        return data

    async def block(self, cid: CID) -> bytes:
        return self.block_now(cid)

    async def table(self, cid: CID, r: Report) -> pa.Table | None:
        if not self.has(cid):  # a proof may leave slices out (--no-data): those checks cannot be made
            if self.carries_data:
                r.add("slice held", cid, FAILED, "the proof holds slices, but not this one")
            else:
                r.add("slice held", cid, UNCHECKED, self.absent)
            return None
        fd, name = tempfile.mkstemp(prefix="proof-slice-", suffix=".parquet", dir=self.tmp_dir)
        path = Path(name)
        try:
            hasher = UnixfsHasher()
            try:
                with os.fdopen(fd, "wb") as f:
                    for piece in unixfs_bytes(cid, self.block_now):
                        f.write(piece)
                        hasher.update(piece)
            except CairnError as e:
                r.add("slice held", cid, FAILED, e.message)
                return None
            if not r.compare("slice bytes give its CID", cid, cid_str(cid), cid_str(hasher.cid()), "from the proof"):
                return None
            return await read_table(path, cid, r)
        finally:
            await asyncio.to_thread(path.unlink, missing_ok=True)


# -- UnixFS files (dag-pb PBNode over raw leaves), read back --------------------------------------------------


def _fields(msg: bytes | memoryview) -> list[tuple[int, int | memoryview]]:
    """A protobuf message's fields in order: (number, varint value or length-delimited bytes)."""
    view, pos = memoryview(msg), 0
    out: list[tuple[int, int | memoryview]] = []
    while pos < len(view):
        r = read_varint(view, pos)
        if r is None:
            raise InvalidInput("a malformed dag-pb block")
        key, pos = r
        wire = key & 7
        r = read_varint(view, pos) if wire in (0, 2) else None
        if r is None:
            raise InvalidInput("a malformed dag-pb block (a field of a type UnixFS does not use)")
        value, pos = r
        if wire == 2:
            if pos + value > len(view):
                raise InvalidInput("a malformed dag-pb block (a field runs past its end)")
            out.append((key >> 3, view[pos : pos + value]))
            pos += value
        else:
            out.append((key >> 3, value))
    return out


def _file_node(data: bytes) -> tuple[bytes, list[CID]]:
    """A dag-pb UnixFS file node: (its own data bytes, its children's CIDs in order)."""
    links: list[CID] = []
    unixfs: memoryview | None = None
    for number, value in _fields(data):
        if number == 2 and isinstance(value, memoryview):  # PBNode.Links
            hashes = [v for n, v in _fields(value) if n == 1 and isinstance(v, memoryview)]
            if len(hashes) != 1:
                raise InvalidInput("a dag-pb link without one hash")
            links.append(CID.decode(bytes(hashes[0])))
        elif number == 1 and isinstance(value, memoryview):  # PBNode.Data: a UnixFS Data message
            unixfs = value
    if unixfs is None:
        raise InvalidInput("a dag-pb node with no UnixFS data")
    kind, own = None, b""
    for number, value in _fields(unixfs):
        if number == 1 and isinstance(value, int):
            kind = value
        elif number == 2 and isinstance(value, memoryview):
            own = bytes(value)
    if kind not in (UNIXFS_RAW, UNIXFS_FILE):
        raise InvalidInput(f"a dag-pb node that is not a UnixFS file (type {kind})")
    return own, links


def unixfs_bytes(root: CID, block: Callable[[CID], bytes]) -> Iterator[bytes]:
    """The file's bytes under ``root``, in order, from ``block`` (which checks each block against its CID)."""
    stack: list[tuple[CID, int]] = [(root, 0)]
    while stack:
        cid, depth = stack.pop()
        data = block(cid)
        if cid.codec.code == RAW:
            yield data
            continue
        if cid.codec.code != DAG_PB or depth >= MAX_DEPTH:
            raise InvalidInput(f"{cid_str(cid, keep_v0=True)} is not part of a UnixFS file (or nests too deep)")
        try:
            own, links = _file_node(data)
        except (ValueError, KeyError) as e:  # a link that is not a CID
            raise InvalidInput(f"{cid_str(cid, keep_v0=True)}: a malformed dag-pb link ({e})") from None
        if own:
            yield own
        stack.extend((c, depth + 1) for c in reversed(links))
