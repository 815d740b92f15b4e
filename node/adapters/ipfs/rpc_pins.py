"""Kubo's pin calls: pins added, removed and listed, never walking a DAG over the network."""

from __future__ import annotations

from multiformats import CID

from node.adapters.ipfs.rpc_transport import KuboTransport
from node.domain.model.cid import parse_cid
from node.support.errors import KuboNotFound, KuboRPCError


class PinCalls:
    def __init__(self, transport: KuboTransport) -> None:
        self._rpc = transport

    async def add(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        """Pin ``cid``; a direct pin of a CID already pinned recursively is done (Kubo refuses it as an error,
        which made a peer's answer fail when two nodes share one Kubo and the other had pinned it)."""
        params = [("arg", parse_cid(cid)), ("recursive", recursive)]
        try:
            obj = await self._rpc.json_object("pin/add", params, timeout=timeout)
        except KuboRPCError as e:
            if recursive or "already pinned recursively" not in e.kubo_message:
                raise
            return [parse_cid(cid)]
        return [parse_cid(p) for p in obj.get("Pins") or ()]

    async def rm(self, cid: CID | str, recursive: bool = True, *, timeout: float | None = None) -> list[CID]:
        params = [("arg", parse_cid(cid)), ("recursive", recursive)]
        obj = await self._rpc.json_object("pin/rm", params, timeout=timeout)
        return [parse_cid(p) for p in obj.get("Pins") or ()]

    async def ls(
        self,
        cid: CID | str | None = None,
        *,
        type: str = "all",
        timeout: float | None = None,
    ) -> dict[CID, str]:
        """Pinned CIDs -> "recursive" | "direct" | "indirect"; a CID asked for and not pinned gives {}.

        Never fetches. A pinned DAG may be incomplete (``dag put --pin`` pins a root whose linked
        blocks are absent); Kubo's own ``pin ls <cid>`` then walks it over the network until its
        timeout, even offline. So a single CID is asked about as recursive, then direct (both
        instant, no walk), and only then looked up in the offline listing of indirect pins. That
        listing (and ``type="all"``/``"indirect"`` without a CID) raises KuboRPCError when a pinned
        DAG is incomplete: the answer cannot be known, and we ask unstreamed so Kubo can say so
        (a streamed listing would just stop short, its error lost in a trailer).
        """
        if cid is None:
            return await self._listing(type, timeout)
        c = parse_cid(cid)
        for kind in ("recursive", "direct"):
            if type in (kind, "all"):
                try:
                    await self._rpc.json_object("pin/ls", [("arg", c), ("type", kind)], timeout=timeout)
                except KuboNotFound as e:
                    if "not pinned" not in e.kubo_message:
                        raise
                    continue
                return {c: kind}
        if type in ("indirect", "all") and c in await self._listing("indirect", timeout):
            return {c: "indirect"}
        return {}

    async def _listing(self, kind: str, timeout: float | None) -> dict[CID, str]:
        # offline: the walk of pinned DAGs must never wait for a block the repo lacks.
        params = [("type", kind), ("offline", True)]
        try:
            obj = await self._rpc.json_object("pin/ls", params, timeout=timeout)
        except KuboNotFound as e:
            raise KuboRPCError(
                "pin/ls",
                f"cannot list {kind} pins, a pinned DAG is incomplete: {e.kubo_message}",
                e.code,
                e.http_status,
            ) from e
        # Asked about one CID, Kubo says "indirect through <root>": we keep the kind only.
        return {parse_cid(k): v["Type"].split()[0] for k, v in (obj.get("Keys") or {}).items()}
