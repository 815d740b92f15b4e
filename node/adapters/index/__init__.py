"""The node's local index: names → dataset heads, executions, peers' claims and refusals, trust and signer scores,
owed pins, result shapes, facts about versions. ``Index`` holds one repository per family
(``node.domain.ports.repositories``): SQLite (WAL, one connection) or, ``Index.in_memory()``, their in-memory twins."""

from node.adapters.index.aggregate import MEMORY, Index
from node.domain.ports.records import TRUST_LABELS, ClaimRow, DatasetRow, Divergence, ExecutionRow, trust_strength

__all__ = ["MEMORY", "TRUST_LABELS", "ClaimRow", "DatasetRow", "Divergence", "ExecutionRow", "Index", "trust_strength"]
