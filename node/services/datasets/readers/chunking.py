"""Cutting decompressed text into chunks of complete rows (CSV quoting, JSON lines), UTF-8 checks.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from typing import cast

import numpy as np

from node.services.datasets.readers.options import _BOM, _size_text
from node.services.datasets.readers.streams import _ByteSource
from node.support.errors import InvalidInput

#: A row may make its chunk grow to at most this much beyond the block size.
MAX_ROW_BYTES = 64 << 20


def _row_pattern(delimiter: bytes) -> re.Pattern[bytes]:
    """One CSV row, as pyarrow's parser splits rows (see the module docstring's dialect):
    a quote opens a quoted field only at a field's start; ``""`` inside is literal; after the
    closing quote the field goes on unquoted. Possessive/atomic so that an unterminated
    quoted field does not match at all (rather than being re-read another way)."""
    d = re.escape(delimiter)
    quoted = b'"[^"]*+(?:""[^"]*+)*+"[^' + d + b"\r\n]*+"
    plain = b'[^"' + d + b"\r\n][^" + d + b"\r\n]*+"
    fld = b"(?>" + quoted + b"|" + plain + b"|)"
    return re.compile(fld + b"(?:" + d + fld + b")*+(?:\r\n|\n|\r|\\Z)")


def _complete_rows_pattern(delimiter: bytes) -> re.Pattern[bytes]:
    """As many complete (terminated) rows as there are, in one match."""
    d = re.escape(delimiter)
    quoted = b'"[^"]*+(?:""[^"]*+)*+"[^' + d + b"\r\n]*+"
    plain = b'[^"' + d + b"\r\n][^" + d + b"\r\n]*+"
    fld = b"(?>" + quoted + b"|" + plain + b"|)"
    return re.compile(b"(?:" + fld + b"(?:" + d + fld + b")*+(?:\r\n|\n|\r))*+")


def _csv_rows(data: bytes, pattern: re.Pattern[bytes], limit: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each non-blank row of ``data``; an unterminated quoted field at the
    end makes the rest one row."""
    rows: list[tuple[int, int]] = []
    pos, n = 0, len(data)
    match = pattern.match
    while pos < n:
        m = match(data, pos)
        if m is None or m.end() == pos:
            rows.append((pos, n))
            break
        end = m.end()
        if end - pos > 2 or data[pos:end] not in (b"\n", b"\r\n", b"\r"):
            rows.append((pos, end))
            if limit is not None and len(rows) >= limit:
                break
        pos = end
    return rows


def _csv_cut(buf: bytes, eol: bytes, rows: re.Pattern[bytes], delimiter: int) -> int:
    """Where to cut ``buf`` (which starts at a row boundary): just after the last complete
    row; 0 if there is none. Exact for pyarrow's dialect, and fast when the data is RFC 4180:

    - no quote before the last line terminator: that terminator;
    - else the last terminator preceded by an even number of quotes, if every quote before it
      is where RFC 4180 puts one (:func:`_rfc_quotes`): then that parity is exactly pyarrow's
      quoting state;
    - else (stray quotes inside unquoted fields, or a quoted field spanning the last lines)
      the buffer is lexed with :func:`_complete_rows_pattern`.
    """
    last = buf.rfind(eol)
    if last < 0:
        return 0
    first_quote = buf.find(b'"', 0, last)
    if first_quote < 0:
        return last + 1
    values = np.frombuffer(buf, np.uint8, count=last + 1)
    quotes = np.flatnonzero(values == 34)
    n = len(quotes)
    cut = last + 1
    if n % 2:
        # the last terminator is inside quotes: try the last one before the unmatched quote
        opening = int(quotes[n - 1])
        before = buf.rfind(eol, 0, opening)
        if before < 0 or (n > 1 and before < int(quotes[n - 2])):
            return _csv_complete_end(buf, rows)
        cut, n = before + 1, n - 1
        quotes = quotes[:n]
    if _rfc_quotes(values, quotes, delimiter):
        return cut
    return _csv_complete_end(buf, rows)


_ALLOWED_AROUND_QUOTES: dict[int, np.ndarray] = {}


def _rfc_quotes(values: np.ndarray, quotes: np.ndarray, delimiter: int) -> bool:
    """Whether the (even number of) quotes at positions ``quotes`` of ``values`` pair up as RFC
    4180 quoting: taken two by two, each opening quote follows a delimiter, a line end, the
    start or the previous closing quote (``""``), and each closing quote is followed by a
    delimiter, a line end, the end or the next opening quote. Then a line end is inside quotes
    exactly when an odd number of quotes precedes it, as pyarrow's lexer sees it.
    Vectorised with numpy (twice as fast as the same with pyarrow.compute; both run
    without the GIL)."""
    if len(quotes) == 0:
        return True
    allowed = _ALLOWED_AROUND_QUOTES.get(delimiter)
    if allowed is None:
        table = np.zeros(256, dtype=bool)
        table[[delimiter, 10, 13, 34]] = True
        allowed = _ALLOWED_AROUND_QUOTES.setdefault(delimiter, table)
    # (an opening quote at 0 is "preceded" by itself and a closing one at the end "followed"
    # by itself: quotes, so allowed, as the start and the end are)
    before = values[np.maximum(quotes[0::2] - 1, 0)]
    if not allowed[before].all():
        return False
    after = values[np.minimum(quotes[1::2] + 1, len(values) - 1)]
    return bool(allowed[after].all())


def _csv_complete_end(buf: bytes, rows: re.Pattern[bytes]) -> int:
    """End of the last complete (terminated) row of ``buf`` (``rows``: :func:`_complete_rows_pattern`)."""
    m = rows.match(buf)
    return m.end() if m else 0


_COUNT_PIECE = 1 << 18


def _count_byte(data: bytearray, byte: bytes) -> int:
    """``data.count(byte)`` for a one-byte ``byte``, vectorised in cache-sized pieces: the cutter thread counts
    the lines of every chunk, and bytes.count took about 0.55 s a GB of CSV, this about 0.1 s."""
    if len(byte) != 1:  # pragma: no cover - line terminators here are one byte (\n or \r)
        return data.count(byte)
    values = np.frombuffer(data, np.uint8)
    b = byte[0]
    return sum(int(np.count_nonzero(values[i : i + _COUNT_PIECE] == b)) for i in range(0, len(values), _COUNT_PIECE))


def _as_bytes(buf: bytearray) -> bytes:
    # Chunks are cut in place from one bytearray (no 4 MB copy per chunk) and only read from then on: the
    # readers use bytes' read-only API (find, count, slices, regex), which bytearray has too.
    return cast(bytes, buf)


def _json_cut(buf: bytes, eol: bytes) -> int:
    return buf.rfind(b"\n") + 1


class _Chunker:
    """Cuts the decompressed input into chunks of complete rows: ``block_size`` bytes, cut
    back to the last row end; a chunk grows (doubling) while it holds no complete row. A pure
    function of the bytes and the block size."""

    def __init__(
        self,
        src: _ByteSource,
        block_size: int,
        cut: Callable[[bytes, bytes], int],
        name: str,
        cr_lines: bool = False,
        check_utf8: bool = True,
    ) -> None:
        self._src = src
        self._cr_lines = cr_lines  # CSV: a file whose only line terminator is \r counts \r
        self._check_utf8 = check_utf8
        self._block = block_size
        self._cut = cut
        self._name = name
        self._buf = bytearray()
        self._eof = False
        self._first = True
        self.eol = b"\n"
        self.line = 1  # line number of the start of the next chunk
        self.offset = 0  # byte offset of the start of the next chunk in the input

    def next(self) -> tuple[bytes, int] | None:
        target = self._block
        while True:
            if not self._eof and len(self._buf) < target:
                # One allocation per chunk: the leftover, then the input read straight after it.
                have = len(self._buf)
                buf = bytearray(target)
                buf[:have] = self._buf
                got = self._src.readinto(buf, have)
                if got < target - have:
                    self._eof = True
                    del buf[have + got :]
                self._buf = buf
            if self._first and self._buf:
                self._first = False
                if self._buf.startswith(_BOM):
                    self._buf = self._buf[3:]
                    self.offset = len(_BOM)
                if self._cr_lines and b"\n" not in self._buf and b"\r" in self._buf:
                    self.eol = b"\r"
            if self._eof:
                out, self._buf = self._buf, bytearray()
                if not out:
                    return None
                break
            cut = self._cut(_as_bytes(self._buf), self.eol)
            if cut > 0:
                out, self._buf = self._buf, self._buf[cut:]
                del out[cut:]
                break
            if len(self._buf) > self._block + MAX_ROW_BYTES:
                raise InvalidInput(
                    f"{self._name}: line {self.line}: a row longer than {_size_text(MAX_ROW_BYTES)}"
                    " (an unterminated quoted field?)"
                )
            target = len(self._buf) + max(self._block, len(self._buf))
        if self._check_utf8:
            self._check_text(out)
        first = self.line
        self.line += _count_byte(out, self.eol)
        self.offset += len(out)
        return _as_bytes(out), first

    def _check_text(self, data: bytearray) -> None:
        """Refuse a chunk that is not UTF-8 text, naming the line and byte offset: pyarrow would
        read it as ``binary`` columns or fail deep inside. A NUL byte is refused too: UTF-8 text
        holds none, UTF-16/32 without a byte order mark is full of them."""
        try:
            codecs.utf_8_decode(data, "strict", True)
            bad, end, reason = len(data), 0, ""
        except UnicodeDecodeError as e:
            bad, end, reason = e.start, e.end, e.reason
        nul = data.find(0, 0, bad)  # whichever comes first: UTF-16 text fails on a NUL before anything else
        if nul >= 0:
            bad, reason = nul, ""
        elif not reason:
            return
        where = f"{self._name}: line {self.line + data.count(self.eol, 0, bad)}, byte offset {self.offset + bad}"
        if reason:
            raise InvalidInput(
                f"{where}: not UTF-8 ({data[bad:end].hex(' ')}: {reason}); give the file's encoding"
                " with --encoding, e.g. --encoding latin-1"
            )
        raise InvalidInput(
            f"{where}: a NUL byte (UTF-16 or UTF-32 text without a byte order mark? give --encoding,"
            " e.g. --encoding utf-16-le)"
        )


def _first_failure(n: int, fails: Callable[[int, int], bool]) -> int | None:
    """The first index in [0, n) whose item fails on its own, given ``fails(lo, hi)`` for the
    items [lo, hi) and that [0, n) fails as a whole. Halving: O(n) work overall."""
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(lo, mid):
            hi = mid
        else:
            lo = mid
    if n and fails(lo, lo + 1):
        return lo
    return None
