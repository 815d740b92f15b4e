"""DAG-JSON codec: round trips, canonical output, strict parsing, Kubo 0.42 CIDs."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.domain.model import cid_for, dumps, encode, loads, parse_cid
from node.domain.model.dagjson import MAX_DEPTH
from node.support.errors import EncodingError, InvalidDagJson
from tests.unit.test_model_codec import ipld_values, same, shuffled

json_values = ipld_values(st.text(max_size=8).filter(lambda k: k != "/"))


@settings(max_examples=300)
@given(json_values)
def test_loads_dumps_round_trip(value: Any) -> None:
    assert same(loads(dumps(value)), value)


@given(json_values)
def test_indented_output_reads_back(value: Any) -> None:
    assert same(loads(dumps(value, indent=2)), value)


@settings(max_examples=200)
@given(json_values, st.randoms(use_true_random=False))
def test_dumps_is_deterministic(value: Any, rnd: random.Random) -> None:
    text = dumps(value)
    assert dumps(shuffled(value, rnd)) == text
    assert dumps(loads(text)) == text


def test_keys_sorted_by_utf8_bytes() -> None:
    # DAG-JSON sorts bytewise (unlike DAG-CBOR's length-first order), as go-ipld-prime does.
    assert dumps({"b": 1, "aa": 2, "é": 3, "a": 4}) == '{"a":4,"aa":2,"b":1,"é":3}'


@pytest.mark.parametrize(
    "value, text",
    [
        (1.0, "1.0"),
        (-0.0, "-0.0"),
        (1e300, "1e+300"),
        (5e-324, "5e-324"),
        (1e16, "1e+16"),
        (0.1, "0.1"),
        (1, "1"),
        (-(2**63), "-9223372036854775808"),
        (b"hello", '{"/":{"bytes":"aGVsbG8"}}'),
        (b"", '{"/":{"bytes":""}}'),
        ('é\n"', '"é\\n\\""'),
        ([], "[]"),
        ({}, "{}"),
    ],
)
def test_dumps_forms(value: Any, text: str) -> None:
    assert dumps(value) == text
    assert same(loads(text), value)


def test_numbers_keep_their_kind() -> None:
    assert type(loads("1")) is int
    assert type(loads("1.0")) is float
    assert type(loads("1e2")) is float
    assert type(loads("-0")) is int


def test_links_and_cidv0() -> None:
    v0 = "QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n"
    text = '{"a":{"/":"' + v0 + '"}}'
    value = loads(text)
    assert value["a"] == parse_cid(v0) and value["a"].version == 0
    assert dumps(value) == text  # v0 links stay v0 (different bytes)


def test_padded_base64_is_accepted_like_kubo() -> None:
    assert loads('{"/":{"bytes":"aGVsbA=="}}') == b"hell"


def test_bytes_input() -> None:
    assert loads('{"é":[1]}'.encode()) == {"é": [1]}


def test_dumps_refuses_the_reserved_key() -> None:
    with pytest.raises(EncodingError, match='"/" key is reserved'):
        dumps({"a": {"/": 5}})


# Recorded with Kubo 0.42: `ipfs dag put --input-codec dag-json --store-codec dag-cbor --hash blake3`
KUBO_CIDS = [
    ('{"a":1.0}', "bafyr4iaeeb7nedys7o3x7236cj4lhixmobfkt6kubuytsi3z7m3ylrmqcu"),
    ("-0.0", "bafyr4ihlayw73cceqwna4dlj4bytl2rzb72hvetchovw4es3iiuuxiadu4"),
    ("5e-324", "bafyr4ifivtcisfmgi2avm3m4z6hbqhigjkce63pzkgocnmfmrli2tnoeam"),
    ("1e300", "bafyr4idhlzghvl6ulzg6365gx647zt3jzkpy3lriy2fvqifzex26zxptoy"),
    ("1e-400", "bafyr4iddcyss3hzch32swsbsrjb6mxo7piuptykexvqbqj5tizhnltuiju"),
    ("-9223372036854775808", "bafyr4id4bawxlvul5twpzk4am6y4bu7haedexxntx323qmh2dzuwmp2aci"),
    ("9223372036854775807", "bafyr4icmej33nuz6ygy6dq7tj2pfqg5in43byjmbg2kw5w24airoi23ltu"),
    ('{"b":1,"a":2,"aa":3}', "bafyr4ibdluyvu6skm23u2n6agai5hlo27dyxfpev6nziujzpb2piwej34y"),
    ('{"é":1,"z":2,"aaa":3}', "bafyr4ibg3etr5c7mogovjw7drlvy7jnqlizy5rach2x3a6lt4km7h2ak4m"),
    ('{"/":{"bytes":"aGVsbG8"}}', "bafyr4ia755v5pssxaj2m7nzgk2pe3aanak26zjpi6p7draidwfjy5ltadi"),
    (
        '{"/":"QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n"}',
        "bafyr4id7gaky22zqradp65thoqt6vb5lzsvfrunmxnxgtxkuc4jhpth6oi",
    ),
    ("null", "bafyr4idbvg7rb4h75xd5y52ytlrkwtfibmagzadomy3oig3aiegnr4f3yq"),
    ("[]", "bafyr4if342u7liaunipu2a4b5gyo2gwc6guxttu5llme4rx7bnmpg227iy"),
    ("{}", "bafyr4ia7stf7ge5tzyrsk6tskhva7sk2erkw5jqr4t4pi5pfjglrxlw3ai"),
]


@pytest.mark.parametrize("text, cid", KUBO_CIDS)
def test_same_cids_as_kubo(text: str, cid: str) -> None:
    assert str(cid_for(encode(loads(text)))) == cid


@pytest.mark.parametrize(
    "text, where, fragment",
    [
        ('{"a":1,\n "a":2}', "line 2 column 2", 'duplicate key "a"'),
        ("NaN", "line 1 column 1", "NaN and Infinity"),
        ("[-Infinity]", "line 1 column 2", "NaN and Infinity"),
        ("9223372036854775808", "line 1 column 1", "outside the signed 64-bit range"),
        ("[-9223372036854775809]", "line 1 column 2", "outside the signed 64-bit range"),
        ("1" * 5000, "line 1 column 1", "outside the signed 64-bit range"),
        ("1e400", "line 1 column 1", "too large for a 64-bit float"),
        ('{"/":5}', "line 1 column 1", 'a map with a "/" key'),
        ('{"/":"bafyabc","x":1}', "line 1 column 1", 'a map with a "/" key'),
        ('{"/":{"bytes":"aGVs","more":1}}', "line 1 column 1", 'a map with a "/" key'),
        ('[{"/":"nope"}]', "line 1 column 2", 'bad link: invalid CID "nope"'),
        ('{"/":{"bytes":"a"}}', "line 1 column 1", "not standard base64"),
        ('{"/":{"bytes":"aGVsbG8-"}}', "line 1 column 1", "not standard base64"),
        ("[1,]", "line 1 column 4", "trailing comma"),
        ('{"a":1,}', "line 1 column 8", "trailing comma"),
        ("01", "line 1 column 1", "leading zeros"),
        ("1.", "line 1 column 1", "invalid number"),
        (".5", "line 1 column 1", 'unexpected character "."'),
        ('"\\ud800"', "line 1 column 1", "lone UTF-16 surrogate"),
        ('"a\tb"', "line 1 column 3", "invalid control character"),
        ('"abc', "line 1 column 1", "unterminated string"),
        ("[1] x", "line 1 column 5", "unexpected content after the value"),
        ("", "line 1 column 1", "unexpected end of input"),
        ('{"a" 1}', "line 1 column 6", "expected ':'"),
        ("[1 2]", "line 1 column 4", "expected ',' or ']'"),
        ("{1:2}", "line 1 column 2", "expected a string key"),
        ("\ufeff[]", "line 1 column 1", "byte order mark"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"line 1 column {MAX_DEPTH + 1}", "nested deeper"),
    ],
)
def test_loads_errors(text: str, where: str, fragment: str) -> None:
    with pytest.raises(InvalidDagJson) as info:
        loads(text)
    msg = str(info.value)
    assert msg.startswith(f"invalid DAG-JSON: {where}: "), msg
    assert fragment in msg
    assert "\n" not in msg


def test_invalid_utf8_bytes() -> None:
    with pytest.raises(InvalidDagJson, match="line 2 column 4: input is not valid UTF-8"):
        loads(b'[\n  "\xff"]')
