"""Input readers for dataset ingest: CSV, TSV, JSON Lines and Parquet, plain, gzip or zstd,
from a file or a (non-seekable) stream, as a stream of Arrow record batches.

``open_input(source, ReadOptions(...))`` returns an :class:`Input` with the ``schema`` known
up front and ``batches`` produced lazily. What comes out is what :mod:`node.services.datasets.slices`
and :mod:`node.services.datasets.logical_hash` consume, so it is held to two rules:

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
:func:`node.services.datasets.slices.canonical_slice_schema` writes. Types Parquet cannot store are
mapped to the ones it reads back (``timestamp[s]`` → ``timestamp[ms]``, ``time32[s]`` →
``time32[ms]``, ``date64`` → ``date32``; lossless), so a slice written from these batches reads
back with the same schema and logical hash. So the same data read from CSV, JSON Lines or
Parquet yields the same Arrow schema whenever the inferred types agree.

Streaming: memory is bounded by a few chunks (up to ``workers + 2`` chunks of text, workers ≤ 4,
plus the Arrow data parsed from them), never the input size: reading a 200 MB CSV allocates
under 20 MB of Arrow memory at any time. Non-seekable input (the CLI passes
``sys.stdin.buffer``) is sniffed from its first bytes without seeking. Parquet needs random
access: a non-seekable or compressed Parquet input is first spooled to a temporary file
(disk, not memory: the ingest's work directory under ``$CAIRN_HOME/tmp``), then read row group by row group.

**Caps** (``limits``: ``InputLimits``, module ``limits``): decompressed bytes (absolute, and as a ratio to the bytes
received), columns (counted from the CSV header, the JSON keys or the Parquet footer before pyarrow builds a schema)
and rows; beyond one the input is refused (``TooLarge``). Its ``stop`` event ends the reading at the next read.

Choices, documented because callers and error messages depend on them:

- **Format detection** (``format=None``): from the file name (``.csv``, ``.tsv``/``.tab``,
  ``.jsonl``/``.ndjson``/``.json-lines``, ``.parquet``/``.pq``, each optionally followed by
  ``.gz``/``.gzip``/``.zst``/``.zstd``); without a usable name, by content: Parquet magic
  ``PAR1``, else JSON Lines if the first non-blank character is ``{``, else CSV.
  **Compression** (``compression=None``): from the name, else magic bytes (gzip ``1f8b``,
  zstd ``28b52ffd``). Concatenated gzip members / zstd frames are read through.
- **Line numbers** in errors are 1-based *physical* lines of the decompressed text: the number
  of ``\n`` before the start of the offending row, plus one. The header is line 1, blank
  lines count, and a quoted CSV field holding newlines counts as that many lines, so the line
  reported is the one where the offending row *starts* (what an editor shows). A file whose
  only line terminator is ``\r`` counts ``\r`` instead. Parquet errors name the 1-based row.
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
  with ``
``, ``
`` or ``
``, mixed or not. TSV is the same dialect with a tab delimiter.
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

Modules, one concern each: ``options`` (ReadOptions, type names, limits), ``limits`` (caps, the
stop signal), ``streams`` (peeking and push-back over the input's bytes), ``encodings`` (the text
encoding, transcoding to UTF-8), ``source`` (files and streams, decompression, format sniffing),
``chunking`` (cutting text into chunks of complete rows, UTF-8 checks), ``convert`` (conversions
shared by the text formats), one module per format (``csv_format``, ``jsonl_format``,
``parquet_format``), and ``inputs`` (``Input``, ``open_input``).
"""

from __future__ import annotations

from node.services.datasets.readers.csv_format import SNIFFED_DELIMITERS
from node.services.datasets.readers.input_limits import InputLimits, field_count
from node.services.datasets.readers.opened_input import Input, open_input
from node.services.datasets.readers.options import (
    DEFAULT_BLOCK_SIZE,
    EVENT_TIME_TYPE,
    FORMATS,
    NULL_VALUES,
    TYPE_NAMES,
    ReadOptions,
    parse_type_name,
)
from node.services.datasets.readers.parquet_format import check_parquet_file

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "EVENT_TIME_TYPE",
    "FORMATS",
    "NULL_VALUES",
    "SNIFFED_DELIMITERS",
    "TYPE_NAMES",
    "Input",
    "InputLimits",
    "ReadOptions",
    "check_parquet_file",
    "field_count",
    "open_input",
    "parse_type_name",
]
