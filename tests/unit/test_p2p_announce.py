"""Peer ids and detached signatures without libp2p (``p2p.announce``)."""

from __future__ import annotations

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from p2p import announce


def seed(n: int) -> bytes:
    return bytes([n]) * 32


def test_peer_ids_agree_with_libp2p():
    for n in range(1, 20):
        seed = bytes([n]) * 31 + bytes([n * 7 % 256])
        expected = ID.from_pubkey(create_new_key_pair(seed).public_key).to_base58()
        assert announce.peer_id_from_seed(seed) == expected
        pub = create_new_key_pair(seed).public_key.to_bytes()
        assert announce.public_key_from_peer_id(expected) == pub


def test_detached_signatures_bind_to_peer_ids():
    data = b"cairn-an_0\x00" + b"payload"
    sig = announce.sign(seed(7), data)
    assert announce.verify(announce.peer_id_from_seed(seed(7)), data, sig)
    assert not announce.verify(announce.peer_id_from_seed(seed(8)), data, sig)
    assert not announce.verify(announce.peer_id_from_seed(seed(7)), data + b"x", sig)
    assert not announce.verify("QmNotAnEd25519PeerId", data, sig)
