"""Ports: the ``Protocol``s services use instead of concrete adapters, and the records they carry.

Each port has a real adapter and an in-memory twin shipped in the product (tests and simulations use the twins);
one contract suite per port (``tests/contract``) runs against both, so the twins cannot drift:

- ``block_store``: content-addressed blocks, pins, UnixFS files, CARs, keys and IPNS (``node.adapters.ipfs.KuboClient``;
  twin ``node.adapters.ipfs.memory_blocks.MemoryBlockStore``);
- ``repositories``: the node's index split by what it holds (catalog, executions, claims, trust, pins, shapes;
  SQLite in ``node.adapters.index``, twins in ``node.adapters.index.memory_tables``), over the records of ``records``;
- ``sql_engine``: the engine that runs a statement over input slices (``node.services.resolve.spark.SparkWorker``; twin
  ``node.services.resolve.memory_engine.MemoryEngine``);
- ``peer_host``: the peer-to-peer transport under ``node.services.peers.network`` (``p2p.host.P2PHost``; twin
  ``p2p.memory.MemoryHost`` on a shared ``p2p.memory.MemoryNetwork``).
"""
