"""Answers held here, peers' disagreeing answers and output names, in SQLite
(``node.domain.ports.repositories.ExecutionRepository``)."""

from __future__ import annotations

import json
from dataclasses import astuple
from typing import Any

from node.adapters.index.db import Db
from node.domain.model import Failure
from node.domain.ports.records import STRENGTH, Divergence, ExecutionRow, trust_strength

_STRENGTH_SQL = "CASE executions.trust " + " ".join(f"WHEN '{k}' THEN {v}" for k, v in STRENGTH.items()) + " ELSE 0 END"
_COLUMNS = (
    "invocation, query, execution, receipt, logical_hash, rows, structure, slices, source, created, trust, profile, "
    "failure"
)
# First writer wins, except that a better-checked answer replaces a looser one (a row computed here replaces a
# peer's unverified row: a stricter request that computed must find its own row), and a result computed here
# replaces a recorded failure (a retry that succeeded).
_UPSERT = (
    f"INSERT INTO executions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(invocation) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS.split(", ")[1:])
    + f" WHERE ? > {_STRENGTH_SQL} OR (? AND executions.failure IS NOT NULL)"
)


def _failure_json(f: Failure | None) -> str | None:
    return None if f is None else json.dumps([f.error_class, f.sqlstate, f.message])


def _failure_of(text: str | None) -> Failure | None:
    return None if text is None else Failure(*json.loads(text))


def _row(r: tuple[Any, ...]) -> ExecutionRow:
    inv, query, execution, receipt, logical_hash, rows, structure, slices, source, created, trust, profile, fail = r
    return ExecutionRow(
        str(inv),
        str(query),
        str(execution),
        str(receipt),
        str(logical_hash),
        int(rows),
        str(structure),
        tuple(json.loads(str(slices))),
        str(source),
        float(created),
        str(trust),
        None if profile is None else str(profile),
        _failure_of(None if fail is None else str(fail)),
    )


class SqliteExecutions:
    def __init__(self, db: Db) -> None:
        self._db = db
        self.generation = 0  # writes of executions (see SqliteCatalog.generation)

    def execution(self, invocation: str) -> ExecutionRow | None:
        with self._db.locked() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM executions WHERE invocation = ?", (invocation,)).fetchone()
        return _row(row) if row else None

    def add_execution(self, e: ExecutionRow) -> None:
        retried = int(e.failure is None and e.trust in ("computed", "recomputed-agreed"))
        values = (*astuple(e)[:7], json.dumps(list(e.slices)), e.source, e.created, e.trust, e.profile)
        with self._db.locked() as db:
            db.execute(_UPSERT, (*values, _failure_json(e.failure), trust_strength(e.trust), retried))
            self.generation += 1

    def _where(self, sql: str, args: tuple[object, ...]) -> list[ExecutionRow]:
        with self._db.locked() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM executions {sql}", args).fetchall()
        return [_row(r) for r in rows]

    def executions(self, limit: int = 1000) -> list[ExecutionRow]:
        return self._where("ORDER BY created DESC LIMIT ?", (limit,))

    def executions_by_cid(self, execution: str) -> ExecutionRow | None:
        found = self._where("WHERE execution = ? LIMIT 1", (execution,))
        return found[0] if found else None

    def executions_with_slice(self, slice_cid: str, limit: int = 16) -> list[ExecutionRow]:
        """No object links a slice back to what wrote it: the slice lists are searched."""
        pattern = '%"' + slice_cid.replace("%", "").replace("_", "") + '"%'
        found = self._where("WHERE slices LIKE ? ORDER BY created LIMIT ?", (pattern, limit))
        return [e for e in found if slice_cid in e.slices]

    def count(self) -> int:
        with self._db.locked() as db:
            return int(db.execute("SELECT COUNT(*) FROM executions").fetchone()[0])

    def add_divergence(self, d: Divergence) -> bool:
        """Our own answer stays the cached one."""
        with self._db.locked() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO divergences VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", astuple(d)
            )
        return cur.rowcount == 1

    def divergences(self, invocation: str | None = None, limit: int = 100) -> list[Divergence]:
        where = " WHERE invocation = ?" if invocation else ""
        with self._db.locked() as db:
            rows = db.execute(
                f"SELECT * FROM divergences{where} ORDER BY received DESC LIMIT ?",
                ((invocation,) if invocation else ()) + (limit,),
            ).fetchall()
        return [Divergence(*r) for r in rows]

    def divergence_count(self) -> int:
        with self._db.locked() as db:
            return int(db.execute("SELECT COUNT(*) FROM divergences").fetchone()[0])

    def output_names(self, execution: str) -> list[str] | None:
        with self._db.locked() as db:
            row = db.execute("SELECT names FROM output_names WHERE execution = ?", (execution,)).fetchone()
        return list(json.loads(row[0])) if row else None

    def set_output_names(self, execution: str, names: list[str]) -> None:
        """The column names a user's query gave an execution (its outputs are positional: _0, _1, …), what
        ``/data`` shows. The first query to ask wins."""
        with self._db.locked() as db:
            db.execute("INSERT OR IGNORE INTO output_names VALUES (?, ?)", (execution, json.dumps(names)))
