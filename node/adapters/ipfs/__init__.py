"""IPFS layer: an async client of Kubo's RPC API and the node's own managed Kubo daemon."""

from node.adapters.ipfs.addr import api_base_url, api_url_from_address
from node.adapters.ipfs.car import CarSummary, CarVerifier, read_car
from node.adapters.ipfs.kubo_client import KuboClient
from node.adapters.ipfs.managed import (
    HOME_SECRET,
    KUBO_VERSION,
    ExitInfo,
    ManagedKubo,
    find_kubo_binary,
    home_kubo_auth,
)
from node.domain.ports.block_store import (
    AddResult,
    BlockStat,
    KeyInfo,
    KuboVersion,
    NamePublished,
    NodeIdentity,
    PeerInfo,
)

__all__ = [
    "HOME_SECRET",
    "KUBO_VERSION",
    "AddResult",
    "BlockStat",
    "CarSummary",
    "CarVerifier",
    "ExitInfo",
    "KeyInfo",
    "KuboClient",
    "KuboVersion",
    "ManagedKubo",
    "NamePublished",
    "NodeIdentity",
    "PeerInfo",
    "api_base_url",
    "api_url_from_address",
    "find_kubo_binary",
    "home_kubo_auth",
    "read_car",
]
