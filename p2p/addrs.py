"""Which of a node's addresses to tell others first.

A node with several interfaces (a container, a host on a LAN and the internet) has addresses of every scope, and
an announcement carries at most 8 (node/services/resolve/claim_checks.py): public ones first, then private, link-local
and
loopback last (another host dialling a loopback address reaches itself, and the `/p2p/` id check refuses it), so
a cut keeps the ones a far peer can dial. The order within a scope is kept.
"""

from __future__ import annotations

import ipaddress


def scope(addr: str) -> int:
    """0 public or a DNS name, 1 private (RFC 1918, ULA, shared), 2 link-local, 3 loopback or unspecified."""
    parts = addr.split("/")
    if len(parts) < 3 or parts[1] not in ("ip4", "ip6"):
        return 0
    try:
        ip = ipaddress.ip_address(parts[2])
    except ValueError:
        return 0
    if ip.is_loopback or ip.is_unspecified:
        return 3
    if ip.is_link_local:
        return 2
    return 1 if ip.is_private or ip in ipaddress.ip_network("100.64.0.0/10") else 0


def reachability_order(addrs: list[str]) -> list[str]:
    return sorted(addrs, key=scope)
