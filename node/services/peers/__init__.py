"""The node among its peers: announcements, lookups and catch-up over the p2p host (``docs/p2p.md``).

- ``node.services.peers.network.Network``: the IO loop tying the libp2p host (``p2p``) to the resolver and the index;
- ``node.services.peers.claim_intake`` (IO-free) and ``node.services.peers.claim_receiver`` (its IO): what peers send,
admitted,
  recorded or refused, within the limits of ``node.services.peers.admission``;
- ``node.services.peers.own_claims``: our results as peers get them (signed announcements, carried blocks, answers);
- ``node.services.peers.outbound_choices`` (IO-free): what is announced and sent, and whom is asked;
- ``node.services.peers.host_setup``: the libp2p host made from ``peers.*``.
"""

from node.services.peers.network import CATCHUP, HAVE, LOOKUP, TOPIC, Network

__all__ = ["CATCHUP", "HAVE", "LOOKUP", "TOPIC", "Network"]
