"""The py-libp2p host Cairn runs: TCP with Noise and yamux only, one connection per peer, the inbound connection
cap of ``HostLimits``, optional mDNS; and the guards of ``p2p/guard.py`` installed on its swarm. Built in the
trio thread, not yet running."""

from __future__ import annotations

from typing import Any

import multiaddr

from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p import new_host  # noqa: E402
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair  # noqa: E402
from libp2p.custom_types import TProtocol  # noqa: E402
from libp2p.network.config import ConnectionConfig  # noqa: E402
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID  # noqa: E402
from libp2p.security.noise.transport import Transport as NoiseTransport  # noqa: E402
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID  # noqa: E402
from libp2p.stream_muxer.yamux.yamux import Yamux  # noqa: E402

from p2p.guard import HostLimits, StreamGuard, install  # noqa: E402

# libp2p keeps this many connection slots for its own dials: the swarm's inbound slots are its connection cap less
# this (py-libp2p's ConnectionConfig: max_connections - min_connections).
OUTBOUND_RESERVE = 50


def build_host(
    key_pair: Any,
    listen: list[multiaddr.Multiaddr],
    *,
    mdns: bool,
    dial_timeout: float,
    limits: HostLimits,
    streams: StreamGuard,
) -> Any:
    host = new_host(
        key_pair=key_pair,
        # Noise + yamux only: the default also offers TLS, secio and plaintext.
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
        listen_addrs=listen,
        enable_mDNS=mdns,
        connection_config=connection_config(limits, dial_timeout),
    )
    install(host.get_network(), streams)  # p2p/guard.py: slots given back, windows and budgets enforced
    return host


def connection_config(limits: HostLimits, dial_timeout: float) -> ConnectionConfig:
    inbound = max(1, limits.inbound_connections)
    return ConnectionConfig(
        # One connection per peer. Also removes a 250 ms wait from every dial: the swarm
        # otherwise waits out its happy-eyeballs delay hoping for a second connection.
        max_connections_per_peer=1,
        dial_timeout=dial_timeout,
        max_connections=inbound + OUTBOUND_RESERVE,
        min_connections=OUTBOUND_RESERVE,
        low_watermark=OUTBOUND_RESERVE,
        high_watermark=inbound + OUTBOUND_RESERVE,
    )
