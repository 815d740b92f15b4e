"""DAG-JSON: the text form of IPLD values (https://ipld.io/specs/codecs/dag-json/spec/).

Links are ``{"/": "<cid>"}``, bytes are ``{"/": {"bytes": "<base64, no padding>"}}``. A number
without ``.`` or exponent is an int (signed 64-bit, as Kubo), otherwise a float. ``loads`` is
strict (RFC 8259 grammar, no duplicate keys, no NaN/Infinity, no other use of the ``"/"`` key)
so that one value has one reading; ``dumps`` writes the spec's canonical form: keys sorted by
their UTF-8 bytes, no whitespace, floats always with ``.`` or an exponent so they read back as
floats. See docs/object-model.md for how Kubo 0.42 differs at the edges.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]  # public at runtime (C scanner), absent from typeshed
from typing import Any

from multiformats import CID

from node.domain.model.cid import parse_cid
from node.domain.model.codec import INT64_MAX, INT64_MIN, as_ipld, check_ipld, child_path
from node.support.errors import EncodingError, InvalidCID, InvalidDagJson, quote

__all__ = ["MAX_DEPTH", "dumps", "loads"]

MAX_DEPTH = 400  # nesting limit: keeps parsing and encoding inside Python's recursion limit

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}\Z")


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.pos = 0

    def fail(self, msg: str, pos: int | None = None) -> InvalidDagJson:
        return InvalidDagJson(f"invalid DAG-JSON: {_where(self.s, self.pos if pos is None else pos)}: {msg}")

    def ws(self) -> None:
        m = _WS.match(self.s, self.pos)  # always matches (possibly empty): the pattern is a star
        if m:
            self.pos = m.end()

    def value(self, depth: int) -> Any:
        self.ws()
        s, pos = self.s, self.pos
        if pos >= len(s):
            raise self.fail("unexpected end of input")
        c = s[pos]
        if c == "{":
            return self.obj(depth + 1)
        if c == "[":
            return self.arr(depth + 1)
        if c == '"':
            return self.string()
        for word, val in (("true", True), ("false", False), ("null", None)):
            if s.startswith(word, pos):
                self.pos += len(word)
                return val
        if s.startswith(("NaN", "Infinity", "-Infinity"), pos):
            raise self.fail("NaN and Infinity are not allowed")
        if c == "-" or c.isdigit():
            return self.number()
        raise self.fail(f"unexpected character {quote(c)}")

    def number(self) -> int | float:
        start = self.pos
        m = _NUMBER.match(self.s, start)
        if not m:
            raise self.fail("invalid number")
        end = m.end()
        nxt = self.s[end : end + 1]
        if nxt.isdigit():
            raise self.fail("leading zeros are not allowed in numbers")
        if nxt in (".", "e", "E"):
            raise self.fail("invalid number")
        text = m.group(0)
        self.pos = end
        if m.group(1) is None and m.group(2) is None:
            try:
                n = int(text)
            except ValueError:  # more digits than Python converts
                raise self.fail("integer is outside the signed 64-bit range", start) from None
            if not INT64_MIN <= n <= INT64_MAX:
                raise self.fail(f"integer {text} is outside the signed 64-bit range", start)
            return n
        x = float(text)
        if x in (float("inf"), float("-inf")):
            raise self.fail(f"number {quote(text, 40)} is too large for a 64-bit float", start)
        return x

    def string(self) -> str:
        start = self.pos
        try:
            value, self.pos = scanstring(self.s, start + 1, True)
        except json.JSONDecodeError as exc:
            msg = re.sub(r"\s+(starting\s+)?at$", "", exc.msg).lower().replace("\\", "")
            msg = msg if msg.startswith("unterminated") else msg + " in string"
            raise self.fail(msg.replace("uxxxx", "\\uXXXX"), exc.pos) from None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail("string holds a lone UTF-16 surrogate escape", start) from None
        return value

    def arr(self, depth: int) -> list[Any]:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        self.pos += 1
        out: list[Any] = []
        self.ws()
        if self.s.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value(depth))
            self.ws()
            c = self.s[self.pos : self.pos + 1]
            self.pos += 1
            if c == "]":
                return out
            if c != ",":
                self.pos -= 1
                raise self.fail("expected ',' or ']'")
            self.ws()
            if self.s.startswith("]", self.pos):
                raise self.fail("trailing comma is not allowed")

    def obj(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        start = self.pos
        self.pos += 1
        out: dict[str, Any] = {}
        self.ws()
        if self.s.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            self.ws()
            if not self.s.startswith('"', self.pos):
                raise self.fail(
                    "trailing comma is not allowed" if self.s.startswith("}", self.pos) else "expected a string key"
                )
            key_pos = self.pos
            key = self.string()
            if key in out:
                raise self.fail(f"duplicate key {quote(key)}", key_pos)
            self.ws()
            if not self.s.startswith(":", self.pos):
                raise self.fail("expected ':' after the key")
            self.pos += 1
            out[key] = self.value(depth)
            self.ws()
            c = self.s[self.pos : self.pos + 1]
            self.pos += 1
            if c == "}":
                break
            if c != ",":
                self.pos -= 1
                raise self.fail("expected ',' or '}'")
        return self.reserved(out, start) if "/" in out else out

    def reserved(self, m: dict[str, Any], start: int) -> CID | bytes:
        """The ``"/"`` key marks a link or bytes; anything else using it is refused."""
        inner = m["/"]
        if len(m) == 1 and isinstance(inner, str):
            try:
                return parse_cid(inner)
            except InvalidCID as exc:
                raise self.fail(f"bad link: {exc}", start) from None
        if len(m) == 1 and isinstance(inner, dict) and list(inner) == ["bytes"] and isinstance(inner["bytes"], str):
            return self.b64(inner["bytes"], start)
        raise self.fail(
            'a map with a "/" key must be a link {"/": "<cid>"} or bytes {"/": {"bytes": "<base64>"}}', start
        )

    def b64(self, text: str, start: int) -> bytes:
        # The spec writes no padding; padded input is accepted too, as Kubo does.
        if not _B64.match(text) or len(text.rstrip("=")) % 4 == 1:
            raise self.fail(f"bad bytes: {quote(text, 40)} is not standard base64", start)
        try:
            return base64.b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4), validate=True)
        except binascii.Error:
            raise self.fail(f"bad bytes: {quote(text, 40)} is not standard base64", start) from None


def _where(s: str, pos: int) -> str:
    line = s.count("\n", 0, pos) + 1
    col = pos - (s.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {col}"


def loads(text: str | bytes) -> Any:
    """Parse DAG-JSON text (str, or UTF-8 bytes) into an IPLD value (links → CID, bytes → bytes)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            prefix = raw[: exc.start].decode("utf-8", "replace")
            raise InvalidDagJson(f"invalid DAG-JSON: {_where(prefix, len(prefix))}: input is not valid UTF-8") from None
    if not isinstance(text, str):
        raise InvalidDagJson(f"invalid DAG-JSON: expected text, got {type(text).__name__}")
    parser = _Parser(text)
    if text.startswith("\ufeff"):
        raise parser.fail("a byte order mark is not allowed")
    value = parser.value(0)
    parser.ws()
    if parser.pos != len(text):
        raise parser.fail("unexpected content after the value")
    return value


def dumps(obj: Any, indent: int | None = None) -> str:
    """Canonical DAG-JSON of an IPLD value (or of an object with ``to_ipld()``).

    Keys are sorted by UTF-8 bytes (spec "Serialization"; go-ipld-prime does the same);
    ``indent`` pretty-prints with that many spaces (still deterministic, not canonical).
    """
    value = as_ipld(obj)
    check_ipld(value)
    out: list[str] = []
    try:
        _dump(value, out, indent, 0, "$")
    except RecursionError:
        raise EncodingError("cannot encode value as DAG-JSON: nested too deeply") from None
    return "".join(out)


def _dump(v: Any, out: list[str], indent: int | None, level: int, path: str) -> None:
    if v is None:
        out.append("null")
    elif v is True or v is False:
        out.append("true" if v else "false")
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        r = repr(v)  # shortest text that reads back to the same double
        out.append(r if any(c in r for c in ".eE") else r + ".0")
    elif isinstance(v, str):
        out.append(json.dumps(v, ensure_ascii=False))
    elif isinstance(v, bytes):
        out.append('{"/":{"bytes":"' + base64.b64encode(v).decode("ascii").rstrip("=") + '"}}')
    elif isinstance(v, CID):
        text = v.encode(None) if v.version == 0 else v.encode("base32")
        out.append('{"/":"' + text + '"}')
    elif isinstance(v, list):
        _container(out, "[", "]", [(None, x) for x in v], indent, level, path)
    else:  # dict (check_ipld already refused anything else)
        if "/" in v:
            raise EncodingError(
                f'cannot encode value at {path} as DAG-JSON: the "/" key is reserved for links and bytes'
            )
        items = sorted(v.items(), key=lambda kv: kv[0].encode("utf-8"))
        _container(out, "{", "}", items, indent, level, path)


def _container(
    out: list[str],
    open_: str,
    close: str,
    items: list[tuple[str | None, Any]],
    indent: int | None,
    level: int,
    path: str,
) -> None:
    if not items:
        out.append(open_ + close)
        return
    out.append(open_)
    pad = "" if indent is None else "\n" + " " * (indent * (level + 1))
    for i, (key, item) in enumerate(items):
        if i:
            out.append(",")
        out.append(pad)
        if key is not None:
            out.append(json.dumps(key, ensure_ascii=False) + (":" if indent is None else ": "))
        _dump(item, out, indent, level + 1, child_path(path, i if key is None else key))
    out.append("" if indent is None else "\n" + " " * (indent * level))
    out.append(close)
