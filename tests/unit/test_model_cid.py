"""CIDs: computing, parsing, printing, verifying (DESIGN.md "Object rules")."""

from __future__ import annotations

import hashlib

import pytest
from multiformats import CID, multihash

from node.domain.model import CBOR, DAG_CBOR, DAG_PB, RAW, cid_for, cid_str, parse_cid, same_cid, verify_block
from node.support.errors import CairnError, HashMismatch, InvalidCID, InvalidInput

NULL_LEAF = "bafir4idbvg7rb4h75xd5y52ytlrkwtfibmagzadomy3oig3aiegnr4f3yq"  # holium-rs test vector
V0 = "QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n"


def test_codec_constants() -> None:
    assert (DAG_CBOR, CBOR, RAW, DAG_PB) == (0x71, 0x51, 0x55, 0x70)


def test_cid_for_is_v1_blake3_base32() -> None:
    cid = cid_for(b"hello")
    assert cid.version == 1 and cid.codec.code == DAG_CBOR
    assert cid.hashfun.code == 0x1E and len(cid.raw_digest) == 32
    assert str(cid).startswith("bafyr4")
    assert cid_for(b"hello", "raw").codec.code == RAW
    assert cid_for(b"hello", CBOR).codec.code == CBOR


def test_null_leaf_cid() -> None:
    assert str(cid_for(b"\xf6", "cbor")) == NULL_LEAF


def test_unknown_codec_is_refused() -> None:
    with pytest.raises(InvalidCID, match="unsupported codec"):
        cid_for(b"x", "dag-jose")


def test_parse_and_print_v1() -> None:
    cid = parse_cid(NULL_LEAF)
    assert cid == cid_for(b"\xf6", "cbor")
    assert cid_str(cid) == NULL_LEAF
    assert cid_str(NULL_LEAF.upper()) == NULL_LEAF  # base32 upper case, multibase prefix "B"


def test_other_multibases_normalise_to_base32() -> None:
    cid = cid_for(b"data")
    for base in ("base58btc", "base16", "base64"):
        assert cid_str(cid.encode(base)) == str(cid)


def test_cidv0_is_accepted_and_printed_as_v1() -> None:
    cid = parse_cid(V0)
    assert cid.version == 0  # kept as v0: a v0 link is different bytes inside DAG-CBOR
    assert cid_str(cid) == "bafybeihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"


def test_parse_cid_passes_cids_through() -> None:
    cid = cid_for(b"x")
    assert parse_cid(cid) is cid


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello",
        "bafy",
        "Qm",
        "QmTooShort",
        V0 + "0",
        NULL_LEAF[:-3],
        NULL_LEAF + " ",
        " " + NULL_LEAF,
        "b" + "1" * 20,  # '1' is not in the base32 alphabet
        "zzzzzzzz",
        "f01711e20",  # hex CID with a truncated multihash
        "not a cid at all, and a long one " * 5,
        "bafy\nrei",
    ],
)
def test_malformed_cid_strings(text: str) -> None:
    with pytest.raises(InvalidCID) as info:
        parse_cid(text)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("invalid CID ")
    assert isinstance(info.value, InvalidInput) and info.value.status == 400
    assert text[:10].strip() in msg or text.strip() == "" or "\n" in text


def test_parse_cid_rejects_non_strings() -> None:
    with pytest.raises(InvalidCID, match="expected a CID string, got int"):
        parse_cid(123)  # type: ignore[arg-type]


def test_verify_blake3_block() -> None:
    data = b"\xa1aa\x01"
    verify_block(cid_for(data), data)
    with pytest.raises(HashMismatch) as info:
        verify_block(cid_for(data), data + b"x")
    assert str(cid_for(data)) in str(info.value)
    assert isinstance(info.value, CairnError) and "\n" not in str(info.value)


def test_verify_sha256_and_identity_blocks() -> None:
    data = b"some bytes"
    sha = CID("base32", 1, "raw", multihash.wrap(hashlib.sha256(data).digest(), "sha2-256"))
    verify_block(sha, data)
    with pytest.raises(HashMismatch):
        verify_block(sha, b"other bytes")
    ident = CID("base32", 1, "raw", multihash.wrap(data, "identity"))
    verify_block(str(ident), data)
    with pytest.raises(HashMismatch):
        verify_block(ident, b"nope")


def test_verify_other_implemented_hashes() -> None:
    # Kubo can hold blocks hashed otherwise (``--hash``): every function multiformats runs is checked.
    for name, ref in (("sha2-512", hashlib.sha512), ("sha3-256", hashlib.sha3_256)):
        cid = CID("base32", 1, "raw", multihash.wrap(ref(b"x").digest(), name))
        verify_block(cid, b"x")
        with pytest.raises(HashMismatch):
            verify_block(cid, b"y")


def test_verify_unsupported_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    # multiformats builds no CID whose hash it cannot run; should its hasher fail anyway, the error stays a 4xx.
    cid = CID("base32", 1, "raw", multihash.digest(b"x", "sha2-512"))

    def broken(*args: object, **kwargs: object) -> None:
        raise ImportError("hasher missing")

    monkeypatch.setattr(multihash, "get", broken)
    with pytest.raises(InvalidCID, match=r"cannot verify b\w+: no sha2-512 digest of 64 bytes"):
        verify_block(cid, b"x")


def test_cid_for_other_hash_matches_hashlib() -> None:
    cid = cid_for(b"abc", "raw", "sha2-256")
    assert cid.hashfun.name == "sha2-256" and cid.raw_digest == hashlib.sha256(b"abc").digest()
    with pytest.raises(InvalidCID, match="unsupported hash function"):
        cid_for(b"abc", "raw", "no-such-hash")


def test_binary_cids_parse_and_kubo_text_keeps_v0() -> None:
    cid = cid_for(b"x", "raw")
    assert parse_cid(bytes(cid)) == cid
    with pytest.raises(InvalidCID, match="invalid binary CID"):
        parse_cid(b"\x01\x02")
    assert cid_str(V0, keep_v0=True) == V0 and cid_str(cid, keep_v0=True) == str(cid)
    assert same_cid(cid, cid.set(base="base58btc")) and not same_cid(cid, cid_for(b"y", "raw"))
