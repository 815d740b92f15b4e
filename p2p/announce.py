"""Cairn's wire names and the small key helpers announcements need, without libp2p or the node.

Decision (see ``docs/p2p.md``): **the p2p layer carries announcement bytes; it does not define
or sign them.** An announcement is the node's ``an_0`` object (DAG-CBOR, object model), signed
by the node key inside the object, so that it stays verifiable wherever it travels (gossip,
catch-up after a connect, a lookup answer, a file) and long after the gossip message is gone.
What the p2p layer adds is the *authenticated sender*: gossipsub runs with strict signing, so
the ``sender_peer_id`` a gossip handler receives is the origin whose libp2p signature was
checked, and a request handler's ``peer_id`` is the Noise-authenticated remote. The helpers
below let the node tie the two together (signer of the ``an_0`` == peer that sent it, or not)
from a peer id string alone.

Peer ids here are the ed25519 form ``12D3KooW…``: base58btc of the identity multihash of the
protobuf ``PublicKey{Type: Ed25519, Data: <32 bytes>}``.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

#: Gossipsub topic of execution announcements (``an_0`` blocks, one per message).
TOPIC_EXECUTIONS = "/cairn/executions/1"
#: Request/response protocol: "who has claims about this invocation?"
LOOKUP_PROTOCOL = "/cairn/lookup/1.0.0"

_PROTO_ED25519 = b"\x08\x01\x12\x20"  # PublicKey{Type: Ed25519 (1), Data: 32 bytes}
_IDENTITY_PREFIX = b"\x00\x24"  # identity multihash, 36 bytes
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58)}


def _b58encode(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 58)
        out.append(_B58[r])
    pad = len(data) - len(data.lstrip(b"\x00"))
    return "1" * pad + "".join(reversed(out))


def _b58decode(text: str) -> bytes:
    n = 0
    for c in text:
        if c not in _B58_INDEX:
            raise ValueError(f"not base58: {c!r}")
        n = n * 58 + _B58_INDEX[c]
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    pad = len(text) - len(text.lstrip("1"))
    return b"\x00" * pad + body


def peer_id_from_public_key(public_key: bytes) -> str:
    """The libp2p peer id of a raw 32-byte ed25519 public key."""
    if len(public_key) != 32:
        raise ValueError("an ed25519 public key is 32 bytes")
    return _b58encode(_IDENTITY_PREFIX + _PROTO_ED25519 + bytes(public_key))


def peer_id_from_seed(seed: bytes) -> str:
    """The libp2p peer id of a 32-byte ed25519 private seed (same as ``P2PHost.peer_id``)."""
    key = Ed25519PrivateKey.from_private_bytes(bytes(seed))
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return peer_id_from_public_key(raw)


def public_key_from_peer_id(peer_id: str) -> bytes:
    """The raw ed25519 public key inside a ``12D3KooW…`` peer id (ValueError otherwise)."""
    raw = _b58decode(peer_id)
    prefix = _IDENTITY_PREFIX + _PROTO_ED25519
    if len(raw) != len(prefix) + 32 or not raw.startswith(prefix):
        raise ValueError(f"not an ed25519 libp2p peer id: {peer_id!r}")
    return raw[len(prefix) :]


def sign(seed: bytes, data: bytes) -> bytes:
    """Detached ed25519 signature of ``data`` by the key of ``seed``.

    Sign a domain-separated message (e.g. ``b"cairn-an_0\\x00" + body``), never bare bytes
    that some other protocol using the same key might also sign.
    """
    return Ed25519PrivateKey.from_private_bytes(bytes(seed)).sign(bytes(data))


def verify(peer_id: str, data: bytes, signature: bytes) -> bool:
    """True if ``signature`` over ``data`` was made by the key of ``peer_id``."""
    try:
        key = Ed25519PublicKey.from_public_bytes(public_key_from_peer_id(peer_id))
        key.verify(bytes(signature), bytes(data))
        return True
    except (InvalidSignature, ValueError):
        return False
