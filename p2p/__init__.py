"""The libp2p host of a Cairn node (py-libp2p 0.8.1, trio) behind an asyncio facade.

- ``p2p.host``: :class:`~p2p.host.P2PHost`: identity, TCP + Noise + yamux, identify, ping,
  gossipsub, request/response protocols, remembered / bootstrap / mDNS peers.
- ``p2p.bridge``: the asyncio ↔ trio bridge (one trio thread per host).
- ``p2p.peers``: the peer table and its JSON file.
- ``p2p.guard``: the connection, stream and frame budgets Cairn puts around py-libp2p (slots given back, the
  receive window enforced, streams and partial frames bounded).
- ``p2p.ids``: the peer id of an ed25519 key, computed by libp2p (the one peer-id function).
- ``p2p.errors``: ``P2PError`` / ``P2PTimeout`` (the node maps them to its own errors where it calls p2p);
  ``p2p.logs``: libp2p's logging tamed.

This package imports nothing of ``node`` but the leaf ``node.errors`` (for ``one_line``): it carries bytes,
peer-id strings and callbacks.
See ``docs/p2p.md``.
"""
