"""CIDs: computing, parsing, printing and verifying them.

DESIGN.md "Object rules": every object is addressed by a CIDv1 whose multihash is BLAKE3-256
(code 0x1e, 32 bytes), printed in lower-case base32 (``b…``). Holium schema v0 "Reference
schema" fixes the same hash. Links inside DAG-CBOR are ``multiformats.CID`` values, so that is
the one CID type used everywhere.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Annotated

import blake3
from multiformats import CID, multihash

from node.support.errors import HashMismatch, InvalidCID, quote

DAG_CBOR = 0x71  # objects (Cairn uses dag-cbor so IPFS follows links; DESIGN.md "Object rules")
CBOR = 0x51  # Holium scalar leaves (plain CBOR, no links; holium-rs linked_data_tree)
RAW = 0x55  # raw bytes (UnixFS raw leaves, module bytecode in holium-rs)
DAG_PB = 0x70  # UnixFS nodes (bulk data added through Kubo)
BLAKE3 = 0x1E

CODECS: dict[str, int] = {"dag-cbor": DAG_CBOR, "cbor": CBOR, "raw": RAW, "dag-pb": DAG_PB}

# A CID as JSON answers write it (``cid_str``); the text is its description in the API's answer schemas.
CidText = Annotated[str, "a CID, base32 (CIDv1) or base58 (CIDv0)"]

__all__ = [
    "BLAKE3",
    "CBOR",
    "CID",
    "CODECS",
    "DAG_CBOR",
    "DAG_PB",
    "RAW",
    "CidText",
    "blake3_cid",
    "cid_for",
    "cid_str",
    "codec_code",
    "parse_cid",
    "same_cid",
    "verify_block",
]


def codec_code(codec: str | int) -> int:
    """Multicodec code for a codec name ("dag-cbor", "cbor", "raw", "dag-pb") or code."""
    if isinstance(codec, int) and not isinstance(codec, bool):
        if codec in CODECS.values():
            return codec
    elif isinstance(codec, str) and codec in CODECS:
        return CODECS[codec]
    known = ", ".join(CODECS)
    raise InvalidCID(f"unsupported codec {codec!r}: use one of {known}")


def cid_for(data: bytes, codec: str | int = "dag-cbor", hashfun: str = "blake3") -> CID:
    """CIDv1 of ``data`` under ``codec``, hashed with BLAKE3-256 (DESIGN.md "Object rules").

    ``hashfun`` names another multihash function (Kubo's ``sha2-256`` for a ``dag put --hash``).
    """
    code = codec_code(codec)
    if hashfun == "blake3":
        return blake3_cid(blake3.blake3(data).digest(), code)
    try:
        mh = multihash.get(hashfun).digest(data)
    except Exception as exc:  # noqa: BLE001  multiformats raises KeyError/ValueError/ImportError subclasses
        raise InvalidCID(f"unsupported hash function {hashfun!r}: {_reason(exc)}") from None
    return CID("base32", 1, code, mh)


def blake3_cid(digest: bytes, codec: str | int = "raw") -> CID:
    """The CIDv1 of a BLAKE3-256 ``digest`` computed elsewhere (e.g. while streaming a file)."""
    return _blake3_cid(bytes(digest), codec_code(codec))


@functools.lru_cache(maxsize=8192)  # a hit builds the same question objects again: see _MEMO_CIDS below
def _blake3_cid(digest: bytes, code: int) -> CID:
    return CID("base32", 1, code, multihash.wrap(digest, "blake3"))


def parse_cid(text: str | bytes | CID) -> CID:
    """Parse a CID string (any multibase CIDv1, or a base58 CIDv0 ``Qm…``) or its binary form.

    The returned CID keeps its version (a v0 link and its v1 form are different bytes inside
    DAG-CBOR); print it with :func:`cid_str` to get the canonical base32 v1 form.
    """
    if isinstance(text, CID):
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        return _decode_binary(bytes(text))
    if not isinstance(text, str):
        raise InvalidCID(f"expected a CID string, got {type(text).__name__}")
    if not text:
        raise InvalidCID('invalid CID "": empty string')
    if text != text.strip():
        raise InvalidCID(f"invalid CID {quote(text)}: surrounding whitespace")
    return _decode_text(text)


# multiformats spends ~0.15 ms of CPU decoding, printing or building one CID (pure-Python base32, type checks on
# every call), and a memoized hit handles about ten of the same CIDs each time (scripts/bench/load.py). CIDs are
# immutable values: remember the last few thousand texts both ways (bounded, so hostile input cannot grow it).
_MEMO_CIDS = 8192


@functools.lru_cache(maxsize=_MEMO_CIDS)
def _decode_text(text: str) -> CID:
    try:
        return CID.decode(text)
    except Exception as exc:  # noqa: BLE001  multiformats raises many unrelated types (KeyError, ValueError, …)
        raise InvalidCID(f"invalid CID {quote(text)}: {_reason(exc)}") from None


def _decode_binary(raw: bytes) -> CID:
    try:
        return CID.decode(raw)
    except Exception as exc:  # noqa: BLE001  as in parse_cid: many unrelated exception types
        raise InvalidCID(f"invalid binary CID {raw[:16].hex()}…: {_reason(exc)}") from None


def _reason(exc: Exception) -> str:
    msg = str(exc).strip("'\" ") or type(exc).__name__
    if "multibase" in msg.lower() and "prefix" in msg.lower():
        return "unknown multibase prefix (expected b… base32 CIDv1 or Qm… CIDv0)"
    return msg.rstrip(".")


def cid_str(cid: CID | str, *, keep_v0: bool = False) -> str:
    """Canonical text of a CID: CIDv1, base32 lower case (a v0 CID is shown as its v1 form).

    ``keep_v0``: print a v0 CID as its ``Qm…`` self, e.g. as an argument to Kubo, so that what
    Kubo echoes back (pins, keys) is the CID it was given.
    """
    return _text_of(parse_cid(cid), keep_v0)


@functools.lru_cache(maxsize=_MEMO_CIDS)
def _text_of(c: CID, keep_v0: bool) -> str:
    if c.version == 0:
        if keep_v0:
            return str(c)
        c = c.set(version=1, base="base32")
    return c.encode("base32")


def same_cid(a: CID, b: CID) -> bool:
    """Same CID, whatever multibase each happens to carry (that is not part of its identity)."""
    return bytes(a) == bytes(b)


def verify_block(cid: CID | str, data: bytes) -> None:
    """Check that ``data`` hashes to ``cid`` with the CID's own hash function.

    Fetched blocks are always hash-checked (DESIGN.md "Resolving a query"). Supports every
    multihash function multiformats implements (BLAKE3, the SHA-2/SHA-3 family, identity, …);
    raises HashMismatch naming the CID when they differ, InvalidCID for a function it cannot run.
    """
    c = parse_cid(cid)
    name = c.hashfun.name
    expected = c.raw_digest
    if name == "blake3":
        actual = blake3.blake3(data).digest(length=len(expected))
    elif name == "sha2-256":
        actual = hashlib.sha256(data).digest()
    elif name == "identity":
        actual = bytes(data)
    else:
        try:
            actual = multihash.unwrap(multihash.get(name).digest(data, size=len(expected)))
        except Exception:  # noqa: BLE001  guard: multiformats builds no CID it cannot hash, but a failure must stay a 4xx
            why = f"no {name} digest of {len(expected)} bytes can be computed here"
            raise InvalidCID(f"cannot verify {cid_str(c)}: {why}") from None
    if actual != expected:
        raise HashMismatch(
            f"block does not match its CID {cid_str(c)}: "
            f"{name} digest is {actual.hex()[:16]}…, expected {expected.hex()[:16]}…"
        )
