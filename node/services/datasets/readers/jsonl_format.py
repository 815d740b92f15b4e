"""JSON Lines: keys of the first chunk, type inference, errors by line.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from node.services.datasets.readers.chunking import _Chunker, _first_failure, _json_cut
from node.services.datasets.readers.convert import MAX_TYPE_DEPTH, _event_time_supported, _output_schema, _TextFormat
from node.services.datasets.readers.input_limits import field_count
from node.services.datasets.readers.options import (
    EVENT_TIME_TYPE,
    ReadOptions,
    _check_names,
    _names_text,
    _size_text,
    _snip,
)
from node.services.datasets.readers.source import _Opened
from node.support.errors import InvalidInput, one_line


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


_STEP = np.zeros(256, dtype=np.int8)
_STEP[[0x5B, 0x7B]], _STEP[[0x5D, 0x7D]] = 1, -1  # [ { open, ] } close
_JSON_STRING = re.compile(rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')


def _deepest(data: bytes, limit: int) -> tuple[int, int]:
    """(deepest bracket nesting of any line, that line's 0-based index), strings left out; exact only when over
    ``limit``. Linear and vectorised: pyarrow's JSON reader is superlinear in nesting (4,000 levels: 6 s; printing
    the type: minutes), so a deep line is refused before it gets there (found by tests/unit/test_fuzz_decoders.py)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if not raw.size:
        return 0, 0
    starts = np.concatenate(([0], np.flatnonzero(raw[:-1] == 0x0A) + 1))
    opens = np.add.reduceat((_STEP[raw] > 0).view(np.uint8), starts, dtype=np.int64)  # per line, an upper bound
    if int(opens.max()) <= limit:
        return int(opens.max()), int(np.argmax(opens))
    bare = np.frombuffer(_JSON_STRING.sub(b'""', data), dtype=np.uint8)  # rare: a line with many brackets
    return _line_peak(bare, _STEP[bare].astype(np.int64))


def _line_peak(text: np.ndarray, step: np.ndarray) -> tuple[int, int]:
    """Highest running sum of ``step`` within one line of ``text`` (restarting at each newline), and that line."""
    if not text.size:
        return 0, 0
    level = np.cumsum(step)
    newline = text == 0x0A
    last_nl = np.maximum.accumulate(np.where(newline, np.arange(text.size), -1))
    depth = level - np.where(last_nl >= 0, level[np.maximum(last_nl, 0)], 0)
    peak = int(np.argmax(depth))
    return int(depth[peak]), int(np.count_nonzero(newline[:peak]))


#: A JSON string followed by a colon: an object's key (in valid JSON nothing else is; a string value's quotes are
#: escaped inside it, so a match cannot start within one).
_JSON_KEY = re.compile(rb'"([^"\\\n]*+(?:\\.[^"\\\n]*+)*+)"\s*+:')
_KEY_PIECE = 1 << 20


def _distinct_keys(data: bytes, cap: int) -> int:
    """How many distinct keys (at any nesting level, same names counted once) the first chunk holds, scanned a
    piece at a time, stopping once past ``cap`` (memory bounded by a piece, whatever the chunk's size)."""
    seen: set[bytes] = set()
    start = 0
    while start < len(data) and len(seen) <= cap:
        end = data.find(b"\n", start + _KEY_PIECE)
        end = len(data) if end < 0 else end + 1
        seen.update(_JSON_KEY.findall(data, start, end))
        start = end
    return len(seen)


class _JsonFormat(_TextFormat):
    def __init__(self, opened: _Opened, options: ReadOptions) -> None:
        self.name = opened.name
        self._options = options
        self._block = options.block_size
        self.chunker = _Chunker(opened.source, options.block_size, _json_cut, opened.name, check_utf8=opened.check_utf8)
        self._overrides = options.override_types()
        self._null_spellings = ()
        self._read_schema: pa.Schema | None = None
        self._limits = opened.limits
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
        if self._limits.max_columns is not None:  # before pyarrow infers them: 300,000 keys cost it 670 MB
            self._limits.check_columns(_distinct_keys(data, self._limits.max_columns), self.name, "distinct keys")
        inferred = self._parse_table(data, line, None)
        if inferred is None:
            raise InvalidInput(f"{self.name}: the input is empty")
        self._limits.check_columns(field_count(inferred.schema), self.name)
        names = inferred.column_names
        if not names:
            raise InvalidInput(f"{self.name}: the JSON objects have no fields")
        _check_names(names, f"{self.name}: ")
        self._names = names
        for col in self._overrides:
            if col not in names:
                raise InvalidInput(
                    f"{self.name}: --type {col}=…: no field {col!r} in the first"
                    f" {_size_text(self._block)} of the input (fields: {_names_text(names)})"
                )
        if opts.event_time is not None and opts.event_time not in names:
            raise InvalidInput(
                f"{self.name}: event time column {opts.event_time!r} not found (fields: {_names_text(names)})"
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
        self._first = self._finish(table, data, line, self._row_line) if table is not None and table.num_rows else []

    def first_batches(self) -> list[pa.RecordBatch]:
        out, self._first = self._first, []
        return out

    def parse(self, data: bytes, first_line: int) -> list[pa.RecordBatch]:
        table = self._parse_table(data, first_line, self._read_schema)
        if table is None or not table.num_rows:
            return []
        return self._finish(table, data, first_line, self._row_line)

    def _parse_table(self, data: bytes, first_line: int, schema: pa.Schema | None) -> pa.Table | None:
        depth, index = _deepest(data, MAX_TYPE_DEPTH + 1)
        if depth > MAX_TYPE_DEPTH + 1:  # + 1: the row's own object
            raise InvalidInput(
                f"{self.name}: line {first_line + index}: values nest more than {MAX_TYPE_DEPTH} levels deep: refused"
            )
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

    def _locate(self, data: bytes, first_line: int, schema: pa.Schema | None, error: Exception) -> InvalidInput:
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
                return InvalidInput(f"{self.name}: lines {first_line}–{last}: {one_line(str(error))}")
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
            return f"{where}: invalid JSON: {one_line(detail)}"
        if not isinstance(obj, dict):
            return f"{where}: not a JSON object (each line must hold one object)"
        if "unexpected field" in msg and schema is not None:
            extra = [k for k in obj if k not in schema.names]
            if extra:
                return (
                    f"{where}: field {extra[0]!r} is not among the fields found in the first"
                    f" {_size_text(self._block)} of the input, which fix the columns ({_names_text(schema.names)})"
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
                f" earlier values ({one_line(detail).removeprefix(f'Column(/{m.group(1)}) ')})"
            )
        if col is None or schema is None:
            return f"{where}: {one_line(msg)}"
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
