"""Declared inputs: the ``inputs`` mapping checked into :class:`Input` records, canonical type strings read as
sqlglot types (docs/hashing.md type strings; only struct fields matter: they let ``s.f`` resolve), and the
:class:`Context` of one canonicalization (the statement, its inputs, its CTEs)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.errors import SqlglotError

from node.support.errors import QueryRefused


@dataclass(frozen=True)
class Input:
    """One declared input: its alias, its lower-case key, its columns' names, types and lower-case keys."""

    alias: str
    key: str
    names: tuple[str, ...]
    types: tuple[str, ...]
    keys: tuple[str, ...]  # lower-case column names


def declare(inputs: Mapping[str, Sequence[tuple[str, str]]]) -> tuple[Input, ...]:
    if not isinstance(inputs, Mapping):
        raise QueryRefused("invalid-inputs", "inputs must map each input alias to its columns", repr(inputs))
    declared: list[Input] = []
    seen: set[str] = set()
    for alias, columns in inputs.items():
        if not isinstance(alias, str) or not alias.strip():
            raise QueryRefused("invalid-inputs", "an input alias must be a non-empty string", repr(alias))
        key = alias.lower()
        if key in seen:
            raise QueryRefused("invalid-inputs", "input declared twice (names are case-insensitive)", alias)
        seen.add(key)
        if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
            raise QueryRefused("invalid-inputs", "an input's structure must be a list of (name, type)", alias)
        names: list[str] = []
        types: list[str] = []
        for column in columns:
            if (
                not isinstance(column, Sequence)
                or isinstance(column, (str, bytes))
                or len(column) != 2
                or not all(isinstance(part, str) and part for part in column)
            ):
                raise QueryRefused(
                    "invalid-inputs", f"column of input {alias!r} is not a (name, type) pair", repr(column)
                )
            names.append(column[0])
            types.append(column[1])
        keys = tuple(n.lower() for n in names)
        if len(set(keys)) != len(keys):
            raise QueryRefused("invalid-inputs", "input has two columns of the same name (case-insensitive)", alias)
        if not names:
            raise QueryRefused("invalid-inputs", "input has no columns", alias)
        declared.append(Input(alias, key, tuple(names), tuple(types), keys))
    return tuple(declared)


@dataclass
class Context:
    """What the checks, the qualification and the rewrite of one statement share."""

    sql: str
    declared: tuple[Input, ...]
    by_key: dict[str, int] = field(default_factory=dict)  # input key -> index in declared
    cte_names: dict[str, exp.CTE] = field(default_factory=dict)  # lower-case CTE name -> its node

    def __post_init__(self) -> None:
        self.by_key = {d.key: i for i, d in enumerate(self.declared)}


_PRIMITIVES = {
    "bool": "BOOLEAN",
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "uint8": "SMALLINT",
    "uint16": "INT",
    "uint32": "BIGINT",
    "uint64": "DECIMAL(20, 0)",
    "float16": "FLOAT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "utf8": "STRING",
    "binary": "BINARY",
    "date32": "DATE",
    "date64": "DATE",
}


class _TypeParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def parse(self) -> exp.DataType:
        t = self._type()
        if self.i != len(self.text):
            raise ValueError(self.text)
        return t

    def _eat(self, s: str) -> bool:
        if self.text.startswith(s, self.i):
            self.i += len(s)
            return True
        return False

    def _expect(self, s: str) -> None:
        if not self._eat(s):
            raise ValueError(self.text)

    def _type(self) -> exp.DataType:
        m = re.compile(r"[a-z_0-9]+").match(self.text, self.i)
        if not m:
            raise ValueError(self.text)
        name = m.group(0)
        self.i = m.end()
        if name in ("list", "fixed_size_list"):
            self._expect("<")
            item = self._type()
            self._expect(">")
            if name == "fixed_size_list":
                self._skip_brackets()
            return exp.DataType(this=exp.DType.ARRAY, expressions=[item], nested=True)
        if name == "map":
            self._expect("<")
            k = self._type()
            self._expect(",")
            v = self._type()
            self._expect(">")
            return exp.DataType(this=exp.DType.MAP, expressions=[k, v], nested=True)
        if name == "struct":
            self._expect("<")
            fields: list[exp.ColumnDef] = []
            while not self._eat(">"):
                if fields:
                    self._expect(",")
                field_name = self._json_string()
                self._expect(":")
                fields.append(exp.ColumnDef(this=exp.to_identifier(field_name, quoted=True), kind=self._type()))
            return exp.DataType(this=exp.DType.STRUCT, expressions=fields, nested=True)
        if name == "decimal":
            m = re.compile(r"\((\d+),(-?\d+)\)").match(self.text, self.i)
            if not m:
                raise ValueError(self.text)
            self.i = m.end()
            return exp.DataType.build(f"DECIMAL({m.group(1)}, {max(int(m.group(2)), 0)})")
        self._skip_brackets()
        if name.startswith("timestamp"):
            return exp.DataType.build("TIMESTAMP")
        if name in _PRIMITIVES:
            return exp.DataType.build(_PRIMITIVES[name])
        if name == "fixed_size_binary":
            return exp.DataType.build("BINARY")
        return exp.DataType.build("UNKNOWN")

    def _skip_brackets(self) -> None:
        if self._eat("["):
            depth = 1
            while depth:
                if self.i >= len(self.text):
                    raise ValueError(self.text)
                c = self.text[self.i]
                if c == '"':
                    self._json_string()
                    continue
                depth += {"[": 1, "]": -1}.get(c, 0)
                self.i += 1

    def _json_string(self) -> str:
        if not self.text.startswith('"', self.i):
            raise ValueError(self.text)
        decoder = json.JSONDecoder()
        value, end = decoder.raw_decode(self.text, self.i)
        self.i = end
        return value


def sqlglot_type(type_string: str) -> exp.DataType:
    try:
        return _TypeParser(type_string).parse()
    except (ValueError, SqlglotError):
        return exp.DataType.build("UNKNOWN")
