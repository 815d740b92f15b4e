"""Opening an input: files and streams, decompression, text encodings (to UTF-8), format sniffing.

Part of :mod:`node.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import codecs
import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa

from node.datasets.readers.options import _BOM, ReadOptions, _one_line
from node.errors import InvalidInput

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PAR1 = b"PAR1"
_SNIFF_BYTES = 4096
#: Byte order marks that name an encoding when none is given (UTF-32 first: its LE mark starts with UTF-16's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


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
            raise InvalidInput("the input stream is in text mode; pass a binary stream (e.g. sys.stdin.buffer)")
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
        parts: list[bytes] = []
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


@dataclass
class _Raw:
    """The undecoded bytes of an input, before decompression."""

    reader: Any  # pa.OSFile or _PeekReader
    magic: bytes  # its first bytes (up to 4), for sniffing the compression
    counter: Callable[[], int]  # bytes read so far
    total_size: int | None = None
    seekable_file: Any = None  # a seekable stream at offset 0 (for Parquet's random access)


def _locate(
    source: str | os.PathLike | BinaryIO, closers: list[Callable[[], None]]
) -> tuple[str | BinaryIO, str | None, str]:
    """What to read: a regular file's path, or a stream (given, or a FIFO/device opened here); the name that hints
    the format (None if there is none), and the label messages use."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        return _open_path(path, closers), path, path
    if hasattr(source, "read"):
        file_name = getattr(source, "name", None)
        name = file_name if isinstance(file_name, str) and not file_name.startswith("<") else None
        label = name or (file_name.strip("<>") if isinstance(file_name, str) else "input")
        return source, name, label
    raise InvalidInput(f"cannot read input from a {type(source).__name__}: pass a path or a binary stream")


def _open_path(path: str, closers: list[Callable[[], None]]) -> str | BinaryIO:
    """The path itself for a regular file; an open stream for anything else readable."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InvalidInput(f"no such file: {path}") from None
    except OSError as e:
        raise InvalidInput(f"cannot open {path}: {_one_line(str(e))}") from None
    if stat.S_ISDIR(mode):
        raise InvalidInput(f"{path} is a directory, not a file")
    if stat.S_ISREG(mode):
        return path
    # a FIFO, /dev/stdin, <(zcat …): read it as a stream
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the Input
    except OSError as e:
        raise InvalidInput(f"cannot open {path}: {_one_line(str(e))}") from None
    closers.append(stream.close)
    return stream


def _raw_file(path: str, closers: list[Callable[[], None]]) -> _Raw:
    try:
        raw = pa.OSFile(path, "r")
    except (OSError, pa.ArrowException) as e:
        raise InvalidInput(f"cannot open {path}: {_one_line(str(e))}") from None
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
        raise InvalidInput(f"{label}: cannot decompress {codec}: {_one_line(str(e))}") from None
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


def _open_source(source: str | os.PathLike | BinaryIO, options: ReadOptions) -> _Opened:
    closers: list[Callable[[], None]] = []
    target, name, label = _locate(source, closers)
    raw = _raw_file(target, closers) if isinstance(target, str) else _raw_stream(target)
    name_fmt, name_codec = _detect_from_name(name)
    fmt = options.format or name_fmt
    codec = options.compression or name_codec or _codec_from_magic(raw.magic)
    reader = raw.reader if codec == "none" else _decompressed(raw.reader, codec, label, closers)
    src, fmt, check_utf8 = _text_and_format(_ByteSource(reader, codec, label), fmt, options, label)
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
    )


def _sniff_format(head: bytes) -> str | None:
    if head.startswith(_PAR1):
        return "parquet"
    text = head[3:] if head.startswith(_BOM) else head
    text = text.lstrip()
    if not text:
        return None  # empty: reported by the reader
    return "jsonl" if text.startswith(b"{") else "csv"
