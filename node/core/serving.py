"""``node.serving``: what this node gives others by CID, from what it holds: the trustless gateway ``/ipfs/``
(docs/gateway.md) and the ODF Simple Transfer Protocol ``/odf/`` (docs/datasets.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from config import Settings
from node.adapters.ipfs import KuboClient
from node.adapters.ipfs.gateway_client import Answer, GatewayClient
from node.domain.model import CID, cid_str
from node.services.datasets import Datasets, block_of_dataset, slice_of_dataset
from node.support.errors import KuboNotFound, NotFound


class Serving:
    def __init__(self, settings: Settings, kubo: KuboClient, datasets: Datasets, gateway: GatewayClient) -> None:
        self._timeout = settings.ipfs.timeout
        self._kubo, self._datasets, self._gateway = kubo, datasets, gateway

    async def holds(self, cid: CID) -> bool:
        """Whether this node's Kubo has the block, asked offline: never fetched from the network."""
        try:
            await self._kubo.block_stat(cid, timeout=5.0, offline=True)
        except KuboNotFound:
            return False
        return True

    async def held(self, cid: CID) -> None:
        """The gateway serves what this node holds, at once (an absent CID is not searched for on a network this
        node may not be connected to); 404 otherwise, as Kubo's gateway with Gateway.NoFetch."""
        if not await self.holds(cid):
            raise NotFound(f"this node does not hold {cid_str(cid)}: fetch it first (`cairn pull CID`, or a query)")

    def gateway_url(self) -> str | None:
        """The Kubo gateway ``/ipfs/`` relays (None: none is configured)."""
        return self._gateway.url

    def gateway_open(
        self, method: str, path: str, query: str, headers: Mapping[str, str]
    ) -> AbstractAsyncContextManager[Answer]:
        """The Kubo gateway's answer to ``/ipfs/{path}``, every block it sends hash-checked
        (node.adapters.ipfs.gateway_client)."""
        return self._gateway.open(method, path, query, headers)

    async def odf_head(self, dataset: str) -> CID:
        return (await self._datasets.resolve(dataset))[1].head

    async def odf_block(self, dataset: str, cid: CID) -> bytes:
        return await block_of_dataset(self._datasets, dataset, cid)

    async def odf_data(self, dataset: str, cid: CID) -> Path:
        return await slice_of_dataset(self._datasets, dataset, cid)

    async def raw_block(self, cid: CID) -> bytes:
        """One block from Kubo, checked against its CID (the client re-hashes it)."""
        return await self._kubo.block_get(cid, timeout=self._timeout, offline=True)

    def car_export(self, cid: CID) -> AsyncIterator[bytes]:
        """The DAG under ``cid`` as a CAR stream; every block is hash-checked as it passes."""
        return self._kubo.dag_export(cid, timeout=self._timeout, verify=True, offline=True)

    def cat(self, cid: CID) -> AsyncIterator[bytes]:
        """A UnixFS file's bytes. Kubo re-hashes every block it reads (Datastore.HashOnRead on the managed
        Kubo) and bitswap checks every block it fetches."""
        return self._kubo.cat(cid, timeout=self._timeout, offline=True)
