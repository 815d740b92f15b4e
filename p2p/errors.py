"""Errors of the p2p layer: one-line messages meant for the user."""

from __future__ import annotations


class P2PError(Exception):
    """A p2p operation failed; the message is one line meant for the user."""


class P2PTimeout(P2PError, TimeoutError):
    """A peer did not answer before the deadline."""


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {text[0].strip()}" if text else type(exc).__name__
