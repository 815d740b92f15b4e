"""Text encodings: the one to read text in (given, or named by a byte order mark, else UTF-8), and other
encodings transcoded to UTF-8 on the fly.

Part of :mod:`node.services.datasets.readers` (see its docstring for the rules these follow)."""

from __future__ import annotations

import codecs
from typing import Any

from node.services.datasets.readers.options import ReadOptions
from node.services.datasets.readers.streams import _ByteSource
from node.support.errors import InvalidInput

#: Byte order marks that name an encoding when none is given (UTF-32 first: its LE mark starts with UTF-16's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


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
