"""Plain CBOR (codec ``cbor`` 0x51) as holium-rs writes and reads it.

Holium scalar leaves are plain CBOR blocks (DESIGN.md "Object rules"). holium-rs builds them with
serde_cbor 0.11 (crates/api/src/data/data_tree.rs, ``Value::to_cbor_vec``), whose serializer
writes each float in the *shortest* IEEE form that keeps its value (half, single, else double)
and every integer and length with the shortest head. DAG-CBOR instead always writes floats as
doubles, so leaves need this encoder to reproduce Holium's published CIDs.

The reader is lenient like ``serde_cbor::from_reader`` (the Holium CBOR importer): it accepts
any float width, indefinite lengths, ``undefined`` (read as null), any map keys, and ignores
tags (so a tag-42 link reads as its byte string, as in holium-rs). Maps are returned as
:class:`CborMap` so non-string keys and duplicates survive until the caller decides.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

from multiformats import CID

from node.support.errors import EncodingError

UINT64_MAX = 2**64 - 1
NINT64_MIN = -(2**64)  # serde_cbor's Integer range is [-2**64, 2**64 - 1]


@dataclass(frozen=True)
class CborMap:
    """A CBOR map as read: its (key, value) pairs in the order they were written."""

    pairs: tuple[tuple[Any, Any], ...]


# --------------------------------------------------------------------------- encoding


def _head(major: int, arg: int) -> bytes:
    if arg < 24:
        return bytes([major << 5 | arg])
    if arg <= 0xFF:
        return bytes([major << 5 | 24, arg])
    if arg <= 0xFFFF:
        return bytes([major << 5 | 25]) + arg.to_bytes(2, "big")
    if arg <= 0xFFFFFFFF:
        return bytes([major << 5 | 26]) + arg.to_bytes(4, "big")
    return bytes([major << 5 | 27]) + arg.to_bytes(8, "big")


def float_bytes(x: float) -> bytes:
    """Shortest exact float encoding, as serde_cbor's ``serialize_f64``/``serialize_f32``."""
    for fmt, lead in ((">e", 0xF9), (">f", 0xFA)):
        try:
            packed = struct.pack(fmt, x)
        except OverflowError:
            continue
        if struct.unpack(fmt, packed)[0] == x:
            return bytes([lead]) + packed
    return b"\xfb" + struct.pack(">d", x)


def encode_plain(value: Any, path: str = "$") -> bytes:
    """Encode a link-free value as holium-rs/serde_cbor would (maps in canonical key order)."""
    out = bytearray()
    _enc(value, out, path)
    return bytes(out)


def _enc(v: Any, out: bytearray, path: str) -> None:
    if v is None:
        out.append(0xF6)
    elif v is True or v is False:
        out.append(0xF5 if v else 0xF4)
    elif isinstance(v, int):
        if not NINT64_MIN <= v <= UINT64_MAX:
            raise EncodingError(f"cannot encode value at {path}: integer {v} does not fit in CBOR")
        out += _head(0, v) if v >= 0 else _head(1, -1 - v)
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise EncodingError(f"cannot encode value at {path}: {v} is not allowed (IPLD floats are finite)")
        out += float_bytes(v)
    elif isinstance(v, str):
        try:
            raw = v.encode("utf-8")
        except UnicodeEncodeError:
            raise EncodingError(
                f"cannot encode value at {path}: string is not valid Unicode (lone surrogate)"
            ) from None
        out += _head(3, len(raw)) + raw
    elif isinstance(v, (bytes, bytearray, memoryview)):
        raw = bytes(v)
        out += _head(2, len(raw)) + raw
    elif isinstance(v, list):
        out += _head(4, len(v))
        for i, item in enumerate(v):
            _enc(item, out, f"{path}[{i}]")
    elif isinstance(v, (dict, CborMap)):
        pairs = sorted_pairs(v)
        out += _head(5, len(pairs))
        for k, item in pairs:
            _enc(k, out, f"{path}.<key>")
            _enc(item, out, f"{path}[{k!r}]")
    elif isinstance(v, CID):
        raise EncodingError(f"cannot encode value at {path}: plain CBOR blocks (codec cbor) hold no links")
    else:
        raise EncodingError(f"cannot encode value at {path}: {type(v).__name__} is not an IPLD kind")


def key_order(k: Any) -> tuple[Any, ...]:
    """Sort key reproducing serde_cbor 0.11 ``Value``'s ``Ord`` (the order of its BTreeMap).

    Major type first; integers by magnitude; byte and text strings by length then bytes;
    arrays and maps by length then encoding; null, bools and floats by encoding. For text keys
    this is DAG-CBOR's order (length first, then bytes).
    """
    if k is None or isinstance(k, (bool, float)):
        return (7, encode_plain(k))
    if isinstance(k, int):
        return (0, k) if k >= 0 else (1, -k)
    if isinstance(k, (bytes, bytearray)):
        return (2, len(k), bytes(k))
    if isinstance(k, str):
        raw = k.encode("utf-8", "surrogatepass")
        return (3, len(raw), raw)
    if isinstance(k, list):
        return (4, len(k), encode_plain(k))
    if isinstance(k, (dict, CborMap)):
        n = len(k) if isinstance(k, dict) else len(k.pairs)
        return (5, n, encode_plain(k))
    raise EncodingError(f"unsupported CBOR map key of type {type(k).__name__}")


def sorted_pairs(m: dict[Any, Any] | CborMap) -> list[tuple[Any, Any]]:
    """Pairs of a map in serde_cbor BTreeMap order; for repeated keys the last value wins."""
    items = m.items() if isinstance(m, dict) else m.pairs
    merged: dict[tuple[Any, ...], tuple[Any, Any]] = {}
    for k, v in items:
        ok = key_order(k)
        first_key = merged[ok][0] if ok in merged else k
        merged[ok] = (first_key, v)
    return [merged[ok] for ok in sorted(merged)]


# --------------------------------------------------------------------------- decoding


class _Reader:
    def __init__(self, data: bytes, strict: bool) -> None:
        self.data = data
        self.pos = 0
        self.strict = strict  # strict: a block of codec cbor (no tags, text keys, no duplicates)

    def fail(self, msg: str) -> EncodingError:
        return EncodingError(f"invalid CBOR at byte {self.pos}: {msg}")

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise self.fail("unexpected end of data")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def head(self) -> tuple[int, int, int]:
        """(major, additional info, argument); argument is -1 for indefinite lengths."""
        b = self.take(1)[0]
        major, info = b >> 5, b & 0x1F
        if info < 24:
            return major, info, info
        if info <= 27:
            return major, info, int.from_bytes(self.take(1 << (info - 24)), "big")
        if info == 31 and major in (2, 3, 4, 5, 7):
            return major, info, -1
        raise self.fail(f"reserved additional information {info}")

    def item(self) -> Any:
        start = self.pos
        major, info, arg = self.head()
        if major == 0:
            return arg
        if major == 1:
            return -1 - arg
        if major in (2, 3):
            raw = self._string(major, arg)
            if major == 2:
                return raw
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                self.pos = start
                raise self.fail("text string is not valid UTF-8") from None
        if major == 4:
            out: list[Any] = []
            while not self._at_end(arg, len(out)):
                out.append(self.item())
            return out
        if major == 5:
            pairs: list[tuple[Any, Any]] = []
            while not self._at_end(arg, len(pairs)):
                pairs.append((self.item(), self.item()))
            return self._map(pairs, start)
        if major == 6:
            if self.strict:
                self.pos = start
                raise self.fail(f"tag {arg} is not allowed in a plain CBOR block (links need dag-cbor)")
            return self.item()  # serde_cbor without the "tags" feature ignores tags
        return self._simple(info, arg, start)

    def _string(self, major: int, arg: int) -> bytes:
        if arg >= 0:
            return self.take(arg)
        chunks = []
        while self.data[self.pos : self.pos + 1] != b"\xff":
            m, _, n = self.head()
            if m != major or n < 0:
                raise self.fail("malformed indefinite-length string")
            chunks.append(self.take(n))
        self.pos += 1
        return b"".join(chunks)

    def _at_end(self, arg: int, count: int) -> bool:
        if arg >= 0:
            return count >= arg
        if self.pos >= len(self.data):
            raise self.fail("unexpected end of data")
        if self.data[self.pos] == 0xFF:
            self.pos += 1
            return True
        return False

    def _map(self, pairs: list[tuple[Any, Any]], start: int) -> Any:
        if not self.strict:
            return CborMap(tuple(pairs))
        out: dict[str, Any] = {}
        for k, v in pairs:
            if not isinstance(k, str):
                self.pos = start
                raise self.fail(f"map key {k!r} is not a string")
            if k in out:
                self.pos = start
                raise self.fail(f"duplicate map key {k!r}")
            out[k] = v
        return out

    def _simple(self, info: int, arg: int, start: int) -> Any:
        if info in (24, 31):
            self.pos = start
            raise self.fail("unexpected break code" if info == 31 else "unsupported simple value")
        if info in (25, 26, 27):
            fmt = {25: ">e", 26: ">f", 27: ">d"}[info]
            value = struct.unpack(fmt, arg.to_bytes(1 << (info - 24), "big"))[0]
            if self.strict and not math.isfinite(value):
                self.pos = start
                raise self.fail(f"{value} is not allowed (IPLD floats are finite)")
            return value
        if arg == 20:
            return False
        if arg == 21:
            return True
        if arg in (22, 23):  # serde_cbor reads undefined as null
            return None
        self.pos = start
        raise self.fail(f"unsupported simple value {arg}")


def decode_plain(data: bytes, *, strict: bool = True) -> Any:
    """Decode one CBOR item; ``strict`` for codec-cbor blocks, lenient for imported files."""
    reader = _Reader(bytes(data), strict)
    try:
        value = reader.item()
    except RecursionError:
        raise EncodingError("invalid CBOR: nested too deeply") from None
    if reader.pos != len(reader.data):
        raise reader.fail("unexpected data after the first CBOR item")
    return value
