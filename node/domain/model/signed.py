"""Kinds that carry their author's ed25519 signature in a ``sig`` field of their content.

The signature covers the DAG-CBOR bytes of the same envelope without ``sig``, so it is as canonical as
the object itself. Who the author is depends on the kind (a dataset key, a node key): the caller passes
the public key to ``verify``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, Self

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from node.domain.model.codec import encode
from node.support.errors import InvalidObject


class Signed:
    """Mixin for a frozen Kind dataclass with a ``sig: bytes`` field and an ``_unsigned()`` content."""

    typed_version: ClassVar[str]  # set by each Kind subclass, as in Kind itself
    sig: bytes

    def _unsigned(self) -> dict[str, Any]:
        raise NotImplementedError

    def _content(self) -> Any:
        return {**self._unsigned(), "sig": self.sig}

    def signing_bytes(self) -> bytes:
        return encode({"typedVersion": self.typed_version, "content": self._unsigned()})

    def signed(self, sign: Callable[[bytes], bytes]) -> Self:
        return replace(self, sig=sign(self.signing_bytes()))  # type: ignore[type-var]  # mixed into dataclasses only

    def _who(self) -> str:
        return self.typed_version

    def verify(self, key: Ed25519PublicKey) -> None:
        try:
            key.verify(self.sig, self.signing_bytes())
        except InvalidSignature:
            raise InvalidObject(f"{self._who()}: the signature does not verify with the signer's key") from None
