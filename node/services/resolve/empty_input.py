"""Inputs with no rows: a version whose structure is known but that holds no slice is still a table (0 rows is an
answer, not an error). Spark reads files, so such an input is handed to it as one empty Parquet file of the
version's structure, rebuilt from the structure's canonical type strings (docs/hashing.md, "Type strings")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from node.support.errors import InvalidInput

_SIMPLE = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "utf8": pa.string(),
    "binary": pa.binary(),
    "date32": pa.date32(),
    "date64": pa.date32(),
}
_WORD = re.compile(r"[a-z_0-9]+")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def fail(self) -> InvalidInput:
        return InvalidInput(f"not a canonical type string: {self.text!r} (at {self.pos})")

    def eat(self, token: str) -> None:
        if not self.text.startswith(token, self.pos):
            raise self.fail()
        self.pos += len(token)

    def until(self, stop: str) -> str:
        end = self.text.find(stop, self.pos)
        if end < 0:
            raise self.fail()
        out, self.pos = self.text[self.pos : end], end + len(stop)
        return out

    def type(self) -> pa.DataType:
        m = _WORD.match(self.text, self.pos)
        if not m:
            raise self.fail()
        word, self.pos = m.group(), m.end()
        if word in _SIMPLE:
            return _SIMPLE[word]
        if word == "decimal":
            self.eat("(")
            p, s = (int(x) for x in self.until(")").split(","))
            return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
        if word == "timestamp":
            self.eat("[")
            unit, _, tz = self.until("]").partition(",tz=")
            return pa.timestamp(unit, json.loads(tz) if tz else None)
        if word in ("time32", "time64", "duration"):
            self.eat("[")
            unit = self.until("]")
            return {"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}[word](unit)
        if word == "fixed_size_binary":
            self.eat("[")
            return pa.binary(int(self.until("]")))
        return self.nested(word)

    def nested(self, word: str) -> pa.DataType:
        self.eat("<")
        if word in ("list", "fixed_size_list"):
            inner = self.type()
            self.eat(">")
            if word == "list":
                return pa.list_(inner)
            self.eat("[")
            return pa.list_(inner, int(self.until("]")))
        if word == "map":
            key = self.type()
            self.eat(",")
            item = self.type()
            self.eat(">")
            return pa.map_(key, item)
        if word == "struct":
            fields: list[pa.Field] = []
            while not self.text.startswith(">", self.pos):
                if fields:
                    self.eat(",")
                m = _JSON_STRING.match(self.text, self.pos)
                if not m:
                    raise self.fail()
                self.pos = m.end()
                self.eat(":")
                fields.append(pa.field(json.loads(m.group()), self.type()))
            self.eat(">")
            return pa.struct(fields)
        raise self.fail()


def arrow_type(canonical: str) -> pa.DataType:
    """The Arrow type a canonical type string names (one of the encodings it stands for)."""
    p = _Parser(canonical)
    t = p.type()
    if p.pos != len(canonical):
        raise p.fail()
    return t


def write_empty(path: Path, schema: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> Path:
    """A Parquet file with no rows and the given ``(name, canonical type)`` columns."""
    arrow = pa.schema([pa.field(n, arrow_type(t)) for n, t in schema])
    pq.write_table(arrow.empty_table(), path)
    return path
