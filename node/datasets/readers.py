"""Input readers for dataset ingest: CSV, TSV, JSON Lines and Parquet, plain, gzip or zstd,
from a file or a (non-seekable) stream, as a stream of Arrow record batches.

``open_input(source, ReadOptions(...))`` returns an :class:`Input` with the ``schema`` known
up front and ``batches`` produced lazily. What comes out is what :mod:`node.datasets.slices`
and :mod:`node.datasets.logical_hash` consume, so it is held to two rules:

**Deterministic.** Two nodes reading the same bytes with the same options get the same
schema and the same rows. Text input is cut into *chunks*: the first ``block_size`` bytes
(default 4 MiB, a fixed number, never a function of the machine), cut back to the end of the
last complete row; then the next ``block_size`` bytes from there, and so on (a row longer than
a block makes its chunk grow). Column types are inferred by pyarrow from the **first chunk
only**; every later chunk is parsed with those types fixed. A later value that does not fit is
an error naming the line, the column and the value (and suggesting ``--type COL=string``);
nothing is ever re-typed silently. Reading is parallel (chunks are parsed on a few threads),
but chunk boundaries, types and row order do not depend on it. Conversion settings (null
spellings, true/false spellings, ISO 8601 timestamps) are pinned here rather than left to
pyarrow defaults.

Why not ``pyarrow.csv.open_csv`` / ``pyarrow.json.open_json`` directly: their streaming readers
report neither line nor row numbers for later blocks. Here the chunking is ours (so every
chunk knows the line it starts on) and each chunk is parsed by ``pyarrow.csv.read_csv`` /
``pyarrow.json.read_json`` as one block with the types fixed; when a chunk fails, the failing
row is found by halving the chunk's rows and re-parsing (only on that error path). Finding
where a CSV chunk ends must follow pyarrow's quoting (quoted fields may hold newlines): the
last line end with an even number of quotes before it, trusted only when every quote stands
where RFC 4180 puts one (checked vectorised with ``pyarrow.compute``); otherwise (stray quotes
inside unquoted fields) the chunk is lexed with a regular expression of pyarrow's rules.

**Normalised schema.** Strings are ``string`` (never ``large_string``), binary is ``binary``,
no dictionary types, no field or schema metadata, every field nullable: the schema
:func:`node.datasets.slices.canonical_slice_schema` writes. Types Parquet cannot store are
mapped to the ones it reads back (``timestamp[s]`` → ``timestamp[ms]``, ``time32[s]`` →
``time32[ms]``, ``date64`` → ``date32``; lossless), so a slice written from these batches reads
back with the same schema and logical hash. So the same data read from CSV, JSON Lines or
Parquet yields the same Arrow schema whenever the inferred types agree.

Streaming: memory is bounded by a few chunks (up to ``workers + 2`` chunks of text, workers ≤ 4,
plus the Arrow data parsed from them), never the input size: reading a 200 MB CSV allocates
under 20 MB of Arrow memory at any time. Non-seekable input (the CLI passes
``sys.stdin.buffer``) is sniffed from its first bytes without seeking. Parquet needs random
access: a non-seekable or compressed Parquet input is first spooled to a temporary file
(disk, not memory), then read row group by row group.

Choices, documented because callers and error messages depend on them:

- **Format detection** (``format=None``): from the file name (``.csv``, ``.tsv``/``.tab``,
  ``.jsonl``/``.ndjson``/``.json-lines``, ``.parquet``/``.pq``, each optionally followed by
  ``.gz``/``.gzip``/``.zst``/``.zstd``); without a usable name, by content: Parquet magic
  ``PAR1``, else JSON Lines if the first non-blank character is ``{``, else CSV.
  **Compression** (``compression=None``): from the name, else magic bytes (gzip ``1f8b``,
  zstd ``28b52ffd``). Concatenated gzip members / zstd frames are read through.
- **Line numbers** in errors are 1-based *physical* lines of the decompressed text: the number
  of ``\\n`` before the start of the offending row, plus one. The header is line 1, blank
  lines count, and a quoted CSV field holding newlines counts as that many lines, so the line
  reported is the one where the offending row *starts* (what an editor shows). A file whose
  only line terminator is ``\\r`` counts ``\\r`` instead. Parquet errors name the 1-based row.
- **Text encoding** (``encoding``): ``None`` reads UTF-8, or UTF-16/UTF-32 when the input starts
  with their byte order mark; any other Python text codec can be given (``latin-1``, ``cp1252``,
  ``utf-16-le``…). Other encodings are transcoded to UTF-8 on the fly (:class:`_Decoded`); UTF-8
  input is checked chunk by chunk (a chunk ends at a row end, so never inside a character).
  Undecodable input and NUL bytes (UTF-16 without a byte order mark looks like that) are errors
  naming the line and the 0-based **byte offset** in the decompressed input, never ``binary``
  columns: text becomes ``binary`` only with ``--type COL=binary``.
- **CSV dialect**: RFC 4180 quoting with ``"`` (a quote opens a quoted field only at the start
  of a field, ``""`` inside is a literal quote, quoted fields may hold delimiters and
  newlines); no escape character; blank lines are skipped; a UTF-8 BOM is skipped; lines end
  with ``\n``, ``\r\n`` or ``\r``, mixed or not. TSV is the same dialect with a tab delimiter.
  **Delimiter**: given, else tab for TSV, else sniffed for CSV (:func:`_sniff_delimiter`): of
  ``,`` tab ``;`` ``|``, the one that splits each of the first 20 rows (within the first 64 KiB)
  into the same number of fields, the most fields, ties to the earlier; ``,`` if none splits them.
  Null spellings (numbers, dates, …): :data:`NULL_VALUES`;
  string columns never hold nulls (an empty field is ``""``), as in pyarrow's default.
  A column that is empty in the whole first chunk (pyarrow would infer ``null``) is read as
  ``string``, so that later values still fit.
- **header=False**: columns are named ``column_names`` if given, else ``f0, f1, …`` (pyarrow's
  ``autogenerate_column_names`` convention), as many as the first row has fields.
  ``header=True`` with ``column_names`` renames the header's columns (same count required).
- **JSON Lines**: one JSON object per line; the columns are the keys seen in the first chunk,
  in first-appearance order; a key first seen later is an error. pyarrow infers ISO 8601
  strings as ``timestamp[s]``; a key that is ``null`` in the whole first chunk has type
  ``null`` (a later value is an error suggesting ``--type``).
- **Event time** (``event_time``): the column is converted to ``timestamp[us, UTC]``:
  timestamps are converted (naive ones are taken as UTC), dates become midnight UTC, strings
  are parsed as ISO 8601 (``2024-01-31T12:00:00Z``, ``2024-01-31 12:00:00+02:00``,
  ``2024-01-31``; without an offset: UTC). Nulls (and CSV null spellings) stay null.
  Anything else, or an unparseable value, is an error naming the line and value.
- **Empty input** (no bytes, or only blank lines) is an error. A CSV with a header and no rows
  is not: it yields no batches and ``string`` columns (or the ``--type`` given).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import os
import re
import stat
import tempfile
import zoneinfo
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Self

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from node.datasets.slices import canonical_slice_schema
from node.errors import InvalidInput

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "EVENT_TIME_TYPE",
    "FORMATS",
    "NULL_VALUES",
    "SNIFFED_DELIMITERS",
    "TYPE_NAMES",
    "Input",
    "ReadOptions",
    "open_input",
    "parse_type_name",
]

#: Bytes per chunk. Fixed, so that type inference (first chunk only) is the same everywhere.
DEFAULT_BLOCK_SIZE = 4 << 20
MAX_BLOCK_SIZE = 1 << 30
#: A row may make its chunk grow to at most this much beyond the block size.
MAX_ROW_BYTES = 64 << 20
#: Rows per batch read from Parquet.
PARQUET_BATCH_ROWS = 64 * 1024
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

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PAR1 = b"PAR1"
_BOM = b"\xef\xbb\xbf"
_WORKERS = max(1, min(4, os.cpu_count() or 1))
_SNIFF_BYTES = 4096
#: Byte order marks that name an encoding when none is given (UTF-32 first: its LE mark starts with UTF-16's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
#: Delimiters tried when a CSV's is not given, in order of preference on a tie.
SNIFFED_DELIMITERS = (",", "\t", ";", "|")
_SNIFF_ROWS = 20  # rows the delimiter is sniffed from (a fixed number: every node sniffs the same)
_DELIMITER_NAMES = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
_SPOOL_PIECE = 1 << 20


# --------------------------------------------------------------------------- type names

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
_TIMESTAMP_RE = re.compile(
    r"timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*(?:tz\s*=\s*)?([^\]]*?)\s*)?\]", re.IGNORECASE
)
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
            raise InvalidInput(
                f"bad decimal type {name!r}: need 1 ≤ precision ≤ 76 and 0 ≤ scale ≤ precision"
            )
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    raise InvalidInput(f"unknown type {name!r}; valid types: {_valid_types_text()}")


# --------------------------------------------------------------------------- options


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
                raise InvalidInput(
                    f"unknown compression {self.compression!r}; valid: {', '.join(COMPRESSIONS)}"
                )
            object.__setattr__(self, "compression", comp)
        d = self.delimiter
        if isinstance(d, str) and d.lower() in _DELIMITER_NAMES:
            d = _DELIMITER_NAMES[d.lower()]
            object.__setattr__(self, "delimiter", d)
        if d is not None:
            if not isinstance(d, str) or len(d) != 1 or d in '"\r\n':
                raise InvalidInput(
                    f"delimiter must be a single character other than a quote or a newline, got {d!r}"
                )
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
            raise InvalidInput(
                f"{where}column name {n!r} appears more than once (column names must be unique)"
            )
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


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- byte streams


class _PeekReader(io.RawIOBase):
    """A readable file object over a Python binary stream that can look at its first bytes
    without seeking (stdin) and counts the bytes taken from it."""

    def __init__(self, f: Any) -> None:
        super().__init__()
        self._f = f
        self._buf = b""
        self.count = 0

    def readable(self) -> bool:
        return True

    def _raw(self, n: int) -> bytes:
        data = self._f.read(n)
        if data is None:
            return b""
        if isinstance(data, str):
            raise InvalidInput(
                "the input stream is in text mode; pass a binary stream (e.g. sys.stdin.buffer)"
            )
        self.count += len(data)
        return bytes(data) if not isinstance(data, bytes) else data

    def peek(self, n: int) -> bytes:
        while len(self._buf) < n:
            data = self._raw(n - len(self._buf))
            if not data:
                break
            self._buf += data
        return self._buf[:n]

    def read(self, n: int = -1) -> bytes:
        if self._buf:
            if n is None or n < 0:
                out, self._buf = self._buf + self._read_all(), b""
                return out
            out, self._buf = self._buf[:n], self._buf[n:]
            return out
        if n is None or n < 0:
            return self._read_all()
        return self._raw(n)

    def _read_all(self) -> bytes:
        parts = []
        while True:
            data = self._raw(1 << 20)
            if not data:
                return b"".join(parts)
            parts.append(data)

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class _ByteSource:
    """Sequential, full reads of the (decompressed) input, with push-back for sniffing."""

    def __init__(self, reader: Any, codec: str, name: str) -> None:
        self._reader = reader
        self._codec = codec
        self._name = name
        self._pushback = b""

    def _fail(self, e: BaseException) -> InvalidInput:
        if self._codec != "none":
            return InvalidInput(
                f"{self._name}: {self._codec} decompression failed, the input is corrupt or"
                f" truncated ({_one_line(str(e))})"
            )
        return InvalidInput(f"{self._name}: reading failed: {_one_line(str(e))}")

    def readinto(self, buf: bytearray, start: int = 0) -> int:
        """Fill ``buf[start:]``; returns the byte count (short only at the end of the input)."""
        pos = start
        end = len(buf)
        if self._pushback and pos < end:
            k = min(end - pos, len(self._pushback))
            buf[pos : pos + k] = self._pushback[:k]
            self._pushback = self._pushback[k:]
            pos += k
        if pos < end:
            view = memoryview(buf)
            try:
                while pos < end:
                    part = view[pos:]
                    try:
                        got = self._reader.readinto(part)
                    except InvalidInput:
                        raise
                    except (OSError, pa.ArrowException, ValueError) as e:
                        raise self._fail(e) from None
                    finally:
                        part.release()
                    if not got:
                        break
                    pos += got
            finally:
                view.release()
        return pos - start

    def read(self, n: int) -> bytes:
        buf = bytearray(n)
        got = self.readinto(buf)
        del buf[got:]
        return bytes(buf)

    def unread(self, data: bytes) -> None:
        self._pushback = data + self._pushback


class _Decoded:
    """A raw reader over a ``_ByteSource`` in another text encoding, handing out its text as UTF-8
    (the one form the parsers read). Undecodable input is an error naming the line and the byte
    offset in the (decompressed) input."""

    _PIECE = 1 << 20

    def __init__(self, src: _ByteSource, encoding: str, name: str) -> None:
        self._src = src
        self._encoding = encoding
        self._name = name
        self._decoder = codecs.getincrementaldecoder(encoding)("strict")
        self._out = b""
        self._fed = 0  # input bytes given to the decoder so far
        self._newlines = 0  # line ends in the text decoded so far
        self._eof = False

    def readinto(self, view: Any) -> int:
        while not self._out and not self._eof:
            piece = self._src.read(self._PIECE)
            self._eof = not piece
            pending = len(self._decoder.getstate()[0])  # bytes held back from the previous piece
            try:
                text = self._decoder.decode(piece, final=self._eof)
            except UnicodeDecodeError as e:
                raise self._error(e, self._fed - pending) from None
            self._fed += len(piece)
            self._newlines += text.count("\n")
            self._out = text.encode("utf-8")
        n = min(len(view), len(self._out))
        view[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _error(self, e: UnicodeDecodeError, base: int) -> InvalidInput:
        before = e.object[: e.start].decode(e.encoding, "replace")
        line = self._newlines + before.count("\n") + 1
        bad = e.object[e.start : e.end].hex(" ")
        return InvalidInput(
            f"{self._name}: line {line}, byte offset {base + e.start}: cannot decode {bad} as"
            f" {self._encoding} ({e.reason}); give the file's encoding with --encoding"
        )


def _text_encoding(head: bytes, given: str | None) -> str:
    """The encoding to read text in: the one given, else the one a byte order mark names, else UTF-8."""
    if given is not None:
        return given
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return "utf-8"


def _decoded_source(src: _ByteSource, head: bytes, options: ReadOptions, name: str) -> tuple[_ByteSource, bool]:
    """``src`` as UTF-8 text, and whether the chunker must still check that it is valid UTF-8
    (it is cheaper there, chunk by chunk, than transcoding UTF-8 to itself)."""
    encoding = _text_encoding(head, options.encoding)
    if encoding == "utf-8":
        return src, True
    return _ByteSource(_Decoded(src, encoding, name), "none", name), False


@dataclass
class _Opened:
    name: str  # for messages
    source: _ByteSource
    codec: str
    format: str | None
    bytes_read: Callable[[], int]
    closers: list[Callable[[], None]]
    path: str | None  # a plain (uncompressed) file path, for Parquet's random access
    seekable_file: Any  # an uncompressed seekable file object at offset 0, ditto
    total_size: int | None
    check_utf8: bool = True  # text: the chunker checks that it is UTF-8 (False: transcoded, so it is)


def _detect_from_name(name: str | None) -> tuple[str | None, str | None]:
    if not name:
        return None, None
    n = os.path.basename(name).lower()
    codec = None
    for suffix, c in ((".gz", "gzip"), (".gzip", "gzip"), (".zst", "zstd"), (".zstd", "zstd")):
        if n.endswith(suffix):
            codec, n = c, n[: -len(suffix)]
            break
    fmt = None
    for suffixes, f in (
        ((".csv",), "csv"),
        ((".tsv", ".tab"), "tsv"),
        ((".jsonl", ".ndjson", ".json-lines"), "jsonl"),
        ((".parquet", ".pq"), "parquet"),
    ):
        if n.endswith(suffixes):
            fmt = f
            break
    return fmt, codec


def _open_source(source: str | os.PathLike | BinaryIO, options: ReadOptions) -> _Opened:
    closers: list[Callable[[], None]] = []
    path: str | None = None
    seekable_file = None
    total_size = None
    stream: Any = None
    name: str | None = None
    label = "input"
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        name = label = path
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise InvalidInput(f"no such file: {path}") from None
        except OSError as e:
            raise InvalidInput(f"cannot open {path}: {_one_line(str(e))}") from None
        if stat.S_ISDIR(mode):
            raise InvalidInput(f"{path} is a directory, not a file")
        if not stat.S_ISREG(mode):  # a FIFO, /dev/stdin, <(zcat …): read it as a stream
            try:
                stream = open(path, "rb")  # noqa: SIM115 - closed by the Input
            except OSError as e:
                raise InvalidInput(f"cannot open {path}: {_one_line(str(e))}") from None
            closers.append(stream.close)
            path = None
    elif hasattr(source, "read"):
        stream = source
        file_name = getattr(source, "name", None)
        name = file_name if isinstance(file_name, str) and not file_name.startswith("<") else None
        label = name or (file_name.strip("<>") if isinstance(file_name, str) else "input")
    else:
        raise InvalidInput(
            f"cannot read input from a {type(source).__name__}: pass a path or a binary stream"
        )

    if stream is None:
        assert path is not None
        try:
            raw = pa.OSFile(path, "r")
        except (OSError, pa.ArrowException) as e:
            raise InvalidInput(f"cannot open {path}: {_one_line(str(e))}") from None
        closers.append(raw.close)
        total_size = raw.size()
        magic = raw.read(4)
        raw.seek(0)
        counter: Callable[[], int] = raw.tell
    else:
        start = None
        try:
            if stream.seekable():
                start = stream.tell()
        except (OSError, ValueError, AttributeError):
            start = None
        peek = _PeekReader(stream)
        magic = peek.peek(4)
        raw = peek
        counter = lambda: peek.count
        if start == 0:
            seekable_file = stream
            try:
                here = stream.tell()
                total_size = stream.seek(0, io.SEEK_END)
                stream.seek(here)
            except (OSError, ValueError):
                seekable_file, total_size = None, None

    name_fmt, name_codec = _detect_from_name(name)
    fmt = options.format or name_fmt
    codec = options.compression or name_codec
    if codec is None:
        if magic.startswith(_GZIP_MAGIC):
            codec = "gzip"
        elif magic.startswith(_ZSTD_MAGIC):
            codec = "zstd"
        else:
            codec = "none"
    if codec == "none":
        reader: Any = raw
    else:
        try:
            reader = pa.CompressedInputStream(raw, codec)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise InvalidInput(f"{label}: cannot decompress {codec}: {_one_line(str(e))}") from None
        closers.insert(0, reader.close)
        path = None
        seekable_file = None
    src = _ByteSource(reader, codec, label)
    check_utf8 = True
    if fmt != "parquet":
        head = src.read(_SNIFF_BYTES)
        src.unread(head)
        if fmt is None and head.startswith(_PAR1):
            fmt = "parquet"
        else:
            src, check_utf8 = _decoded_source(src, head, options, label)
            if fmt is None:
                head = src.read(_SNIFF_BYTES)
                src.unread(head)
                fmt = _sniff_format(head)
    return _Opened(
        name=label,
        source=src,
        codec=codec,
        format=fmt,
        bytes_read=counter,
        closers=closers,
        path=path if codec == "none" else None,
        seekable_file=seekable_file,
        total_size=total_size,
        check_utf8=check_utf8,
    )


def _sniff_format(head: bytes) -> str | None:
    if head.startswith(_PAR1):
        return "parquet"
    text = head[3:] if head.startswith(_BOM) else head
    text = text.lstrip()
    if not text:
        return None  # empty: reported by the reader
    return "jsonl" if text.startswith(b"{") else "csv"


# --------------------------------------------------------------------------- chunking


def _row_pattern(delimiter: bytes) -> re.Pattern[bytes]:
    """One CSV row, as pyarrow's parser splits rows (see the module docstring's dialect):
    a quote opens a quoted field only at a field's start; ``""`` inside is literal; after the
    closing quote the field goes on unquoted. Possessive/atomic so that an unterminated
    quoted field does not match at all (rather than being re-read another way)."""
    d = re.escape(delimiter)
    quoted = b'"[^"]*+(?:""[^"]*+)*+"[^' + d + b"\r\n]*+"
    plain = b'[^"' + d + b"\r\n][^" + d + b"\r\n]*+"
    fld = b"(?>" + quoted + b"|" + plain + b"|)"
    return re.compile(fld + b"(?:" + d + fld + b")*+(?:\r\n|\n|\r|\\Z)")


def _complete_rows_pattern(delimiter: bytes) -> re.Pattern[bytes]:
    """As many complete (terminated) rows as there are, in one match."""
    d = re.escape(delimiter)
    quoted = b'"[^"]*+(?:""[^"]*+)*+"[^' + d + b"\r\n]*+"
    plain = b'[^"' + d + b"\r\n][^" + d + b"\r\n]*+"
    fld = b"(?>" + quoted + b"|" + plain + b"|)"
    return re.compile(b"(?:" + fld + b"(?:" + d + fld + b")*+(?:\r\n|\n|\r))*+")


def _csv_rows(data: bytes, pattern: re.Pattern[bytes], limit: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each non-blank row of ``data``; an unterminated quoted field at the
    end makes the rest one row."""
    rows: list[tuple[int, int]] = []
    pos, n = 0, len(data)
    match = pattern.match
    while pos < n:
        m = match(data, pos)
        if m is None or m.end() == pos:
            rows.append((pos, n))
            break
        end = m.end()
        if end - pos > 2 or data[pos:end] not in (b"\n", b"\r\n", b"\r"):
            rows.append((pos, end))
            if limit is not None and len(rows) >= limit:
                break
        pos = end
    return rows


def _csv_cut(buf: bytes, eol: bytes, rows: re.Pattern[bytes], delimiter: int) -> int:
    """Where to cut ``buf`` (which starts at a row boundary): just after the last complete
    row; 0 if there is none. Exact for pyarrow's dialect, and fast when the data is RFC 4180:

    - no quote before the last line terminator: that terminator;
    - else the last terminator preceded by an even number of quotes, if every quote before it
      is where RFC 4180 puts one (:func:`_rfc_quotes`): then that parity is exactly pyarrow's
      quoting state;
    - else (stray quotes inside unquoted fields, or a quoted field spanning the last lines)
      the buffer is lexed with :func:`_complete_rows_pattern`.
    """
    last = buf.rfind(eol)
    if last < 0:
        return 0
    first_quote = buf.find(b'"', 0, last)
    if first_quote < 0:
        return last + 1
    data = pa.Array.from_buffers(pa.uint8(), last + 1, [None, pa.py_buffer(buf)])
    quotes = pc.indices_nonzero(pc.equal(data, pa.scalar(34, pa.uint8())))
    n = len(quotes)
    cut = last + 1
    if n % 2:
        # the last terminator is inside quotes: try the last one before the unmatched quote
        opening = quotes[n - 1].as_py()
        before = buf.rfind(eol, 0, opening)
        if before < 0 or (n > 1 and before < quotes[n - 2].as_py()):
            return _csv_complete_end(buf, rows)
        cut, n = before + 1, n - 1
        quotes = quotes.slice(0, n)
    if _rfc_quotes(data, quotes, delimiter):
        return cut
    return _csv_complete_end(buf, rows)


_ALLOWED_AROUND_QUOTES: dict[int, pa.Array] = {}


def _rfc_quotes(data: pa.Array, quotes: pa.Array, delimiter: int) -> bool:
    """Whether the (even number of) quotes at positions ``quotes`` of ``data`` pair up as RFC
    4180 quoting: taken two by two, each opening quote follows a delimiter, a line end, the
    start or the previous closing quote (``""``), and each closing quote is followed by a
    delimiter, a line end, the end or the next opening quote. Then a line end is inside quotes
    exactly when an odd number of quotes precedes it, as pyarrow's lexer sees it.
    Vectorised (pyarrow.compute, which runs without the GIL)."""
    if len(quotes) == 0:
        return True
    allowed = _ALLOWED_AROUND_QUOTES.get(delimiter)
    if allowed is None:
        allowed = _ALLOWED_AROUND_QUOTES.setdefault(delimiter, pa.array([delimiter, 10, 13, 34], pa.uint8()))
    pairs = pa.FixedSizeListArray.from_arrays(quotes, 2)
    # (an opening quote at 0 is "preceded" by itself and a closing one at the end "followed"
    # by itself: quotes, so allowed, as the start and the end are)
    before = pc.take(data, pc.max_element_wise(pc.subtract(pc.list_element(pairs, 0), 1), 0))
    if not pc.all(pc.is_in(before, value_set=allowed)).as_py():
        return False
    after = pc.take(data, pc.min_element_wise(pc.add(pc.list_element(pairs, 1), 1), len(data) - 1))
    return bool(pc.all(pc.is_in(after, value_set=allowed)).as_py())


def _csv_complete_end(buf: bytes, rows: re.Pattern[bytes]) -> int:
    """End of the last complete (terminated) row of ``buf`` (``rows``: :func:`_complete_rows_pattern`)."""
    m = rows.match(buf)
    return m.end() if m else 0


def _json_cut(buf: bytes, eol: bytes) -> int:
    return buf.rfind(b"\n") + 1


class _Chunker:
    """Cuts the decompressed input into chunks of complete rows: ``block_size`` bytes, cut
    back to the last row end; a chunk grows (doubling) while it holds no complete row. A pure
    function of the bytes and the block size."""

    def __init__(
        self,
        src: _ByteSource,
        block_size: int,
        cut: Callable[[bytes, bytes], int],
        name: str,
        cr_lines: bool = False,
        check_utf8: bool = True,
    ) -> None:
        self._src = src
        self._cr_lines = cr_lines  # CSV: a file whose only line terminator is \r counts \r
        self._check_utf8 = check_utf8
        self._block = block_size
        self._cut = cut
        self._name = name
        self._buf = bytearray()
        self._eof = False
        self._first = True
        self.eol = b"\n"
        self.line = 1  # line number of the start of the next chunk
        self.offset = 0  # byte offset of the start of the next chunk in the input

    def next(self) -> tuple[bytes, int] | None:
        target = self._block
        while True:
            if not self._eof and len(self._buf) < target:
                # One allocation per chunk: the leftover, then the input read straight after it.
                have = len(self._buf)
                buf = bytearray(target)
                buf[:have] = self._buf
                got = self._src.readinto(buf, have)
                if got < target - have:
                    self._eof = True
                    del buf[have + got :]
                self._buf = buf
            if self._first and self._buf:
                self._first = False
                if self._buf.startswith(_BOM):
                    self._buf = self._buf[3:]
                    self.offset = len(_BOM)
                if self._cr_lines and b"\n" not in self._buf and b"\r" in self._buf:
                    self.eol = b"\r"
            if self._eof:
                out, self._buf = self._buf, bytearray()
                if not out:
                    return None
                break
            cut = self._cut(self._buf, self.eol)
            if cut > 0:
                out, self._buf = self._buf, self._buf[cut:]
                del out[cut:]
                break
            if len(self._buf) > self._block + MAX_ROW_BYTES:
                raise InvalidInput(
                    f"{self._name}: line {self.line}: a row longer than {_size_text(MAX_ROW_BYTES)}"
                    " (an unterminated quoted field?)"
                )
            target = len(self._buf) + max(self._block, len(self._buf))
        if self._check_utf8:
            self._check_text(out)
        first = self.line
        self.line += out.count(self.eol)
        self.offset += len(out)
        return out, first

    def _check_text(self, data: bytearray) -> None:
        """Refuse a chunk that is not UTF-8 text, naming the line and byte offset: pyarrow would
        read it as ``binary`` columns or fail deep inside. A NUL byte is refused too: UTF-8 text
        holds none, UTF-16/32 without a byte order mark is full of them."""
        try:
            codecs.utf_8_decode(data, "strict", True)
            bad, end, reason = len(data), 0, ""
        except UnicodeDecodeError as e:
            bad, end, reason = e.start, e.end, e.reason
        nul = data.find(0, 0, bad)  # whichever comes first: UTF-16 text fails on a NUL before anything else
        if nul >= 0:
            bad, reason = nul, ""
        elif not reason:
            return
        where = f"{self._name}: line {self.line + data.count(self.eol, 0, bad)}, byte offset {self.offset + bad}"
        if reason:
            raise InvalidInput(
                f"{where}: not UTF-8 ({data[bad:end].hex(' ')}: {reason}); give the file's encoding"
                " with --encoding, e.g. --encoding latin-1"
            )
        raise InvalidInput(
            f"{where}: a NUL byte (UTF-16 or UTF-32 text without a byte order mark? give --encoding,"
            " e.g. --encoding utf-16-le)"
        )


def _first_failure(n: int, fails: Callable[[int, int], bool]) -> int | None:
    """The first index in [0, n) whose item fails on its own, given ``fails(lo, hi)`` for the
    items [lo, hi) and that [0, n) fails as a whole. Halving: O(n) work overall."""
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(lo, mid):
            hi = mid
        else:
            lo = mid
    if n and fails(lo, lo + 1):
        return lo
    return None


# --------------------------------------------------------------------------- conversions

_ZONED_RE = r"[T ]\d{2}(?::?\d{2}(?::?\d{2}(?:[.,]\d+)?)?)?\s*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"


def _storable_type(type_: pa.DataType) -> pa.DataType:
    """``type_`` as Parquet stores it, so that a slice reads back with the type it was
    written with: Parquet has no seconds unit (``timestamp[s]`` → ``timestamp[ms]``,
    ``time32[s]`` → ``time32[ms]``, lossless) and no 64-bit date (``date64`` → ``date32``).
    Nested types are mapped inside."""
    t = pa.types
    if t.is_timestamp(type_) and type_.unit == "s":
        return pa.timestamp("ms", tz=type_.tz)
    if t.is_time32(type_) and type_.unit == "s":
        return pa.time32("ms")
    if t.is_date64(type_):
        return pa.date32()
    if t.is_struct(type_):
        return pa.struct([f.with_type(_storable_type(f.type)) for f in type_])
    if t.is_list(type_) or t.is_large_list(type_):
        item = type_.value_field.with_type(_storable_type(type_.value_type))
        return pa.large_list(item) if t.is_large_list(type_) else pa.list_(item)
    if t.is_fixed_size_list(type_):
        return pa.list_(type_.value_field.with_type(_storable_type(type_.value_type)), type_.list_size)
    if t.is_map(type_):
        return pa.map_(
            type_.key_field.with_type(_storable_type(type_.key_type)),
            type_.item_field.with_type(_storable_type(type_.item_type)),
        )
    if t.is_dictionary(type_):
        return _storable_type(type_.value_type)
    return type_


def _output_schema(fields: list[pa.Field]) -> pa.Schema:
    """The normalised schema handed out: storable types, canonical slice form."""
    return canonical_slice_schema(pa.schema([pa.field(f.name, _storable_type(f.type)) for f in fields]))


def _event_time_supported(type_: pa.DataType) -> bool:
    t = pa.types
    return (
        t.is_timestamp(type_)
        or t.is_date(type_)
        or t.is_string(type_)
        or t.is_large_string(type_)
        or t.is_null(type_)
    )


def _nullify(arr: pa.Array, spellings: tuple[str, ...]) -> pa.Array:
    """A string array with the null spellings made nulls."""
    return pc.if_else(
        pc.is_in(arr, value_set=pa.array(spellings, pa.string())), pa.scalar(None, pa.string()), arr
    )


def _to_event_time(arr: pa.Array, null_values: tuple[str, ...] = ()) -> pa.Array:
    """``arr`` as ``timestamp[us, UTC]`` (raises pa.ArrowException on a bad value)."""
    t = arr.type
    if t == EVENT_TIME_TYPE:
        return arr
    if pa.types.is_null(t):
        return pa.nulls(len(arr), EVENT_TIME_TYPE)
    if pa.types.is_timestamp(t):
        if t.tz is None:
            arr = arr.cast(pa.timestamp(t.unit, tz="UTC"))
        return arr.cast(EVENT_TIME_TYPE)
    if pa.types.is_date(t):
        return arr.cast(pa.timestamp("us")).cast(EVENT_TIME_TYPE)
    if pa.types.is_large_string(t):
        arr = arr.cast(pa.string())
    if null_values:
        arr = _nullify(arr, null_values)
    try:
        return arr.cast(EVENT_TIME_TYPE)
    except pa.ArrowInvalid:
        pass
    try:
        return arr.cast(pa.timestamp("us")).cast(EVENT_TIME_TYPE)
    except pa.ArrowInvalid:
        pass
    zoned = pc.match_substring_regex(arr, _ZONED_RE)
    null = pa.scalar(None, pa.string())
    a = pc.if_else(zoned, arr, null).cast(EVENT_TIME_TYPE)
    b = pc.if_else(zoned, null, arr).cast(pa.timestamp("us")).cast(EVENT_TIME_TYPE)
    return pc.if_else(zoned, a, b)


def _cast_failure(arr: pa.Array, convert: Callable[[pa.Array], pa.Array]) -> tuple[int | None, str]:
    """Index and message of the first value of ``arr`` that ``convert`` refuses."""
    messages: list[str] = []

    def fails(lo: int, hi: int) -> bool:
        try:
            convert(arr.slice(lo, hi - lo))
            return False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            messages.append(str(e))
            return True

    index = _first_failure(len(arr), fails)
    return index, (messages[-1] if messages else "")


def _value_at(arr: pa.Array, i: int) -> Any:
    try:
        return arr[i].as_py()
    except Exception:  # noqa: BLE001 - only for a message
        return str(arr[i])


def _event_time_message(where: str, col: str, value: Any) -> str:
    return (
        f"{where}, column {col!r}: value {_snip(value)} is not a valid event time (expected an ISO 8601"
        " timestamp such as 2024-01-31T12:00:00Z; values without an offset are read as UTC)"
    )


# --------------------------------------------------------------------------- formats


class _TextFormat:
    """Shared by CSV and JSON Lines: chunks → batches with fixed types."""

    name: str
    schema: pa.Schema

    def first_batches(self) -> list[pa.RecordBatch]:
        raise NotImplementedError

    def parse(self, data: bytes, first_line: int) -> list[pa.RecordBatch]:
        raise NotImplementedError

    def _finish(
        self, table: pa.Table, data: bytes, first_line: int, row_lines: Callable[[bytes, int, int], int]
    ) -> list[pa.RecordBatch]:
        """Post-conversions (event time, casts) and the normalised schema."""
        out = []
        row0 = 0
        for batch in table.to_batches():
            columns = []
            for i, f in enumerate(self.schema):
                arr = batch.column(i)
                if i == self._event_index:
                    try:
                        arr = _to_event_time(arr, self._null_spellings)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                        idx, _ = _cast_failure(arr, lambda a: _to_event_time(a, self._null_spellings))
                        idx = idx or 0
                        line = row_lines(data, first_line, row0 + idx)
                        raise InvalidInput(
                            _event_time_message(f"{self.name}: line {line}", f.name, _value_at(arr, idx))
                        ) from None
                elif arr.type != f.type:
                    if self._null_spellings and pa.types.is_string(arr.type):
                        arr = _nullify(arr, self._null_spellings)  # a column read as text
                    try:
                        arr = arr.cast(f.type)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                        idx, msg = _cast_failure(arr, lambda a, target=f.type: a.cast(target))
                        line = row_lines(data, first_line, row0 + (idx or 0))
                        value = _value_at(arr, idx) if idx is not None else None
                        raise InvalidInput(
                            f"{self.name}: line {line}, column {f.name!r}: value {_snip(value)} cannot be"
                            f" converted to {f.type}: {_one_line(msg or str(e))}"
                        ) from None
                columns.append(arr)
            out.append(pa.RecordBatch.from_arrays(columns, schema=self.schema))
            row0 += batch.num_rows
        return out


class _CsvFormat(_TextFormat):
    def __init__(self, opened: _Opened, options: ReadOptions, fmt: str) -> None:
        self.name = opened.name
        self._options = options
        self._block = options.block_size
        delimiter = options.delimiter or ("\t" if fmt == "tsv" else _sniff_delimiter(opened.source))
        self.delimiter = delimiter
        self._pattern = _row_pattern(delimiter.encode("ascii"))
        self._parse_options = pacsv.ParseOptions(
            delimiter=delimiter,
            quote_char='"',
            double_quote=True,
            escape_char=False,
            newlines_in_values=True,
            ignore_empty_lines=True,
        )
        delimiter_byte = ord(delimiter)
        complete_rows = _complete_rows_pattern(delimiter.encode("ascii"))
        self.chunker = _Chunker(
            opened.source,
            options.block_size,
            lambda buf, eol: _csv_cut(buf, eol, complete_rows, delimiter_byte),
            opened.name,
            cr_lines=True,
            check_utf8=opened.check_utf8,
        )
        self._overrides = options.override_types()
        self._null_spellings = NULL_VALUES
        self._setup()

    # -- pyarrow calls

    def _convert_options(self, column_types: dict[str, pa.DataType]) -> pacsv.ConvertOptions:
        return pacsv.ConvertOptions(
            check_utf8=True,
            column_types=column_types,
            null_values=list(NULL_VALUES),
            true_values=list(TRUE_VALUES),
            false_values=list(FALSE_VALUES),
            strings_can_be_null=False,
            quoted_strings_can_be_null=True,
            auto_dict_encode=False,
            decimal_point=".",
            timestamp_parsers=[pacsv.ISO8601],
        )

    def _read(
        self,
        data: bytes,
        names: list[str] | None,
        convert: pacsv.ConvertOptions | None,
        parse: pacsv.ParseOptions | None = None,
    ) -> pa.Table:
        read = pacsv.ReadOptions(
            use_threads=False,
            block_size=min(max(len(data) + 1, 1 << 16), (1 << 31) - 1),
            column_names=names,
            autogenerate_column_names=names is None and not self._options.header,
        )
        return pacsv.read_csv(
            pa.BufferReader(pa.py_buffer(data)),
            read_options=read,
            parse_options=parse or self._parse_options,
            convert_options=convert or self._convert_options({}),
        )

    # -- setup: header, names, inference on the first chunk

    def _setup(self) -> None:
        opts = self._options
        first = self.chunker.next()
        if first is None or not first[0].strip():
            raise InvalidInput(f"{self.name}: the input is empty")
        data, line = first
        rows = _csv_rows(data, self._pattern, limit=1)
        start, end = rows[0]
        row = data[start:end]
        if not row.endswith((b"\n", b"\r")):
            row += b"\n"
        try:
            if opts.header:
                header = self._read(row, None, None).column_names
            else:
                header = None
                count = self._read(row, None, None).num_columns
        except pa.ArrowInvalid as e:
            raise InvalidInput(
                f"{self.name}: line {line + data.count(self.chunker.eol, 0, start)}: {_one_line(str(e))}"
            ) from None
        if opts.header:
            assert header is not None
            if opts.column_names is not None:
                if len(opts.column_names) != len(header):
                    raise InvalidInput(
                        f"{self.name}: {len(opts.column_names)} column names given, the header has {len(header)} columns"
                    )
                names = list(opts.column_names)
            else:
                names = header
            _check_names(names, f"{self.name}: header: ")
            data_line = line + data.count(self.chunker.eol, 0, end)
            data = data[end:]
        else:
            if opts.column_names is not None:
                if len(opts.column_names) != count:
                    raise InvalidInput(
                        f"{self.name}: {len(opts.column_names)} column names given, the first row has {count} fields"
                    )
                names = list(opts.column_names)
            else:
                names = [f"f{i}" for i in range(count)]
            data_line = line
        self._names = names
        for col in self._overrides:
            if col not in names:
                raise InvalidInput(
                    f"{self.name}: --type {col}=…: no column {col!r} (columns: {', '.join(names)})"
                )
        if opts.event_time is not None and opts.event_time not in names:
            raise InvalidInput(
                f"{self.name}: event time column {opts.event_time!r} not found (columns: {', '.join(names)})"
            )
        # pyarrow's CSV reader cannot convert to decimal256: read as text, cast afterwards.
        fixed = {c: pa.string() if pa.types.is_decimal256(t) else t for c, t in self._overrides.items()}
        if opts.event_time is not None and opts.event_time not in fixed:
            fixed[opts.event_time] = pa.string()

        # Type inference: the first chunk holding data rows (the first one, unless the header
        # filled it), with the overridden columns' types given.
        while not data.strip(b"\r\n") and (nxt := self.chunker.next()) is not None:
            data, data_line = nxt
        self._event_index = names.index(opts.event_time) if opts.event_time is not None else None
        table: pa.Table | None = None
        if data.strip(b"\r\n"):
            table = self._parse_table(data, data_line, self._convert_options(fixed))
        if table is not None:
            types = {}
            for f in table.schema:
                t = f.type
                types[f.name] = fixed.get(f.name, pa.string() if pa.types.is_null(t) else t)
        else:  # a header and no rows
            types = {n: fixed.get(n, pa.string()) for n in names}
        self._types = types
        self._fixed_convert = self._convert_options(types)
        if table is not None and any(table.schema.field(n).type != types[n] for n in names):
            table = self._parse_table(data, data_line, self._fixed_convert)
        out_fields = []
        for n in names:
            t = EVENT_TIME_TYPE if n == opts.event_time else self._overrides.get(n, types[n])
            if n == opts.event_time and not _event_time_supported(types[n]):
                raise InvalidInput(
                    f"{self.name}: event time column {n!r} has type {types[n]}; it needs timestamps, dates or"
                    " ISO 8601 strings"
                )
            out_fields.append(pa.field(n, t))
        self.schema = _output_schema(out_fields)
        self._first = (
            self._finish(table, data, data_line, self._row_line)
            if table is not None and table.num_rows
            else []
        )

    def first_batches(self) -> list[pa.RecordBatch]:
        out, self._first = self._first, []
        return out

    def parse(self, data: bytes, first_line: int) -> list[pa.RecordBatch]:
        table = self._parse_table(data, first_line, self._fixed_convert)
        if table is None or not table.num_rows:
            return []
        return self._finish(table, data, first_line, self._row_line)

    def _parse_table(self, data: bytes, first_line: int, convert: pacsv.ConvertOptions) -> pa.Table | None:
        try:
            return self._read(data, self._names, convert)
        except pa.ArrowNotImplementedError as e:
            raise InvalidInput(f"{self.name}: {_one_line(str(e))}") from None
        except pa.ArrowInvalid as e:
            if not data.strip(b"\r\n"):
                return None
            raise self._locate(data, first_line, convert, e) from None

    # -- errors

    def _row_line(self, data: bytes, first_line: int, index: int) -> int:
        rows = _csv_rows(data, self._pattern)
        start = rows[index][0] if index < len(rows) else len(data)
        return first_line + data.count(self.chunker.eol, 0, start)

    def _locate(
        self, data: bytes, first_line: int, convert: pacsv.ConvertOptions, error: Exception
    ) -> InvalidInput:
        rows = _csv_rows(data, self._pattern)
        invalid: list[Any] = []

        def handler(row: Any) -> str:
            invalid.append(row)
            return "error"

        parse = pacsv.ParseOptions(
            delimiter=self._parse_options.delimiter,
            quote_char='"',
            double_quote=True,
            escape_char=False,
            newlines_in_values=True,
            ignore_empty_lines=True,
            invalid_row_handler=handler,
        )
        errors: list[Exception] = []

        def fails(lo: int, hi: int) -> bool:
            invalid.clear()
            try:
                self._read(data[rows[lo][0] : rows[hi - 1][1]], self._names, convert, parse)
                return False
            except pa.ArrowInvalid as e:
                errors.append(e)
                return True

        index = _first_failure(len(rows), fails)
        eol = self.chunker.eol
        if index is None:
            last = first_line + data.count(eol) - (1 if data.endswith(eol) else 0)
            return InvalidInput(f"{self.name}: lines {first_line}–{last}: {_one_line(str(error))}")
        start, end = rows[index]
        line = first_line + data.count(eol, 0, start)
        text = data[start:end].rstrip(b"\r\n")
        where = f"{self.name}: line {line}"
        if invalid:
            row = invalid[-1]
            return InvalidInput(
                f"{where}: expected {row.expected_columns} fields, found {row.actual_columns}: {_snip(text)}"
            )
        msg = str(errors[-1]) if errors else str(error)
        m = re.match(r"In CSV column #(\d+): (.*)", msg, re.DOTALL)
        if not m:
            return InvalidInput(f"{where}: {_one_line(msg)}")
        col = self._names[int(m.group(1))]
        rest = re.sub(r"^Row #\d+: ", "", m.group(2))
        conv = re.match(r"CSV conversion error to (.+?): invalid value '(.*)'\s*$", rest, re.DOTALL)
        if conv:
            type_text, value = conv.group(1), conv.group(2)
            if col in self._overrides:
                hint = f"(type given by --type {col}={self._options.schema_overrides[col]})"
            else:
                hint = (
                    f"(type inferred from the first {_size_text(self._block)} of the input);"
                    f" use --type {col}=string"
                )
            return InvalidInput(
                f"{where}, column {col!r}: value {_snip(value)} is not a valid {type_text} {hint}"
            )
        return InvalidInput(f"{where}, column {col!r}: {_one_line(rest)}")


_DELIMITER_SNIFF_BYTES = 64 << 10


def _sniff_delimiter(src: _ByteSource) -> str:
    """The delimiter of a CSV whose delimiter is not given, from its first rows (at most
    ``_SNIFF_ROWS`` complete rows in the first 64 KiB: a function of the bytes only): of
    :data:`SNIFFED_DELIMITERS`, the one that splits every one of these rows into the same number of
    fields, the most fields (a tie goes to the earlier one); ``,`` when none splits them."""
    head = src.read(_DELIMITER_SNIFF_BYTES)
    src.unread(head)
    whole = len(head) < _DELIMITER_SNIFF_BYTES
    if head.startswith(_BOM):
        head = head[len(_BOM):]
    best, most = ",", 1
    for d in SNIFFED_DELIMITERS:
        rows = _csv_rows(head, _row_pattern(d.encode("ascii")), limit=_SNIFF_ROWS)
        if not whole and len(rows) > 1 and not head[: rows[-1][1]].endswith((b"\n", b"\r")):
            rows.pop()  # cut by the 64 KiB limit
        counts = {_field_count(head[start:end], d) for start, end in rows}
        if len(counts) == 1 and (n := counts.pop()) > most:
            best, most = d, n
    return best


def _field_count(row: bytes, delimiter: str) -> int:
    """Fields in one CSV row (pyarrow's dialect; 0 if it does not parse)."""
    try:
        table = pacsv.read_csv(
            pa.BufferReader(pa.py_buffer(row if row.endswith((b"\n", b"\r")) else row + b"\n")),
            read_options=pacsv.ReadOptions(use_threads=False, autogenerate_column_names=True),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(check_utf8=False),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return 0
    return table.num_columns


def _json_rows(data: bytes) -> list[tuple[int, int]]:
    rows = []
    pos, n = 0, len(data)
    while pos < n:
        nl = data.find(b"\n", pos)
        end = n if nl < 0 else nl + 1
        if data[pos:end].strip():
            rows.append((pos, end))
        pos = end
    return rows


class _JsonFormat(_TextFormat):
    def __init__(self, opened: _Opened, options: ReadOptions) -> None:
        self.name = opened.name
        self._options = options
        self._block = options.block_size
        self.chunker = _Chunker(
            opened.source, options.block_size, _json_cut, opened.name, check_utf8=opened.check_utf8
        )
        self._overrides = options.override_types()
        self._null_spellings = ()
        self._read_schema: pa.Schema | None = None
        self._setup()

    def _read(self, data: bytes, schema: pa.Schema | None, behavior: str = "error") -> pa.Table:
        return pajson.read_json(
            pa.BufferReader(pa.py_buffer(data)),
            read_options=pajson.ReadOptions(
                use_threads=False, block_size=min(max(len(data) + 1, 1 << 16), (1 << 31) - 1)
            ),
            parse_options=pajson.ParseOptions(
                explicit_schema=schema,
                newlines_in_values=False,
                unexpected_field_behavior=behavior if schema is not None else "infer",
            ),
        )

    def _setup(self) -> None:
        opts = self._options
        first = self.chunker.next()
        if first is None or not first[0].strip():
            raise InvalidInput(f"{self.name}: the input is empty")
        data, line = first
        inferred = self._parse_table(data, line, None)
        if inferred is None:
            raise InvalidInput(f"{self.name}: the input is empty")
        names = inferred.column_names
        if not names:
            raise InvalidInput(f"{self.name}: the JSON objects have no fields")
        _check_names(names, f"{self.name}: ")
        self._names = names
        for col in self._overrides:
            if col not in names:
                raise InvalidInput(
                    f"{self.name}: --type {col}=…: no field {col!r} in the first"
                    f" {_size_text(self._block)} of the input (fields: {', '.join(names)})"
                )
        if opts.event_time is not None and opts.event_time not in names:
            raise InvalidInput(
                f"{self.name}: event time column {opts.event_time!r} not found (fields: {', '.join(names)})"
            )
        read_fields, out_fields = [], []
        for f in inferred.schema:
            out_type = self._overrides.get(f.name, f.type)
            # The JSON reader reads dates from numbers only: read date strings as strings.
            read_type = pa.string() if pa.types.is_date(out_type) else out_type
            if f.name == opts.event_time and f.name not in self._overrides and pa.types.is_timestamp(f.type):
                # pyarrow infers timestamp[s] from ISO strings; read them as strings and parse
                # them ourselves so that later fractional seconds still fit.
                read_type = pa.string()
            read_fields.append(pa.field(f.name, read_type))
            if f.name == opts.event_time:
                if not _event_time_supported(out_type):
                    raise InvalidInput(
                        f"{self.name}: event time column {f.name!r} has type {out_type}; it needs timestamps,"
                        " dates or ISO 8601 strings"
                    )
                out_type = EVENT_TIME_TYPE
            out_fields.append(pa.field(f.name, out_type))
        self._read_schema = pa.schema(read_fields)
        self.schema = _output_schema(out_fields)
        self._event_index = names.index(opts.event_time) if opts.event_time is not None else None
        table = inferred
        if not inferred.schema.equals(self._read_schema, check_metadata=False):
            table = self._parse_table(data, line, self._read_schema)
        self._first = (
            self._finish(table, data, line, self._row_line) if table is not None and table.num_rows else []
        )

    def first_batches(self) -> list[pa.RecordBatch]:
        out, self._first = self._first, []
        return out

    def parse(self, data: bytes, first_line: int) -> list[pa.RecordBatch]:
        table = self._parse_table(data, first_line, self._read_schema)
        if table is None or not table.num_rows:
            return []
        return self._finish(table, data, first_line, self._row_line)

    def _parse_table(self, data: bytes, first_line: int, schema: pa.Schema | None) -> pa.Table | None:
        try:
            return self._read(data, schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            if not data.strip():
                return None
            raise self._locate(data, first_line, schema, e) from None

    def _row_line(self, data: bytes, first_line: int, index: int) -> int:
        rows = _json_rows(data)
        start = rows[index][0] if index < len(rows) else len(data)
        return first_line + data.count(b"\n", 0, start)

    def _locate(
        self, data: bytes, first_line: int, schema: pa.Schema | None, error: Exception
    ) -> InvalidInput:
        rows = _json_rows(data)
        errors: list[Exception] = []

        def fails(lo: int, hi: int) -> bool:
            try:
                self._read(data[rows[lo][0] : rows[hi - 1][1]], schema)
                return False
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                errors.append(e)
                return True

        index = _first_failure(len(rows), fails)
        if index is None:
            # Not a fault of one line alone (lines whose types conflict while inferring):
            # pyarrow names the row (counting non-blank lines from 0) where it noticed.
            m = re.search(r"in row (\d+)\s*$", str(error))
            if m and int(m.group(1)) < len(rows):
                index = int(m.group(1))
                errors.append(error)
            else:
                last = first_line + data.count(b"\n") - (1 if data.endswith(b"\n") else 0)
                return InvalidInput(f"{self.name}: lines {first_line}–{last}: {_one_line(str(error))}")
        start, end = rows[index]
        line = first_line + data.count(b"\n", 0, start)
        text = data[start:end]
        msg = str(errors[-1]) if errors else str(error)
        return InvalidInput(self._explain(f"{self.name}: line {line}", text, msg, schema))

    def _explain(self, where: str, text: bytes, msg: str, schema: pa.Schema | None) -> str:
        try:
            obj = json.loads(text)
        except ValueError:
            detail = re.sub(r"^JSON parse error: ", "", msg)
            detail = re.sub(r"\s*in row \d+\s*$", "", detail)
            return f"{where}: invalid JSON: {_one_line(detail)}"
        if not isinstance(obj, dict):
            return f"{where}: not a JSON object (each line must hold one object)"
        if "unexpected field" in msg and schema is not None:
            extra = [k for k in obj if k not in schema.names]
            if extra:
                return (
                    f"{where}: field {extra[0]!r} is not among the fields found in the first"
                    f" {_size_text(self._block)} of the input, which fix the columns ({', '.join(schema.names)})"
                )
        m = re.search(r"Column\(/([^)/]*)[^)]*\) was specified twice", msg)
        if m:
            return f"{where}: field {m.group(1)!r} appears twice in one object"
        col = None
        m = re.search(r"Column\(/([^)/]*)", msg)
        if m and schema is not None and m.group(1) in schema.names:
            col = m.group(1)
        elif schema is not None:
            for f in schema:  # which field does not fit on its own?
                try:
                    self._read(text, pa.schema([f]), behavior="ignore")
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    col = f.name
                    break
        if col is None and schema is None and m:
            detail = re.sub(r"^JSON parse error: ", "", msg)
            detail = re.sub(r"\s*in row \d+\s*$", "", detail)
            return (
                f"{where}, column {m.group(1)!r}: value {_snip(obj.get(m.group(1)))} does not match the column's"
                f" earlier values ({_one_line(detail).removeprefix(f'Column(/{m.group(1)}) ')})"
            )
        if col is None or schema is None:
            return f"{where}: {_one_line(msg)}"
        value = obj.get(col)
        type_ = self._overrides.get(col, schema.field(col).type)
        if col in self._overrides:
            hint = f"(type given by --type {col}={self._options.schema_overrides[col]})"
        else:
            hint = f"(type inferred from the first {_size_text(self._block)} of the input)"
            suggestion = _json_type_for(value, type_)
            if suggestion:
                hint += f"; use --type {col}={suggestion}"
        return f"{where}, column {col!r}: value {_snip(value)} does not fit type {type_} {hint}"


def _json_type_for(value: Any, current: pa.DataType) -> str | None:
    """A ``--type`` the JSON reader could read ``value`` (and the column's earlier values) as."""
    if isinstance(value, bool):
        return "bool" if pa.types.is_null(current) else None
    if isinstance(value, int):
        return "int64" if pa.types.is_null(current) else None
    if isinstance(value, float):
        return "float64" if pa.types.is_null(current) or pa.types.is_integer(current) else None
    if isinstance(value, str):
        return "string" if pa.types.is_null(current) or pa.types.is_timestamp(current) else None
    return None


class _ParquetFormat:
    def __init__(self, opened: _Opened, options: ReadOptions) -> None:
        self.name = opened.name
        self._options = options
        self._spool = None
        self.spooled = opened.path is None and opened.seekable_file is None
        if opened.path is not None:
            target: Any = opened.path
        elif opened.seekable_file is not None:
            target = opened.seekable_file
        else:
            self._spool = tempfile.TemporaryFile(prefix="cairn-parquet-")  # noqa: SIM115 - closed in close()
            while True:
                piece = opened.source.read(_SPOOL_PIECE)
                if not piece:
                    break
                self._spool.write(piece)
            if self._spool.tell() == 0:
                self._spool.close()
                raise InvalidInput(f"{self.name}: the input is empty")
            self._spool.seek(0)
            target = self._spool
        try:
            self._file = pq.ParquetFile(target, buffer_size=1 << 20, pre_buffer=False)
        except (pa.ArrowException, OSError) as e:
            if self._spool is not None:
                self._spool.close()
            if opened.total_size == 0:
                raise InvalidInput(f"{self.name}: the input is empty") from None
            raise InvalidInput(f"{self.name}: not a readable Parquet file ({_one_line(str(e))})") from None
        self.num_rows = self._file.metadata.num_rows
        raw = self._file.schema_arrow
        names = raw.names
        if not names:
            raise InvalidInput(f"{self.name}: the Parquet file has no columns")
        _check_names(names, f"{self.name}: ")
        overrides = options.override_types()
        for col in overrides:
            if col not in names:
                raise InvalidInput(
                    f"{self.name}: --type {col}=…: no column {col!r} (columns: {', '.join(names)})"
                )
        ev = options.event_time
        if ev is not None and ev not in names:
            raise InvalidInput(
                f"{self.name}: event time column {ev!r} not found (columns: {', '.join(names)})"
            )
        self._overrides = overrides
        self._event_index = names.index(ev) if ev is not None else None
        fields = []
        for f in raw:
            t = overrides.get(f.name, f.type)
            if f.name == ev:
                base = t.value_type if pa.types.is_dictionary(t) else t
                if not _event_time_supported(base):
                    raise InvalidInput(
                        f"{self.name}: event time column {f.name!r} has type {t}; it needs timestamps, dates"
                        " or ISO 8601 strings"
                    )
                t = EVENT_TIME_TYPE
            fields.append(pa.field(f.name, t))
        self.schema = _output_schema(fields)
        self.rows_done = 0

    def batches(self) -> Iterator[pa.RecordBatch]:
        try:
            it = self._file.iter_batches(batch_size=PARQUET_BATCH_ROWS, use_threads=True)
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    return
                except (pa.ArrowException, OSError) as e:
                    raise InvalidInput(f"{self.name}: reading Parquet failed: {_one_line(str(e))}") from None
                yield self._convert(batch)
                self.rows_done += batch.num_rows
        finally:
            pass

    def _convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = []
        for i, f in enumerate(self.schema):
            arr = batch.column(i)
            if pa.types.is_dictionary(arr.type):
                arr = arr.cast(arr.type.value_type)
            src_override = self._overrides.get(f.name)
            try:
                if i == self._event_index:
                    if src_override is not None and arr.type != src_override:
                        arr = arr.cast(src_override)
                    arr = _to_event_time(arr)
                elif arr.type != f.type:
                    arr = arr.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                if i == self._event_index:

                    def convert(a: pa.Array, override: pa.DataType | None = src_override) -> pa.Array:
                        if override is not None and a.type != override:
                            a = a.cast(override)
                        return _to_event_time(a)

                else:

                    def convert(a: pa.Array, target: pa.DataType = f.type) -> pa.Array:
                        return a.cast(target)

                idx, msg = _cast_failure(arr, convert)
                row = self.rows_done + (idx or 0) + 1
                value = _value_at(arr, idx) if idx is not None else None
                if i == self._event_index:
                    raise InvalidInput(
                        _event_time_message(f"{self.name}: row {row}", f.name, value)
                    ) from None
                raise InvalidInput(
                    f"{self.name}: row {row}, column {f.name!r}: value {_snip(value)} cannot be converted to"
                    f" {f.type}: {_one_line(msg or str(e))}"
                ) from None
            columns.append(arr)
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._file.close()
        if self._spool is not None:
            self._spool.close()


# --------------------------------------------------------------------------- the Input

_EOF = object()


class Input:
    """An opened input: ``schema`` now, ``batches`` (an iterator, single use) as they are read.

    ``bytes_read``: bytes taken from the source so far (compressed bytes for compressed
    input; for Parquet read from a file, an estimate proportional to the rows read), for a
    progress bar. ``rows_read``: rows handed out so far. Close it (or use ``with``); it also
    closes itself when ``batches`` is exhausted or fails.
    """

    def __init__(
        self,
        *,
        name: str,
        format: str,
        compression: str,
        schema: pa.Schema,
        bytes_read: Callable[[], int],
        closers: list[Callable[[], None]],
        text: _TextFormat | None = None,
        parquet: _ParquetFormat | None = None,
        total_size: int | None = None,
    ) -> None:
        self.name = name
        self.format = format
        self.compression = compression
        self.schema = schema
        self.rows_read = 0
        self._bytes_read = bytes_read
        self._closers = closers
        self._text = text
        self._parquet = parquet
        self._total_size = total_size
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self.batches: Iterator[pa.RecordBatch] = self._generate()

    @property
    def bytes_read(self) -> int:
        if self._parquet is not None and self._total_size is not None:
            total_rows = self._parquet.num_rows
            if self._closed or total_rows == 0:
                return self._total_size
            return self._total_size * min(self.rows_read, total_rows) // total_rows
        try:
            return int(self._bytes_read())
        except (OSError, ValueError, pa.ArrowException):
            return 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._parquet is not None:
            self._parquet.close()
        # Record the final position before the files go away.
        final = self.bytes_read
        self._bytes_read = lambda: final
        self._closed = True
        for close in self._closers:
            with contextlib.suppress(Exception):
                close()

    def _emit(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        self.rows_read += batch.num_rows
        return batch

    def _generate(self) -> Iterator[pa.RecordBatch]:
        try:
            if self._parquet is not None:
                for batch in self._parquet.batches():
                    if self._closed:
                        return
                    yield self._emit(batch)
                return
            text = self._text
            assert text is not None
            for batch in text.first_batches():
                yield self._emit(batch)
            chunker = text.chunker  # type: ignore[attr-defined]
            if _WORKERS == 1:
                while not self._closed and (item := chunker.next()) is not None:
                    for batch in text.parse(*item):
                        yield self._emit(batch)
                return
            self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="cairn-read")
            pending: deque[Future[list[pa.RecordBatch]]] = deque()
            stop: Any = None
            while not self._closed:
                while stop is None and len(pending) <= _WORKERS:
                    try:
                        item = chunker.next()
                    except InvalidInput as e:
                        stop = e  # raised after the chunks before it, in order
                        break
                    if item is None:
                        stop = _EOF
                        break
                    pending.append(self._pool.submit(text.parse, *item))
                if not pending:
                    break
                for batch in pending.popleft().result():
                    yield self._emit(batch)
            if isinstance(stop, InvalidInput):
                raise stop
        finally:
            self.close()


def open_input(source: str | Path | BinaryIO, options: ReadOptions | None = None) -> Input:
    """Open ``source`` (a path, or a readable binary stream such as ``sys.stdin.buffer``).

    Reads the first chunk (to know the schema) and returns; the rest is read as
    ``Input.batches`` is iterated. Raises :class:`InvalidInput` for anything wrong with the
    input or the options, with a one-line message.
    """
    options = options or ReadOptions()
    if not isinstance(options, ReadOptions):
        raise InvalidInput("open_input needs ReadOptions")
    opened = _open_source(source, options)
    fmt = opened.format
    try:
        if fmt is None:
            raise InvalidInput(f"{opened.name}: the input is empty")
        if fmt in ("jsonl", "parquet") and (
            options.delimiter is not None or not options.header or options.column_names is not None
        ):
            raise InvalidInput(
                f"{opened.name}: delimiter, header and column_names apply to CSV/TSV only, not {fmt}"
            )
        if fmt == "parquet" and options.encoding is not None:
            raise InvalidInput(f"{opened.name}: encoding applies to CSV/TSV and JSON Lines only, not parquet")
        if fmt == "parquet":
            pf = _ParquetFormat(opened, options)
            return Input(
                name=opened.name,
                format=fmt,
                compression=opened.codec,
                schema=pf.schema,
                bytes_read=opened.bytes_read,
                closers=opened.closers,
                parquet=pf,
                total_size=opened.total_size if pf.spooled is False else None,
            )
        text: _TextFormat = (
            _JsonFormat(opened, options) if fmt == "jsonl" else _CsvFormat(opened, options, fmt)
        )
        return Input(
            name=opened.name,
            format=fmt,
            compression=opened.codec,
            schema=text.schema,
            bytes_read=opened.bytes_read,
            closers=opened.closers,
            text=text,
        )
    except BaseException:
        for close in opened.closers:
            with contextlib.suppress(Exception):
                close()
        raise
