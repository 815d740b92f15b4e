"""Adapters: Kubo and IPFS (``ipfs``), the SQLite index (``index``), the node's keys and home directory, with
the in-memory twins of the ports beside their real implementations."""
