"""Caps on what one input may make the node read, decode and hold, and the stop signal of its ingest.

Part of :mod:`node.services.datasets.readers`. A small compressed input can stand for an enormous one (10 MB of gzip
held
10 GiB of CSV; a 26 MB Parquet file held 100,000 columns), so every reader counts what it makes of its input:

- **decompressed bytes** (gzip/zstd text, a spooled ``.parquet.gz``): at most ``max_input_bytes``, and at most
  ``max_ratio`` times the compressed bytes read so far beyond :data:`RATIO_ALLOWANCE` (a bomb is refused within
  seconds, a small file always fits); Parquet's own pages count the same way, as the Arrow data they decode to
  against the file's size;
- **columns** (nested fields counted): from the CSV header, the JSON keys or the Parquet footer, before pyarrow
  builds a schema of them;
- **rows** handed out.

Beyond a cap the input is refused with ``TooLarge`` (413). ``stop`` (set when the ingest's client goes away) ends
the reading at its next read with ``IngestCancelled``. ``spool_dir``: where a Parquet input that needs random access
is spooled (the ingest's work directory, under ``$CAIRN_HOME/tmp``: never the system temp directory)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from node.support.errors import IngestCancelled, TooLarge

#: Bytes any input may decompress to whatever its size: the ratio cap starts beyond them.
RATIO_ALLOWANCE = 64 << 20


@dataclass(frozen=True)
class InputLimits:
    """The caps of one input (None: no cap) and its ingest's stop signal (see the module docstring)."""

    max_input_bytes: int | None = None
    max_ratio: int | None = None
    max_columns: int | None = None
    max_rows: int | None = None
    spool_dir: str | None = None
    stop: threading.Event | None = None

    def check_stop(self, name: str) -> None:
        if self.stop is not None and self.stop.is_set():
            raise IngestCancelled(f"{name}: the ingest was stopped (its client went away); nothing was kept")

    def check_columns(self, count: int, name: str, what: str = "columns") -> None:
        cap = self.max_columns
        if cap is not None and count > cap:
            raise TooLarge(f"{name}: {count} {what}, more than datasets.max_columns ({cap}): refused")

    def check_rows(self, rows: int, name: str) -> None:
        cap = self.max_rows
        if cap is not None and rows > cap:
            raise TooLarge(f"{name}: more than datasets.max_rows ({cap}) rows: refused")

    def check_decoded(self, decoded: int, base: int | None, name: str, what: str = "decompresses") -> None:
        """``decoded`` bytes made so far from ``base`` bytes read (None: not compressed, no ratio applies)."""
        self.check_stop(name)
        cap = self.max_input_bytes
        if cap is not None and decoded > cap:
            raise TooLarge(f"{name}: {what} to more than datasets.max_input_bytes ({cap} bytes): refused")
        ratio = self.max_ratio
        if ratio is not None and base is not None and decoded > RATIO_ALLOWANCE + ratio * base:
            raise TooLarge(
                f"{name}: {what} to more than {ratio} times its size (datasets.max_decompression_ratio): refused as"
                " a decompression bomb"
            )


NO_LIMITS = InputLimits()


class _Metered:
    """A raw reader over the (decompressed) input that counts what it hands out against ``limits`` and stops
    when its ingest is stopped. ``compressed``: bytes taken from the source so far (None for plain input: only
    ``max_input_bytes`` applies)."""

    def __init__(self, reader: Any, limits: InputLimits, name: str, compressed: Any) -> None:
        self._reader = reader
        self._limits = limits
        self._name = name
        self._compressed = compressed
        self.count = 0

    def readinto(self, view: Any) -> int:
        got = int(self._reader.readinto(view) or 0)
        self.count += got
        base = int(self._compressed()) if self._compressed is not None else None
        self._limits.check_decoded(self.count, base, self._name)
        return got


def field_count(schema: pa.Schema) -> int:
    """Fields of ``schema`` at every nesting level (a struct of 3 fields counts 4), walked without recursion."""
    count, level = 0, [f.type for f in schema]
    while level:
        count += len(level)
        level = [t.field(i).type for t in level for i in range(t.num_fields)]
    return count
