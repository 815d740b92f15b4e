"""Read options, type names, limits and the message helpers every reader shares.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import codecs
import json
import re
import zoneinfo
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from node.support.errors import InvalidInput

#: Bytes per chunk. Fixed, so that type inference (first chunk only) is the same everywhere.
DEFAULT_BLOCK_SIZE = 4 << 20
MAX_BLOCK_SIZE = 1 << 30
#: Type of the event-time column.
EVENT_TIME_TYPE = pa.timestamp("us", tz="UTC")
FORMATS = ("csv", "tsv", "jsonl", "parquet")
_FORMAT_ALIASES = {"ndjson": "jsonl", "json-lines": "jsonl", "jsonlines": "jsonl", "pq": "parquet"}
COMPRESSIONS = ("gzip", "zstd", "none")
_COMPRESSION_ALIASES = {"gz": "gzip", "zst": "zstd"}
#: CSV spellings of null for non-string columns (pyarrow 26's defaults, pinned here).
NULL_VALUES = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null",
)  # fmt: skip
TRUE_VALUES = ("1", "True", "TRUE", "true")
FALSE_VALUES = ("0", "False", "FALSE", "false")
#: The type names ``schema_overrides`` accepts (``--type COL=TYPE``).
TYPE_NAMES = (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "bool", "string", "binary", "date32",
    "timestamp[s|ms|us|ns]", "timestamp[us, UTC] (any unit; any IANA zone or ±HH:MM)",
    "decimal(p,s)",
)  # fmt: skip
_BOM = b"\xef\xbb\xbf"
_DELIMITER_NAMES = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date32": pa.date32(),
    "date32[day]": pa.date32(),
}
_TIMESTAMP_RE = re.compile(r"timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*(?:tz\s*=\s*)?([^\]]*?)\s*)?\]", re.IGNORECASE)
_DECIMAL_RE = re.compile(r"decimal(?:128|256)?\(\s*(\d+)\s*,\s*(\d+)\s*\)", re.IGNORECASE)
_OFFSET_TZ_RE = re.compile(r"[+-](?:[01]\d|2[0-3]):[0-5]\d")


def _valid_types_text() -> str:
    return ", ".join(TYPE_NAMES)


def parse_type_name(name: str) -> pa.DataType:
    """The Arrow type a ``--type`` name stands for (see :data:`TYPE_NAMES`)."""
    if not isinstance(name, str):
        raise InvalidInput(f"a type name must be a string, got {type(name).__name__}")
    text = name.strip()
    simple = _SIMPLE_TYPES.get(text.lower())
    if simple is not None:
        return simple
    m = _TIMESTAMP_RE.fullmatch(text)
    if m:
        unit, tz = m.group(1).lower(), m.group(2)
        if not tz:
            return pa.timestamp(unit)
        if tz.upper() in ("UTC", "Z"):
            return pa.timestamp(unit, tz="UTC")
        if not _OFFSET_TZ_RE.fullmatch(tz):
            try:
                zoneinfo.ZoneInfo(tz)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise InvalidInput(
                    f"unknown time zone {tz!r} in type {name!r} (use an IANA name such as"
                    " Europe/Paris, UTC, or an offset such as +02:00)"
                ) from None
        return pa.timestamp(unit, tz=tz)
    m = _DECIMAL_RE.fullmatch(text)
    if m:
        p, s = int(m.group(1)), int(m.group(2))
        if not 1 <= p <= 76 or s > p:
            raise InvalidInput(f"bad decimal type {name!r}: need 1 ≤ precision ≤ 76 and 0 ≤ scale ≤ precision")
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    raise InvalidInput(f"unknown type {name!r}; valid types: {_valid_types_text()}")


@dataclass(frozen=True)
class ReadOptions:
    """How to read an input. Every field has a fixed default (see the module docstring).

    - ``format``: ``csv``, ``tsv``, ``jsonl`` or ``parquet``; ``None``: from the name, else
      sniffed from the content.
    - ``compression``: ``gzip``, ``zstd`` or ``none``; ``None``: from the name, else magic bytes.
    - ``delimiter``: one character (CSV default ``,``, TSV default tab).
    - ``header``: the first CSV/TSV row holds the column names.
    - ``column_names``: names to use (with ``header=False``: required count = fields of the
      first row; default ``f0, f1, …``; with ``header=True``: renames the header's columns).
    - ``schema_overrides``: ``{column: type name}`` (:data:`TYPE_NAMES`).
    - ``event_time``: a column converted to ``timestamp[us, UTC]``.
    - ``block_size``: bytes per chunk; the first chunk fixes the inferred types.
    - ``encoding``: the text encoding of CSV/TSV/JSON Lines (any Python codec name, e.g.
      ``latin-1``, ``cp1252``, ``utf-16``); ``None``: UTF-8, or UTF-16/32 if the input starts with
      their byte order mark.
    - ``label``: what messages call the input (an upload's file name): a node reading its own spool file must
      not show that internal path; ``None``: the path or the stream's name.
    """

    format: str | None = None
    compression: str | None = None
    delimiter: str | None = None
    header: bool = True
    column_names: list[str] | None = None
    schema_overrides: dict[str, str] = field(default_factory=dict)
    event_time: str | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    encoding: str | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        fmt = self.format
        if fmt is not None:
            if not isinstance(fmt, str):
                raise InvalidInput(f"format must be a string, got {type(fmt).__name__}")
            fmt = _FORMAT_ALIASES.get(fmt.lower(), fmt.lower())
            if fmt not in FORMATS:
                raise InvalidInput(f"unknown format {self.format!r}; valid formats: {', '.join(FORMATS)}")
            object.__setattr__(self, "format", fmt)
        comp = self.compression
        if comp is not None:
            if not isinstance(comp, str):
                raise InvalidInput(f"compression must be a string, got {type(comp).__name__}")
            comp = _COMPRESSION_ALIASES.get(comp.lower(), comp.lower())
            if comp not in COMPRESSIONS:
                raise InvalidInput(f"unknown compression {self.compression!r}; valid: {', '.join(COMPRESSIONS)}")
            object.__setattr__(self, "compression", comp)
        d = self.delimiter
        if isinstance(d, str) and d.lower() in _DELIMITER_NAMES:
            d = _DELIMITER_NAMES[d.lower()]
            object.__setattr__(self, "delimiter", d)
        if d is not None:
            if not isinstance(d, str) or len(d) != 1 or d in '"\r\n':
                raise InvalidInput(f"delimiter must be a single character other than a quote or a newline, got {d!r}")
            if not d.isascii():
                raise InvalidInput(f"delimiter must be an ASCII character, got {d!r}")
        if not isinstance(self.header, bool):
            raise InvalidInput("header must be true or false")
        if self.column_names is not None:
            names = self.column_names
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise InvalidInput("column_names must be a list of strings")
            object.__setattr__(self, "column_names", list(names))
            _check_names(list(names), "")
        overrides = self.schema_overrides
        if overrides is None:
            overrides = {}
        if not isinstance(overrides, dict):
            raise InvalidInput("schema_overrides must map column names to type names")
        object.__setattr__(self, "schema_overrides", dict(overrides))
        for col, type_name in overrides.items():
            if not isinstance(col, str) or not col:
                raise InvalidInput(f"bad column name in a type override: {col!r}")
            try:
                parse_type_name(type_name)
            except InvalidInput as e:
                raise InvalidInput(f"--type {col}={type_name}: {e.message}") from None
        if self.event_time is not None and (not isinstance(self.event_time, str) or not self.event_time):
            raise InvalidInput("event_time must be a column name")
        if self.encoding is not None:
            object.__setattr__(self, "encoding", _codec_name(self.encoding))
        bs = self.block_size
        if isinstance(bs, bool) or not isinstance(bs, int) or not 1 <= bs <= MAX_BLOCK_SIZE:
            raise InvalidInput(f"block_size must be an integer between 1 and {MAX_BLOCK_SIZE}, got {bs!r}")

    def override_types(self) -> dict[str, pa.DataType]:
        return {c: parse_type_name(t) for c, t in self.schema_overrides.items()}


def _codec_name(encoding: object) -> str:
    """Python's name for a text encoding (``latin1`` → ``iso8859-1``), or InvalidInput."""
    if not isinstance(encoding, str) or not encoding:
        raise InvalidInput(f"encoding must be a name such as utf-8 or latin-1, got {encoding!r}")
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise InvalidInput(f"unknown encoding {encoding!r} (e.g. utf-8, latin-1, cp1252, utf-16)") from None
    if not getattr(info, "_is_text_encoding", True):  # rot13, base64, zlib…: not text encodings
        raise InvalidInput(f"{encoding!r} is not a text encoding")
    return info.name


def _check_names(names: list[str], where: str) -> None:
    seen: set[str] = set()
    for i, n in enumerate(names):
        if n == "" or n.strip() == "":
            raise InvalidInput(f"{where}column {i + 1} has an empty name (column names must be non-empty)")
        if n in seen:
            raise InvalidInput(f"{where}column name {n!r} appears more than once (column names must be unique)")
        seen.add(n)


def _size_text(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} bytes"


def _snip(value: Any, limit: int = 80) -> str:
    """A value for a one-line message: repr-quoted, cut at ``limit`` characters."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", errors="replace")
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if len(text) > limit:
        text = text[:limit] + "…"
    return repr(text) if isinstance(value, str) else text


_NAMES_SHOWN = 20


def _names_text(names: list[str]) -> str:
    """Column names for a one-line message: the first few, then how many there are (a wide input's 10,000 names
    would make a message of hundreds of KB)."""
    if len(names) <= _NAMES_SHOWN:
        return ", ".join(names)
    return ", ".join(names[:_NAMES_SHOWN]) + f", … ({len(names)} columns)"
