"""Pins and blocks owed to the block store, in SQLite (``node.domain.ports.repositories.PinRepository``)."""

from __future__ import annotations

from collections.abc import Sequence

from node.adapters.index.db import Db
from node.domain.ports.repositories import PendingPin
from node.support import wall_clock as clock


class SqlitePins:
    def __init__(self, db: Db) -> None:
        self._db = db

    def queue_pins(self, pins: list[PendingPin], blocks: Sequence[tuple[str, bytes]] = ()) -> None:
        """One transaction."""
        now = clock.now()
        with self._db.locked() as db:
            db.execute("BEGIN")
            try:
                db.executemany(
                    "INSERT OR IGNORE INTO pending_blocks VALUES (?, ?, ?)", [(c, d, now) for c, d in blocks]
                )
                db.executemany(
                    "INSERT OR IGNORE INTO pending_pins VALUES (?, ?, ?, ?)",
                    [(c, int(r), int(p), now) for c, r, p in pins],
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def pending_pins(self, limit: int = 1000) -> list[PendingPin]:
        with self._db.locked() as db:
            rows = db.execute(
                "SELECT cid, recursive, provide FROM pending_pins ORDER BY added, rowid LIMIT ?", (limit,)
            ).fetchall()
        return [(c, bool(r), bool(p)) for c, r, p in rows]

    def pending_blocks(self, limit: int = 1000) -> list[tuple[str, bytes]]:
        with self._db.locked() as db:
            rows = db.execute("SELECT cid, data FROM pending_blocks ORDER BY added, rowid LIMIT ?", (limit,)).fetchall()
        return [(c, bytes(d)) for c, d in rows]

    def blocks_done(self, cids: Sequence[str]) -> None:
        with self._db.locked() as db:
            db.executemany("DELETE FROM pending_blocks WHERE cid = ?", [(c,) for c in cids])

    def pin_done(self, cid: str, recursive: bool) -> None:
        with self._db.locked() as db:
            db.execute("DELETE FROM pending_pins WHERE cid = ? AND recursive = ?", (cid, int(recursive)))
