"""Peers' claims, refused messages and signers' replay marks, in SQLite
(``node.domain.ports.repositories.ClaimRepository``)."""

from __future__ import annotations

from dataclasses import astuple

from node.adapters.index.db import Db
from node.domain.ports.records import ClaimRow
from node.support import wall_clock as clock


class SqliteClaims:
    def __init__(self, db: Db) -> None:
        self._db = db

    def add_claim(self, c: ClaimRow) -> bool:
        """A refusal is recorded too, never as usable."""
        with self._db.locked() as db:
            cur = db.execute("INSERT OR IGNORE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", astuple(c))
        return cur.rowcount == 1

    def _listed(self, where: str, args: tuple[object, ...], limit: int) -> list[ClaimRow]:
        with self._db.locked() as db:
            rows = db.execute(f"SELECT * FROM claims{where} ORDER BY received DESC LIMIT ?", (*args, limit)).fetchall()
        return [ClaimRow(*r) for r in rows]

    def claims(self, invocation: str | None = None, limit: int = 100) -> list[ClaimRow]:
        return (
            self._listed(" WHERE invocation = ?", (invocation,), limit) if invocation else self._listed("", (), limit)
        )

    def shape_claims(self, shape: str, limit: int = 64) -> list[ClaimRow]:
        return self._listed(" WHERE shape = ?", (shape,), limit)

    def claim_count(self, peer: str | None = None, status: str | None = None) -> int:
        where = [(c, v) for c, v in (("peer", peer), ("status", status)) if v is not None]
        sql = "SELECT count(*) FROM claims" + (" WHERE " + " AND ".join(f"{c} = ?" for c, _ in where) if where else "")
        with self._db.locked() as db:
            return int(db.execute(sql, tuple(v for _, v in where)).fetchone()[0])

    def set_claim_status(self, invocation: str, signer: str, execution: str, status: str, reason: str = "") -> None:
        with self._db.locked() as db:
            db.execute(
                "UPDATE claims SET status = ?, reason = ? WHERE invocation = ? AND signer = ? AND execution = ?",
                (status, reason, invocation, signer, execution),
            )

    def prune_claims(self, peer: str, per_peer: int, total: int) -> int:
        """docs/peers.md "Floods and quotas"."""
        order = "ORDER BY status = 'accepted', received LIMIT max(0, (SELECT count(*) FROM claims {w}) - ?)"
        steps: tuple[tuple[str, tuple[object, ...]], ...] = (
            ("WHERE peer = ?", (peer, peer, per_peer)),
            ("", (total,)),
        )
        gone = 0
        with self._db.locked() as db:
            for where, args in steps:
                sql = f"DELETE FROM claims WHERE rowid IN (SELECT rowid FROM claims {where} {order.format(w=where)})"
                gone += db.execute(sql, args).rowcount
        return gone

    def log_refusal(self, peer: str, reason: str, keep: int = 1000) -> None:
        """A message too broken to be a claim at all (bad signature, not an an_0): kept for `cairn announcements`
        (peers choose how many they send, so only the last ``keep``)."""
        with self._db.locked() as db:
            db.execute("INSERT INTO refusals VALUES (?, ?, ?)", (peer, reason, clock.now()))
            db.execute(
                "DELETE FROM refusals WHERE rowid <= (SELECT rowid FROM refusals ORDER BY rowid DESC LIMIT 1 OFFSET ?)",
                (keep,),
            )

    def refusals(self, limit: int = 100) -> list[tuple[str, str, float]]:
        with self._db.locked() as db:
            rows = db.execute("SELECT peer, reason, received FROM refusals ORDER BY received DESC LIMIT ?", (limit,))
            return [(str(p), str(r), float(t)) for p, r, t in rows.fetchall()]

    def signer_mark(self, signer: str) -> float | None:
        with self._db.locked() as db:
            row = db.execute("SELECT newest FROM signer_marks WHERE signer = ?", (signer,)).fetchone()
        return None if row is None else float(row[0])

    def set_signer_mark(self, signer: str, newest: float, keep: int) -> None:
        """A forgotten signer's replays are then refused only while remembered in memory
        (node.services.peers.admission)."""
        with self._db.locked() as db:
            cur = db.execute(
                "UPDATE signer_marks SET newest = max(newest, ?), moved = ? WHERE signer = ?",
                (newest, clock.now(), signer),
            )
            if cur.rowcount:
                return
            db.execute("INSERT INTO signer_marks VALUES (?, ?, ?)", (signer, newest, clock.now()))
            db.execute(
                "DELETE FROM signer_marks WHERE rowid IN (SELECT rowid FROM signer_marks ORDER BY moved "
                "LIMIT max(0, (SELECT count(*) FROM signer_marks) - ?))",
                (keep,),
            )
