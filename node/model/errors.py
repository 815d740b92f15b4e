"""Errors raised by the object model.

Every message is one line and meant for the person who sent the input: the CLI prints it as
``error: <message>`` and the HTTP API returns it with the class's ``status``.
"""

from __future__ import annotations

from node.errors import CairnError, InvalidInput


def _one_line(message: object) -> str:
    """Collapse line breaks so a message can never span several lines."""
    return " ".join(str(message).splitlines())


def quote(text: object, limit: int = 80) -> str:
    """Quote user text for an error message: one line, escaped, cut to ``limit`` characters."""
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    out = []
    for ch in s:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return '"' + "".join(out) + '"'


class _OneLine:
    """Mixin: normalise the message to a single line."""

    def __init__(self, message: object = "") -> None:
        super().__init__(_one_line(message))  # type: ignore[call-arg]


class InvalidCID(_OneLine, InvalidInput):
    """A CID string or value that cannot be parsed or is not usable."""


class InvalidDagJson(_OneLine, InvalidInput):
    """Text that is not valid DAG-JSON (message: ``invalid DAG-JSON: line L column C: …``)."""


class InvalidObject(_OneLine, InvalidInput):
    """An IPLD value with the wrong shape for its kind; the message names the field path."""


class UnknownKind(InvalidObject):
    """A ``typedVersion`` no registered kind claims."""


class EncodingError(_OneLine, InvalidInput):
    """A value that cannot be encoded (or a block that cannot be decoded) by a codec."""


class HashMismatch(_OneLine, CairnError):
    """Block bytes whose hash is not the one their CID names (corrupt or forged data)."""
