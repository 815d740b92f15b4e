"""The proof file reader (node/services/provenance/car_source.py): strict CARv1, UnixFS files put back together.

Hand-built files, no node: each fault of docs/provenance.md "Proofs" ("How the file is read") is a BadCar naming
it, and ``verify_car`` turns it into a failed answer, never an exception. The reassembly against Kubo's own
``add`` is tests/integration/test_proof.py::test_unixfs_reassembly_matches_kubo_add.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import dag_cbor
import pytest

from node.adapters.ipfs.unixfs import _field, _varint
from node.domain.model import block_of, cid_str
from node.domain.model.cid import cid_for
from node.services.provenance.car_source import BadCar, CarSource, index_car, unixfs_bytes
from node.services.provenance.proof import car_header, car_section, verify_car

A, B = block_of({"a": 1}), block_of({"b": [1, 2]})


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "p.car"
    path.write_bytes(data)
    return path


def test_a_well_formed_file_is_indexed(tmp_path: Path) -> None:
    data = car_header(A.cid) + car_section(A.cid, A.data) + car_section(B.cid, B.data)
    index = index_car(_write(tmp_path, data))
    assert index.root == A.cid and len(index.blocks) == 2
    source = CarSource(index)
    try:
        assert source.block_now(B.cid) == B.data and source.read == {bytes(B.cid)}
    finally:
        source.close()


@pytest.mark.parametrize(
    ("data", "fault"),
    [
        (b"", "ends inside the length of the header"),
        (b"\x05\xa1", "ends inside the CAR header"),
        (_varint(len(h := dag_cbor.encode({"roots": [A.cid, B.cid], "version": 1}))) + h, "exactly one root"),
        (_varint(len(h := dag_cbor.encode({"roots": [A.cid], "version": 2}))) + h, "not a CARv1 header"),
        (car_header(A.cid) + b"\x00", "claims 0 bytes"),
        (car_header(A.cid) + b"\x85\x00" + bytes(A.cid) + A.data, "not minimally encoded"),
        (car_header(A.cid) + car_section(A.cid, A.data)[:-1], "ends inside the section"),
        (car_header(A.cid) + car_section(A.cid, B.data), "does not match its CID"),
        (car_header(A.cid) + car_section(A.cid, A.data) * 2, "in the file twice"),
        (car_header(A.cid) + _varint(3) + b"\x01\x71\x1e", "does not start with a CID"),
        (car_header(A.cid) + b"\xff" * 12, "not a varint"),
    ],
)
def test_each_fault_is_named(tmp_path: Path, data: bytes, fault: str) -> None:
    with pytest.raises(BadCar, match=fault):
        index_car(_write(tmp_path, data))
    out = asyncio.run(verify_car(tmp_path / "p.car"))
    assert not out["ok"] and out["summary"]["failed"] == 1 and fault in out["executions"][0]["checks"][0]["detail"]


def test_a_root_that_is_not_a_receipt_fails(tmp_path: Path) -> None:
    out = asyncio.run(verify_car(_write(tmp_path, car_header(A.cid) + car_section(A.cid, A.data))))
    checks = {c["check"]: c["status"] for c in out["executions"][0]["checks"]}
    assert not out["ok"] and checks == {
        "proof file": "ok",
        "receipt": "failed",
        "proof holds only what its checks read": "ok",
    }
    out = asyncio.run(verify_car(tmp_path / "absent.car"))
    assert not out["ok"] and "cannot read" in out["executions"][0]["checks"][0]["detail"]


def _file_node(children: list[tuple[bytes, int]]) -> bytes:
    """A dag-pb UnixFS File node over (CID bytes, size) children, as boxo writes it."""
    links = b"".join(_field(2, _field(1, c) + _field(2, b"") + b"\x18" + _varint(n)) for c, n in children)
    total = sum(n for _, n in children)
    unixfs = b"\x08\x02\x18" + _varint(total) + b"".join(b"\x20" + _varint(n) for _, n in children)
    return links + _field(1, unixfs)


def test_unixfs_file_put_back_together(tmp_path: Path) -> None:
    leaves = [b"first leaf ", b"second", b""]
    leaf_cids = [cid_for(x, "raw") for x in leaves]
    inner = _file_node([(bytes(c), len(x)) for c, x in zip(leaf_cids[:2], leaves[:2], strict=True)])
    inner_cid = cid_for(inner, "dag-pb")
    root = _file_node([(bytes(inner_cid), 17), (bytes(leaf_cids[2]), 0)])
    root_cid = cid_for(root, "dag-pb")
    blocks = {cid_str(c): d for c, d in [*zip(leaf_cids, leaves, strict=True), (inner_cid, inner), (root_cid, root)]}
    assert b"".join(unixfs_bytes(root_cid, lambda c: blocks[cid_str(c)])) == b"first leaf second"
    directory = _field(1, b"\x08\x01")  # a UnixFS Directory: not a file
    with pytest.raises(Exception, match="not a UnixFS file"):
        list(unixfs_bytes(cid_for(directory, "dag-pb"), lambda c: directory))
