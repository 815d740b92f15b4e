"""Byte streams under the readers: peeking at a Python stream's first bytes, full sequential reads with
push-back for sniffing.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa

from node.support.errors import InvalidInput, one_line


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
                f" truncated ({one_line(str(e))})"
            )
        return InvalidInput(f"{self._name}: reading failed: {one_line(str(e))}")

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
