"""A proof anyone can check (docs/provenance.md "Proofs").

One in-process node on the session's real Kubo with its real Spark worker answers one query over two datasets;
its proof is exported through the API and the real CLI, then checked with no node: in this process
(``verify_car``) and by `cairn verify FILE.car --offline` in a process whose home has no running node, or names a
node at a dead port. Every byte class of the file is then flipped (header, each section's length varint, CID and
data), and the file is cut, extended and thinned: each time the answer is a failure, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.adapters.home import Home
from node.adapters.ipfs import ManagedKubo
from node.adapters.ipfs.car import cid_length, read_varint
from node.domain.model import block_of, cid_str
from node.services.provenance.car_source import CarSource, index_car, unixfs_bytes
from node.services.provenance.proof import car_header, car_section, verify_car
from tests.fixtures.inprocess import add_csv, cli, inprocess_node

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
CITIES = b"city,pop\nParis,2100000\nLyon,520000\n"
TOWNS = b"town,people\nArles,50000\n"
SQL = "SELECT city AS place, pop FROM c UNION ALL SELECT town, people FROM t"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prov(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("proof")
    async with inprocess_node(work / "a", kubo_session) as (node, client):
        await node.spark.ensure()
        for name, data in (("cities", CITIES), ("towns", TOWNS)):
            await add_csv(client, name, data)
        resp = await client.post("/api/v0/query", json={"sql": SQL, "inputs": {"c": "cities", "t": "towns"}})
        answer = await resp.json()
        assert resp.status == 200, answer
        proofs = {}
        for name, query in (("full", ""), ("light", "?data=false")):
            resp = await client.get(f"/api/v0/proof/{answer['receipt']}{query}", headers={"Authorization": ""})
            assert resp.status == 200 and resp.headers["X-Ipfs-Roots"] == answer["receipt"]
            assert resp.headers["Content-Type"].startswith("application/vnd.ipld.car")
            proofs[name] = await resp.read()
        yield {"node": node, "client": client, "answer": answer, "proofs": proofs, "work": work}


def _sections(data: bytes) -> list[tuple[int, int, int, int]]:
    """(start, CID start, data start, end) of every section, the header first (its CID start = data start)."""
    out, pos = [], 0
    while pos < len(data):
        r = read_varint(data, pos)
        assert r is not None
        length, start = r
        n = 0 if not out else cid_length(data, start)
        out.append((pos, start, start + n, start + length))
        pos = start + length
    return out


async def _check(tmp: Path, data: bytes) -> dict[str, Any]:
    path = tmp / "proof.car"
    path.write_bytes(data)
    return await verify_car(path, tmp)


def _statuses(out: dict[str, Any]) -> dict[str, str]:
    return {c["check"]: c["status"] for s in out["executions"] for c in s["checks"]}


async def _cairn(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The real `cairn` process with this home (and no node of it unless the test made one)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "node",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "CAIRN_HOME": str(home), **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_an_exported_proof_verifies_with_no_node(prov: dict[str, Any], tmp_path: Path) -> None:
    answer = prov["answer"]
    path = tmp_path / "result.car"
    code, _, err = await cli(prov["node"], "export-proof", answer["receipt"], "-o", str(path))
    assert code == 0 and path.read_bytes() == prov["proofs"]["full"], err
    out = await verify_car(path, tmp_path)
    checks = [c for s in out["executions"] for c in s["checks"]]
    assert out["ok"] and out["summary"]["failed"] == out["summary"]["unchecked"] == 0, out
    assert all(c["status"] == "ok" for c in checks) and out["cid"] == answer["receipt"]
    names = {c["check"] for c in checks}
    for want in ("proof file", "receipt signature", "bytecode is the query's", "dataset chain signatures",
                 "input 0 logical hash", "input 1 rows", "output logical hash", "output rows",
                 "slice bytes give its CID", "proof holds only what its checks read"):  # fmt: skip
        assert want in names, want
    # The same checks as the node's own offline verify (bar the file's own two, and the cache's)
    resp = await prov["client"].post("/api/v0/verify", json={"cid": answer["receipt"], "offline": True})
    node_names = {c["check"] for c in (await resp.json())["executions"][0]["checks"]}
    assert node_names - {"cached copy gives its CID"} <= names
    # A home whose node is not running, then one whose node.json names a dead port: the CLI asks no node
    dead = Home(tmp_path / "dead")
    dead.init()
    code, text, err = await _cairn(dead.path, "verify", str(path), "--offline")
    assert code == 0 and "0 failed, 0 could not be checked" in text, (text, err)
    dead.write_runtime({"pid": os.getpid(), "api": "http://127.0.0.1:1"})
    code, text, err = await _cairn(dead.path, "verify", str(path), "--offline", "--json")
    assert code == 0 and json.loads(text)["ok"], err
    code, text, _ = await _cairn(dead.path, "status")
    assert code == 1  # the node it names is indeed not there


async def test_no_data_leaves_the_data_checks_unchecked(prov: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "light.car"
    code, _, err = await cli(prov["node"], "export-proof", prov["answer"]["receipt"], "-o", str(path), "--no-data")
    assert code == 0 and path.read_bytes() == prov["proofs"]["light"], err
    assert len(prov["proofs"]["light"]) < len(prov["proofs"]["full"])
    out = await verify_car(path, tmp_path)
    assert not out["ok"] and out["summary"]["failed"] == 0 and out["summary"]["unchecked"] > 0, out
    unchecked = {n for n, s in _statuses(out).items() if s == "unchecked"}
    assert unchecked == {"slice held", "input 0 logical hash", "input 0 rows", "input 1 logical hash",
                         "input 1 rows", "output logical hash", "output rows"}  # fmt: skip
    assert _statuses(out)["receipt signature"] == "ok"
    code, text, _ = await _cairn(tmp_path / "nohome", "verify", str(path), "--offline")
    assert code == 2 and ", 0 failed, " in text


def _positions(data: bytes) -> list[int]:
    """Every byte of the header, and of each section's length varint and CID; its data's first, middle, last."""
    out: list[int] = []
    for i, (start, _, data_at, end) in enumerate(_sections(data)):
        if i == 0:
            out += range(start, end)
        else:
            out += range(start, data_at)
            out += sorted({data_at, (data_at + end) // 2, end - 1})
    return out


async def test_a_flipped_byte_anywhere_fails(prov: dict[str, Any], tmp_path: Path) -> None:
    for name in ("full", "light"):
        data = prov["proofs"][name]
        positions = _positions(data)
        t0 = time.monotonic()
        for pos in positions:
            for mask in (0x01, 0x80) if name == "full" else (0x01,):
                bad = bytearray(data)
                bad[pos] ^= mask
                out = await _check(tmp_path, bytes(bad))
                assert not out["ok"] and out["summary"]["failed"] > 0, (name, pos, mask, out)
        print(f"{name}: {len(data)} bytes, {len(positions)} positions in {time.monotonic() - t0:.1f} s")


async def test_flips_chosen_by_hypothesis_fail(prov: dict[str, Any], tmp_path: Path) -> None:
    """Any position, any XOR mask (hypothesis picks them; the check is run on the module's event loop)."""
    data = prov["proofs"]["full"]
    cases: list[tuple[int, int]] = []

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(pos=st.integers(0, len(data) - 1), mask=st.integers(1, 255))
    def collect(pos: int, mask: int) -> None:
        cases.append((pos, mask))

    collect()
    for pos, mask in cases:
        bad = bytearray(data)
        bad[pos] ^= mask
        out = await _check(tmp_path, bytes(bad))
        assert not out["ok"] and out["summary"]["failed"] > 0, (pos, mask, out)


async def test_cut_extended_or_thinned_files_fail(prov: dict[str, Any], tmp_path: Path) -> None:
    data = prov["proofs"]["full"]
    sections = _sections(data)
    cuts = {1, sections[0][3] - 1, len(data) // 2, len(data) - 1} | {s[0] for s in sections[2:]}
    for cut in sorted(cuts):  # inside the header, inside sections, and on every section boundary
        out = await _check(tmp_path, data[:cut])
        if data[:cut] == prov["proofs"]["light"]:  # every slice cut off: a --no-data proof, whose data is unchecked
            assert not out["ok"] and out["summary"]["failed"] == 0 and out["summary"]["unchecked"] > 0
            continue
        assert not out["ok"] and out["summary"]["failed"] > 0, (cut, out)
    extra = block_of({"not": "needed"})
    first = sections[1]
    for tail in (b"\x00", b"garbage", data[first[0] : first[3]], car_section(extra.cid, extra.data)):
        out = await _check(tmp_path, data + tail)  # garbage, a block twice, a block no check reads
        assert not out["ok"] and out["summary"]["failed"] > 0, (tail, out)
    for start, _, _, end in sections[1:]:  # each block removed in turn
        out = await _check(tmp_path, data[:start] + data[end:])
        assert not out["ok"] and out["summary"]["failed"] > 0, (start, out)
    roots = (await _check(tmp_path, car_header(extra.cid) + data[sections[0][3] :]))["summary"]
    assert roots["failed"] > 0  # another root: the receipt's blocks are then not what the checks read
    code, text, err = await _cairn(tmp_path / "nohome", "verify", str(tmp_path / "proof.car"), "--offline")
    assert code == 1 and "Traceback" not in err and " failed, " in text


async def test_usage_and_refusals(prov: dict[str, Any], tmp_path: Path) -> None:
    client, answer = prov["client"], prov["answer"]
    head = (await (await client.get("/api/v0/datasets/cities")).json())["head"]
    for ref, status in ((head, 400), ("not-a-cid", 400), (cid_str(block_of({"x": 1}).cid), 404)):
        resp = await client.get(f"/api/v0/proof/{ref}")
        body = await resp.json()
        assert resp.status == status and body["error"]["message"], (ref, body)
    resp = await client.get(f"/api/v0/proof/{answer['receipt']}?data=maybe")
    assert resp.status == 400
    code, _, err = await cli(prov["node"], "export-proof", head, "-o", str(tmp_path / "x.car"))
    assert code == 1 and err.decode().startswith("error: ") and len(err.decode().splitlines()) == 1
    assert not (tmp_path / "x.car").exists()
    home = tmp_path / "nohome"
    for args in (("verify", str(tmp_path / "absent.car"), "--offline"), ("verify", str(tmp_path / "x.car"))):
        code, _, err = await _cairn(home, *args)
        assert code == 2 and err.startswith("error: "), (args, err)
    (tmp_path / "p.car").write_bytes(prov["proofs"]["full"])
    code, _, err = await _cairn(home, "verify", str(tmp_path / "p.car"))  # without --offline
    assert code == 2 and "--offline" in err


async def test_unixfs_reassembly_matches_kubo_add(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """Kubo's own `add` (Cairn's parameters: 1 MiB chunks, raw leaves, a dag-pb root) and `dag export`: the bytes
    put back together from the CAR are the file's."""
    data = os.urandom(3 * (1 << 20) + 12345)
    async with kubo_session.client() as client:
        added = await client.add(data, pin=False)
        car = b"".join([c async for c in client.dag_export(added.cid, offline=True)])
    (tmp_path / "file.car").write_bytes(car)
    index = index_car(tmp_path / "file.car")
    assert index.root == added.cid and added.cid.codec.name == "dag-pb" and len(index.blocks) == 5
    source = CarSource(index)
    try:
        assert b"".join(unixfs_bytes(added.cid, source.block_now)) == data
    finally:
        source.close()


def _doc_commands() -> list[str]:
    text = (ROOT / "docs" / "provenance.md").read_text()
    section = re.search(r"^## Proofs\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "docs/provenance.md has no '## Proofs' section"
    return re.findall(r"^\$ cairn (.+?)(?:\s+#.*)?$", section.group(1), re.M)


async def test_documented_walkthrough(prov: dict[str, Any], tmp_path: Path) -> None:
    """Every `cairn` line of docs/provenance.md "Proofs" runs, RECEIPT being this answer's, files in a temporary
    directory; `verify` with a home that has no node."""
    ran = []
    for line in _doc_commands():
        words = line.split()
        args = [prov["answer"]["receipt"] if w == "RECEIPT…" else w for w in words]
        args = [str(tmp_path / a) if a.endswith(".car") else a for a in args]
        if words[0] == "verify":
            code, text, err = await _cairn(tmp_path / "nohome", *args)
            want = 2 if "light" in line else 0
        else:
            rc, out, err_b = await cli(prov["node"], *args)
            code, text, err = rc, out.decode(), err_b.decode()
            want = 0
        assert code == want, (line, text, err)
        ran.append(words[0])
    assert ran.count("export-proof") >= 2 and ran.count("verify") >= 2, ran


async def test_a_proof_over_slices_of_many_blocks(prov: dict[str, Any], tmp_path: Path) -> None:
    """Slices past 1 MiB are dag-pb nodes over raw leaves in the proof: put back together, they give their CIDs."""
    client = prov["client"]
    rows = "\n".join(f"{i},{os.urandom(16).hex()}" for i in range(90_000))
    await add_csv(client, "big", b"id,tag\n" + rows.encode())
    resp = await client.post("/api/v0/query", json={"sql": "SELECT id, tag FROM b", "inputs": {"b": "big"}})
    answer = await resp.json()
    assert resp.status == 200, answer
    resp = await client.get(f"/api/v0/proof/{answer['receipt']}")
    assert resp.status == 200
    path = tmp_path / "big.car"
    path.write_bytes(await resp.read())
    index = index_car(path)
    assert sum(1 for k in index.blocks if k[1] == 0x70) >= 2  # an input and an output slice of several blocks
    out = await verify_car(path, tmp_path)
    assert out["ok"] and out["summary"]["unchecked"] == out["summary"]["failed"] == 0, out
    data = path.read_bytes()
    leaf = max(_sections(data)[1:], key=lambda s: s[3] - s[2])  # the biggest block: a 1 MiB leaf
    bad = bytearray(data)
    bad[(leaf[2] + leaf[3]) // 2] ^= 0x01
    out = await _check(tmp_path, bytes(bad))
    assert not out["ok"] and out["summary"]["failed"] > 0
