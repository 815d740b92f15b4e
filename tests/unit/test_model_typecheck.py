"""Algorithms 1–4 of transform-storage-provenance.md §6.1, branch by branch.

Each test is named after the pseudocode line it covers (``a<algorithm>_line<n>``); blocks come from a dict through
the injected loader (no IO). The map of branches to tests:

| algorithm | line(s) | branch | test |
|---|---|---|---|
| 1 isSimpleTypeNormalForm | 2 | T is True | test_a1_line2_true |
| 1 | 4 | T is False (and null, the null type) | test_a1_line4_false_and_null |
| 1 | 7 | no protocol_name "transform.storage" | test_a1_line7_other_protocol |
| 1 | 9 | no protocol_version | test_a1_line9_no_protocol_version |
| 1 | 11 | protocol_version not supported | test_a1_line11_unsupported_version |
| 1 | 13 | a canonical field missing | test_a1_line13_missing_field |
| 1 | 15 | a valid simple type | test_a1_line15_valid |
| 1 | 19 | not an object | test_a1_line19_not_an_object |
| 2 normalizeType | 3 | isSimpleTypeNormalForm version not supported | test_a2_line3_simple_version_unsupported |
| 2 | 5 | already simple normal: unchanged | test_a2_line5_simple_unchanged |
| 2 | 5 (reading) | the null type normalizes to itself | test_a2_null_type_unchanged |
| 2 | 9–10 | a CID expanded, then normalized | test_a2_line10_cid_expanded, test_a2_line10_with_a_plain_loader |
| 2 | 12 | no IPFS node / CID not retrievable | test_a2_line12_cannot_expand |
| 2 | 18–19 | an element fails: its result returned | test_a2_line19_element_failure |
| 2 | 21–22 | an element normalizes to an array: concatenated | test_a2_line22_arrays_concatenated |
| 2 | 24 | an element normalizes to a simple type: appended | test_a2_line24_simple_appended |
| 2 | 28 | an array normalized (the empty one too) | test_a2_line28_array_success |
| 2 | 30 | not a type | test_a2_line30_not_a_type |
| 2 | bounds | blocks, elements, depth | test_a2_limit_blocks, test_a2_limit_elements, test_a2_limit_depth |
| 3 isTerm | 2 | T is True: every D | test_a3_line2_true |
| 3 | 4 | T is False / null: no D | test_a3_line4_false |
| 3 | 7 | T not transform.storage | test_a3_line7_other_protocol |
| 3 | 10 | T's version not supported | test_a3_line10_unsupported_version |
| 3 | 13 | type_checking not in the table | test_a3_line13_unknown_type_checking |
| 3 | 14 | f_check's answer | test_a3_line14_f_check_answer |
| 3 | 16 | D not an array of T's length | test_a3_line16_length_mismatch |
| 3 | 20–21 | mismatch at index i | test_a3_line21_mismatch_at_index |
| 3 | 23 | every element matches | test_a3_line23_all_match |
| 3 | 26 | T not a normal form | test_a3_line26_not_normal_form |
| 4 isValidAsset | 2–5 | A is a CID: expanded | test_a4_line5_cid_expanded |
| 4 | 7 | A's CID cannot be expanded | test_a4_line7_cannot_expand |
| 4 | 10–11 | not transform.storage | test_a4_line11_other_protocol |
| 4 | 12–13 | no protocol_version | test_a4_line13_no_protocol_version |
| 4 | 14–15 | version not supported | test_a4_line15_unsupported_version |
| 4 | 16–17 | a canonical field missing | test_a4_line17_missing_field |
| 4 | 20–21 | normalizeType version not supported | test_a4_line21_normalize_version_unsupported |
| 4 | 22–23 | template not a type: its code | test_a4_line23_template_not_a_type |
| 4 | 27–29 | payload CID retrieved once, not recursively | test_a4_line29_payload_cid_once |
| 4 | 31 | payload CID cannot be expanded | test_a4_line31_payload_cannot_expand |
| 4 | 33–43 | series payload: CIDs retrieved, values kept | test_a4_line38_43_series_payload |
| 4 | 40 | payload[i] cannot be expanded | test_a4_line40_payload_element_cannot_expand |
| 4 | 47 | payload passed unchanged | test_a4_line47_payload_unchanged |
| 4 | 50–51 | isTerm's answer | test_a4_line51_is_term_answer |
| 4 | 53 | not an object | test_a4_line53_not_an_object |

The type checking table (arrow-schema, arrow-schema-positional, json-schema) and the hypothesis properties follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.domain.model import block_of
from node.domain.model import typecheck as tc
from node.domain.model.structure import Structure
from node.domain.model.typecheck import (
    NO_STRUCTURE,
    TypeContext,
    is_simple_type_normal_form,
    is_term,
    is_valid_asset,
    normalize_type,
)
from node.domain.model.types import Asset, Type
from node.support.errors import NotFound

R = TypeVar("R")
BLOCKS: dict[Any, Any] = {}  # content-addressed, so one registry serves every test


def put(value: Any) -> Any:
    """Store ``value`` as a block; its CID."""
    block = block_of(value)
    BLOCKS[block.cid] = value
    return block.cid


async def _load(cid: Any) -> Any:
    if cid not in BLOCKS:
        raise NotFound(f"no block {cid}")
    return BLOCKS[cid]


def ctx(**limits: int) -> TypeContext:
    return TypeContext(load=_load, limits=tc.Limits(**limits))


def run(coro: Coroutine[Any, Any, R]) -> R:
    return asyncio.run(coro)


CITIES = Structure("parquet", (("city", "string"), ("pop", "int64")))
TOWNS = Structure("parquet", (("town", "string"), ("people", "int64")))
OTHER = Structure("parquet", (("city", "string"), ("pop", "double")))
CITIES_T = Type(type_checking="arrow-schema", schema=put(CITIES.to_ipld())).to_ipld()
POSITIONAL_T = Type(type_checking="arrow-schema-positional", schema=put(CITIES.abstract().to_ipld())).to_ipld()
OBJ_SCHEMA = {"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}}
OBJ_T = Type(type_checking="json-schema", schema=put(OBJ_SCHEMA), name="has x").to_ipld()
ARRAY_T = Type(type_checking="json-schema", schema=put({"type": "array", "items": {"type": "integer"}})).to_ipld()
MISSING = block_of({"not": "stored"}).cid


def asset(payload: Any, template: Any, **changes: Any) -> dict[str, Any]:
    a = Asset(payload=payload, template=template).to_ipld()
    a.update(changes)
    return {k: v for k, v in a.items() if v is not _DROP}


_DROP = object()


# -- Algorithm 1 ----------------------------------------------------------------------------------------------


def test_a1_line2_true() -> None:
    v = is_simple_type_normal_form(True)
    assert (v.result, v.code, v.protocol, v.protocol_version) == (True, None, "transform.storage", "2.0.0")


def test_a1_line4_false_and_null() -> None:
    for t in (False, None):
        v = is_simple_type_normal_form(t)
        assert (v.result, v.code) == (False, "Type T is False")


@pytest.mark.parametrize("protocol", [None, "Transform.Storage", "other", _DROP])
def test_a1_line7_other_protocol(protocol: Any) -> None:
    t = {k: v for k, v in {**CITIES_T, "protocol_name": protocol}.items() if v is not _DROP}
    v = is_simple_type_normal_form(t)
    assert (v.result, v.code) == (False, "Type T does not use the Transform.Storage protocol")


def test_a1_line9_no_protocol_version() -> None:
    t = {k: v for k, v in CITIES_T.items() if k != "protocol_version"}
    v = is_simple_type_normal_form(t)
    assert (v.result, v.code) == (False, "Type T does not list a Transform.Storage protocol version")


@pytest.mark.parametrize("version", ["3.0.0", "1.0.0", 2])
def test_a1_line11_unsupported_version(version: Any) -> None:
    v = is_simple_type_normal_form({**CITIES_T, "protocol_version": version})
    assert v.result is False
    assert v.code == f"Type T uses Transform.Storage protocol version {version} not supported by this implementation"


@pytest.mark.parametrize("field", ["cid", "type_checking", "creator", "creator_id_format"])
def test_a1_line13_missing_field(field: str) -> None:
    t = {**CITIES_T, "creator": "did:key:z6Mkexample", "creator_id_format": "did:key"}
    del t[field]
    v = is_simple_type_normal_form(t)
    assert (v.result, v.code) == (False, "T does not contain required Type fields for transform.storage version 2.0.0")


def test_a1_line15_valid() -> None:
    signed = {**CITIES_T, "creator": "did:key:z6Mkexample", "creator_id_format": "did:key", "x-cairn": 1}
    for t in (CITIES_T, OBJ_T, signed, {**CITIES_T, "cid": None}):
        v = is_simple_type_normal_form(t)
        assert (v.result, v.code) == (True, None)


@pytest.mark.parametrize("t", [MISSING, [CITIES_T], "type", 1, b"\x01"], ids=["cid", "array", "str", "int", "bytes"])
def test_a1_line19_not_an_object(t: Any) -> None:
    v = is_simple_type_normal_form(t)
    assert (v.result, v.code) == (False, "T is not an object")


# -- Algorithm 2 ----------------------------------------------------------------------------------------------


def test_a2_line3_simple_version_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tc, "NORMALIZE_SUPPORTS", ("1.0.0",))
    n = run(normalize_type(CITIES_T, ctx()))
    assert (n.result, n.success) == (None, False)
    assert n.code == "isSimpleTypeNormalForm version 2.0.0 not supported by normalizeType version 2.0.0"


def test_a2_line5_simple_unchanged() -> None:
    for t in (CITIES_T, True):
        n = run(normalize_type(t, ctx()))
        assert (n.result, n.success, n.code, n.protocol_version) == (t, True, None, "2.0.0")


def test_a2_null_type_unchanged() -> None:
    """The reading of line 5 for §3.2's null type (Algorithm 1 line 4's comment: a valid simple type)."""
    for t in (None, False):
        assert run(normalize_type(t, ctx())).result is t
    assert run(normalize_type([CITIES_T, None], ctx())).result == [CITIES_T, None]


def test_a2_line10_cid_expanded() -> None:
    n = run(normalize_type(put(CITIES_T), ctx()))
    assert (n.result, n.success) == (CITIES_T, True)
    n = run(normalize_type(put(put(OBJ_T)), ctx()))  # a CID of a CID: expanded until a type
    assert n.result == OBJ_T


def test_a2_line10_with_a_plain_loader() -> None:
    """The loader may be synchronous (a dict's lookup); its CairnError is "Could not expand CID" too."""

    def load(cid: Any) -> Any:
        if cid not in BLOCKS:
            raise NotFound("absent")
        return BLOCKS[cid]

    assert run(normalize_type([put(CITIES_T)], TypeContext(load=load))).result == [CITIES_T]
    assert run(normalize_type(MISSING, TypeContext(load=load))).code == "Could not expand CID"


def test_a2_line12_cannot_expand() -> None:
    for t, context in ((put(CITIES_T), TypeContext()), (MISSING, ctx()), ([CITIES_T, MISSING], ctx())):
        n = run(normalize_type(t, context))
        assert (n.result, n.success, n.code) == (None, False, "Could not expand CID")


def test_a2_line19_element_failure() -> None:
    n = run(normalize_type([CITIES_T, "x", OBJ_T], ctx()))
    assert (n.result, n.success, n.code) == (None, False, "T is not a type")
    n = run(normalize_type([CITIES_T, [OBJ_T, MISSING]], ctx()))
    assert n.code == "Could not expand CID"


def test_a2_line22_arrays_concatenated() -> None:
    inner = put([OBJ_T, put(ARRAY_T)])  # the CID of an array: expanded, then promoted
    n = run(normalize_type([CITIES_T, inner, [[True]]], ctx()))
    assert (n.result, n.success) == ([CITIES_T, OBJ_T, ARRAY_T, True], True)


def test_a2_line24_simple_appended() -> None:
    n = run(normalize_type([put(CITIES_T), OBJ_T], ctx()))
    assert n.result == [CITIES_T, OBJ_T]


def test_a2_line28_array_success() -> None:
    assert run(normalize_type([], ctx())).result == []
    assert run(normalize_type([[], put([])], ctx())).result == []


@pytest.mark.parametrize("t", ["type", 3, b"\x00", {"protocol_name": "x"}, {**CITIES_T, "protocol_version": "9"}])
def test_a2_line30_not_a_type(t: Any) -> None:
    n = run(normalize_type(t, ctx()))
    assert (n.result, n.success, n.code) == (None, False, "T is not a type")


def test_a2_limit_blocks() -> None:
    t = [put(CITIES_T)] * 5
    assert run(normalize_type(t, ctx(blocks=5))).success
    n = run(normalize_type(t, ctx(blocks=4)))
    assert (n.success, n.code) == (False, "type expansion limit: more than 4 blocks")


def test_a2_limit_elements() -> None:
    n = run(normalize_type([True] * 11, ctx(elements=10)))
    assert (n.success, n.code) == (False, "type expansion limit: more than 10 array elements")


def test_a2_limit_depth() -> None:
    t: Any = True
    for _ in range(10):
        t = [t]
    assert run(normalize_type(t, ctx(depth=10))).result == [True]
    n = run(normalize_type([t], ctx(depth=10)))
    assert (n.success, n.code) == (False, "type expansion limit: nested deeper than 10")


# -- Algorithm 3 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [None, 1, {"x": 1}, [1, 2], b"blob", MISSING])
def test_a3_line2_true(d: Any) -> None:
    v = run(is_term(True, d, ctx()))
    assert (v.result, v.code, v.protocol, v.protocol_version) == (True, None, "transform.storage", "2.0.0")


@pytest.mark.parametrize("t", [False, None])
def test_a3_line4_false(t: Any) -> None:
    for d in (None, False, 1, {"x": 1}):
        v = run(is_term(t, d, ctx()))
        assert (v.result, v.code) == (False, "Type T is False")


def test_a3_line7_other_protocol() -> None:
    v = run(is_term({**OBJ_T, "protocol_name": "Transform.Storage"}, {"x": 1}, ctx()))
    assert (v.result, v.code) == (False, "Type T does not use the Transform.Storage protocol")


def test_a3_line10_unsupported_version() -> None:
    v = run(is_term({**OBJ_T, "protocol_version": "3.0.0"}, {"x": 1}, ctx()))
    assert (v.result, v.code) == (
        False,
        "Type T uses Transform.Storage protocol version 3.0.0 not supported by this implementation",
    )


def test_a3_line13_unknown_type_checking() -> None:
    v = run(is_term({**OBJ_T, "type_checking": "xml-schema"}, {"x": 1}, ctx()))
    assert v.result is False
    assert v.code == (
        "type_checking 'xml-schema' is not in the type checking table "
        "(known: arrow-schema, arrow-schema-positional, json-schema)"
    )


def test_a3_line14_f_check_answer() -> None:
    assert run(is_term(OBJ_T, {"x": 1}, ctx())).result is True
    v = run(is_term(OBJ_T, {"x": "one"}, ctx()))
    assert (v.result, v.code) == (False, 'D does not match the JSON Schema at ["x"]: "one" is not of type "integer"')


@pytest.mark.parametrize("d", [{"x": 1}, [{"x": 1}], [{"x": 1}, [1], {"x": 2}], None])
def test_a3_line16_length_mismatch(d: Any) -> None:
    v = run(is_term([OBJ_T, ARRAY_T], d, ctx()))
    assert (v.result, v.code) == (False, "D and T length mismatch")


def test_a3_line21_mismatch_at_index() -> None:
    t = [OBJ_T, ARRAY_T, True]
    v = run(is_term(t, [{"x": 1}, ["no"], 0], ctx()))  # index 0 matches: the loop goes on past it
    assert (v.result, v.code) == (False, "D and T mismatch at index 1")
    v = run(is_term(t, [{}, [1], 0], ctx()))
    assert v.code == "D and T mismatch at index 0"


def test_a3_line23_all_match() -> None:
    v = run(is_term([OBJ_T, ARRAY_T, True], [{"x": 1}, [1, 2], "anything"], ctx()))
    assert (v.result, v.code) == (True, None)
    assert run(is_term([], [], ctx())).result is True


@pytest.mark.parametrize("t", [put(OBJ_T), "json-schema", 7], ids=["cid", "str", "int"])
def test_a3_line26_not_normal_form(t: Any) -> None:
    v = run(is_term(t, {"x": 1}, ctx()))
    assert (v.result, v.code) == (False, "T is not the normal form of a transform.storage type")


# -- Algorithm 4 ----------------------------------------------------------------------------------------------


def test_a4_line5_cid_expanded() -> None:
    v = run(is_valid_asset(put(asset({"x": 1}, put(OBJ_T))), ctx()))
    assert (v.result, v.code, v.protocol, v.protocol_version) == (True, None, "transform.storage", "2.0.0")


def test_a4_line7_cannot_expand() -> None:
    for a, context in ((put(asset({"x": 1}, OBJ_T)), TypeContext()), (MISSING, ctx())):
        v = run(is_valid_asset(a, context))
        assert (v.result, v.code) == (False, "Could not expand CID")


@pytest.mark.parametrize("protocol", ["Transform.Storage", None, _DROP])
def test_a4_line11_other_protocol(protocol: Any) -> None:
    v = run(is_valid_asset(asset({"x": 1}, OBJ_T, protocol_name=protocol), ctx()))
    assert (v.result, v.code) == (False, "Asset A does not use the Transform.Storage protocol")


def test_a4_line13_no_protocol_version() -> None:
    v = run(is_valid_asset(asset({"x": 1}, OBJ_T, protocol_version=_DROP), ctx()))
    assert (v.result, v.code) == (False, "Asset A does not list a Transform.Storage protocol version")


def test_a4_line15_unsupported_version() -> None:
    v = run(is_valid_asset(asset({"x": 1}, OBJ_T, protocol_version="1.0.0"), ctx()))
    assert v.code == "Asset A uses Transform.Storage protocol version 1.0.0 not supported by this implementation"


@pytest.mark.parametrize("field", ["payload", "template", "creator", "creator_id_format"])
def test_a4_line17_missing_field(field: str) -> None:
    a = asset({"x": 1}, OBJ_T, creator="did:key:z6Mkexample", creator_id_format="did:key")
    del a[field]
    v = run(is_valid_asset(a, ctx()))
    assert (v.result, v.code) == (False, "A does not contain required Asset fields for transform.storage version 2.0.0")


def test_a4_line21_normalize_version_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tc, "ASSET_SUPPORTS", ("1.0.0",))
    v = run(is_valid_asset(asset({"x": 1}, OBJ_T), ctx()))
    assert (v.result, v.code) == (False, "normalizeType version 2.0.0 not supported by isValidAsset version 2.0.0")


def test_a4_line23_template_not_a_type() -> None:
    assert run(is_valid_asset(asset({"x": 1}, "obj"), ctx())).code == "T is not a type"
    assert run(is_valid_asset(asset({"x": 1}, [OBJ_T, MISSING]), ctx())).code == "Could not expand CID"


def test_a4_line29_payload_cid_once() -> None:
    assert run(is_valid_asset(asset(put({"x": 1}), OBJ_T), ctx())).result is True
    # Retrieved once, never recursively (§3.3): a CID of a CID gives D = the inner CID, which is no object.
    v = run(is_valid_asset(asset(put(put({"x": 1})), OBJ_T), ctx()))
    assert (v.result, v.code) == (
        False,
        'D does not match the JSON Schema at the top level: "x" is a required property',
    )


def test_a4_line31_payload_cannot_expand() -> None:
    for context in (TypeContext(load=None), ctx()):
        payload = MISSING if context.load else put({"x": 1})
        template = OBJ_T
        v = run(is_valid_asset(asset(payload, template), context))
        assert (v.result, v.code) == (False, "Could not expand A.payload CID")


def test_a4_line38_43_series_payload() -> None:
    template = [OBJ_T, put([ARRAY_T, True])]  # normal form: [OBJ_T, ARRAY_T, True]
    payload = [put({"x": 1}), [1, 2], put(put({"x": 1}))]  # CIDs retrieved once, the list kept as given
    v = run(is_valid_asset(asset(payload, template), ctx()))
    assert (v.result, v.code) == (True, None)
    v = run(is_valid_asset(asset([{"x": 1}, put(["a"]), 0], template), ctx()))
    assert (v.result, v.code) == (False, "D and T mismatch at index 1")


def test_a4_line40_payload_element_cannot_expand() -> None:
    v = run(is_valid_asset(asset([{"x": 1}, MISSING], [OBJ_T, True]), ctx()))
    assert (v.result, v.code) == (False, "Could not expand A.payload[1] CID")


def test_a4_line47_payload_unchanged() -> None:
    assert run(is_valid_asset(asset({"x": 1}, OBJ_T), ctx())).result is True
    # An array payload with a simple template describing an array: passed as it is, CIDs and all.
    assert run(is_valid_asset(asset([1, 2, 3], ARRAY_T), ctx())).result is True
    v = run(is_valid_asset(asset([1, put(2)], ARRAY_T), ctx()))
    assert v.result is False and v.code is not None and v.code.startswith("D does not match the JSON Schema at [1]")


def test_a4_line51_is_term_answer() -> None:
    v = run(is_valid_asset(asset({"x": 1.5}, OBJ_T), ctx()))
    assert (v.result, v.code) == (False, 'D does not match the JSON Schema at ["x"]: 1.5 is not of type "integer"')
    assert run(is_valid_asset(asset(put(OTHER.to_ipld()), put(CITIES_T)), ctx())).result is False
    assert run(is_valid_asset(asset(put(CITIES.to_ipld()), put(CITIES_T)), ctx())).result is True


@pytest.mark.parametrize("a", [[asset({"x": 1}, OBJ_T)], "asset", 1, None], ids=["array", "str", "int", "null"])
def test_a4_line53_not_an_object(a: Any) -> None:
    v = run(is_valid_asset(a, ctx()))
    assert (v.result, v.code) == (False, "A is not an object")


# -- the type checking table ----------------------------------------------------------------------------------


def test_arrow_schema_compares_names_and_types_in_order() -> None:
    assert run(is_term(CITIES_T, CITIES.to_ipld(), ctx())).result is True
    cases = [
        (TOWNS, "structure mismatch at column 0: D has town string, T has city string"),
        (OTHER, "structure mismatch at column 1: D has pop double, T has pop int64"),
        (Structure("parquet", (("city", "string"),)), "structure mismatch: D has 1 columns, T has 2"),
        (Structure("parquet", (("pop", "int64"), ("city", "string"))), "structure mismatch at column 0: D has pop"),
    ]
    for structure, code in cases:
        v = run(is_term(CITIES_T, structure.to_ipld(), ctx()))
        assert v.result is False and v.code is not None and v.code.startswith(code), v.code


def test_arrow_schema_positional_ignores_names() -> None:
    assert run(is_term(POSITIONAL_T, TOWNS.to_ipld(), ctx())).result is True
    assert run(is_term(POSITIONAL_T, CITIES.to_ipld(), ctx())).result is True
    v = run(is_term(POSITIONAL_T, OTHER.to_ipld(), ctx()))
    assert (v.result, v.code) == (False, "structure mismatch at column 1: D has double, T has int64")
    named = {**CITIES_T, "type_checking": "arrow-schema-positional"}  # a named T.cid works positionally too
    assert run(is_term(named, TOWNS.to_ipld(), ctx())).result is True


def test_arrow_schema_asks_structure_of_for_other_data() -> None:
    """A dataset version (an mb_0 block) has the structure node.services.type_checks finds for it; other data has
    none."""
    seen: list[Any] = []

    async def structure_of(d: Any) -> Structure | None:
        seen.append(d)
        return CITIES if d == {"typedVersion": "mb_0"} else None

    context = TypeContext(load=_load, structure_of=structure_of)
    assert run(is_term(CITIES_T, {"typedVersion": "mb_0"}, context)).result is True
    v = run(is_term(CITIES_T, {"x": 1}, context))
    assert v.code == NO_STRUCTURE
    assert seen == [{"typedVersion": "mb_0"}, {"x": 1}]
    assert run(is_term(CITIES_T, {"typedVersion": "st_0", "content": 1}, ctx())).result is False


@pytest.mark.parametrize(
    "cid, code",
    [
        (None, "T.cid is not the CID of an st_0 structure"),
        (MISSING, "Could not expand T.cid"),
        (put({"typedVersion": "st_0", "content": {}}), "T.cid is not an st_0 structure"),
        (put(OBJ_SCHEMA), "T.cid is not an st_0 structure"),
    ],
    ids=["null", "missing", "bad-st0", "not-st0"],
)
def test_arrow_schema_t_cid_problems(cid: Any, code: str) -> None:
    v = run(is_term({**CITIES_T, "cid": cid}, CITIES.to_ipld(), ctx()))
    assert (v.result, v.code) == (False, code)


def test_json_schema_reads_ipld_as_dag_json() -> None:
    link_t = Type(type_checking="json-schema", schema=put({"required": ["/"], "properties": {"/": {"type": "string"}}}))
    assert run(is_term(link_t.to_ipld(), MISSING, ctx())).result is True  # a link is {"/": "<cid>"}
    bytes_t = Type(type_checking="json-schema", schema=put({"properties": {"/": {"required": ["bytes"]}}}))
    assert run(is_term(bytes_t.to_ipld(), b"\x01\x02", ctx())).result is True


@pytest.mark.parametrize(
    "schema, code",
    [
        ({"type": 12}, "T.cid is not a valid JSON Schema: "),
        ({"$ref": "http://127.0.0.1:9/schema.json"}, "T.cid is not a valid JSON Schema: "),
        (None, "T.cid is not the CID of a JSON Schema document"),
        (MISSING, "Could not expand T.cid"),
    ],
    ids=["bad-keyword", "remote-ref", "null", "missing"],
)
def test_json_schema_t_cid_problems(schema: Any, code: str) -> None:
    cid = schema if schema is None or schema == MISSING else put(schema)
    v = run(is_term({**OBJ_T, "cid": cid}, {"x": 1}, ctx()))
    assert v.result is False and v.code is not None and v.code.startswith(code), v.code
    assert "\n" not in v.code


# -- properties -----------------------------------------------------------------------------------------------

SIMPLE = st.sampled_from([CITIES_T, OBJ_T, ARRAY_T, POSITIONAL_T, True, None])


def _wrap(t: Any) -> Any:
    return put(t)


TYPES = st.recursive(
    SIMPLE,
    lambda inner: st.one_of(st.lists(inner, max_size=4), inner.map(_wrap)),
    max_leaves=12,
)


def _simple_ok(t: Any) -> bool:
    return t is None or is_simple_type_normal_form(t).result


@settings(max_examples=200, deadline=None)
@given(TYPES)
def test_normal_form_is_simple_or_a_flat_list_of_simple_types(t: Any) -> None:
    n = run(normalize_type(t, ctx()))
    assert n.success, n.code
    if isinstance(n.result, list):
        assert all(_simple_ok(x) for x in n.result)
    else:
        assert _simple_ok(n.result)


@settings(max_examples=200, deadline=None)
@given(TYPES)
def test_normalize_type_is_idempotent(t: Any) -> None:
    once = run(normalize_type(t, ctx())).result
    assert run(normalize_type(once, ctx())).result == once


@settings(max_examples=200, deadline=None)
@given(TYPES)
def test_wrapping_never_changes_the_normal_form(t: Any) -> None:
    """§3.2: a type and its CID are logically equivalent; [A] promotes to A's elements."""
    n = run(normalize_type(t, ctx())).result
    as_series = n if isinstance(n, list) else [n]
    assert run(normalize_type(put(t), ctx())).result == n
    assert run(normalize_type([t], ctx())).result == as_series
    assert run(normalize_type([[t], put([t])], ctx())).result == as_series + as_series


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([(OBJ_T, {"x": 1}), (ARRAY_T, [1]), (True, "any"), (CITIES_T, CITIES.to_ipld())])))
def test_a_series_of_terms_is_a_term_of_the_series(pairs: list[tuple[Any, Any]]) -> None:
    t, d = [p[0] for p in pairs], [p[1] for p in pairs]
    assert run(is_term(t, d, ctx())).result is True
    asset_v = run(is_valid_asset(asset([put(x) for x in d], put(t)), ctx()))
    assert (asset_v.result, asset_v.code) == (True, None)  # a series asset: each payload CID retrieved once


KEYS = st.sampled_from(["cid", "type_checking", "creator", "protocol_name", "protocol_version", "payload", "template"])
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from(["transform.storage", "2.0.0", "json-schema", "arrow-schema", "x"]),
    st.binary(max_size=3),
    st.sampled_from([MISSING, put(OBJ_T), put([OBJ_T, True]), put({"x": 1}), put(CITIES.to_ipld())]),
)
IPLD = st.recursive(
    LEAVES | SIMPLE,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=7),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(IPLD, IPLD)
def test_any_value_gets_an_answer_never_an_exception(t: Any, d: Any) -> None:
    """Whatever a peer or a user sends as a type, data or asset: a result and, when false, a code."""
    answers = [
        is_simple_type_normal_form(t),
        run(is_term(t, d, ctx())),
        run(is_valid_asset(t, ctx())),
        run(is_valid_asset({**Asset().to_ipld(), "payload": d, "template": t}, ctx())),
    ]
    for v in answers:
        assert v.protocol == "transform.storage" and v.protocol_version == "2.0.0"
        assert v.result is True or (v.result is False and isinstance(v.code, str) and v.code)
    n = run(normalize_type(t, ctx()))
    assert n.success is (n.code is None)
