"""Transform.Storage types end to end: an in-process node on the session's real Kubo, its HTTP
API and the real `cairn` process (no Spark: nothing here queries).

- ``test_documented_walkthrough``: the commands of docs/provenance.md "Types", run as the doc runs them (the test
  also checks the doc names no `cairn` command it does not run): a dataset ingested, its structure stored as a type,
  `type check` true for it and false, with the code, for a dataset of another schema; a JSON Schema type over
  DAG-JSON values both ways; an asset over the dataset's head.
- ``test_check_over_http``: the same answers from ``GET /api/v0/types/check`` for a name, an id and a head CID, and
  the positional (abstract structure) type.
- ``test_bad_input_is_a_clear_4xx``: not a CID, an unknown dataset, a CID that is no type, an unknown
  ``type_checking``, a missing field: one-line 4xx answers (API) and exit 1 with ``error:`` (CLI), no paths.
- ``test_functions_are_checked_before_they_are_stored``: Table 4 on the node (``POST /api/v0/types``).
- ``test_a_query_result_is_checked_through_its_receipt``: REF a receipt: its result's structure, if it is signed.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from node.domain.model import Receipt, Structure, cid_str, dagjson, parse_cid
from node.domain.model.functions import builtin
from node.domain.model.typecheck import NO_STRUCTURE
from node.domain.model.types import Type
from tests.fixtures.inprocess import InNode, add_csv, cli

ROOT = Path(__file__).resolve().parents[2]
CITIES = b"city,pop\nParis,2100000\nLyon,520000\n"
TOWNS = b"town,people\nArles,50000\n"
POINT_SCHEMA = {
    "type": "object",
    "required": ["x", "y"],
    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
}


def _type_json(schema_cid: str, checking: str, name: str) -> str:
    return json.dumps(
        {
            "cid": {"/": schema_cid},
            "type_checking": checking,
            "creator": None,
            "protocol_name": "transform.storage",
            "protocol_version": "2.0.0",
            "name": name,
        }
    )


class Shell:
    """Runs `cairn` against the node as the doc's reader would, keeping the commands it ran."""

    def __init__(self, node: Any, tmp: Path) -> None:
        self.node, self.tmp, self.ran = node, tmp, []

    def file(self, name: str, text: str) -> str:
        (self.tmp / name).write_text(text)
        return str(self.tmp / name)

    async def __call__(self, *args: str, rc: int = 0) -> str:
        self.ran.append(" ".join(args[:2]) if args[0] in ("type", "dag") else args[0])
        code, out, err = await cli(self.node, *args)
        assert code == rc, (args, code, out.decode(), err.decode())
        return out.decode()


def _doc_commands() -> set[str]:
    """`cairn X Y` (the command words) of every ``$ cairn …`` line in docs/provenance.md "Types", "Walk-through"
    (the query commands of its next part run in test_types_query.py)."""
    text = (ROOT / "docs" / "provenance.md").read_text()
    section = re.search(r"^## Types\n.*?^### Walk-through\n(.*?)(?=^##|\Z)", text, re.M | re.S)
    assert section, "docs/provenance.md has no '## Types', '### Walk-through' section"
    words = re.findall(r"^\$ cairn ([a-z]+)(?: ([a-z]+))?", section.group(1), re.M)
    return {f"{a} {b}".strip() if a in ("type", "dag") else a for a, b in words}


async def test_documented_walkthrough(inode: InNode, tmp_path: Path) -> None:
    node, _ = inode
    sh = Shell(node, tmp_path)
    (tmp_path / "cities.csv").write_bytes(CITIES)
    (tmp_path / "towns.csv").write_bytes(TOWNS)
    await sh("add", str(tmp_path / "cities.csv"), "--name", "cities")
    await sh("add", str(tmp_path / "towns.csv"), "--name", "towns")
    log = await sh("log", "cities")
    structure = re.search(r"SetDataSchema +structure (\S+)", log)
    assert structure, log
    type_cid = (
        await sh("type", "put", sh.file("cities-type.json", _type_json(structure[1], "arrow-schema", "cities")))
    ).strip()

    assert await sh("type", "check", "cities", type_cid) == "true\n"
    out = await sh("type", "check", "towns", type_cid, rc=1)
    assert out == "false: structure mismatch at column 0: D has town utf8, T has city utf8\n"

    schema = (await sh("dag", "put", sh.file("point-schema.json", json.dumps(POINT_SCHEMA)))).strip()
    point_type = (
        await sh("type", "put", sh.file("point-type.json", _type_json(schema, "json-schema", "point")))
    ).strip()
    good = (await sh("dag", "put", sh.file("point.json", '{"x": 1.5, "y": -2}'))).strip()
    bad = (await sh("dag", "put", sh.file("not-a-point.json", '{"x": 1.5}'))).strip()
    assert await sh("type", "check", good, point_type) == "true\n"
    out = await sh("type", "check", bad, point_type, rc=1)
    assert out == 'false: D does not match the JSON Schema at the top level: "y" is a required property\n'
    answer = json.loads(await sh("type", "check", bad, point_type, "--json", rc=1))
    assert answer["protocol"] == "transform.storage" and answer["protocol_version"] == "2.0.0"

    head = json.loads(await sh("ls", "--json"))
    cities_head = next(d["head"] for d in head if d["name"] == "cities")
    asset = {"payload": {"/": cities_head}, "template": {"/": type_cid}, "creator": None}
    asset |= {"protocol_name": "transform.storage", "protocol_version": "2.0.0"}
    asset_cid = (await sh("type", "put", sh.file("asset.json", json.dumps(asset)))).strip()
    assert await sh("type", "asset", asset_cid) == "true\n"
    assert set(sh.ran) == _doc_commands()


async def _check(client: TestClient[Any, Any], ref: str, type_cid: str) -> tuple[int, dict[str, Any]]:
    resp = await client.get("/api/v0/types/check", params={"ref": ref, "type": type_cid})
    return resp.status, await resp.json()


async def _put(client: TestClient[Any, Any], obj: Any) -> tuple[int, dict[str, Any]]:
    resp = await client.post("/api/v0/types", data=dagjson.dumps(obj), headers={"Content-Type": "application/json"})
    return resp.status, await resp.json()


async def test_check_over_http(inode: InNode) -> None:
    node, client = inode
    cities = await add_csv(client, "cities", CITIES)
    await add_csv(client, "towns", TOWNS)
    info = await node.data.get("cities")
    named, positional = (
        Type(type_checking=c, schema=parse_cid(info[k])).to_ipld()
        for c, k in (("arrow-schema", "structure"), ("arrow-schema-positional", "abstractStructure"))
    )
    (s1, t1), (s2, t2) = await _put(client, named), await _put(client, positional)
    assert (s1, t1["kind"], s2) == (200, "Type", 200)
    for ref in ("cities", cities["id"], cities["head"], info["structure"]):
        status, body = await _check(client, ref, t1["cid"])
        assert (status, body["result"], body["code"]) == (200, True, None), (ref, body)
    assert body["data"] == info["structure"] and body["type"] == t1["cid"]
    status, body = await _check(client, "towns", t1["cid"])
    assert (status, body["result"]) == (200, False) and body["code"].startswith("structure mismatch at column 0")
    status, body = await _check(client, "towns", t2["cid"])  # same shape: a term of the positional type
    assert (status, body["result"], body["code"]) == (200, True, None)
    series = await _put(client, [parse_cid(t1["cid"]), parse_cid(t2["cid"])])
    assert series[1]["kind"] == "series type"
    status, body = await _check(client, "cities", series[1]["cid"])  # one dataset is no series of two
    assert (status, body["result"], body["code"]) == (200, False, "D and T length mismatch")


async def test_bad_input_is_a_clear_4xx(inode: InNode) -> None:
    node, client = inode
    await add_csv(client, "cities", CITIES)
    structure = (await node.data.get("cities"))["structure"]
    good = Type(type_checking="arrow-schema", schema=parse_cid(structure)).to_ipld()
    good_cid = (await _put(client, good))[1]["cid"]
    unknown = cid_str(await node.dag_put({**good, "type_checking": "xml-schema"}))  # dag put does not check types
    missing = cid_str(await node.dag_put({k: v for k, v in good.items() if k != "creator"}))
    cases = [
        (("cities", "not-a-cid"), 400, "invalid CID"),
        (("no-such-dataset", good_cid), 404, "no dataset named 'no-such-dataset'"),
        (("cities", structure), 400, f"{structure} is not a Transform.Storage type: Type T does not use the"),
        (("cities", unknown), 400, "type_checking 'xml-schema' is not in the type checking table"),
        (("cities", missing), 400, "T does not contain required Type fields for transform.storage version 2.0.0"),
    ]
    for (ref, type_cid), status, message in cases:
        got, body = await _check(client, ref, type_cid)
        assert (got, message in body["error"]["message"]) == (status, True), (ref, type_cid, body)
        assert "\n" not in body["error"]["message"] and "/tmp" not in body["error"]["message"]
    assert 'missing key "creator"' in (await _check(client, "cities", missing))[1]["error"]["message"]
    resp = await client.get("/api/v0/types/check", params={"ref": "cities"})
    assert resp.status == 400 and (await resp.json())["error"]["message"] == "missing query parameter type="
    for obj, message in (
        ({**good, "type_checking": "xml-schema"}, "type_checking 'xml-schema' is not in the type checking table"),
        ({k: v for k, v in good.items() if k != "cid"}, 'Type: missing key "cid"'),
        ({"name": "x"}, "not a Transform.Storage object"),
    ):
        status, body = await _put(client, obj)
        assert (status, body["error"]["message"].startswith(message)) == (400, True), body
    rc, out, err = await cli(node, "type", "check", "cities", unknown)
    assert (rc, out) == (1, b"") and err.decode().startswith("error: type_checking 'xml-schema' is not in the")
    rc, _, err = await cli(node, "type", "check", "cities", "nope")
    assert rc == 1 and err.decode().startswith("error: invalid CID")


async def test_functions_are_checked_before_they_are_stored(inode: InNode) -> None:
    """Table 4 on the node: a built-in's out must be what its in gives; an unknown execution is refused."""
    node, client = inode
    schema = await node.dag_put({"type": "object"})
    a = Type(type_checking="json-schema", schema=schema, name="A").to_ipld()
    b = Type(type_checking="json-schema", schema=schema, name="B").to_ipld()
    a_cid, b_cid = [parse_cid((await _put(client, t))[1]["cid"]) for t in (a, b)]
    braid = builtin("braid", [a_cid, b_cid]).to_ipld()
    status, body = await _put(client, braid)
    assert (status, body["kind"]) == (200, "Function")
    assert dagjson.loads(dagjson.dumps(await node.dag_get(parse_cid(body["cid"])))) == braid
    for obj, message in (
        ({**braid, "out": [a_cid, b_cid]}, "built-in 'braid': out is not the type its in gives (Table 4)"),
        ({**braid, "in": [a_cid]}, "built-in 'braid' takes a series of height 2; the input has height 1"),
        ({**braid, "execution": "python"}, "execution 'python' is not in the execution table (Table 4: identity,"),
        ({**braid, "in": "A"}, "Function in/out is not a type: T is not a type"),
    ):
        status, body = await _put(client, obj)
        assert (status, body["error"]["message"].startswith(message)) == (400, True), body
    wasm = {**braid, "execution": "WASM", "fn": schema, "out": [b_cid]}  # external: its declared types are kept
    assert (await _put(client, wasm))[0] == 200


async def test_a_query_result_is_checked_through_its_receipt(inode: InNode) -> None:
    """An ``rc_0`` receipt names its result's structure: `type check RECEIPT TYPE` compares that one, once the
    receipt's signature checks (the receipt is built here, signed by the node's key: no Spark needed)."""
    node, client = inode
    result = Structure("parquet", (("city", "utf8"), ("pop", "int64")))
    structure = await node.dag_put(result.to_ipld())
    receipt = Receipt(
        structure, structure, node.identity.node_key, "2026-01-01T00:00:00Z", {"name": "spark"}, "ab", 2, structure,
        (), {},
    ).signed(node.identity.sign)  # fmt: skip
    good = cid_str(await node.dag_put(receipt.to_ipld()))
    forged = cid_str(await node.dag_put(replace(receipt, rows=3).to_ipld()))  # the signature no longer checks
    named = (await _put(client, Type(type_checking="arrow-schema", schema=structure).to_ipld()))[1]["cid"]
    positional = Type(type_checking="arrow-schema-positional", schema=await node.dag_put(result.abstract().to_ipld()))
    positional_cid = (await _put(client, positional.to_ipld()))[1]["cid"]
    for type_cid in (named, positional_cid):
        assert (await _check(client, good, type_cid))[1]["result"] is True
    status, body = await _check(client, forged, named)
    assert (status, body["result"]) == (200, False)
    assert body["code"] == NO_STRUCTURE
