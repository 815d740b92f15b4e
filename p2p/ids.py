"""Peer ids: libp2p's own derivation, the one every part of Cairn uses.

A ``12D3KooW…`` id is libp2p's ``ID.from_pubkey`` of the ed25519 key (identity multihash of the
protobuf public key, base58btc; libp2p peer-ids spec). Computing it with libp2p itself, rather
than by hand, keeps the node's printed id and the id the host proves in Noise the same by
construction. libp2p is imported on first use: it costs about a second, which commands that
never print a peer id should not pay.
"""

from __future__ import annotations

from p2p.logs import tame_libp2p_logging


def peer_id(public_key: bytes) -> str:
    """The libp2p peer id (``12D3KooW…``) of a raw 32-byte ed25519 public key."""
    tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)
    from libp2p.crypto.ed25519 import Ed25519PublicKey
    from libp2p.peer.id import ID

    return ID.from_pubkey(Ed25519PublicKey.from_bytes(bytes(public_key))).to_base58()
