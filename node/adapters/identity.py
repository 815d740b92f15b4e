"""The node's ed25519 identity and the names derived from it.

- ``peer_id``: the libp2p peer id of the key (``12D3KooW…``), computed by libp2p itself
  (:func:`p2p.ids.peer_id`), so it is the id the p2p host proves to its peers.
- ``node_key``: ``did:key:z6Mk…`` (multicodec ``ed25519-pub`` 0xed, base58btc), the form others put
  in their trust lists and the same did:key style that dataset ids use (DESIGN.md, Datasets).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from multiformats import multibase

from node.support.errors import ConfigError, InvalidInput
from p2p.ids import peer_id

_ED25519_PUB_MULTICODEC = b"\xed\x01"  # varint of 0xed


@dataclass(frozen=True)
class Identity:
    private_key: Ed25519PrivateKey

    @property
    def public_bytes(self) -> bytes:
        return self.private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def seed(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )

    @property
    def peer_id(self) -> str:
        return peer_id(self.public_bytes)

    @property
    def node_key(self) -> str:
        return did_key(self.public_bytes)

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)


def did_key(public_bytes: bytes) -> str:
    return "did:key:" + multibase.encode(_ED25519_PUB_MULTICODEC + public_bytes, "base58btc")


def public_key_from_did(did: str) -> Ed25519PublicKey:
    try:
        if not did.startswith("did:key:z"):
            raise ValueError
        raw = multibase.decode(did[len("did:key:") :])
        if raw[:2] != _ED25519_PUB_MULTICODEC or len(raw) != 34:
            raise ValueError
        return Ed25519PublicKey.from_public_bytes(raw[2:])
    except ValueError:
        raise InvalidInput(f"not an ed25519 did:key: {did!r}") from None


def generate() -> Identity:
    return Identity(Ed25519PrivateKey.generate())


def save(identity: Identity, path: Path) -> None:
    pem = identity.private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_private(path, pem)


def load(path: Path) -> Identity:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise ConfigError(f"no node key at {path}: run `cairn init`") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not a PEM private key ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path}: the node key must be ed25519")
    return Identity(key)


def write_private(path: Path, data: bytes) -> None:
    """Write a secret so that it is never readable by others, not even for an instant."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
