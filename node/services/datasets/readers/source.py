"""Opening an input: files and streams, decompression, the text encoding (``encodings``), format sniffing.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa

from node.services.datasets.readers.encodings import _decoded_source
from node.services.datasets.readers.input_limits import InputLimits, _Metered
from node.services.datasets.readers.options import _BOM, ReadOptions
from node.services.datasets.readers.streams import _ByteSource, _PeekReader
from node.support.errors import InvalidInput, one_line

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PAR1 = b"PAR1"
_SNIFF_BYTES = 4096


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
    limits: InputLimits = field(default_factory=InputLimits)


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


@dataclass
class _Raw:
    """The undecoded bytes of an input, before decompression."""

    reader: Any  # pa.OSFile or _PeekReader
    magic: bytes  # its first bytes (up to 4), for sniffing the compression
    counter: Callable[[], int]  # bytes read so far
    total_size: int | None = None
    seekable_file: Any = None  # a seekable stream at offset 0 (for Parquet's random access)


def _locate(
    source: str | os.PathLike | BinaryIO, closers: list[Callable[[], None]], label: str | None = None
) -> tuple[str | BinaryIO, str | None, str]:
    """What to read: a regular file's path, or a stream (given, or a FIFO/device opened here); the name that hints
    the format (None if there is none), and the label messages use (``label``, else the path)."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        shown = label or path
        return _open_path(path, closers, shown), path, shown
    if hasattr(source, "read"):
        file_name = getattr(source, "name", None)
        name = file_name if isinstance(file_name, str) and not file_name.startswith("<") else None
        label = name or (file_name.strip("<>") if isinstance(file_name, str) else "input")
        return source, name, label
    raise InvalidInput(f"cannot read input from a {type(source).__name__}: pass a path or a binary stream")


def _open_path(path: str, closers: list[Callable[[], None]], shown: str) -> str | BinaryIO:
    """The path itself for a regular file; an open stream for anything else readable. Messages name ``shown``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InvalidInput(f"no such file: {shown}") from None
    except OSError as e:
        raise InvalidInput(f"cannot open {shown}: {e.strerror}") from None
    if stat.S_ISDIR(mode):
        raise InvalidInput(f"{shown} is a directory, not a file")
    if stat.S_ISREG(mode):
        return path
    # a FIFO, /dev/stdin, <(zcat …): read it as a stream
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the Input
    except OSError as e:
        raise InvalidInput(f"cannot open {shown}: {e.strerror}") from None
    closers.append(stream.close)
    return stream


def _raw_file(path: str, closers: list[Callable[[], None]], shown: str) -> _Raw:
    try:
        raw = pa.OSFile(path, "r")
    except (OSError, pa.ArrowException) as e:
        raise InvalidInput(f"cannot open {shown}: {one_line(str(e)).replace(path, shown)}") from None
    closers.append(raw.close)
    total_size = raw.size()
    magic = raw.read(4)
    raw.seek(0)
    return _Raw(raw, magic, raw.tell, total_size)


def _raw_stream(stream: Any) -> _Raw:
    start = None
    try:
        if stream.seekable():
            start = stream.tell()
    except (OSError, ValueError, AttributeError):
        start = None
    peek = _PeekReader(stream)
    raw = _Raw(peek, peek.peek(4), lambda: peek.count)
    if start == 0:
        try:
            here = stream.tell()
            raw.total_size = stream.seek(0, io.SEEK_END)
            stream.seek(here)
            raw.seekable_file = stream
        except (OSError, ValueError):
            raw.seekable_file, raw.total_size = None, None
    return raw


def _codec_from_magic(magic: bytes) -> str:
    if magic.startswith(_GZIP_MAGIC):
        return "gzip"
    if magic.startswith(_ZSTD_MAGIC):
        return "zstd"
    return "none"


def _decompressed(raw: Any, codec: str, label: str, closers: list[Callable[[], None]]) -> Any:
    try:
        reader = pa.CompressedInputStream(raw, codec)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InvalidInput(f"{label}: cannot decompress {codec}: {one_line(str(e))}") from None
    closers.insert(0, reader.close)
    return reader


def _text_and_format(
    src: _ByteSource, fmt: str | None, options: ReadOptions, label: str
) -> tuple[_ByteSource, str | None, bool]:
    """Text decoded to UTF-8 (Parquet is not text) and the format sniffed when not known; whether UTF-8 is
    still to be checked (see _decoded_source)."""
    if fmt == "parquet":
        return src, fmt, True
    head = src.read(_SNIFF_BYTES)
    src.unread(head)
    if fmt is None and head.startswith(_PAR1):
        return src, "parquet", True
    src, check_utf8 = _decoded_source(src, head, options, label)
    if fmt is None:
        head = src.read(_SNIFF_BYTES)
        src.unread(head)
        fmt = _sniff_format(head)
    return src, fmt, check_utf8


def _open_source(source: str | os.PathLike | BinaryIO, options: ReadOptions, limits: InputLimits) -> _Opened:
    closers: list[Callable[[], None]] = []
    target, name, label = _locate(source, closers, options.label)
    raw = _raw_file(target, closers, label) if isinstance(target, str) else _raw_stream(target)
    name_fmt, name_codec = _detect_from_name(name)
    fmt = options.format or name_fmt
    codec = options.compression or name_codec or _codec_from_magic(raw.magic)
    reader = raw.reader if codec == "none" else _decompressed(raw.reader, codec, label, closers)
    # Every byte the readers take is counted here, decompressed: a bomb is refused as it inflates.
    metered = _Metered(reader, limits, label, None if codec == "none" else raw.counter)
    src, fmt, check_utf8 = _text_and_format(_ByteSource(metered, codec, label), fmt, options, label)
    plain = codec == "none"  # only then can Parquet read the file or stream at random
    return _Opened(
        name=label,
        source=src,
        codec=codec,
        format=fmt,
        bytes_read=raw.counter,
        closers=closers,
        path=target if plain and isinstance(target, str) else None,
        seekable_file=raw.seekable_file if plain else None,
        total_size=raw.total_size,
        check_utf8=check_utf8,
        limits=limits,
    )


def _sniff_format(head: bytes) -> str | None:
    if head.startswith(_PAR1):
        return "parquet"
    text = head[3:] if head.startswith(_BOM) else head
    text = text.lstrip()
    if not text:
        return None  # empty: reported by the reader
    return "jsonl" if text.startswith(b"{") else "csv"
