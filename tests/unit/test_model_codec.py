"""Strict DAG-CBOR codec and blocks: round trips, canonical bytes, clear errors."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import CID, multihash

from node.domain.model import INT64_MAX, INT64_MIN, Block, block_of, cid_for, decode, encode
from node.support.errors import EncodingError, HashMismatch

# ----------------------------------------------------------------------- strategies (shared)

cids = st.one_of(
    st.builds(cid_for, st.binary(max_size=16), st.sampled_from(["dag-cbor", "cbor", "raw", "dag-pb"])),
    st.builds(lambda d: CID("base32", 1, "dag-cbor", multihash.digest(d, "sha2-256")), st.binary(max_size=8)),
    st.builds(lambda d: CID("base58btc", 0, "dag-pb", multihash.digest(d, "sha2-256")), st.binary(max_size=8)),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from([INT64_MIN, INT64_MAX, 0, -1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
    st.binary(),
    cids,
)


_KEYS = st.text(max_size=8)


def ipld_values(keys: st.SearchStrategy[str] = _KEYS) -> st.SearchStrategy[Any]:
    """Arbitrary IPLD data model values (nested lists and maps of every kind)."""
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
        max_leaves=25,
    )


def same(a: Any, b: Any) -> bool:
    """Equality that also compares types (1 vs 1.0, True vs 1) and the sign of zero."""
    if isinstance(a, CID) or isinstance(b, CID):
        return isinstance(a, CID) and isinstance(b, CID) and bytes(a) == bytes(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def shuffled(v: Any, rnd: random.Random) -> Any:
    """The same value with every map's keys inserted in a random order."""
    if isinstance(v, list):
        return [shuffled(x, rnd) for x in v]
    if isinstance(v, dict):
        keys = list(v)
        rnd.shuffle(keys)
        return {k: shuffled(v[k], rnd) for k in keys}
    return v


# ----------------------------------------------------------------------- properties


@settings(max_examples=300)
@given(ipld_values())
def test_decode_encode_round_trip(value: Any) -> None:
    assert same(decode(encode(value)), value)


@settings(max_examples=200)
@given(ipld_values(), st.randoms(use_true_random=False))
def test_encoding_ignores_key_insertion_order(value: Any, rnd: random.Random) -> None:
    assert encode(shuffled(value, rnd)) == encode(value)


@given(ipld_values())
def test_encoded_bytes_are_canonical(value: Any) -> None:
    data = encode(value)
    assert encode(decode(data)) == data


# ----------------------------------------------------------------------- exact bytes


def test_map_keys_sort_length_first() -> None:
    assert encode({"b": 1, "aa": 2, "a": 3}) == bytes.fromhex("a3616103616201626161" + "02")


def test_floats_are_always_64_bit() -> None:
    assert encode(1.0) == bytes.fromhex("fb3ff0000000000000")
    assert encode(-0.0) == bytes.fromhex("fb8000000000000000")


def test_links_are_tag_42() -> None:
    cid = cid_for(b"\xf6", "cbor")
    assert encode([cid]) == bytes.fromhex("81d82a58250001511e20") + cid.raw_digest


def test_int64_extremes() -> None:
    assert encode(INT64_MAX) == bytes.fromhex("1b7fffffffffffffff")
    assert encode(INT64_MIN) == bytes.fromhex("3b7fffffffffffffff")


def test_kind_objects_encode_through_to_ipld() -> None:
    class Obj:
        def to_ipld(self) -> dict[str, int]:
            return {"a": 1}

    assert encode(Obj()) == encode({"a": 1})


# ----------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "value, fragment",
    [
        ({"a": [1, 2**63]}, "at $.a[1]: integer 9223372036854775808 is outside the signed 64-bit range"),
        ([INT64_MIN - 1], "at $[0]: integer"),
        ({"x": float("nan")}, "at $.x: nan is not allowed"),
        ([float("inf")], "inf is not allowed"),
        ({1: "a"}, "map key 1 is not a string"),
        ((1, 2), "tuple is not an IPLD kind"),
        ({"a b": {1, 2}}, 'at $["a b"]: set is not an IPLD kind'),
        (["\ud800"], "lone surrogate"),
        (bytearray(b"x"), "bytearray is not an IPLD kind"),
    ],
)
def test_encode_errors_name_the_path(value: Any, fragment: str) -> None:
    with pytest.raises(EncodingError) as info:
        encode(value)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "hex_data, fragment",
    [
        ("a2616201616102", "canonical order"),  # keys out of order
        ("1801", "bytes"),  # non-minimal integer
        ("f93c00", "additional info"),  # half float
        ("8201", "EOF"),  # truncated
        ("0102", "single top-level"),  # two items
        ("1bffffffffffffffff", "signed 64-bit range"),  # uint64 beyond int64
        ("a2616101616102", "duplicate"),  # repeated key
        ("c1f6", "tag"),  # tags other than 42
    ],
)
def test_decode_is_strict(hex_data: str, fragment: str) -> None:
    with pytest.raises(EncodingError) as info:
        decode(bytes.fromhex(hex_data))
    msg = str(info.value)
    assert msg.startswith("invalid DAG-CBOR") and fragment.lower() in msg.lower()
    assert "\n" not in msg


# ----------------------------------------------------------------------- blocks


def test_block_of_dag_cbor() -> None:
    block = block_of({"a": 1})
    assert block == Block(cid_for(block.data), encode({"a": 1}))
    block.verify()
    assert block.decode() == {"a": 1}


@pytest.mark.parametrize(
    "value, hex_data",
    [
        (None, "f6"),
        (True, "f5"),
        (0, "00"),
        (-1, "20"),
        (2**64 - 1, "1bffffffffffffffff"),  # serde_cbor's range goes past int64
        (1.0, "f93c00"),  # shortest float form, as serde_cbor writes it
        (-0.0, "f98000"),
        (65504.0, "f97bff"),
        (100000.0, "fa47c35000"),
        (1.1, "fb3ff199999999999a"),
        (5e-324, "fb0000000000000001"),
        ("a", "6161"),
        (b"\x01", "4101"),
    ],
)
def test_cbor_leaf_blocks(value: Any, hex_data: str) -> None:
    block = block_of(value, "cbor")
    assert block.data.hex() == hex_data
    assert block.cid.codec.code == 0x51
    assert same(block.decode(), value)


def test_cbor_blocks_refuse_links() -> None:
    with pytest.raises(EncodingError, match="hold no links"):
        block_of([cid_for(b"x")], "cbor")
    with pytest.raises(EncodingError, match="tag 42"):
        decode(encode([cid_for(b"x")]), "cbor")


def test_raw_blocks() -> None:
    block = block_of(b"\x00asm", "raw")
    assert block.data == b"\x00asm" and block.cid.codec.code == 0x55
    assert block.decode() == b"\x00asm"
    with pytest.raises(EncodingError, match="raw block holds bytes, got string"):
        block_of("text", "raw")


def test_block_verify_detects_tampering() -> None:
    block = block_of([1, 2, 3])
    with pytest.raises(HashMismatch):
        Block(block.cid, block.data[:-1] + b"\x04").verify()


def test_remembered_blocks_are_the_blocks_a_fresh_encoding_gives() -> None:
    """st_0, qy_0 and iv_0 blocks are remembered by value (a hit rebuilds them): the remembered block is
    byte-identical to encoding the object again, an object differing in any field gets its own block, and the
    memory stays bounded."""
    from node.domain.model import InputIdentity, Invocation, Query, Structure, codec

    st = Structure("parquet", (("col_0", "int64"), ("col_1", "string")))
    qy = Query("sql", "spark", "sqlglot", "SELECT col_0 FROM a", (block_of(st).cid,))
    iv = Invocation(block_of(qy).cid, (InputIdentity(block_of(st).cid, "f1e2", 3),))
    for obj in (st, qy, iv):
        first = block_of(obj)
        assert block_of(obj) is first  # remembered
        assert first.data == encode(obj) and first.cid == cid_for(encode(obj))
    other = Invocation(block_of(qy).cid, (InputIdentity(block_of(st).cid, "f1e2", 4),))
    assert block_of(other).cid != block_of(iv).cid and block_of(other).data == encode(other)
    for i in range(codec.MEMO_BLOCKS + 10):
        block_of(Structure("parquet", ((f"c{i}", "int64"),)))
    assert len(codec._MEMO) <= codec.MEMO_BLOCKS
