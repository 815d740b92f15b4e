"""Trusted keys by community and signers' scores, in SQLite (``node.domain.ports.repositories.TrustRepository``)."""

from __future__ import annotations

from node.adapters.index.db import Db
from node.support import wall_clock as clock


class SqliteTrust:
    def __init__(self, db: Db) -> None:
        self._db = db

    def trust_add(self, key: str, community: str) -> None:
        with self._db.locked() as db:
            db.execute("INSERT OR IGNORE INTO trust VALUES (?, ?, ?)", (key, community, clock.now()))

    def trust_rm(self, key: str, community: str | None) -> int:
        with self._db.locked() as db:
            if community is None:
                return db.execute("DELETE FROM trust WHERE key = ?", (key,)).rowcount
            return db.execute("DELETE FROM trust WHERE key = ? AND community = ?", (key, community)).rowcount

    def trusted(self, community: str | None = None) -> list[tuple[str, str]]:
        with self._db.locked() as db:
            if community is None:
                rows = db.execute("SELECT key, community FROM trust ORDER BY community, key").fetchall()
            else:
                rows = db.execute(
                    "SELECT key, community FROM trust WHERE community = ? ORDER BY key", (community,)
                ).fetchall()
        return [(str(k), str(c)) for k, c in rows]

    def signer_score(self, key: str) -> tuple[int, int]:
        with self._db.locked() as db:
            row = db.execute("SELECT accepted, refused FROM signer_scores WHERE key = ?", (key,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def score(self, signer: str, accepted: bool) -> None:
        col = "accepted" if accepted else "refused"
        with self._db.locked() as db:
            db.execute(
                f"INSERT INTO signer_scores (key, {col}) VALUES (?, 1) "
                f"ON CONFLICT(key) DO UPDATE SET {col} = {col} + 1",
                (signer,),
            )
