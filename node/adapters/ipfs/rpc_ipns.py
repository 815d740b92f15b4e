"""Kubo's key and IPNS calls: keys made, imported and listed; names published and resolved."""

from __future__ import annotations

from multiformats import CID

from node.adapters.ipfs.rpc_transport import KuboTransport, duration, multipart
from node.domain.model.cid import cid_str
from node.domain.ports.block_store import KeyInfo, NamePublished


class KeyCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport

    async def gen(self, name: str, type: str = "ed25519", *, timeout: float | None = None) -> KeyInfo:
        obj = await self._rpc.json_object("key/gen", [("arg", name), ("type", type)], timeout=timeout)
        return KeyInfo(name=obj["Name"], id=obj["Id"])

    async def import_pem(self, name: str, pem: bytes, *, timeout: float | None = None) -> str:
        """Import a PKCS#8 PEM private key under ``name``; returns its IPNS name (k51…)."""
        params = [("arg", name), ("format", "pem-pkcs8-cleartext")]
        obj = await self._rpc.json_object("key/import", params, body=multipart(bytes(pem), "key.pem"), timeout=timeout)
        return str(obj["Id"])

    async def ls(self, *, timeout: float | None = None) -> list[KeyInfo]:
        obj = await self._rpc.json_object("key/list", timeout=timeout)
        return [KeyInfo(name=k["Name"], id=k["Id"]) for k in obj.get("Keys") or ()]


class NameCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport

    async def publish(
        self,
        target: CID | str,
        key: str = "self",
        lifetime: str | float = "48h",
        *,
        ttl: str | float | None = None,
        allow_offline: bool = True,
        resolve: bool = True,
        timeout: float | None = None,
    ) -> NamePublished:
        """Point the IPNS name of ``key`` at ``target`` (a CID, or an /ipfs/ or /ipns/ path)."""
        path = (
            target
            if isinstance(target, str) and target.startswith(("/ipfs/", "/ipns/"))
            else f"/ipfs/{cid_str(target, keep_v0=True)}"
        )
        params = [
            ("arg", path),
            ("key", key),
            ("lifetime", duration(lifetime)),
            ("ttl", duration(ttl) if ttl is not None else None),
            ("allow-offline", allow_offline),
            ("resolve", resolve),
        ]
        obj = await self._rpc.json_object("name/publish", params, timeout=timeout)
        return NamePublished(name=obj["Name"], value=obj["Value"])

    async def resolve(
        self, name: str, *, recursive: bool = True, nocache: bool = False, timeout: float | None = None
    ) -> str:
        """The path an IPNS name points to (``/ipfs/<cid>``); KuboNotFound if it cannot be resolved."""
        params = [("arg", name), ("recursive", recursive), ("nocache", nocache or None)]
        obj = await self._rpc.json_object("name/resolve", params, timeout=timeout)
        return str(obj["Path"])
