"""The domain: Cairn's objects and their encodings (``model``), SQL rules (``sql``: canonical form,
determinism, rewrites) and the ports (``ports``): IO-free, importing only ``node.support``."""
