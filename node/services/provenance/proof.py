"""A proof anyone can check: one CAR file with everything the offline checks of a receipt read.

``export_proof`` runs the offline checks over this node's Kubo with a source that keeps every block they read
(receipt, execution, its envelopes and slice lists, bytecode, invocation, query, structures, engine profile,
every block of each input version's chain) and lists the slices they would hash; the CAR is those blocks, then
each slice's UnixFS blocks (unless ``data`` is false). So the file holds exactly what the checks need, and
``verify_car`` runs the same checks (``node.services.provenance.verify.Checks``) over the file alone: no node, no
network.
Its root is the receipt's CID (CARv1: docs/provenance.md "Proofs").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import dag_cbor
import pyarrow as pa

from node.adapters.index import Index
from node.adapters.ipfs.car import CarVerifier
from node.domain.model import CID, cid_str
from node.domain.ports.block_store import BlockStore
from node.services.datasets import Datasets
from node.services.provenance.car_source import BadCar, CarSource, index_car
from node.services.provenance.lineage import Fetcher
from node.services.provenance.verify import FAILED, OK, Checked, Checks, OfflineVerify, Report, answer
from node.support.errors import KuboError, KuboUnreachable, NotFound

CAR_TYPE = "application/vnd.ipld.car; version=1"
NEEDED = ("block held", "receipt held")  # an unchecked check of these names: the node lacks a block


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def car_header(root: CID) -> bytes:
    header = dag_cbor.encode({"roots": [root], "version": 1})
    return _varint(len(header)) + header


def car_section(cid: CID, data: bytes) -> bytes:
    key = bytes(cid)
    return _varint(len(key) + len(data)) + key + data


class _Recorder:
    """This node's Kubo (offline), keeping every block read in order; slices are listed, not read."""

    absent = "not held by this node"

    def __init__(self, kubo: BlockStore) -> None:
        self.fetch = Fetcher(kubo, 0.0, offline=True, deadline=float("inf"))
        self.blocks: dict[bytes, tuple[CID, bytes]] = {}
        self.slices: dict[bytes, CID] = {}

    async def block(self, cid: CID) -> bytes:
        data = await self.fetch.block(cid)
        self.blocks.setdefault(bytes(cid), (cid, data))
        return data

    async def table(self, cid: CID, r: Report) -> pa.Table | None:
        self.slices.setdefault(bytes(cid), cid)
        return None


async def export_proof(
    kubo: BlockStore, datasets: Datasets, index: Index, ref: str, *, data: bool = True, timeout: float = 60.0
) -> tuple[CID, AsyncIterator[bytes]]:
    """The receipt ``ref`` leads to, and the proof's CAR as a stream. Everything that can fail for the caller
    (not a CID, not a result, a block this node lacks) fails here, before the first byte is sent."""
    receipt = await OfflineVerify(kubo, datasets, index, {}).receipt_of(ref)
    recorder = _Recorder(kubo)
    report = Report()
    await Checks(recorder).receipt(receipt, report)
    lacking = [c for c in report.checks if c.name in NEEDED]
    if lacking:
        raise NotFound(f"this node does not hold {lacking[0].subject}, which the proof needs: {lacking[0].detail}")
    slices = list(recorder.slices.values()) if data else []
    for cid in slices:
        try:
            await kubo.block_stat(cid, offline=True, timeout=timeout)
        except KuboUnreachable:
            raise
        except KuboError:
            raise NotFound(
                f"this node does not hold the slice {cid_str(cid)}: export the proof without data (--no-data)"
            ) from None
    return receipt, _stream(kubo, receipt, list(recorder.blocks.values()), slices, timeout)


async def _stream(
    kubo: BlockStore, root: CID, blocks: list[tuple[CID, bytes]], slices: list[CID], timeout: float
) -> AsyncIterator[bytes]:
    """The CAR: header, the checks' blocks in the order they were read, then each slice's blocks (once each:
    slices may share leaves). A slice is streamed from Kubo's ``dag export``, never held whole."""
    yield car_header(root)
    sent: set[bytes] = set()
    for cid, data in blocks:
        sent.add(bytes(cid))
        yield car_section(cid, data)
    got: list[tuple[CID, bytes]] = []
    for slice_cid in slices:
        checker = CarVerifier(slice_cid, on_block=lambda c, d: got.append((c, d)))
        async for chunk in kubo.dag_export(slice_cid, offline=True, verify=False, timeout=timeout):
            checker.feed(chunk)  # each block hash-checked as it passes
            out = [car_section(c, d) for c, d in got if bytes(c) not in sent]
            sent.update(bytes(c) for c, _ in got)
            got.clear()
            if out:
                yield b"".join(out)
        checker.finish()  # KuboTruncated if the slice's DAG did not all come: the stream is cut, not finished


class ProofChecked(Checked):
    proof: str  # the proof file checked


async def verify_car(path: Path, tmp_dir: Path | None = None) -> ProofChecked:
    """The offline checks of the receipt a proof file names, over the file alone; the answer has the shape of
    ``OfflineVerify.verify``'s plus ``proof`` (the file). A malformed file is a failed answer, not an error."""
    r = Report()
    try:
        idx = await asyncio.to_thread(index_car, path)
    except (BadCar, Exception) as e:  # noqa: BLE001  a decoder's own error on crafted bytes fails the file too
        why = e.message if isinstance(e, BadCar) else f"{type(e).__name__}: {e}"
        r.add("proof file", str(path), FAILED, why)
        return {**answer("", [r.step("")], False), "proof": str(path)}
    root = cid_str(idx.root, keep_v0=True)
    r.add("proof file", root, OK, f"CARv1, one root, {len(idx.blocks)} blocks each re-hashed, nothing past the last")
    source = CarSource(idx, tmp_dir)
    try:
        await Checks(source).receipt(idx.root, r)
    except Exception as e:  # noqa: BLE001  a verifier fails closed: whatever went wrong is a failure of the proof, said in one line
        r.add("proof", root, FAILED, f"could not be checked: {type(e).__name__}: {e}")
    finally:
        source.close()
    unused = [k for k in idx.blocks if k not in source.read]
    if unused:
        first = cid_str(CID.decode(unused[0]), keep_v0=True)
        r.add("proof holds only what its checks read", root, FAILED, f"{len(unused)} blocks no check read: {first}…")
    else:
        r.add("proof holds only what its checks read", root, OK, f"each of its {len(idx.blocks)} blocks was read")
    return {**answer(root, [r.step(root)], False), "proof": str(path)}
