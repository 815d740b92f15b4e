"""Text encodings and CSV dialects of the readers: any encoding Python knows,
UTF-8 enforced by default with the line and byte offset of the first bad byte, delimiters sniffed.

Oracles: Python's codecs and csv module write the inputs and decode the expected values; the
readers (pyarrow underneath) must agree with them.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from node.services.datasets.readers import SNIFFED_DELIMITERS, ReadOptions, open_input
from node.support.errors import InvalidInput

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read(data: bytes, **options: object) -> tuple[list[str], list[str], list[dict]]:
    with open_input(io.BytesIO(data), ReadOptions(**options)) as inp:  # type: ignore[arg-type]
        rows = [r for b in inp.batches for r in b.to_pylist()]
        return inp.schema.names, [str(t) for t in inp.schema.types], rows


def error(data: bytes, **options: object) -> str:
    with pytest.raises(InvalidInput) as info:
        read(data, **options)
    assert info.value.status == 400 and "\n" not in info.value.message
    return info.value.message


def first_bad_utf8(data: bytes) -> int:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    raise AssertionError("valid UTF-8")


# --------------------------------------------------------------------------- encodings


CITIES = "id,city\n1,Orléans\n2,Besançon\n3,Zürich\n"


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "iso8859-15", "utf-16-le", "utf-16-be", "utf-8"])
def test_an_encoding_given_is_read_as_text(encoding):
    data = CITIES.encode(encoding)
    names, types, rows = read(data, encoding=encoding)
    expected = pd.read_csv(io.BytesIO(data), encoding=encoding)  # the oracle
    assert names == list(expected.columns) and types == ["int64", "string"]
    assert rows == expected.to_dict("records")


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_a_byte_order_mark_names_the_encoding(encoding):
    data = CITIES.encode(encoding)
    assert read(data) == read(CITIES.encode())
    assert read(gzip.compress(data)) == read(CITIES.encode())


def test_latin1_without_encoding_is_refused_with_line_and_byte():
    data = CITIES.encode("latin-1")
    msg = error(data)
    offset = first_bad_utf8(data)
    line = data[:offset].count(b"\n") + 1
    assert msg.startswith(f"input: line {line}, byte offset {offset}: not UTF-8 (e9")
    assert "--encoding" in msg


def test_random_bytes_are_a_4xx_not_an_internal_error():
    for _ in range(20):
        data = os.urandom(512)
        msg = error(data, format="csv")
        assert "byte offset" in msg or "NUL" in msg, msg


@SETTINGS
@given(
    text=st.lists(st.text(alphabet="abé,\n", min_size=1, max_size=12), min_size=2, max_size=30),
    where=st.integers(min_value=0),
    bad=st.sampled_from([b"\xff", b"\xc3", b"\xe9", b"\x80", b"\xed\xa0\x80"]),
    block_size=st.integers(min_value=1, max_value=64),
    fmt=st.sampled_from(["csv", "jsonl"]),
)
def test_the_first_bad_byte_is_named_exactly(text, where, bad, block_size, fmt):
    """Whatever the chunking: the line and byte offset are those of the first byte Python's
    UTF-8 decoder refuses."""
    if fmt == "csv":
        body = "h\n" + "".join(f'"{t}"\n' for t in text)
    else:
        body = "".join(json.dumps({"h": t.replace(",", "")}, ensure_ascii=False) + "\n" for t in text)
    data = body.encode()
    pos = where % len(data)
    data = data[:pos] + bad + data[pos:]
    offset = first_bad_utf8(data)
    line = data[:offset].count(b"\n") + 1
    msg = error(data, format=fmt, block_size=block_size)
    assert f"line {line}, byte offset {offset}: not UTF-8" in msg, msg


def test_an_undecodable_byte_in_another_encoding():
    data = "id,city\n1,ab".encode("cp1252") + b"\x81" + b"c\n"  # 0x81 is unassigned in cp1252
    assert error(data, encoding="cp1252") == (
        "input: line 2, byte offset 12: cannot decode 81 as cp1252 (character maps to <undefined>);"
        " give the file's encoding with --encoding"
    )
    odd = CITIES.encode("utf-16") + b"x"  # a truncated code unit at the end
    assert error(odd).startswith(f"input: line 5, byte offset {len(odd) - 1}: cannot decode 78 as utf-16")


def test_utf16_without_a_bom_or_nul_bytes_are_refused():
    data = CITIES.encode("utf-16-le")
    assert error(data).startswith("input: line 1, byte offset 1: a NUL byte (UTF-16 or UTF-32")
    assert error(b"a,b\n1,x\x00y\n").startswith("input: line 2, byte offset 7: a NUL byte")


def test_jsonl_in_any_encoding():
    data = '{"city": "Orléans"}\n{"city": "Zürich"}\n'
    assert read(data.encode("utf-16"))[2] == [{"city": "Orléans"}, {"city": "Zürich"}]
    assert read(data.encode("latin-1"), encoding="latin-1", format="jsonl")[2][0] == {"city": "Orléans"}
    assert error(data.encode("latin-1"), format="jsonl").startswith("input: line 1, byte offset 13: not UTF-8")


def test_encoding_option_checks():
    assert ReadOptions(encoding="LATIN1").encoding == "iso8859-1"
    for bad, text in (
        ("nope", "unknown encoding 'nope'"),
        ("rot13", "'rot13' is not a text encoding"),
        ("", "encoding must be a name"),
    ):
        with pytest.raises(InvalidInput, match=text):
            ReadOptions(encoding=bad)
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"a": [1]}), sink)
    assert "encoding applies to CSV/TSV and JSON Lines only" in error(sink.getvalue(), encoding="latin-1")


def test_binary_only_when_asked():
    _, types, rows = read(b"id,blob\n1,abc\n", schema_overrides={"blob": "binary"})
    assert types == ["int64", "binary"] and rows == [{"id": 1, "blob": b"abc"}]


# --------------------------------------------------------------------------- dialects


@pytest.mark.parametrize("delimiter", SNIFFED_DELIMITERS)
def test_delimiters_are_sniffed(delimiter):
    out = io.StringIO()
    w = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    w.writerows([["id", "city", "note"], [1, "Paris", "a, b; c|d\te"], [2, "Lyon", ""]])
    data = out.getvalue().encode()
    names, _, rows = read(data)
    expected = pd.read_csv(io.BytesIO(data), sep=delimiter, keep_default_na=False)
    assert names == list(expected.columns) and rows == expected.to_dict("records")


def test_sniffing_edge_cases():
    # decimal commas in a ;-file: "," does not split every row alike
    assert read(b"id;val\n1;2,5\n2;3,1\n")[2] == [{"id": 1, "val": "2,5"}, {"id": 2, "val": "3,1"}]
    # one column: nothing splits it
    assert read(b"name\nParis\nLyon\n")[0] == ["name"]
    # a header-only file is sniffed from its header
    assert read(b"a;b;c\n")[0] == ["a", "b", "c"]
    # the delimiter given wins; "tab" names the tab
    assert read(b"a;b,c\n1;2,3\n", delimiter=",")[0] == ["a;b", "c"]
    assert read(b"a\tb\n1\t2\n", delimiter="tab")[0] == ["a", "b"]


@pytest.mark.parametrize(
    "data, rows",
    [
        (b"\xef\xbb\xbfid,city\r\n1,Paris\r\n", [{"id": 1, "city": "Paris"}]),  # BOM, CRLF
        (b"id,city\r1,Paris\r2,Lyon\r", [{"id": 1, "city": "Paris"}, {"id": 2, "city": "Lyon"}]),  # \r only
        (
            b"id,city\r\n1,Paris\n2,Lyon\r3,Nice",
            [{"id": i, "city": c} for i, c in ((1, "Paris"), (2, "Lyon"), (3, "Nice"))],
        ),
        (b"id,city\n", []),  # a header only
        (b'id;city\n1;"Saint-\nDenis"\n', [{"id": 1, "city": "Saint-\nDenis"}]),  # quoted newline, sniffed ;
    ],
)
def test_line_ending_and_header_variants(data, rows):
    assert read(data)[2] == rows


@pytest.mark.parametrize("data", [b"", b"\xef\xbb\xbf", b"\n\r\n\n", "".encode("utf-16")])
def test_empty_inputs_are_a_clear_error(data):
    assert error(data).endswith("the input is empty")


cell = st.text(alphabet=st.sampled_from(list("abzéßü€中😀 \"'\n") + [","]), max_size=8)


@SETTINGS
@given(
    rows=st.lists(st.lists(cell, min_size=2, max_size=2), min_size=1, max_size=15),
    delimiter=st.sampled_from(SNIFFED_DELIMITERS),
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "latin-1", "cp1252"]),
    eol=st.sampled_from(["\n", "\r\n"]),
    given_delimiter=st.booleans(),
    block_size=st.integers(min_value=8, max_value=256),
)
def test_generated_dialects_and_encodings_round_trip(rows, delimiter, encoding, eol, given_delimiter, block_size):
    """Python's csv module writes any cells in any dialect and encoding; read with the encoding
    (when no byte order mark says it) and the delimiter (given, or sniffed when no cell holds another
    candidate delimiter), the rows are the same text."""
    cells = [["v" + c for c in r] for r in rows]  # never a number, a boolean or a null spelling
    if not given_delimiter:
        assume(not any(d in c for r in cells for c in r for d in SNIFFED_DELIMITERS))
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator=eol).writerows([["a", "b"], *cells])
    try:
        data = out.getvalue().encode(encoding)
    except UnicodeEncodeError:
        assume(False)
    options: dict[str, object] = {"format": "csv", "block_size": block_size}
    if encoding not in ("utf-8-sig", "utf-16"):  # those have a byte order mark: detected
        options["encoding"] = encoding
    if given_delimiter:
        options["delimiter"] = delimiter
    names, types, got = read(data, **options)
    assert names == ["a", "b"] and types == ["string", "string"]
    assert [[r["a"], r["b"]] for r in got] == cells
