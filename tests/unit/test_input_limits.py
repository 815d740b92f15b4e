"""The ingest caps of the readers (node/services/datasets/readers/input_limits.py): decompressed bytes (absolute and as
a ratio),
columns counted before pyarrow builds a schema (CSV header, JSON keys, Parquet footer), rows, the stop signal, and
the Parquet spool in the directory given. The end-to-end refusals on a real node are in
tests/integration/test_ingest_bombs.py."""

from __future__ import annotations

import gzip
import io
import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.services.datasets.readers import InputLimits, ReadOptions, field_count, open_input
from node.services.datasets.readers.chunking import _csv_rows, _row_pattern
from node.services.datasets.readers.csv_format import _field_count
from node.services.datasets.readers.input_limits import RATIO_ALLOWANCE
from node.services.datasets.readers.parquet_format import _schema_elements
from node.support.errors import IngestCancelled, TooLarge

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MIB = 1 << 20


def read_all(data: bytes, limits: InputLimits, **options: object) -> int:
    rows = 0
    with open_input(io.BytesIO(data), ReadOptions(**options), limits) as inp:  # type: ignore[arg-type]
        for batch in inp.batches:
            rows += batch.num_rows
    return rows


def test_a_gzip_bomb_is_refused_once_past_the_ratio_and_an_honest_file_is_not() -> None:
    rows = (b"x" * 1023 + b"\n") * (RATIO_ALLOWANCE // 1024 - 1)  # under 64 MiB: fits, whatever the ratio
    header, member = gzip.compress(b"a\n"), gzip.compress(rows, 1)  # concatenated members: one input
    with pytest.raises(TooLarge, match="max_decompression_ratio"):
        read_all(header + member * 4, InputLimits(max_ratio=100), format="csv")
    assert read_all(header + member, InputLimits(max_ratio=100), format="csv") == len(rows) // 1024


def test_the_absolute_cap_holds_for_plain_input_too() -> None:
    data = b"a\n" + b"1\n" * (3 * MIB)
    with pytest.raises(TooLarge, match="max_input_bytes"):
        read_all(data, InputLimits(max_input_bytes=2 * MIB), format="csv", block_size=1 << 16)
    assert read_all(data, InputLimits(max_input_bytes=7 * MIB), format="csv") == 3 * MIB


def test_rows_past_the_cap_are_refused() -> None:
    with pytest.raises(TooLarge, match="max_rows"):
        read_all(b"a\n" + b"1\n" * 1000, InputLimits(max_rows=999), format="csv", block_size=64)
    assert read_all(b"a\n" + b"1\n" * 1000, InputLimits(max_rows=1000), format="csv", block_size=64) == 1000


def test_a_set_stop_ends_the_reading_at_the_next_read() -> None:
    stop = threading.Event()
    inp = open_input(io.BytesIO(b"a\n" + b"1\n" * 100_000), ReadOptions(block_size=1024), InputLimits(stop=stop))
    next(inp.batches)
    stop.set()
    with pytest.raises(IngestCancelled):
        for _ in inp.batches:
            pass


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_columns_past_the_cap_are_refused_and_at_the_cap_read(fmt: str) -> None:
    def wide(n: int) -> bytes:
        names = [f"c{i}" for i in range(n)]
        if fmt == "csv":
            return (",".join(names) + "\n" + ",".join("1" for _ in names) + "\n").encode()
        if fmt == "jsonl":
            return json.dumps(dict.fromkeys(names, 1)).encode() + b"\n"
        out = io.BytesIO()
        pq.write_table(pa.table({n: [1] for n in names}), out)
        return out.getvalue()

    with pytest.raises(TooLarge, match=r"301 .*max_columns \(300\)"):
        read_all(wide(301), InputLimits(max_columns=300), format=fmt)
    assert read_all(wide(300), InputLimits(max_columns=300), format=fmt) == 1


def test_nested_json_fields_count_as_columns() -> None:
    line = json.dumps({"a": {f"k{i}": 1 for i in range(50)}, "b": 1}).encode() + b"\n"
    with pytest.raises(TooLarge, match="max_columns"):
        read_all(line, InputLimits(max_columns=40), format="jsonl")
    assert read_all(line, InputLimits(max_columns=52), format="jsonl") == 1


def test_a_compressed_parquet_input_is_spooled_in_the_directory_given(tmp_path: Path) -> None:
    out = io.BytesIO()
    pq.write_table(pa.table({"x": list(range(1000))}), out)
    spool = tmp_path / "spool"
    spool.mkdir()
    seen: list[str] = []
    inp = open_input(io.BytesIO(gzip.compress(out.getvalue())), ReadOptions(format="parquet"),
                     InputLimits(spool_dir=str(spool)))  # fmt: skip
    with inp:
        seen = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if _is_link(fd)]
        assert sum(b.num_rows for b in inp.batches) == 1000
    assert any(s.startswith(str(spool)) for s in seen), seen


def _is_link(fd: str) -> bool:
    try:
        os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return True


@SETTINGS
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=3),
    st.sampled_from(["none", "snappy", "zstd"]),
    st.booleans(),
)
def test_the_footer_peek_counts_what_pyarrow_reads(widths: list[int], compression: str, nested: bool) -> None:
    """The schema's length read from the footer's first bytes is the footer's own: the root, then every group and
    leaf (written by pyarrow with any codec, with or without key-value metadata, flat or nested)."""
    columns = {f"c{i}": pa.array([i], pa.int64()) for i in range(widths[0])}
    if nested:
        columns["s"] = pa.array([{f"f{j}": j for j in range(widths[-1])}])
    table = pa.table(columns).replace_schema_metadata({"k": "v" * sum(widths)})
    out = io.BytesIO()
    pq.write_table(table, out, compression=compression, row_group_size=1)
    out.seek(0)
    elements = _schema_elements(out)
    assert out.tell() == 0
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
    assert elements == 1 + widths[0] + ((1 + widths[-1]) if nested else 0) == 1 + field_count(table.schema)
    assert meta.num_columns == widths[0] + (widths[-1] if nested else 0)


@pytest.mark.parametrize("data", [b"", b"PAR1", b"x" * 20, b"PAR1" + b"\xff" * 8 + b"\x04\x00\x00\x00PAR1"])
def test_the_footer_peek_gives_up_on_what_is_not_a_footer(data: bytes) -> None:
    assert _schema_elements(io.BytesIO(data)) is None


_PIECES = ["a", ",", ";", '"', "\t", "|", " ", '""', "\r\n", "\n", 'x"y', '"q,r"', '"m\nn"']


@SETTINGS
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=30), st.sampled_from([",", ";", "\t", "|"]))
def test_fields_counted_without_pyarrow_are_pyarrows_count(pieces: list[str], delimiter: str) -> None:
    """The delimiter sniffer's count (vectorised when the quotes are RFC 4180's) is pyarrow's, row by row."""
    text = "".join(pieces).encode()
    for start, end in _csv_rows(text, _row_pattern(delimiter.encode()), limit=20):
        row = text[start:end]
        try:
            table = pacsv.read_csv(
                io.BytesIO(row if row.endswith((b"\n", b"\r")) else row + b"\n"),
                read_options=pacsv.ReadOptions(use_threads=False, autogenerate_column_names=True),
                parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(check_utf8=False),
            )
            expected = table.num_columns
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            expected = 0
        assert _field_count(row, delimiter) == expected, row
