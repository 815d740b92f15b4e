"""CSV and TSV: header, delimiter sniffing, type inference on the first chunk, errors by line.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from node.services.datasets.readers.chunking import (
    _Chunker,
    _complete_rows_pattern,
    _csv_cut,
    _csv_rows,
    _first_failure,
    _rfc_quotes,
    _row_pattern,
)
from node.services.datasets.readers.convert import _event_time_supported, _output_schema, _TextFormat
from node.services.datasets.readers.options import (
    _BOM,
    EVENT_TIME_TYPE,
    FALSE_VALUES,
    NULL_VALUES,
    TRUE_VALUES,
    ReadOptions,
    _check_names,
    _names_text,
    _size_text,
    _snip,
)
from node.services.datasets.readers.source import _Opened
from node.services.datasets.readers.streams import _ByteSource
from node.support.errors import InvalidInput, one_line

#: Delimiters tried when a CSV's is not given, in order of preference on a tie.
SNIFFED_DELIMITERS = (",", "\t", ";", "|")
_SNIFF_ROWS = 20  # rows the delimiter is sniffed from (a fixed number: every node sniffs the same)


class _CsvFormat(_TextFormat):
    def __init__(self, opened: _Opened, options: ReadOptions, fmt: str) -> None:
        self.name = opened.name
        self._options = options
        self._block = options.block_size
        cap = opened.limits.max_columns
        delimiter = options.delimiter or ("\t" if fmt == "tsv" else _sniff_delimiter(opened.source, cap))
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
        self._limits = opened.limits
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
        data, line = self._first_chunk()
        start, end = _csv_rows(data, self._pattern, limit=1)[0]
        # Counted before pyarrow parses the row: 100,000 columns cost it seconds and hundreds of MB.
        self._limits.check_columns(_fields_in_row(data[start:end], ord(self.delimiter)), self.name)
        names = self._column_names(data, line, start, end)
        if opts.header:
            data_line = line + data.count(self.chunker.eol, 0, end)
            data = data[end:]
        else:
            data_line = line
        self._names = names
        self._check_columns(names)
        fixed = self._fixed_types()
        # Type inference: the first chunk holding data rows (the first one, unless the header
        # filled it), with the overridden columns' types given.
        while not data.strip(b"\r\n") and (nxt := self.chunker.next()) is not None:
            data, data_line = nxt
        self._event_index = names.index(opts.event_time) if opts.event_time is not None else None
        table, types = self._infer_types(data, data_line, names, fixed)
        self._types = types
        self._fixed_convert = self._convert_options(types)
        if table is not None and any(table.schema.field(n).type != types[n] for n in names):
            table = self._parse_table(data, data_line, self._fixed_convert)
        self.schema = self._final_schema(names, types)
        self._first = (
            self._finish(table, data, data_line, self._row_line) if table is not None and table.num_rows else []
        )

    def _first_chunk(self) -> tuple[bytes, int]:
        first = self.chunker.next()
        if first is None or not first[0].strip():
            raise InvalidInput(f"{self.name}: the input is empty")
        return first

    def _column_names(self, data: bytes, line: int, start: int, end: int) -> list[str]:
        """The names from the header row (or the given ones, checked against it), or f0… for the first row's
        fields when there is no header."""
        row = data[start:end]
        if not row.endswith((b"\n", b"\r")):
            row += b"\n"
        try:
            first = self._read(row, None, None)
        except pa.ArrowInvalid as e:
            raise InvalidInput(
                f"{self.name}: line {line + data.count(self.chunker.eol, 0, start)}: {one_line(str(e))}"
            ) from None
        given = self._options.column_names
        if self._options.header:
            header = first.column_names
            if given is not None and len(given) != len(header):
                raise InvalidInput(
                    f"{self.name}: {len(given)} column names given, the header has {len(header)} columns"
                )
            names = list(given) if given is not None else header
            _check_names(names, f"{self.name}: header: ")
            return names
        count = first.num_columns
        if given is not None and len(given) != count:
            raise InvalidInput(f"{self.name}: {len(given)} column names given, the first row has {count} fields")
        return list(given) if given is not None else [f"f{i}" for i in range(count)]

    def _check_columns(self, names: list[str]) -> None:
        """Every column --type and --event-time name exists."""
        for col in self._overrides:
            if col not in names:
                raise InvalidInput(f"{self.name}: --type {col}=…: no column {col!r} (columns: {_names_text(names)})")
        event_time = self._options.event_time
        if event_time is not None and event_time not in names:
            raise InvalidInput(
                f"{self.name}: event time column {event_time!r} not found (columns: {_names_text(names)})"
            )

    def _fixed_types(self) -> dict[str, pa.DataType]:
        """The types pyarrow reads with, not infers: the overrides, and text for what is converted afterwards."""
        # pyarrow's CSV reader cannot convert to decimal256: read as text, cast afterwards.
        fixed = {c: pa.string() if pa.types.is_decimal256(t) else t for c, t in self._overrides.items()}
        event_time = self._options.event_time
        if event_time is not None and event_time not in fixed:
            fixed[event_time] = pa.string()
        return fixed

    def _infer_types(
        self, data: bytes, data_line: int, names: list[str], fixed: dict[str, pa.DataType]
    ) -> tuple[pa.Table | None, dict[str, pa.DataType]]:
        """The first rows parsed with the fixed types given, and every column's type (null-typed ones as text)."""
        table = self._parse_table(data, data_line, self._convert_options(fixed)) if data.strip(b"\r\n") else None
        if table is None:  # a header and no rows
            return None, {n: fixed.get(n, pa.string()) for n in names}
        types = {}
        for f in table.schema:
            t = f.type
            types[f.name] = fixed.get(f.name, pa.string() if pa.types.is_null(t) else t)
        return table, types

    def _final_schema(self, names: list[str], types: dict[str, pa.DataType]) -> pa.Schema:
        event_time = self._options.event_time
        out_fields = []
        for n in names:
            t = EVENT_TIME_TYPE if n == event_time else self._overrides.get(n, types[n])
            if n == event_time and not _event_time_supported(types[n]):
                raise InvalidInput(
                    f"{self.name}: event time column {n!r} has type {types[n]}; it needs timestamps, dates or"
                    " ISO 8601 strings"
                )
            out_fields.append(pa.field(n, t))
        return _output_schema(out_fields)

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
            raise InvalidInput(f"{self.name}: {one_line(str(e))}") from None
        except pa.ArrowInvalid as e:
            if not data.strip(b"\r\n"):
                return None
            raise self._locate(data, first_line, convert, e) from None

    # -- errors

    def _row_line(self, data: bytes, first_line: int, index: int) -> int:
        rows = _csv_rows(data, self._pattern)
        start = rows[index][0] if index < len(rows) else len(data)
        return first_line + data.count(self.chunker.eol, 0, start)

    def _locate(self, data: bytes, first_line: int, convert: pacsv.ConvertOptions, error: Exception) -> InvalidInput:
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
            return InvalidInput(f"{self.name}: lines {first_line}–{last}: {one_line(str(error))}")
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
            return InvalidInput(f"{where}: {one_line(msg)}")
        col = self._names[int(m.group(1))]
        rest = re.sub(r"^Row #\d+: ", "", m.group(2))
        conv = re.match(r"CSV conversion error to (.+?): invalid value '(.*)'\s*$", rest, re.DOTALL)
        if conv:
            type_text, value = conv.group(1), conv.group(2)
            if col in self._overrides:
                hint = f"(type given by --type {col}={self._options.schema_overrides[col]})"
            else:
                hint = f"(type inferred from the first {_size_text(self._block)} of the input); use --type {col}=string"
            return InvalidInput(f"{where}, column {col!r}: value {_snip(value)} is not a valid {type_text} {hint}")
        return InvalidInput(f"{where}, column {col!r}: {one_line(rest)}")


_DELIMITER_SNIFF_BYTES = 64 << 10


def _sniff_delimiter(src: _ByteSource, cap: int | None = None) -> str:
    """The delimiter of a CSV whose delimiter is not given, from its first rows (at most
    ``_SNIFF_ROWS`` complete rows in the first 64 KiB: a function of the bytes only): of
    :data:`SNIFFED_DELIMITERS`, the one that splits every one of these rows into the same number of
    fields, the most fields (a tie goes to the earlier one); ``,`` when none splits them. A row of more than
    ``cap`` fields is counted without pyarrow (which took 70 MB for 9,000 fields): the input is refused if that
    delimiter wins."""
    head = src.read(_DELIMITER_SNIFF_BYTES)
    src.unread(head)
    whole = len(head) < _DELIMITER_SNIFF_BYTES
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    best, most = ",", 1
    for d in SNIFFED_DELIMITERS:
        rows = _csv_rows(head, _row_pattern(d.encode("ascii")), limit=_SNIFF_ROWS)
        if not whole and len(rows) > 1 and not head[: rows[-1][1]].endswith((b"\n", b"\r")):
            rows.pop()  # cut by the 64 KiB limit
        counts = {_field_count(head[start:end], d, cap) for start, end in rows}
        if len(counts) == 1 and (n := counts.pop()) > most:
            best, most = d, n
    return best


def _field_count(row: bytes, delimiter: str, cap: int | None = None) -> int:
    """Fields in one CSV row (pyarrow's dialect; 0 if it does not parse). Counted without pyarrow when its quotes
    are where RFC 4180 puts them (then the count is pyarrow's: a parse of a row of 9,000 fields took it 70 MB), or
    when even that count is past ``cap`` (the input is refused if this delimiter wins)."""
    values = np.frombuffer(row, np.uint8)
    quotes = np.flatnonzero(values == 34)
    many = _fields_in_row(row, ord(delimiter))
    if (len(quotes) % 2 == 0 and _rfc_quotes(values, quotes, ord(delimiter))) or (cap is not None and many > cap):
        return many
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


def _fields_in_row(row: bytes, delimiter: int) -> int:
    """Fields in one CSV row: the delimiters outside quotes, plus one (exact for RFC 4180 quoting; vectorised, so a
    row of millions of fields is counted without parsing it)."""
    values = np.frombuffer(row, np.uint8)
    delimiters = values == delimiter
    if not delimiters.any():
        return 1
    quoted = np.cumsum(values == 34) % 2 == 1  # inside quotes: an odd number of quotes before
    return int(np.count_nonzero(delimiters & ~quoted)) + 1
