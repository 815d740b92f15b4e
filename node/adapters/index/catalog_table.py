"""Dataset names → heads, and facts about versions, in SQLite (``node.domain.ports.repositories.CatalogRepository``)."""

from __future__ import annotations

import sqlite3

from node.adapters.index.db import Db
from node.domain.ports.records import DatasetRow
from node.support import wall_clock as clock
from node.support.errors import Conflict

_COLUMNS = "SELECT name, id, head, ipns, key_name, created, updated FROM datasets"


class SqliteCatalog:
    def __init__(self, db: Db) -> None:
        self._db = db
        self.generation = 0  # writes to the heads (node.services.resolve.answers keeps answers made at one generation)

    def _one(self, where: str, arg: str) -> DatasetRow | None:
        with self._db.locked() as db:
            row = db.execute(f"{_COLUMNS} WHERE {where} = ?", (arg,)).fetchone()
        return DatasetRow(*row) if row else None

    def dataset(self, name: str) -> DatasetRow | None:
        return self._one("name", name)

    def dataset_by_id(self, dataset_id: str) -> DatasetRow | None:
        return self._one("id", dataset_id)

    def datasets(self) -> list[DatasetRow]:
        with self._db.locked() as db:
            rows = db.execute(f"{_COLUMNS} ORDER BY name").fetchall()
        return [DatasetRow(*r) for r in rows]

    def create_dataset(self, name: str, dataset_id: str, head: str, ipns: str | None, key_name: str) -> None:
        now = clock.now()
        with self._db.locked() as db:
            try:
                db.execute(
                    "INSERT INTO datasets VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (name, dataset_id, head, ipns, key_name, now, now),
                )
            except sqlite3.IntegrityError:
                raise Conflict(f"dataset {name!r} (or its id) is in the index already") from None
            self.generation += 1

    def move_head(self, name: str, old: str, new: str) -> bool:
        with self._db.locked() as db:
            cur = db.execute(
                "UPDATE datasets SET head = ?, updated = ? WHERE name = ? AND head = ?", (new, clock.now(), name, old)
            )
            self.generation += cur.rowcount
        return cur.rowcount == 1

    def count(self) -> int:
        with self._db.locked() as db:
            return int(db.execute("SELECT COUNT(*) FROM datasets").fetchone()[0])

    def version_facts(self, head: str) -> tuple[str, int] | None:
        with self._db.locked() as db:
            row = db.execute("SELECT logical_hash, rows FROM version_facts WHERE head = ?", (head,)).fetchone()
        return (row[0], row[1]) if row else None

    def set_version_facts(self, head: str, logical_hash: str, rows: int) -> None:
        with self._db.locked() as db:
            db.execute("INSERT OR REPLACE INTO version_facts VALUES (?, ?, ?)", (head, logical_hash, rows))
