"""The node among its peers: announcements, lookups and catch-up over the p2p host (``docs/p2p.md``).

``node.peers.network.Network`` ties the libp2p host (``p2p``) to the resolver and the index.
"""

from node.peers.network import CATCHUP, HAVE, LOOKUP, TOPIC, Network

__all__ = ["CATCHUP", "HAVE", "LOOKUP", "TOPIC", "Network"]
