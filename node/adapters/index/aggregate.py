"""``Index``: the node's index as six repositories (``node.domain.ports.repositories``), on SQLite or in memory."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from node.adapters.index.catalog_table import SqliteCatalog
from node.adapters.index.claim_table import SqliteClaims
from node.adapters.index.db import Db
from node.adapters.index.execution_table import SqliteExecutions
from node.adapters.index.memory_tables import (
    MemoryCatalog,
    MemoryClaims,
    MemoryExecutions,
    MemoryPins,
    MemoryShapes,
    MemoryTrust,
)
from node.adapters.index.pin_table import SqlitePins
from node.adapters.index.shape_table import SqliteShapes
from node.adapters.index.trust_table import SqliteTrust
from node.domain.ports.repositories import (
    CatalogRepository,
    ClaimRepository,
    ExecutionRepository,
    PinRepository,
    ShapeRepository,
    TrustRepository,
)

MEMORY = Path(":memory:")  # the path of an index that lives in memory (``Index.in_memory``)


class Index:
    """``Index(path)``: the SQLite index at ``path`` (its repositories share one connection);
    ``Index.in_memory()``: the same repositories as in-memory twins."""

    catalog: CatalogRepository
    results: ExecutionRepository
    peer_claims: ClaimRepository
    trust: TrustRepository
    pins: PinRepository
    shapes: ShapeRepository

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store: Db | None = None
        if path == MEMORY:
            self.catalog, self.results, self.peer_claims = MemoryCatalog(), MemoryExecutions(), MemoryClaims()
            self.trust, self.pins, self.shapes = MemoryTrust(), MemoryPins(), MemoryShapes()
            return
        self._store = db = Db(path)
        self.catalog, self.results, self.peer_claims = SqliteCatalog(db), SqliteExecutions(db), SqliteClaims(db)
        self.trust, self.pins, self.shapes = SqliteTrust(db), SqlitePins(db), SqliteShapes(db)

    @classmethod
    def in_memory(cls) -> Index:
        return cls(MEMORY)

    @property
    def _db(self) -> sqlite3.Connection | None:
        """The SQLite connection (None in memory): for tests that reach under the repositories."""
        return None if self._store is None else self._store.conn

    @property
    def generation(self) -> int:
        """Changes at every write to the tables a query's answer is read from (heads, executions):
        node.services.resolve.answers keeps answers made at one generation only."""
        return self.catalog.generation + self.results.generation

    def count(self, table: str) -> int:
        """Rows in ``table`` (datasets, executions or divergences), as the node's status reports them."""
        counts = {"datasets": self.catalog.count, "executions": self.results.count}
        counts["divergences"] = self.results.divergence_count
        if table not in counts:
            raise ValueError(table)
        return counts[table]()

    def set_claim_status(
        self, invocation: str, signer: str, execution: str, status: str, reason: str = "", score: bool = True
    ) -> None:
        """Judge a peer's claim and, with ``score``, count it for or against its signer: two repositories kept in
        step. ``score`` False: a policy refusal (such as an untrusted signer in community mode) says nothing about
        the claim's truth."""
        self.peer_claims.set_claim_status(invocation, signer, execution, status, reason)
        if score:
            self.trust.score(signer, status == "accepted")

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
