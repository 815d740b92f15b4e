"""Results computed here by the shape of their inputs, in SQLite (``node.domain.ports.repositories.ShapeRepository``;
node.services.resolve.supersets, docs/queries.md "Answers from supersets")."""

from __future__ import annotations

from node.adapters.index.db import Db


class SqliteShapes:
    def __init__(self, db: Db) -> None:
        self._db = db

    def add_shape(
        self, shape: str, invocation: str, statement: str, outputs: int, now: float, public: str | None = None
    ) -> None:
        with self._db.locked() as db:
            db.execute(
                "INSERT OR IGNORE INTO shapes VALUES (?, ?, ?, ?, ?, ?)",
                (shape, invocation, statement, outputs, now, public),
            )

    def shape_candidates(self, shape: str, limit: int = 32) -> list[tuple[str, str, int]]:
        with self._db.locked() as db:
            rows = db.execute(
                "SELECT invocation, statement, outputs FROM shapes WHERE shape = ? ORDER BY created DESC LIMIT ?",
                (shape, limit),
            ).fetchall()
        return [(str(a), str(b), int(c)) for a, b, c in rows]

    def shape_of(self, invocation: str) -> str | None:
        """Its announcement names it."""
        with self._db.locked() as db:
            row = db.execute(
                "SELECT public FROM shapes WHERE invocation = ? AND public IS NOT NULL LIMIT 1", (invocation,)
            ).fetchone()
        return str(row[0]) if row else None
