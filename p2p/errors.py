"""Errors of the p2p layer: one-line messages meant for the user."""

from __future__ import annotations


class P2PError(Exception):
    """A p2p operation failed; the message is one line meant for the user."""


class P2PTimeout(P2PError, TimeoutError):
    """A peer did not answer before the deadline."""


class P2PBadInput(P2PError, ValueError):
    """The caller's input is unusable (a malformed multiaddr or peer id, this node's own address): not the peer's
    fault, and asking again will not help. The node maps it to its 400 ``InvalidInput``."""


class FrameRefused(P2PError):
    """A request frame this host will not read: too long, or over the budget just now."""
