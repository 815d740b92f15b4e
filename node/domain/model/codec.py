"""Blocks: strict DAG-CBOR encoding/decoding and the Block type.

DESIGN.md "Object rules": every object is one DAG-CBOR block (0x71) in strict form: map keys
sorted length first then bytewise, shortest integer heads, floats as 64-bit, links as tag 42.
The ``dag_cbor`` package does the byte work; this module checks values first so that errors
name the path of the bad value, and keeps integers in the signed 64-bit range that Kubo
(go-ipld-prime) accepts. Holium scalar leaves use plain CBOR (0x51), see ``plaincbor``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import dag_cbor
from multiformats import CID

from node.domain.model.cid import CBOR, DAG_CBOR, RAW, cid_for, codec_code, verify_block
from node.domain.model.plaincbor import decode_plain, encode_plain
from node.support.errors import EncodingError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# Kubo refuses blocks over 1 MiB ("produced block is over 1MiB", boxo's SoftBlockLimit); DESIGN.md "Object
# rules" sends bulk data to UnixFS instead. A bigger object is the caller's error, not Kubo's.
MAX_BLOCK_BYTES = 1 << 20

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_BLOCK_BYTES",
    "Block",
    "block_of",
    "check_ipld",
    "decode",
    "encode",
    "kind_name",
]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def child_path(path: str, key: str | int) -> str:
    """JSONPath-like position of a child value, for error messages (``$.content[3]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT.match(key):
        return f"{path}.{key}"
    return f"{path}[{_json_str(key)}]"


def _json_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=True)


_KIND_NAMES = {bool: "bool", int: "int", float: "float", str: "string", bytes: "bytes", list: "list", dict: "map"}


def kind_name(v: Any) -> str:
    """IPLD data model kind of a Python value, for "expected X, got Y" messages."""
    if v is None:
        return "null"
    if isinstance(v, CID):
        return "link"
    return _KIND_NAMES.get(type(v), type(v).__name__)


def check_ipld(value: Any, path: str = "$") -> None:
    """Raise EncodingError (naming the path) unless ``value`` is in the IPLD data model.

    Allowed: None, bool, int in [-2**63, 2**63-1], finite float, str (valid Unicode), bytes,
    list, dict with str keys, CID. Tuples and other types are refused so decode(encode(x)) == x.
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        v, p = stack.pop()
        if v is None or v is True or v is False or isinstance(v, (bytes, CID)):
            continue
        if isinstance(v, int):
            if not INT64_MIN <= v <= INT64_MAX:
                raise EncodingError(
                    f"cannot encode value at {p}: integer {_short_int(v)} is outside the signed 64-bit range"
                )
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise EncodingError(f"cannot encode value at {p}: {v} is not allowed (IPLD floats are finite)")
        elif isinstance(v, str):
            _check_str(v, p)
        elif isinstance(v, list):
            stack.extend((item, child_path(p, i)) for i, item in enumerate(v))
        elif isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise EncodingError(f"cannot encode value at {p}: map key {k!r} is not a string")
                _check_str(k, p)
                stack.append((item, child_path(p, k)))
        else:
            raise EncodingError(f"cannot encode value at {p}: {type(v).__name__} is not an IPLD kind")


def _short_int(v: int) -> str:
    s = str(v)
    return s if len(s) <= 30 else f"{s[:12]}…({len(s)} digits)"


def _check_str(s: str, path: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodingError(f"cannot encode value at {path}: string is not valid Unicode (lone surrogate)") from None


def as_ipld(obj: Any) -> Any:
    """Objects with ``to_ipld()`` (kinds, selector envelopes) encode as their IPLD form."""
    to_ipld = getattr(obj, "to_ipld", None)
    return to_ipld() if callable(to_ipld) else obj


def encode(obj: Any) -> bytes:
    """Strict DAG-CBOR bytes of an IPLD value (or of an object with ``to_ipld()``)."""
    value = as_ipld(obj)
    check_ipld(value)
    try:
        return dag_cbor.encode(value)
    except RecursionError:
        raise EncodingError("cannot encode value: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001  not expected after check_ipld; whatever dag_cbor raises becomes one line
        raise EncodingError(f"cannot encode value: {_first_line(exc)}") from None


def decode(data: bytes, codec: str | int = "dag-cbor") -> Any:
    """Decode a block's bytes: strict DAG-CBOR (default), plain CBOR leaf, or raw bytes."""
    code = codec_code(codec)
    if code == RAW:
        return bytes(data)
    if code == CBOR:
        return decode_plain(data, strict=True)
    if code != DAG_CBOR:
        raise EncodingError(f"cannot decode codec 0x{code:x} here (dag-cbor, cbor or raw only)")
    try:
        value = dag_cbor.decode(bytes(data))
    except RecursionError:
        raise EncodingError("invalid DAG-CBOR: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001  peer bytes: dag_cbor raises assorted types, all become one 4xx error
        raise EncodingError(f"invalid DAG-CBOR: {_first_line(exc)}") from None
    try:
        check_ipld(value)
    except EncodingError as exc:
        raise EncodingError(str(exc).replace("cannot encode value", "invalid DAG-CBOR: value", 1)) from None
    return _base32_links(value)


def _base32_links(value: Any) -> Any:
    """dag_cbor decodes links as base58btc CIDs; Cairn prints CIDv1 in base32 everywhere (DESIGN.md),
    so ``str(link)`` of a decoded link is the same text as the CID that was encoded."""
    if isinstance(value, CID):
        return value.set(base="base32") if value.version == 1 else value
    if isinstance(value, list):
        return [_base32_links(v) for v in value]
    if isinstance(value, dict):
        return {k: _base32_links(v) for k, v in value.items()}
    return value


def _first_line(exc: BaseException) -> str:
    """dag_cbor errors span several lines with byte pointers; keep the informative lines."""
    lines = [ln.strip().lstrip("\\").strip() for ln in str(exc).splitlines()]
    keep = [ln for ln in lines if ln and not ln.startswith(("^", "At byte")) and "details below" not in ln]
    return " ".join(keep) or type(exc).__name__


@dataclass(frozen=True)
class Block:
    """One content-addressed block: its CID and the exact bytes the CID hashes."""

    cid: CID
    data: bytes

    def verify(self) -> None:
        """Raise HashMismatch unless ``data`` hashes to ``cid``."""
        verify_block(self.cid, self.data)

    def decode(self) -> Any:
        """The IPLD value held by the block (per its CID's codec)."""
        return decode(self.data, self.cid.codec.code)


# Blocks of the kinds every query hit rebuilds (st_0, qy_0, iv_0: a third of a hit's time was their DAG-CBOR
# encoding), remembered by value. Only kinds that opt in (``memo_blocks``): frozen, hashable, and
# whose fields are str, int and CIDs only, so equal objects always encode to the same bytes.
_MEMO: dict[tuple[type, Any], Block] = {}
MEMO_BLOCKS = 4096  # entries (each a few hundred bytes); the oldest half is dropped when full


def block_of(obj: Any, codec: str | int = "dag-cbor") -> Block:
    """Encode ``obj`` as a block: dag-cbor (objects), cbor (Holium scalar leaves), or raw bytes.

    Codec ``cbor`` blocks hold no links (holium-rs writes leaves with serde_cbor: shortest
    floats, see ``plaincbor``); codec ``raw`` takes bytes as they are.
    """
    if codec == "dag-cbor" and getattr(type(obj), "memo_blocks", False):
        key = (type(obj), obj)
        block = _MEMO.get(key)
        if block is None:
            block = _encode_block(obj, DAG_CBOR)
            if len(_MEMO) >= MEMO_BLOCKS:
                for old in list(_MEMO)[: MEMO_BLOCKS // 2]:  # insertion order: the oldest first
                    del _MEMO[old]
            _MEMO[key] = block
        return block
    return _encode_block(obj, codec_code(codec))


def _encode_block(obj: Any, code: int) -> Block:
    value = as_ipld(obj)
    if code == DAG_CBOR:
        data = encode(value)
    elif code == CBOR:
        data = encode_plain(value)
    elif code == RAW:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise EncodingError(f"a raw block holds bytes, got {kind_name(value)}")
        data = bytes(value)
    else:
        raise EncodingError(f"cannot build blocks of codec 0x{code:x} here (use Kubo for dag-pb)")
    return Block(cid_for(data, code), data)
