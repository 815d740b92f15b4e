"""The node's peer id is libp2p's: the same string a real p2p host proves to its peers (``p2p.ids``)."""

from __future__ import annotations

import asyncio

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import multibase

from node.adapters.identity import Identity, generate
from p2p.host import P2PHost


def _by_the_spec(public: bytes) -> str:
    """libp2p peer-ids spec, independently: base58btc of the identity multihash of PublicKey{Ed25519, key}."""
    proto = b"\x08\x01\x12\x20" + public
    return multibase.encode(b"\x00" + bytes([len(proto)]) + proto, "base58btc")[1:]


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_peer_id_follows_the_spec(seed: bytes) -> None:
    ident = Identity(Ed25519PrivateKey.from_private_bytes(seed))
    assert ident.peer_id == _by_the_spec(ident.public_bytes)
    assert ident.peer_id.startswith("12D3KooW")


async def test_peer_id_is_what_a_connected_host_sees() -> None:
    """Host ``a`` runs on the node's key and dials ``b``; ``b`` learns ``a``'s id from the Noise handshake."""
    ident = generate()
    a, b = P2PHost(ident.seed), P2PHost(generate().seed)
    seen: asyncio.Queue[str] = asyncio.Queue()
    b.on_peer_connected(seen.put_nowait)
    await a.start()
    await b.start()
    try:
        assert await a.connect(b.addrs()[0]) == b.peer_id
        assert await asyncio.wait_for(seen.get(), timeout=10) == ident.peer_id
        assert b.connected_peers() == [ident.peer_id]
        assert a.peer_id == ident.peer_id
    finally:
        await a.stop()
        await b.stop()
