"""The libp2p host of a Cairn node (py-libp2p 0.8.1, trio) behind an asyncio facade.

- ``p2p.host``: :class:`~p2p.host.P2PHost`, the facade: identity, lifecycle, and each job handed to its module:
  ``p2p.stack`` (the py-libp2p host: TCP + Noise + yamux, identify, ping), ``p2p.gossip`` (gossipsub, topic
  handlers, forwarders), ``p2p.requests`` (request/response protocols, kept streams), ``p2p.connections``
  (remembered / bootstrap / mDNS peers dialled, connection events, ping), ``p2p.probe`` (the accept probe).
- ``p2p.bridge``: the asyncio ↔ trio bridge (one trio thread per host).
- ``p2p.peers``: the peer table and its JSON file.
- ``p2p.streams``, ``p2p.multiaddrs``, ``p2p.failures``, ``p2p.callbacks``: stream and frame helpers; multiaddr
  and peer-id parsing; libp2p's nested errors as one line; the node's callback types and their asyncio tasks.
- ``p2p.guard``: the connection, stream and frame budgets Cairn puts around py-libp2p (slots given back, the
  receive window enforced, streams and partial frames bounded).
- ``p2p.ids``: the peer id of an ed25519 key, computed by libp2p (the one peer-id function).
- ``p2p.errors``: ``P2PError`` / ``P2PTimeout`` (the node maps them to its own errors where it calls p2p);
  ``p2p.logs``: libp2p's logging tamed.

This package imports nothing of ``node`` but the leaf ``node.support.errors`` (for ``one_line``): it carries bytes,
peer-id strings and callbacks.
See ``docs/p2p.md``.
"""
