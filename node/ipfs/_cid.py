"""Tiny CID helpers private to the IPFS layer (multiformats directly, so we do not depend on node.model)."""

from __future__ import annotations

from multiformats import CID, multihash

from node.errors import InvalidInput, KuboCIDMismatch

BLAKE3_LEN = 32


def to_cid(value: CID | str | bytes) -> CID:
    """Accept a CID, its string form, or its binary form."""
    if isinstance(value, CID):
        return value
    try:
        return CID.decode(value)
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidInput(f"not a CID: {value!r} ({e})") from e


def cid_text(value: CID | str) -> str:
    """The string Kubo gets for a CID argument (CIDv1 in base32; CIDv0 as is)."""
    cid = to_cid(value)
    return str(cid if cid.version == 0 else cid.set(base="base32"))


def local_cid(data: bytes, codec: str, hashfun: str = "blake3") -> CID:
    """CIDv1 of ``data`` as one block, as Cairn computes it (BLAKE3-256 by default)."""
    size = BLAKE3_LEN if hashfun == "blake3" else None
    return CID("base32", 1, codec, multihash.get(hashfun).digest(data, size=size))


def same_cid(a: CID, b: CID) -> bool:
    # Compare binary forms: the multibase a CID happens to carry is not part of its identity.
    return bytes(a) == bytes(b)


def check_block(cid: CID, data: bytes) -> None:
    """Raise KuboCIDMismatch unless ``data`` hashes to ``cid``'s multihash."""
    name = cid.hashfun.name
    if name == "identity":
        ok = cid.raw_digest == data
    else:
        try:
            hasher = multihash.get(name)
            got = hasher.digest(data, size=len(cid.raw_digest))
        except Exception as e:  # no implementation of that hash function here
            raise KuboCIDMismatch(cid, None, message=f"cannot verify the block {cid}: no {name} hasher ({e})") from e
        ok = got == cid.digest
    if not ok:
        raise KuboCIDMismatch(cid, None, message=f"Kubo returned {len(data)} bytes for {cid} that do not hash to it")
