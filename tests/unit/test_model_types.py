"""Transform.Storage Type, Asset and Function objects (§3.2–3.4, Tables 1–3) and Table 4's built-ins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from node.domain.model import block_of, cid_for, decode, decode_object, encode, parse_cid
from node.domain.model.functions import BUILTINS, builtin, builtin_output
from node.domain.model.typecheck import normalize_type
from node.domain.model.types import Asset, Function, Type, object_kind, parse_object
from node.support.errors import InvalidInput, InvalidObject

S = parse_cid("bafyr4iczwqktrxwxfudcti3vybfyzsz7h6jgm2i2djsajd4v4cdvbilzpm")
A = {"x": "A"}  # stand-ins for simple types: the built-ins work on normal forms, whatever the types are
B = {"x": "B"}


def test_type_has_exactly_the_canonical_fields_of_table_1() -> None:
    t = Type(type_checking="arrow-schema", schema=S, name="cities")
    assert t.to_ipld() == {
        "cid": S,
        "type_checking": "arrow-schema",
        "creator": None,
        "protocol_name": "transform.storage",
        "protocol_version": "2.0.0",
        "name": "cities",
    }
    signed = Type(type_checking="json-schema", creator="did:key:z6Mkx", creator_id_format="did:key")
    assert {"creator", "creator_id_format", "cid"} <= set(signed.to_ipld())


def test_asset_and_function_fields_of_tables_2_and_3() -> None:
    assert set(Asset(payload=S, template=S).to_ipld()) == {
        "payload", "template", "creator", "protocol_name", "protocol_version"
    }  # fmt: skip
    f = Function(execution="identity", input=S, output=S, description="id")
    assert set(f.to_ipld()) == {
        "execution", "fn", "reference", "in", "out", "environment", "env_params",
        "creator", "protocol_name", "protocol_version", "description",
    }  # fmt: skip


@pytest.mark.parametrize(
    "obj",
    [
        Type(type_checking="json-schema", schema=S, extra={"x-cairn-note": "kept"}),
        Asset(payload=[S, {"raw": 1}], template=[S, S], creator="did:key:z6Mkx", creator_id_format="did:key"),
        Function(execution="introduce", fn=S, input=None, output=S, reference="ipfs://x", environment="cairn"),
    ],
    ids=["Type", "Asset", "Function"],
)
def test_round_trip_keeps_the_cid(obj: Any) -> None:
    block = obj.block()
    assert block.cid == cid_for(encode(obj.to_ipld()), "dag-cbor") and block.cid.codec.name == "dag-cbor"
    assert block.cid.hashfun.name == "blake3" and str(block.cid).startswith("bafyr4")
    decoded = decode(block.data)
    assert parse_object(decoded) == obj
    assert decode_object(decoded) is None  # plain data to the Holium/Cairn kind registry: no typedVersion
    assert object_kind(decoded) == type(obj).__name__


@pytest.mark.parametrize(
    "obj, message",
    [
        ({"type_checking": "json-schema"}, 'Type: missing key "cid"'),
        ({**Type(type_checking="x").to_ipld(), "protocol_name": "Transform.Storage"}, "Type: protocol_name: must be"),
        ({**Type(type_checking="x").to_ipld(), "protocol_version": "3.0.0"}, "Type: protocol_version: version '3.0.0'"),
        ({**Type(type_checking="x").to_ipld(), "creator": "me"}, 'Type: missing key "creator_id_format"'),
        ({**Type(type_checking="x").to_ipld(), "cid": "bafy"}, "Type: cid: expected link or null, got string"),
        ({**Asset().to_ipld(), "template": 1, "creator": 5}, "Asset: creator: expected string, got int"),
        ({**Function(execution="x").to_ipld(), "reference": 1}, "Function: reference: expected string, got int"),
        ({"name": "x"}, "not a Transform.Storage object"),
        ([1], "not a Transform.Storage object"),
    ],
)
def test_bad_objects_name_the_field(obj: Any, message: str) -> None:
    with pytest.raises(InvalidObject) as e:
        parse_object(obj)
    assert e.value.message.startswith(message), e.value.message


# -- Table 4 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "execution, in_type, out_type",
    [
        ("identity", A, A),
        ("identity", [A, B], [A, B]),
        ("ignore", [A, B], None),
        ("down", [A, None], [None, A]),
        ("down", [A, None, None], [None, None, A]),
        ("up", [None, None, B], [B, None, None]),
        ("duplicate down", [A, None], [A, A]),
        ("duplicate up", [None, B], [B, B]),
        ("braid", [A, B], [B, A]),
    ],
)
def test_builtin_output_types(execution: str, in_type: Any, out_type: Any) -> None:
    assert builtin_output(execution, in_type) == out_type
    f = builtin(execution, in_type, name=execution)
    assert (f.execution, f.fn, f.input, f.output) == (execution, None, in_type, out_type)


def test_braid_is_symmetric_and_up_undoes_down() -> None:
    assert builtin_output("braid", builtin_output("braid", [A, B])) == [A, B]  # Braid∘Braid = Identity (§2.3)
    x = [A, None, None, None]
    assert builtin_output("up", builtin_output("down", x)) == x


def test_introduce_gives_its_fn_type_from_null() -> None:
    assert builtin_output("introduce", None, S) == S
    assert builtin_output("introduce", [None], S) == S
    assert builtin("introduce", None, fn=S).output == S
    with pytest.raises(InvalidInput, match="takes the null type"):
        builtin_output("introduce", A, S)
    with pytest.raises(InvalidInput, match="needs fn"):
        builtin("introduce", None)


@pytest.mark.parametrize(
    "execution, in_type, message",
    [
        ("down", [A], "takes D ⊗ null ⊗ … ⊗ null (height ≥ 2); the input has height 1"),
        ("down", [A, B], "takes D ⊗ null"),
        ("up", [A, B], "takes null ⊗ … ⊗ null ⊗ E"),
        ("duplicate down", [A, B], "takes F ⊗ null"),
        ("duplicate up", [A, B], "takes null ⊗ G"),
        ("braid", [A, B, None], "takes a series of height 2; the input has height 3"),
        ("braid", A, "the input has height 1"),
        ("WASM", A, "is not a built-in function"),
        ("pipeline", A, "a pipeline's output type is the out its Function declares"),
    ],
)
def test_builtin_refuses_inputs_it_is_not_defined_on(execution: str, in_type: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        builtin_output(execution, in_type)
    assert message in e.value.message


def test_pipeline_is_a_reference_with_a_declared_out() -> None:
    f = builtin("pipeline", [A, B], fn=S, out=[B])
    assert (f.fn, f.output) == (S, [B])
    assert builtin("pipeline", A, fn=S, out=None).output is None  # the null type, declared
    with pytest.raises(InvalidInput, match="declares its out"):
        builtin("pipeline", A, fn=S)
    with pytest.raises(InvalidInput, match="takes fn null"):
        builtin("braid", [A, B], fn=S)
    assert builtin("braid", [A, B], out=[B, A]).output == [B, A]
    with pytest.raises(InvalidInput, match="out is not the type its in gives"):
        builtin("braid", [A, B], out=[A, B])


def test_builtin_types_are_types() -> None:
    """Every built-in's in and out normalize (the null type included: Table 4's null wires)."""
    t = Type(type_checking="json-schema", schema=S).to_ipld()
    for execution in BUILTINS:
        in_type = {"introduce": None, "down": [t, None], "up": [None, t], "duplicate down": [t, None]}.get(
            execution, [None, t] if execution == "duplicate up" else [t, t]
        )
        extra = {"fn": S, "out": t} if execution == "pipeline" else {"fn": S} if execution == "introduce" else {}
        f = builtin(execution, in_type, **extra)
        for side in (f.input, f.output if execution != "introduce" else None):
            assert asyncio.run(normalize_type(side)).success, (execution, side)
        assert block_of(f.to_ipld()).cid == f.cid
