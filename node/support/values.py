"""One rendering of result values for every face: HTTP JSON answers, SSE events, `cairn query --json`, the
terminal table, and CSV / JSON Lines output (docs/queries.md, "Answers: how values are written").

Arrow columns are turned into JSON-safe Python values column by column (Arrow compute where it pays), so a JSON
answer is always valid JSON (``allow_nan=False``) whatever the result's types:

- integers within ±(2^53 - 1) are JSON numbers; beyond, decimal strings (a JSON number that large loses digits in
  most parsers); floats are numbers, except ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
- decimals are exact decimal strings (never through a float); dates ``YYYY-MM-DD``; timestamps ISO 8601
  (``2013-01-01T10:00:00``, fraction only when non-zero; with a zone: the UTC instant with ``Z``);
- durations and intervals ISO 8601 durations (``P1DT2H3M4.5S``, ``P1Y2M``); binary is base64;
- lists are arrays, structs objects, maps objects when their keys are strings, else arrays of ``[key, value]``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from node.support.errors import RenderError

MAX_SAFE_INT = 2**53 - 1  # the largest integer every JSON parser (IEEE double) reads exactly
_UNITS_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def dumps(obj: Any, *, indent: int | None = None) -> str:
    """JSON that every strict parser reads: no NaN/Infinity tokens (they are rendered as strings first)."""
    return json.dumps(
        obj, allow_nan=False, ensure_ascii=False, indent=indent, separators=None if indent else (",", ":")
    )


# -- Arrow → JSON-safe values ------------------------------------------------------------------------


def json_columns(table: pa.Table | pa.RecordBatch) -> list[list[Any]]:
    """Each column of ``table`` as a list of JSON-safe values (see the module doc)."""
    out = []
    for name, col in zip(table.schema.names, table.columns):
        try:
            out.append(_column(col))
        except RenderError as e:
            raise RenderError(f"column {name!r}: {e.message}") from None
    return out


def json_rows(table: pa.Table | pa.RecordBatch) -> list[list[Any]]:
    """The rows of ``table`` as lists of JSON-safe values."""
    cols = json_columns(table)
    return [list(r) for r in zip(*cols)] if cols else [[] for _ in range(table.num_rows)]


def _column(col: pa.Array | pa.ChunkedArray) -> list[Any]:
    if isinstance(col, pa.ChunkedArray):
        out: list[Any] = []
        for chunk in col.chunks:
            out += _values(chunk)
        return out
    return _values(col)


def _values(arr: pa.Array) -> list[Any]:
    t = arr.type
    conv = _converter(t)
    if conv is None:
        raise RenderError(f"cannot render values of type {t}; fetch the result as Parquet instead")
    return conv(arr)


def _converter(t: pa.DataType) -> Callable[[pa.Array], list[Any]] | None:
    types = pa.types
    if types.is_dictionary(t):
        return lambda a: _values(a.dictionary_decode())
    if types.is_run_end_encoded(t):
        return lambda a: _values(pc.run_end_decode(a))
    if isinstance(t, pa.ExtensionType):
        return lambda a: _values(a.storage)
    if (
        types.is_null(t)
        or types.is_boolean(t)
        or types.is_string(t)
        or types.is_large_string(t)
        or types.is_string_view(t)
    ):
        return lambda a: a.to_pylist()
    if types.is_integer(t):
        return _integers
    if types.is_floating(t):
        return _floats
    if types.is_decimal(t) or types.is_date(t):
        return lambda a: pc.cast(a, pa.string()).to_pylist()  # exact text: Arrow never goes through a float
    if types.is_timestamp(t):
        return _timestamps
    if types.is_time(t):
        return lambda a: _strip_zero_fraction(pc.cast(a, pa.string())).to_pylist()
    if types.is_duration(t):
        return lambda a: [None if v is None else _iso_duration(0, 0, v, t.unit) for v in a.cast(pa.int64()).to_pylist()]
    if t == pa.month_day_nano_interval():
        return lambda a: [
            None if v is None else _iso_duration(v.months, v.days, v.nanoseconds, "ns") for v in a.to_pylist()
        ]
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t) or types.is_binary_view(t):
        return lambda a: [None if v is None else base64.b64encode(v).decode() for v in a.to_pylist()]
    if types.is_map(t):
        return _maps
    if (
        types.is_list(t)
        or types.is_large_list(t)
        or types.is_fixed_size_list(t)
        or types.is_list_view(t)
        or types.is_large_list_view(t)
    ):
        return _lists
    if types.is_struct(t):
        return _structs
    return None


def _integers(a: pa.Array) -> list[Any]:
    values = a.to_pylist()
    if a.type.bit_width < 54:
        return values
    if len(values) > 4096:  # one vectorised check instead of a Python pass over a long column
        lo, hi = pc.min_max(a).values()
        if lo.as_py() is None or (lo.as_py() >= -MAX_SAFE_INT and hi.as_py() <= MAX_SAFE_INT):
            return values
    return [str(v) if v is not None and not -MAX_SAFE_INT <= v <= MAX_SAFE_INT else v for v in values]


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _floats(a: pa.Array) -> list[Any]:
    if a.type != pa.float64():
        # float32/16: the shortest text that reads back as the same float32, not float64's view of its bits
        text = pc.cast(a, pa.string()).to_pylist()
        return [None if s is None else _NON_FINITE.get(s.lower()) or float(s) for s in text]
    values = a.to_pylist()
    return [v if v is None or v - v == 0 else _NON_FINITE[repr(v)] for v in values]  # x - x is NaN unless finite


def _strip_zero_fraction(s: pa.Array) -> pa.Array:
    return pc.replace_substring_regex(s, r"\.0+$", "")


def _timestamps(a: pa.Array) -> list[Any]:
    return _timestamp_text(a).to_pylist()


def _timestamp_text(a: pa.Array) -> pa.Array:
    t: pa.TimestampType = a.type
    # With a zone the value is an instant, stored as UTC: written in UTC with Z, so equal instants are equal
    # strings. Dropping the zone keeps the stored UTC value (no conversion), and Arrow then prints it as is.
    text = pc.cast(a.cast(pa.timestamp(t.unit)) if t.tz is not None else a, pa.string())
    text = _strip_zero_fraction(pc.replace_substring(text, " ", "T", max_replacements=1))
    return pc.binary_join_element_wise(text, "Z", "") if t.tz is not None else text


def _seconds_text(amount: int, unit: str) -> str:
    per = _UNITS_PER_SECOND[unit]
    seconds, frac = divmod(amount, per)
    return str(seconds) + (f".{frac:0{len(str(per)) - 1}d}".rstrip("0") if frac else "")


def _iso_positive(months: int, days: int, amount: int, unit: str) -> str:
    """ISO 8601 duration of non-negative parts: ``P1Y2M3DT4H5M6.5S`` (zero parts left out, ``PT0S`` if all)."""
    years, months = divmod(months, 12)
    seconds, frac = divmod(amount, _UNITS_PER_SECOND[unit])
    more_days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    date = "".join(f"{n}{u}" for n, u in ((years, "Y"), (months, "M"), (days + more_days, "D")) if n)
    time = "".join(f"{n}{u}" for n, u in ((hours, "H"), (minutes, "M")) if n)
    if seconds or frac:
        time += _seconds_text(seconds * _UNITS_PER_SECOND[unit] + frac, unit) + "S"
    return "P" + date + ("T" + time if time else "") if date or time else "PT0S"


def _iso_duration(months: int, days: int, amount: int, unit: str) -> str:
    """ISO 8601 duration; ``-`` before a negative one. Parts of mixed signs (a Spark calendar interval can
    be +1 month -1 day) are written each with its sign, as java.time does: ``P1M-1DT0S``."""
    signs = {x < 0 for x in (months, days, amount) if x}
    if len(signs) <= 1:
        neg = signs == {True}
        return ("-" if neg else "") + _iso_positive(abs(months), abs(days), abs(amount), unit)
    return f"P{months}M{days}DT{'-' if amount < 0 else ''}{_seconds_text(abs(amount), unit)}S"


def _spans(a: pa.Array) -> tuple[list[int], int]:
    """Offsets of a list-like array into its (unsliced) child, and where its first element starts."""
    if pa.types.is_fixed_size_list(a.type):
        n = a.type.list_size
        return [(a.offset + i) * n for i in range(len(a) + 1)], a.offset * n
    if pa.types.is_list_view(a.type) or pa.types.is_large_list_view(a.type):
        raise RenderError(f"cannot render values of type {a.type}; fetch the result as Parquet instead")
    offsets = a.offsets.to_pylist()
    return offsets, offsets[0]


def _lists(a: pa.Array) -> list[Any]:
    offsets, start = _spans(a)
    child = _values(a.values.slice(start, offsets[-1] - start))
    valid = a.is_valid().to_pylist()
    return [child[offsets[i] - start : offsets[i + 1] - start] if valid[i] else None for i in range(len(a))]


def _maps(a: pa.Array) -> list[Any]:
    offsets, start = _spans(a)
    keys = _values(a.keys.slice(start, offsets[-1] - start))
    items = _values(a.items.slice(start, offsets[-1] - start))
    valid = a.is_valid().to_pylist()
    kt = a.type.key_type
    by_name = _is_text(kt)
    out: list[Any] = []
    for i in range(len(a)):
        if not valid[i]:
            out.append(None)
            continue
        lo, hi = offsets[i] - start, offsets[i + 1] - start
        pairs = zip(keys[lo:hi], items[lo:hi])
        out.append(dict(pairs) if by_name else [list(p) for p in pairs])
    return out


def _structs(a: pa.Array) -> list[Any]:
    names = [a.type.field(i).name for i in range(a.type.num_fields)]
    fields = [_values(f) for f in a.flatten()]  # flatten() honours the slice and the struct's own nulls
    valid = a.is_valid().to_pylist()
    return [
        dict(zip(names, vals)) if ok else None for ok, vals in zip(valid, zip(*fields) if fields else ([()] * len(a)))
    ]


# -- text cells (CSV, the terminal table) --------------------------------------------------------------


def cell_text(value: Any) -> str | None:
    """A rendered value as one text cell: strings as they are, null as None, anything else its compact JSON."""
    if value is None or isinstance(value, str):
        return value
    return dumps(value)


def _one_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One plain array of the column's values (chunks combined, a dictionary decoded)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def text_column(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one ``string`` array, a cell per value, with the same rendering as JSON (null stays null)."""
    col = _one_array(col)
    t = col.type
    if _is_text(t) or pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_date(t):
        return pc.cast(col, pa.string())  # Arrow's text is exactly ours for these: vectorised
    if pa.types.is_boolean(t):
        return pc.if_else(col, "true", "false")
    if pa.types.is_floating(t):  # Arrow prints the shortest text that reads back as the same float
        named = pc.if_else(pc.is_nan(col), "NaN", pc.if_else(pc.greater(col, 0), "Infinity", "-Infinity"))
        return pc.if_else(pc.is_finite(col), pc.cast(col, pa.string()), named)
    if pa.types.is_timestamp(t):
        return _timestamp_text(col)
    return pa.array([cell_text(v) for v in _values(col)], pa.string())


def _csv_cells(col: pa.Array) -> pa.Array:
    """RFC 4180 fields: quoted when they hold , " CR or LF, and "" for an empty string (null stays bare)."""
    needs = pc.equal(col, "")
    for ch in ('"', ",", "\r", "\n"):
        needs = pc.or_(needs, pc.match_substring(col, ch))
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(col, '"', '""'), '"', "")
    return pc.fill_null(pc.if_else(needs, quoted, col), "")


def _csv_column(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    text = text_column(col)
    t = col.type
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_boolean(t)
        or pa.types.is_temporal(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return pc.fill_null(text, "")  # their text never holds a character that needs quoting
    return _csv_cells(text)


def csv_header(names: list[str]) -> bytes:
    return _csv_line([_csv_cells(pa.array([n], pa.string()))[0].as_py() for n in names])


def _csv_line(cells: list[str]) -> bytes:
    return (",".join(cells) + "\r\n").encode()


def csv_rows(table: pa.Table) -> bytes:
    """RFC 4180 records (CRLF line ends) for the rows of ``table``; null is an empty field, "" an empty string."""
    if table.num_rows == 0:
        return b""
    if table.num_columns == 0:
        return b"\r\n" * table.num_rows
    cells = [_csv_column(c) for c in table.columns]
    # A lone empty field would be a blank line, which readers skip: write it "" (as Python's csv module does).
    lines = (
        pc.binary_join_element_wise(*cells, ",")
        if len(cells) > 1
        else pc.if_else(pc.equal(cells[0], ""), '""', cells[0])
    )
    return ("\r\n".join(lines.to_pylist()) + "\r\n").encode()


def unique_names(names: list[str]) -> list[str]:
    """Object keys for rows: a name the query uses twice (``SELECT a.x, b.x``) gets ``_2``, ``_3``… after it."""
    seen: set[str] = set()
    out = []
    for n in names:
        key, k = n, 1
        while key in seen:
            k += 1
            key = f"{n}_{k}"
        seen.add(key)
        out.append(key)
    return out


def jsonl_rows(table: pa.Table, names: list[str] | None = None) -> bytes:
    """One JSON object per row (keys: :func:`unique_names`), built column-wise with Arrow: the same values as
    :func:`json_rows`, without a Python round per row (a whole result can be millions of rows)."""
    if table.num_rows == 0:
        return b""
    keys = [dumps(k) for k in unique_names(names or table.schema.names)]
    parts: list[Any] = []
    for i, (key, col) in enumerate(zip(keys, table.columns)):
        parts += [("{" if i == 0 else ",") + key + ":", _json_text(col)]
    if not parts:
        return b"{}\n" * table.num_rows
    parts.append("}")
    lines = pc.binary_join_element_wise(*parts, "")
    return ("\n".join(lines.to_pylist()) + "\n").encode()


_CONTROL = r"[\x00-\x1f]"


def _quote(text: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', text, '"', "")


def _json_text(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each value's JSON text (``null`` for null), equal in value to what :func:`json_columns` gives: for scalar
    types, :func:`text_column`'s cell text with JSON's quotes and escapes added."""
    col = _one_array(col)
    t = col.type
    scalar = (pa.types.is_integer, pa.types.is_boolean, pa.types.is_floating, pa.types.is_decimal, pa.types.is_date)
    if not (_is_text(t) or pa.types.is_timestamp(t) or any(is_type(t) for is_type in scalar)):
        return pc.fill_null(pa.array([None if v is None else dumps(v) for v in _values(col)], pa.string()), "null")
    text = text_column(col)
    if _is_text(t):
        if pc.any(pc.match_substring_regex(text, _CONTROL)).as_py():  # rare: let json escape \n, \t, \x01…
            text = pa.array([None if v is None else dumps(v) for v in text.to_pylist()], pa.string())
        else:
            text = _quote(pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"'))
    elif pa.types.is_integer(t):
        if t.bit_width >= 54:  # past 2^53: a string of the exact digits (see json_columns)
            big = pc.greater(col, pa.scalar(MAX_SAFE_INT, t))  # typed: uint64 and int64 do not mix
            if pa.types.is_signed_integer(t):
                big = pc.or_(big, pc.less(col, pa.scalar(-MAX_SAFE_INT, t)))
            text = pc.if_else(big, _quote(text), text)
    elif pa.types.is_floating(t):  # text_column: shortest round-trip digits, or NaN / Infinity / -Infinity
        whole = pc.match_substring_regex(text, r"^-?[0-9]+$")
        text = pc.if_else(
            pc.is_finite(col), pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text), _quote(text)
        )
    elif not pa.types.is_boolean(t):  # decimal, date, timestamp: digits, dashes, colons: nothing to escape
        text = _quote(text)
    return pc.fill_null(text, "null")
