"""The libp2p host a node runs when no other transport is given: made from ``peers.*`` (docs/p2p.md)."""

from __future__ import annotations

from typing import Any

from config import PeerSettings
from node.adapters.identity import Identity
from node.domain.ports.peer_host import PeerHost
from node.support.errors import ConfigError
from p2p.host import HostLimits, P2PError, P2PHost
from p2p.memory import MemoryHost


def libp2p_host(settings: PeerSettings, identity: Identity, peerstore: Any) -> P2PHost:
    try:
        return P2PHost(
            identity.seed,
            settings.listen,
            peerstore_path=peerstore,
            bootstrap=settings.bootstrap,
            mdns=settings.mdns,
            announce=settings.announce,
            limits=host_limits(settings),
        )
    except P2PError as e:  # a bad peers.listen / peers.bootstrap multiaddr: the node's own config
        raise ConfigError(f"p2p host: {e}") from None


def _conforms(real: P2PHost, twin: MemoryHost) -> tuple[PeerHost, PeerHost]:
    """Checked by mypy: the libp2p host and its in-memory twin are PeerHosts."""
    return real, twin


def host_limits(s: PeerSettings) -> HostLimits:
    return HostLimits(
        inbound_connections=s.max_inbound_connections,
        streams_per_connection=s.max_streams_per_peer,
        streams_total=s.max_streams,
        frame_bytes_total=s.frame_budget_bytes,
        frame_bytes_per_peer=s.frame_budget_per_peer_bytes,
        frame_timeout=s.frame_timeout,
    )
