"""Input readers (node/services/datasets/readers/): formats, compressions, streams, types, errors,
bounded memory."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import gzip
import io
import os
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.services.datasets.logical_hash import logical_hash
from node.services.datasets.readers import (
    DEFAULT_BLOCK_SIZE,
    EVENT_TIME_TYPE,
    Input,
    ReadOptions,
    open_input,
    parse_type_name,
)
from node.services.datasets.slices import canonical_slice_schema
from node.support.errors import InvalidInput

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UTC = dt.UTC


# --------------------------------------------------------------------------- helpers


class NonSeekable(io.RawIOBase):
    """A pipe-like stream: no name, no seek, short reads."""

    def __init__(self, data: bytes, piece: int = 7777) -> None:
        super().__init__()
        self._data = memoryview(data)
        self._pos = 0
        self._piece = piece

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, b) -> int:  # type: ignore[override]
        n = min(len(b), self._piece, len(self._data) - self._pos)
        b[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


def zstd(data: bytes) -> bytes:
    return pa.Codec("zstd").compress(data, asbytes=True)


def compress(data: bytes, codec: str) -> bytes:
    return {"none": lambda d: d, "gzip": gzip.compress, "zstd": zstd}[codec](data)


def read_all(source, **options) -> pa.Table:
    with open_input(source, ReadOptions(**options)) as inp:
        batches = list(inp.batches)
        assert inp.rows_read == sum(b.num_rows for b in batches)
        for b in batches:
            assert b.schema == inp.schema
        return pa.Table.from_batches(batches, schema=inp.schema)


def read_error(source, **options) -> str:
    with pytest.raises(InvalidInput) as info, open_input(source, ReadOptions(**options)) as inp:
        for _ in inp.batches:
            pass
    message = info.value.message
    assert "\n" not in message
    return message


N = 3000


def sample_rows(n: int = N) -> list[dict]:
    return [
        {
            "id": i,
            "qty": None if i % 11 == 3 else (i * 7) % 1000 - 500,
            "price": round((i % 97) * 1.25 + 0.5, 2),
            "name": f'item {i % 50}, "q"' if i % 13 == 0 else f"item-{i % 50}",
            "ok": i % 3 == 0,
            "at": dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i * 3671),
        }
        for i in range(n)
    ]


EXPECTED_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("qty", pa.int64()),
        ("price", pa.float64()),
        ("name", pa.string()),
        ("ok", pa.bool_()),
        ("at", pa.timestamp("ms")),  # CSV/JSON infer timestamp[s]; Parquet stores ms
    ]
)


def expected_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=EXPECTED_SCHEMA)


def to_csv(rows: list[dict], delimiter: str = ",") -> bytes:
    out = io.StringIO()
    w = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    w.writerow(list(rows[0]))
    for r in rows:
        w.writerow(
            [
                "" if v is None else ("true" if v is True else "false" if v is False else
                                      v.strftime("%Y-%m-%d %H:%M:%S") if isinstance(v, dt.datetime) else v)
                for v in r.values()
            ]
        )  # fmt: skip
    return out.getvalue().encode()


def to_jsonl(rows: list[dict]) -> bytes:
    import json

    def conv(v):
        return v.strftime("%Y-%m-%d %H:%M:%S") if isinstance(v, dt.datetime) else v

    return "".join(json.dumps({k: conv(v) for k, v in r.items()}) + "\n" for r in rows).encode()


def to_parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=1000)
    return sink.getvalue().to_pybytes()


def encode(fmt: str, rows: list[dict]) -> bytes:
    if fmt == "csv":
        return to_csv(rows)
    if fmt == "tsv":
        return to_csv(rows, "\t")
    if fmt == "jsonl":
        return to_jsonl(rows)
    return to_parquet(expected_table(rows))


# --------------------------------------------------------------------------- formats × compressions


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
@pytest.mark.parametrize("how", ["named", "unnamed-path", "stream", "seekable-stream"])
def test_every_format_and_compression_gives_the_same_table(tmp_path, fmt, codec, how):
    rows = sample_rows()
    expected = expected_table(rows)
    data = compress(encode(fmt, rows), codec)
    options = {"block_size": 8192}  # several chunks; types fixed by the first
    suffix = {"none": "", "gzip": ".gz", "zstd": ".zst"}[codec]
    if how == "named":
        source = tmp_path / f"data.{fmt}{suffix}"
        source.write_bytes(data)
    elif how == "unnamed-path":
        source = tmp_path / "data.bin"  # no usable name: everything sniffed
        source.write_bytes(data)
        if fmt == "tsv":
            options["format"] = "tsv"  # a TSV cannot be told from a one-column CSV
    elif how == "stream":
        source = NonSeekable(data)
        if fmt == "tsv":
            options["format"] = "tsv"
    else:
        source = io.BytesIO(data)
        if fmt == "tsv":
            options["format"] = "tsv"
    with open_input(source, ReadOptions(**options)) as inp:
        assert inp.format == fmt
        assert inp.compression == codec
        assert inp.schema == canonical_slice_schema(EXPECTED_SCHEMA)
        table = pa.Table.from_batches(list(inp.batches), schema=inp.schema)
        assert inp.rows_read == N
        assert inp.bytes_read == len(data)
    assert table.equals(expected)
    assert logical_hash(table) == logical_hash(expected)


def test_batches_round_trip_through_a_slice():
    """What the reader hands out is what a slice stores: same schema, same logical hash."""
    from node.services.datasets.slices import read_slice, slice_bytes

    data = b"t,d,h,n\n2024-01-01 10:00:00,2024-01-01,10:00:00,1\n2024-01-02 11:00:00,2024-01-02,11:30:00,2\n"
    table = read_all(io.BytesIO(data))
    assert table.schema == pa.schema(
        [("t", pa.timestamp("ms")), ("d", pa.date32()), ("h", pa.time32("ms")), ("n", pa.int64())]
    )
    back = read_slice(slice_bytes(table))
    assert back.schema == table.schema
    assert logical_hash(back) == logical_hash(table)


def test_chunking_does_not_change_rows(tmp_path):
    data = to_csv(sample_rows())
    reference = read_all(io.BytesIO(data))
    for block_size in (64, 1000, 4096, 65536):
        assert read_all(io.BytesIO(data), block_size=block_size).equals(reference)


def test_real_pipe_like_stdin():
    """An OS pipe read through a BufferedReader, as sys.stdin.buffer is."""
    rows = sample_rows(500)
    data = gzip.compress(to_jsonl(rows))
    r, w = os.pipe()

    def feed():
        with os.fdopen(w, "wb") as f:
            for i in range(0, len(data), 1000):
                f.write(data[i : i + 1000])
                f.flush()

    t = threading.Thread(target=feed)
    t.start()
    with os.fdopen(r, "rb") as stdin:
        assert not stdin.seekable()
        table = read_all(stdin)
    t.join()
    assert table.equals(expected_table(rows))


def test_parquet_normalised_schema_no_dictionary_large_string_or_metadata(tmp_path):
    table = pa.table(
        {
            "s": pa.array(["a", "b", None, "a"]).dictionary_encode(),
            "l": pa.array(["x", "y", "z", "w"], pa.large_string()),
            "b": pa.array([b"1", b"2", b"3", None], pa.large_binary()),
            "i": pa.array([1, 2, 3, 4], pa.int32()),
        }
    )
    table = table.replace_schema_metadata({"pandas": "{}"})
    table = table.cast(pa.schema([f.with_metadata({"k": "v"}) for f in table.schema], metadata={"pandas": "{}"}))
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    got = read_all(path)
    assert got.schema == pa.schema([("s", pa.string()), ("l", pa.string()), ("b", pa.binary()), ("i", pa.int32())])
    assert got.schema.metadata is None
    assert all(f.metadata is None for f in got.schema)
    assert got.column("s").to_pylist() == ["a", "b", None, "a"]
    # same data from CSV: same schema once the types agree
    csv_data = b"s,l,i\na,x,1\nb,y,2\n,z,3\na,w,4\n"
    from_csv = read_all(io.BytesIO(csv_data), schema_overrides={"i": "int32"})
    assert from_csv.schema == got.select(["s", "l", "i"]).schema


def test_format_and_compression_detection(tmp_path):
    rows = sample_rows(20)
    cases = {
        "a.csv.gz": gzip.compress(to_csv(rows)),
        "a.tsv.zst": zstd(to_csv(rows, "\t")),
        "a.ndjson": to_jsonl(rows),
        "a.json-lines.zstd": zstd(to_jsonl(rows)),
        "a.jsonl.gz": gzip.compress(to_jsonl(rows)),
        "a.pq": to_parquet(expected_table(rows)),
        "a.parquet.gz": gzip.compress(to_parquet(expected_table(rows))),
        "a.csv": gzip.compress(to_csv(rows)),  # no suffix: the magic bytes tell
        "noext": zstd(to_parquet(expected_table(rows))),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert read_all(tmp_path / name).equals(expected_table(rows)), name
    # explicit options win
    (tmp_path / "x.txt").write_bytes(to_csv(rows, ";"))
    assert read_all(tmp_path / "x.txt", format="csv", delimiter=";").equals(expected_table(rows))


def test_stream_sniffing_without_name():
    rows = sample_rows(50)
    for data, fmt, codec in [
        (to_parquet(expected_table(rows)), "parquet", "none"),
        (gzip.compress(to_parquet(expected_table(rows))), "parquet", "gzip"),
        (zstd(to_jsonl(rows)), "jsonl", "zstd"),
        (to_csv(rows), "csv", "none"),
        (b"\xef\xbb\xbf" + to_csv(rows), "csv", "none"),
    ]:
        with open_input(NonSeekable(data), ReadOptions()) as inp:
            assert (inp.format, inp.compression) == (fmt, codec)
            assert pa.Table.from_batches(list(inp.batches), schema=inp.schema).equals(expected_table(rows))


# --------------------------------------------------------------------------- options


def test_schema_overrides_csv():
    data = b"a,b,c,d,e,f\n1,2.5,2024-01-02,x,10:00,1.25\n2,3,2024-02-03,y,11:00,2\n"
    t = read_all(
        io.BytesIO(data),
        schema_overrides={
            "a": "int8",
            "b": "float32",
            "c": "date32",
            "d": "binary",
            "e": "string",
            "f": "decimal(10,2)",
        },
    )
    assert t.schema == pa.schema(
        [
            ("a", pa.int8()),
            ("b", pa.float32()),
            ("c", pa.date32()),
            ("d", pa.binary()),
            ("e", pa.string()),
            ("f", pa.decimal128(10, 2)),
        ]
    )
    assert t.column("f").to_pylist() == [decimal.Decimal("1.25"), decimal.Decimal("2.00")]
    t = read_all(
        io.BytesIO(b"id,ts\n007,2024-01-01T00:00:00Z\n"),
        schema_overrides={"id": "string", "ts": "timestamp[ms, UTC]"},
    )
    assert t.column("id").to_pylist() == ["007"]
    assert t.schema.field("ts").type == pa.timestamp("ms", tz="UTC")
    # decimal256 (which pyarrow's CSV reader cannot convert to): read as text, then cast
    t = read_all(io.BytesIO(b"a\n1.5\nNA\n"), schema_overrides={"a": "decimal(40,3)"})
    assert t.schema == pa.schema([("a", pa.decimal256(40, 3))])
    assert t.column("a").to_pylist() == [decimal.Decimal("1.500"), None]


def test_schema_overrides_jsonl_and_parquet(tmp_path):
    data = b'{"a": 1, "d": "2024-01-02", "x": 1.5}\n{"a": 2, "d": "2024-03-04", "x": 2}\n'
    t = read_all(io.BytesIO(data), schema_overrides={"a": "uint16", "d": "date32", "x": "decimal(5,1)"})
    assert t.schema == pa.schema([("a", pa.uint16()), ("d", pa.date32()), ("x", pa.decimal128(5, 1))])
    assert t.column("d").to_pylist() == [dt.date(2024, 1, 2), dt.date(2024, 3, 4)]
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"a": [1, 2], "s": ["2024-01-02", "2024-01-03"]}), path)
    t = read_all(path, schema_overrides={"a": "int32", "s": "date32"})
    assert t.schema == pa.schema([("a", pa.int32()), ("s", pa.date32())])
    pq.write_table(pa.table({"a": [1, 300]}), path)
    msg = read_error(path, schema_overrides={"a": "int8"})
    assert "row 2" in msg and "'a'" in msg and "300" in msg


def test_override_errors():
    with pytest.raises(InvalidInput, match=r"valid types: int8.*decimal"):
        ReadOptions(schema_overrides={"a": "integer"})
    with pytest.raises(InvalidInput, match="time zone"):
        ReadOptions(schema_overrides={"a": "timestamp[us, Mars/Olympus]"})
    msg = read_error(io.BytesIO(b"a,b\n1,2\n"), schema_overrides={"c": "int8"})
    assert "'c'" in msg and "a, b" in msg
    msg = read_error(io.BytesIO(b'{"a":1}\n'), schema_overrides={"c": "int8"})
    assert "'c'" in msg
    msg = read_error(io.BytesIO(b"a\n1\n300\n"), schema_overrides={"a": "int8"})
    assert msg.startswith("input: line 3, column 'a': value '300'") and "--type a=int8" in msg


def test_parse_type_name():
    assert parse_type_name("timestamp[us, UTC]") == pa.timestamp("us", tz="UTC")
    assert parse_type_name("timestamp[ns, tz=Europe/Paris]") == pa.timestamp("ns", tz="Europe/Paris")
    assert parse_type_name("timestamp[s,+02:00]") == pa.timestamp("s", tz="+02:00")
    assert parse_type_name("timestamp[ms]") == pa.timestamp("ms")
    assert parse_type_name("decimal(40, 3)") == pa.decimal256(40, 3)
    assert parse_type_name(" uint64 ") == pa.uint64()
    for bad in ("decimal(0,0)", "decimal(5,6)", "timestamp[m]", "int128", "", "list<int8>"):
        with pytest.raises(InvalidInput):
            parse_type_name(bad)


def test_event_time_csv_jsonl_parquet(tmp_path):
    values = [
        "2024-01-01 10:00:00",
        "2024-01-01T10:00:00+02:00",
        "2024-01-01",
        "",
        "2024-01-01T10:00:00.123456Z",
    ]
    want = [
        dt.datetime(2024, 1, 1, 10, tzinfo=UTC),
        dt.datetime(2024, 1, 1, 8, tzinfo=UTC),
        dt.datetime(2024, 1, 1, tzinfo=UTC),
        None,
        dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=UTC),
    ]
    data = ("n,t\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values))).encode()
    t = read_all(io.BytesIO(data), event_time="t")
    assert t.schema.field("t").type == EVENT_TIME_TYPE
    assert t.column("t").to_pylist() == want
    import json

    lines = "".join(json.dumps({"n": i, "t": v or None}) + "\n" for i, v in enumerate(values)).encode()
    t = read_all(io.BytesIO(lines), event_time="t")
    assert t.column("t").to_pylist() == want
    # JSON infers timestamp[s] from the first lines: later fractional seconds still fit
    lines = b'{"t": "2024-01-01T00:00:00"}\n' * 20 + b'{"t": "2024-01-01T00:00:00.5"}\n'
    t = read_all(io.BytesIO(lines), event_time="t", block_size=64)
    assert t.column("t")[-1].as_py() == dt.datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)
    path = tmp_path / "e.parquet"
    pq.write_table(pa.table({"t": pa.array([0, 1_000_000_000], pa.timestamp("ns"))}), path)
    t = read_all(path, event_time="t")
    assert t.schema == pa.schema([("t", EVENT_TIME_TYPE)])
    assert t.column("t").to_pylist() == [
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
    ]


def test_event_time_errors(tmp_path):
    rows = "".join(f"{i},2024-01-01 00:00:{i % 60:02d}\n" for i in range(400))
    data = ("n,t\n" + rows + "400,yesterday\n").encode()
    msg = read_error(io.BytesIO(data), event_time="t", block_size=256)
    assert msg.startswith("input: line 402, column 't': value 'yesterday' is not a valid event time")
    msg = read_error(io.BytesIO(b"a\n1\n"), event_time="t")
    assert "event time column 't' not found" in msg
    path = tmp_path / "i.parquet"
    pq.write_table(pa.table({"t": [1, 2]}), path)
    assert "int64" in read_error(path, event_time="t")
    assert "int64" in read_error(io.BytesIO(b'{"t": 5}\n'), event_time="t")


def test_header_false():
    t = read_all(io.BytesIO(b"1,x\n2,y\n"), header=False)
    assert t.column_names == ["f0", "f1"]
    assert t.column("f0").to_pylist() == [1, 2]
    t = read_all(io.BytesIO(b"1,x\n2,y\n"), header=False, column_names=["n", "s"], schema_overrides={"n": "int16"})
    assert t.schema == pa.schema([("n", pa.int16()), ("s", pa.string())])
    assert "2 column names given, the first row has 3" in read_error(
        io.BytesIO(b"1,x,y\n"), header=False, column_names=["a", "b"]
    )
    # header=True with column_names renames the header's columns
    t = read_all(io.BytesIO(b"a,b\n1,2\n"), column_names=["x", "y"])
    assert t.column_names == ["x", "y"] and t.num_rows == 1
    with pytest.raises(InvalidInput, match="more than once"):
        ReadOptions(header=False, column_names=["a", "a"])


def test_column_names_must_be_unique_and_non_empty(tmp_path):
    assert "'a' appears more than once" in read_error(io.BytesIO(b"a,b,a\n1,2,3\n"))
    assert "column 2 has an empty name" in read_error(io.BytesIO(b'a,"",c\n1,2,3\n'))
    assert "empty name" in read_error(io.BytesIO(b'{"": 1}\n'))
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["x", "x"]), path)
    assert "'x' appears more than once" in read_error(path)


def test_first_chunk_fixes_types():
    # a column empty in the whole first chunk is read as string, so later values still fit
    data = b"a,b\n" + b"1,\n" * 100 + b"2,hello\n"
    t = read_all(io.BytesIO(data), block_size=128)
    assert t.schema.field("b").type == pa.string()
    assert t.column("b").to_pylist()[-1] == "hello"
    # ints in the first chunk, a float later: an error, never a silent re-type
    data = b"a\n" + b"1\n" * 100 + b"1.5\n"
    msg = read_error(io.BytesIO(data), block_size=64)
    assert "line 102" in msg and "'1.5'" in msg and "--type a=string" in msg
    # the same file with a larger block infers float64
    assert read_all(io.BytesIO(data)).schema.field("a").type == pa.float64()


def test_header_only_csv():
    t = read_all(io.BytesIO(b"a,b\n"))
    assert t.num_rows == 0 and t.schema == pa.schema([("a", pa.string()), ("b", pa.string())])
    t = read_all(io.BytesIO(b"a,b"), schema_overrides={"a": "int64"})
    assert t.schema == pa.schema([("a", pa.int64()), ("b", pa.string())])


def test_options_validation():
    for kwargs in (
        {"format": "xlsx"},
        {"compression": "bz2"},
        {"delimiter": ";;"},
        {"delimiter": '"'},
        {"block_size": 0},
        {"block_size": True},
        {"column_names": "abc"},
        {"event_time": ""},
    ):
        with pytest.raises(InvalidInput):
            ReadOptions(**kwargs)
    assert ReadOptions(format="NDJSON", compression="gz").format == "jsonl"
    assert ReadOptions().block_size == DEFAULT_BLOCK_SIZE == 4 << 20
    assert "CSV/TSV only" in read_error(io.BytesIO(b'{"a":1}\n'), header=False)


# --------------------------------------------------------------------------- errors and line numbers


def _csv_with_multiline(n: int) -> tuple[list[str], int]:
    """Rows with a quoted multi-line field every 7th row; returns the text lines and the
    physical line count."""
    out = ["id,text,v"]
    for i in range(n):
        text = f'"multi\nline {i}"' if i % 7 == 0 else f"plain {i}"
        out.append(f"{i},{text},{i * 2}")
    return out, sum(s.count("\n") + 1 for s in out)


def test_malformed_row_in_later_block_names_its_line():
    lines, _ = _csv_with_multiline(2000)
    bad_index = 1700  # data row 1700 (line index 1701 in `lines`)
    lines[bad_index + 1] = f"{bad_index},oops,1,extra"
    expected_line = sum(s.count("\n") + 1 for s in lines[: bad_index + 1]) + 1
    data = ("\n".join(lines) + "\n").encode()
    with open_input(io.BytesIO(data), ReadOptions(block_size=512)) as inp:
        seen = 0
        with pytest.raises(InvalidInput) as info:
            for b in inp.batches:
                seen += b.num_rows
    assert 0 < seen <= bad_index  # the rows of the chunks before the bad one came out first
    assert info.value.message == (
        f"input: line {expected_line}: expected 3 fields, found 4: '{bad_index},oops,1,extra'"
    )
    # too few fields, CRLF line ends, gzip, a file path
    lines[bad_index + 1] = f"{bad_index}"
    data = gzip.compress(("\r\n".join(lines) + "\r\n").encode())
    msg = read_error(io.BytesIO(data), block_size=300)
    assert msg == f"input: line {expected_line}: expected 3 fields, found 1: '{bad_index}'"


def test_malformed_row_in_first_block():
    assert read_error(io.BytesIO(b"a,b\n1,2\n3\n")) == "input: line 3: expected 2 fields, found 1: '3'"


def test_type_error_in_later_block_names_line_column_value():
    lines, _ = _csv_with_multiline(3000)
    bad = 2500
    lines[bad + 1] = f"{bad},text,not-a-number"
    expected_line = sum(s.count("\n") + 1 for s in lines[: bad + 1]) + 1
    data = ("\n".join(lines) + "\n").encode()
    msg = read_error(io.BytesIO(data), block_size=1024)
    assert msg == (
        f"input: line {expected_line}, column 'v': value 'not-a-number' is not a valid int64"
        " (type inferred from the first 1 KiB of the input); use --type v=string"
    )
    # with the suggested override it reads
    t = read_all(io.BytesIO(data), block_size=1024, schema_overrides={"v": "string"})
    assert t.num_rows == 3000 and t.column("v")[bad].as_py() == "not-a-number"
    assert t.column("text")[7].as_py() == "multi\nline 7"


def test_cr_only_line_ends():
    data = b"a,b\r1,x\r2,y\r3,z,zz\r"
    assert read_error(io.BytesIO(data), block_size=4) == "input: line 4: expected 2 fields, found 3: '3,z,zz'"


def test_invalid_json_line_in_later_block():
    rows = [f'{{"i": {i}, "s": "v{i}"}}' for i in range(1000)]
    rows[800] = '{"i": 800, "s": "v800"'
    data = ("\n".join(rows) + "\n").encode()
    msg = read_error(io.BytesIO(data), block_size=500)
    assert msg.startswith("input: line 801: invalid JSON")
    rows[800] = '{"i": "eight hundred", "s": "v"}'
    msg = read_error(NonSeekable(("\n\n".join(rows) + "\n").encode()), block_size=500)
    assert msg.startswith("input: line 1601, column 'i': value 'eight hundred' does not fit type int64")
    rows[800] = "[1, 2]"
    assert "line 801: not a JSON object" in read_error(io.BytesIO(("\n".join(rows) + "\n").encode()), block_size=500)
    rows[800] = '{"i": 800, "s": "v", "new": 1}'
    msg = read_error(io.BytesIO(("\n".join(rows) + "\n").encode()), block_size=500)
    assert "line 801: field 'new' is not among the fields found in the first" in msg


def test_empty_inputs(tmp_path):
    for data in (b"", b"\n\n  \n", gzip.compress(b""), zstd(b"\n")):
        assert read_error(io.BytesIO(data)) == "input: the input is empty"
    for name in ("e.csv", "e.jsonl", "e.tsv.gz", "e.parquet", "e"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(b"") if name.endswith(".gz") else b"")
        assert read_error(path) == f"{path}: the input is empty"


def test_corrupt_compression(tmp_path):
    good = gzip.compress(to_csv(sample_rows(2000)))
    bad = bytearray(good)
    bad[len(bad) // 2 : len(bad) // 2 + 50] = b"\0" * 50
    assert "gzip decompression failed" in read_error(io.BytesIO(bytes(bad)))
    assert "gzip decompression failed" in read_error(io.BytesIO(good[: len(good) // 2]))
    z = zstd(to_csv(sample_rows(2000)))
    assert "zstd decompression failed" in read_error(io.BytesIO(z[:-20]))
    bad = bytearray(z)
    bad[4:12] = b"\xff" * 8  # frame header (zstd frames without a checksum cannot catch every flip)
    assert "zstd decompression failed" in read_error(io.BytesIO(bytes(bad)))
    assert "zstd decompression failed" in read_error(io.BytesIO(b"\x28\xb5\x2f\xfd" + b"garbage" * 10))
    path = tmp_path / "fake.csv.gz"
    path.write_bytes(b"a,b\n1,2\n")
    assert "gzip" in read_error(path)


def test_not_a_parquet_file(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_bytes(b"a,b\n1,2\n")
    assert "not a readable Parquet file" in read_error(path)


def test_missing_file_and_bad_source(tmp_path):
    assert "no such file" in read_error(tmp_path / "nope.csv")
    with pytest.raises(InvalidInput):
        open_input(12345, ReadOptions())  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="binary"):
        open_input(io.StringIO("a,b\n1,2\n"), ReadOptions())


def test_close_and_context_manager(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(to_csv(sample_rows()))
    inp = open_input(path, ReadOptions(block_size=1024))
    assert isinstance(inp, Input)
    first = next(inp.batches)
    assert first.num_rows > 0 and inp.rows_read == first.num_rows
    inp.close()
    assert list(inp.batches) == []
    with open_input(path, ReadOptions()) as inp:
        assert sum(b.num_rows for b in inp) == N
    assert inp.bytes_read == path.stat().st_size


# --------------------------------------------------------------------------- CSV dialect (property)

cell = st.text(alphabet=st.sampled_from(list('ab ,"\n\r\tx1é')), max_size=8)


def _field(value: str, force_quotes: bool) -> str:
    if force_quotes or value.startswith('"') or any(c in value for c in ",\r\n"):
        return '"' + value.replace('"', '""') + '"'
    return value


@SETTINGS
@given(
    rows=st.lists(st.tuples(cell, cell, cell), min_size=1, max_size=40),
    block_size=st.integers(min_value=1, max_value=200),
    quote_all=st.booleans(),
    eol=st.sampled_from(["\n", "\r\n"]),
)
def test_quoted_fields_survive_any_chunking(rows, block_size, quote_all, eol):
    """RFC 4180 quoting (quoted delimiters, quotes, newlines), whatever the chunk cuts."""
    text = "a,b,c" + eol + "".join(",".join(_field(v, quote_all) for v in r) + eol for r in rows)
    data = text.encode()
    t = read_all(io.BytesIO(data), block_size=block_size, schema_overrides=dict.fromkeys("abc", "string"))
    assert [tuple(r.values()) for r in t.to_pylist()] == rows


bare = st.text(alphabet=st.sampled_from(list('ab x"1')), max_size=6).filter(lambda s: not s.startswith('"'))


@SETTINGS
@given(
    rows=st.lists(st.tuples(bare, bare).filter(lambda r: r != ("", "")), min_size=1, max_size=40),
    block_size=st.integers(min_value=1, max_value=100),
)
def test_stray_quotes_inside_unquoted_fields(rows, block_size):
    """pyarrow reads a quote that is not at a field's start literally; so does the chunker."""
    data = ("a,b\n" + "".join(f"{x},{y}\n" for x, y in rows)).encode()
    t = read_all(io.BytesIO(data), block_size=block_size, schema_overrides={"a": "string", "b": "string"})
    assert [tuple(r.values()) for r in t.to_pylist()] == rows


# --------------------------------------------------------------------------- bounded memory


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0  # pragma: no cover


def _write_big_csv(path, target_bytes: int) -> int:
    rows = []
    for i in range(20000):
        rows.append(
            f"{i},name_{i % 1000},{i * 0.25},{'true' if i % 3 else 'false'},"
            f'2024-01-{1 + i % 28:02d} 12:{i % 60:02d}:00,"quoted, text {i}"\n'
        )
    block = "".join(rows).encode()
    written = 0
    with open(path, "wb") as f:
        f.write(b"id,name,score,flag,when,note\n")
        while written < target_bytes:
            f.write(block)
            written += len(block)
    return written // len(block) * 20000


def test_bounded_memory_on_a_200mb_csv(tmp_path):
    path = tmp_path / "big.csv"
    rows = _write_big_csv(path, 200 << 20)
    size = path.stat().st_size
    # warm up pyarrow (kernels, thread pools) so that one-off costs are not counted
    small = tmp_path / "small.csv"
    small.write_bytes(path.read_bytes()[:200_000].rsplit(b"\n", 1)[0] + b"\n")
    read_all(small)
    rss0 = _rss()
    alloc0 = pa.total_allocated_bytes()
    peak_alloc = peak_rss = 0
    start = time.perf_counter()
    with open_input(path, ReadOptions()) as inp:
        n = 0
        for batch in inp.batches:
            n += batch.num_rows
            peak_alloc = max(peak_alloc, pa.total_allocated_bytes() - alloc0)
            peak_rss = max(peak_rss, _rss() - rss0)
            del batch
    elapsed = time.perf_counter() - start
    assert n == rows
    print(
        f"\n200 MB CSV: {size / elapsed / 1e6:.0f} MB/s, peak Arrow allocation {peak_alloc / 1e6:.1f} MB,"
        f" RSS growth {peak_rss / 1e6:.1f} MB"
    )
    assert peak_alloc < 64 << 20
    assert peak_rss < 160 << 20 < size


# --------------------------------------------------------------------------- more errors, determinism


def test_line_numbers_count_blank_lines_and_json_inference_conflicts():
    assert read_error(io.BytesIO(b"a,b\n1,2\n\n\n3,4,5\n")) == "input: line 5: expected 2 fields, found 3: '3,4,5'"
    msg = read_error(io.BytesIO(b'{"a": 1}\n\n{"a": "x"}\n'))
    assert msg == (
        "input: line 3, column 'a': value 'x' does not match the column's earlier values"
        " (changed from number to string)"
    )


def test_tsv_with_quotes_and_custom_delimiter():
    data = b'a\tb\n1\t"x\ty"\n2\t"multi\nline"\n'
    t = read_all(io.BytesIO(data), format="tsv", block_size=8)
    assert t.to_pylist() == [{"a": 1, "b": "x\ty"}, {"a": 2, "b": "multi\nline"}]
    t = read_all(io.BytesIO(b"a|b\n1|x\n"), delimiter="|")
    assert t.to_pylist() == [{"a": 1, "b": "x"}]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_results_do_not_depend_on_threads(monkeypatch, workers):
    from node.services.datasets import readers

    monkeypatch.setattr(readers.opened_input, "_WORKERS", workers)
    rows = sample_rows()
    data = to_csv(rows)
    t = read_all(io.BytesIO(data), block_size=2048)
    assert t.equals(expected_table(rows))
    lines = data.decode().split("\n")
    lines[2500] = "x,y"
    msg = read_error(io.BytesIO("\n".join(lines).encode()), block_size=2048)
    assert msg.startswith("input: line 2501: expected 6 fields, found 2")
