"""Errors of the p2p layer: one-line messages meant for the user."""

from __future__ import annotations


class P2PError(Exception):
    """A p2p operation failed; the message is one line meant for the user."""


class P2PTimeout(P2PError, TimeoutError):
    """A peer did not answer before the deadline."""
