"""Multiaddrs and peer ids as the host takes and gives them: parsed with one-line errors, fixed listen ports
checked free, wildcard listen addresses expanded to what others can dial, a connection's remote address."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

import multiaddr

from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p.peer.id import ID  # noqa: E402
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr  # noqa: E402

from node.support.errors import one_line  # noqa: E402
from p2p.errors import P2PBadInput, P2PError  # noqa: E402
from p2p.peers import strip_p2p  # noqa: E402


def parse_listen_addr(addr: str) -> multiaddr.Multiaddr:
    try:
        return multiaddr.Multiaddr(addr)
    except Exception as e:  # noqa: BLE001 - multiaddr raises several types
        raise P2PBadInput(f"bad listen multiaddr {addr!r}: {one_line(e)}") from None


def parse_peer_addr(addr: str) -> PeerInfo:
    try:
        ma = multiaddr.Multiaddr(addr)
    except Exception as e:  # noqa: BLE001
        raise P2PBadInput(f"bad multiaddr {addr!r}: {one_line(e)}") from None
    try:
        return info_from_p2p_addr(ma)
    except Exception:  # noqa: BLE001
        raise P2PBadInput(f"multiaddr {addr!r} must end with /p2p/<peer id>") from None


def parse_peer_id(peer_id: str) -> ID:
    try:
        return ID.from_base58(peer_id)
    except Exception:  # noqa: BLE001
        raise P2PBadInput(f"bad peer id {peer_id!r}") from None


def check_ports_free(listen: Iterable[str]) -> None:
    """Refuse fixed TCP ports already in use.

    libp2p binds with SO_REUSEPORT, so a second node on the same port would *share* it (the
    kernel splitting incoming connections between the two) instead of failing.
    """
    for addr in listen:
        parts = addr.split("/")
        if len(parts) < 5 or parts[1] not in ("ip4", "ip6") or parts[3] != "tcp" or parts[4] in ("", "0"):
            continue
        family = socket.AF_INET if parts[1] == "ip4" else socket.AF_INET6
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # SO_REUSEADDR: TIME_WAIT leftovers of our previous run are fine; a listener is not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((parts[2], int(parts[4])))
            except OSError as e:
                raise P2PError(f"cannot listen on {addr}: {e.strerror or e}") from None


def dialable(addrs: Iterable[Any]) -> list[str]:
    """Listen addresses as others can dial them: wildcards expanded to interface addresses."""
    from libp2p.utils.address_validation import expand_wildcard_address

    out: list[str] = []
    for a in addrs:
        text = strip_p2p(str(a))
        parts = text.split("/")
        if len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[2] in ("0.0.0.0", "::"):
            loopback = "127.0.0.1" if parts[1] == "ip4" else "::1"
            try:
                expanded = [strip_p2p(str(x)) for x in expand_wildcard_address(multiaddr.Multiaddr(text))]
            except Exception:  # noqa: BLE001
                expanded = []
            candidates = [x for x in expanded if x != text] + ["/".join(parts[:2] + [loopback] + parts[3:])]
        else:
            candidates = [text]
        out.extend(c for c in candidates if c not in out)
    return out


def remote_addr(conn: Any) -> str | None:
    try:
        ip, port = conn.muxed_conn.get_remote_address()
    except Exception:  # noqa: BLE001
        return None
    return f"/{'ip6' if ':' in str(ip) else 'ip4'}/{ip}/tcp/{port}"
