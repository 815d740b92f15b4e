"""The node's local index (SQLite, WAL): names → dataset heads, and cached facts about versions.

SQLite is the node's memory of what it holds; IPFS holds the objects themselves. Every write is
one transaction, so a crash leaves either the old or the new state, never half of one.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from node import clock
from node.errors import InsufficientStorage
from node.model import Failure

SCHEMA = """
CREATE TABLE IF NOT EXISTS datasets (
    name     TEXT PRIMARY KEY,
    id       TEXT NOT NULL UNIQUE,      -- did:key of the dataset key
    head     TEXT NOT NULL,             -- CID of the newest mb_0 block
    ipns     TEXT,                      -- IPNS name of the dataset key (k51…)
    key_name TEXT NOT NULL,             -- the key's name in Kubo's keystore
    created  REAL NOT NULL,
    updated  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    invocation   TEXT PRIMARY KEY,      -- iv_0 CID: the cache key
    query        TEXT NOT NULL,         -- qy_0 CID
    execution    TEXT NOT NULL,         -- ex_0 CID
    receipt      TEXT NOT NULL,         -- rc_0 CID
    logical_hash TEXT NOT NULL,
    rows         INTEGER NOT NULL,
    structure    TEXT NOT NULL,         -- st_0 of the result
    slices       TEXT NOT NULL,         -- JSON list of output slice CIDs
    source       TEXT NOT NULL,         -- computed | peer
    created      REAL NOT NULL,
    trust        TEXT NOT NULL DEFAULT 'unverified'  -- TRUST_LABELS: how it was checked when stored
    -- profile: added by _migrate (ep_0 CID of the engine that computed it; NULL if unknown)
    -- failure: added by _migrate (JSON {class, sqlstate, message} of a recorded failure; NULL for a result)
);
CREATE TABLE IF NOT EXISTS divergences (
    invocation   TEXT NOT NULL,         -- an invocation we hold an answer for
    execution    TEXT NOT NULL,         -- our answer's ex_0
    profile      TEXT,                  -- our answer's ep_0
    logical_hash TEXT NOT NULL,         -- our answer's
    rows         INTEGER NOT NULL,
    signer       TEXT NOT NULL,         -- who claims a different answer
    peer         TEXT NOT NULL,
    their_execution    TEXT NOT NULL,
    their_receipt      TEXT NOT NULL,
    their_profile      TEXT,            -- the ep_0 its announcement names (NULL: none given)
    their_logical_hash TEXT NOT NULL,
    their_rows         INTEGER NOT NULL,
    received     REAL NOT NULL,
    PRIMARY KEY (invocation, signer, their_execution)
);
CREATE TABLE IF NOT EXISTS claims (
    invocation   TEXT NOT NULL,
    signer       TEXT NOT NULL,         -- did:key that signed the announcement
    execution    TEXT NOT NULL,
    receipt      TEXT NOT NULL,
    logical_hash TEXT NOT NULL,
    rows         INTEGER NOT NULL,
    peer         TEXT NOT NULL,         -- libp2p peer it came from
    announcement BLOB NOT NULL,         -- the signed an_0 block
    received     REAL NOT NULL,
    status       TEXT NOT NULL,         -- pending | accepted | refused
    reason       TEXT NOT NULL DEFAULT '',
    shape        TEXT,                  -- the an_0's shape (a candidate superset of our queries), NULL: none
    PRIMARY KEY (invocation, signer, execution)
);
CREATE INDEX IF NOT EXISTS claims_by_peer ON claims (peer, received);
CREATE INDEX IF NOT EXISTS claims_by_received ON claims (received);
CREATE TABLE IF NOT EXISTS refusals (
    peer     TEXT NOT NULL,
    reason   TEXT NOT NULL,
    received REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trust (
    key       TEXT NOT NULL,            -- did:key
    community TEXT NOT NULL,
    added     REAL NOT NULL,
    PRIMARY KEY (key, community)
);
CREATE TABLE IF NOT EXISTS signer_scores (
    key      TEXT PRIMARY KEY,
    accepted INTEGER NOT NULL DEFAULT 0,
    refused  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS output_names (
    execution TEXT PRIMARY KEY,         -- ex_0 CID
    names     TEXT NOT NULL             -- JSON list: the asking query's output names, for display (first wins)
);
-- Pins and provides owed for a peer's answer already given (docs/peers.md "Answer first"): written before the
-- answer, drained in the background, resumed at start, so a crash between answer and pin loses none.
CREATE TABLE IF NOT EXISTS pending_pins (
    cid       TEXT NOT NULL,
    recursive INTEGER NOT NULL,         -- 1: the block and all it links; 0: the block alone
    provide   INTEGER NOT NULL,         -- 1: also announced on the DHT once pinned
    added     REAL NOT NULL,
    PRIMARY KEY (cid, recursive)
);
-- The carried blocks a peer's answer was given with (the claim's objects, the question's), owed to our Kubo:
-- written in the transaction that owes their pins, before the answer; put right after it, then deleted (issue 18).
CREATE TABLE IF NOT EXISTS pending_blocks (
    cid       TEXT PRIMARY KEY,
    data      BLOB NOT NULL,
    added     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS version_facts (
    head         TEXT PRIMARY KEY,      -- a version (block CID)
    logical_hash TEXT NOT NULL,         -- over all rows of the version, in order
    rows         INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS shapes (
    shape        TEXT NOT NULL,         -- node.resolve.supersets.shape_of: input versions + structures
    invocation   TEXT NOT NULL,         -- an execution computed here over them (a candidate superset)
    statement    TEXT NOT NULL,         -- its canonical statement
    outputs      INTEGER NOT NULL,      -- its number of output columns
    created      REAL NOT NULL,
    public       TEXT,                  -- supersets.public_shape: the shape its announcement names (NULL: none)
    PRIMARY KEY (shape, invocation)
);
CREATE INDEX IF NOT EXISTS shapes_by_invocation ON shapes (invocation);
-- Each signing key's watermark (node/peers/limits.py Replays): a gossiped announcement of the key at or below it
-- after a restart is a replay.
CREATE TABLE IF NOT EXISTS signer_marks (
    signer   TEXT PRIMARY KEY,          -- did:key
    newest   REAL NOT NULL,             -- the newest an_0 time (its clock, unix seconds) taken here by gossip
    moved    REAL NOT NULL              -- when it last moved (our clock): the least recent go past the cap
);
CREATE INDEX IF NOT EXISTS signer_marks_by_moved ON signer_marks (moved);
"""


@dataclass(frozen=True)
class DatasetRow:
    name: str
    id: str
    head: str
    ipns: str | None
    key_name: str
    created: float
    updated: float


# Trust labels (DESIGN.md "Trust labels are facts"), weakest first; docs/peers.md.
TRUST_LABELS = ("unverified", "trusted-signer", "recomputed-agreed", "computed")
_STRENGTH = {"unverified": 0, "trusted-signer": 1, "recomputed-agreed": 2, "computed": 2}  # computed here = checked


_STRENGTH_SQL = (
    "CASE executions.trust " + " ".join(f"WHEN '{k}' THEN {v}" for k, v in _STRENGTH.items()) + " ELSE 0 END"
)


def trust_strength(label: str) -> int:
    return _STRENGTH.get(label, 0)


@dataclass(frozen=True)
class ExecutionRow:
    invocation: str
    query: str
    execution: str
    receipt: str
    logical_hash: str
    rows: int
    structure: str
    slices: tuple[str, ...]
    source: str
    created: float
    trust: str = "computed"  # one of TRUST_LABELS
    profile: str | None = None  # ep_0 CID of the engine that computed it (None: not known here)
    failure: Failure | None = None  # a recorded deterministic failure (issue 22 item 1): no slices, 0 rows


def _failure_json(f: Failure | None) -> str | None:
    return None if f is None else json.dumps([f.error_class, f.sqlstate, f.message])


def _failure_of(text: str | None) -> Failure | None:
    return None if text is None else Failure(*json.loads(text))


@dataclass(frozen=True)
class Divergence:
    """A peer's answer for an invocation we hold that disagrees with ours (DESIGN.md "Engine profile")."""

    invocation: str
    execution: str
    profile: str | None
    logical_hash: str
    rows: int
    signer: str
    peer: str
    their_execution: str
    their_receipt: str
    their_profile: str | None
    their_logical_hash: str
    their_rows: int
    received: float


@dataclass(frozen=True)
class ClaimRow:
    invocation: str
    signer: str
    execution: str
    receipt: str
    logical_hash: str
    rows: int
    peer: str
    announcement: bytes
    received: float
    status: str
    reason: str
    shape: str | None = None  # the announcement's query shape (issue 22 item 3), if it names one


class Index:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._migrate()
        # Writes to the tables a query's answer is read from (datasets, executions): node.resolve.answers keeps
        # answers made at one generation only.
        self.generation = 0

    def _migrate(self) -> None:
        """Columns added after a table was first created (rows already there keep NULL)."""
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(executions)")}
        if "profile" not in cols:
            self._db.execute("ALTER TABLE executions ADD COLUMN profile TEXT")
        if "trust" not in cols:
            # An index from before trust labels: what we computed keeps "computed"; a peer's row is unverified.
            self._db.execute("ALTER TABLE executions ADD COLUMN trust TEXT NOT NULL DEFAULT 'unverified'")
            self._db.execute("UPDATE executions SET trust = 'computed' WHERE source = 'computed'")
        if "failure" not in cols:
            self._db.execute("ALTER TABLE executions ADD COLUMN failure TEXT")
        if "shape" not in {r[1] for r in self._db.execute("PRAGMA table_info(claims)")}:
            self._db.execute("ALTER TABLE claims ADD COLUMN shape TEXT")
        self._db.execute("CREATE INDEX IF NOT EXISTS claims_by_shape ON claims (shape, received)")
        if "public" not in {r[1] for r in self._db.execute("PRAGMA table_info(shapes)")}:
            self._db.execute("ALTER TABLE shapes ADD COLUMN public TEXT")

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One statement at a time; a full disk (SQLITE_FULL) is the caller's clear 507, not a 500 (issue 15).
        SQLite rolls the failed statement back, so the index stays as it was."""
        with self._lock:
            try:
                yield
            except sqlite3.OperationalError as e:
                if e.sqlite_errorcode == sqlite3.SQLITE_FULL or InsufficientStorage.is_disk_full(e):
                    raise InsufficientStorage("the index", f"$CAIRN_HOME/{self.path.name}") from None
                raise

    def _one(self, sql: str, args: tuple[object, ...]) -> DatasetRow | None:
        with self._locked():
            row = self._db.execute(sql, args).fetchone()
        return DatasetRow(*row) if row else None

    def dataset(self, name: str) -> DatasetRow | None:
        return self._one(
            "SELECT name, id, head, ipns, key_name, created, updated FROM datasets WHERE name = ?", (name,)
        )

    def dataset_by_id(self, dataset_id: str) -> DatasetRow | None:
        return self._one(
            "SELECT name, id, head, ipns, key_name, created, updated FROM datasets WHERE id = ?", (dataset_id,)
        )

    def datasets(self) -> list[DatasetRow]:
        with self._locked():
            rows = self._db.execute(
                "SELECT name, id, head, ipns, key_name, created, updated FROM datasets ORDER BY name"
            ).fetchall()
        return [DatasetRow(*r) for r in rows]

    def create_dataset(self, name: str, dataset_id: str, head: str, ipns: str | None, key_name: str) -> None:
        now = clock.now()
        with self._locked():
            self._db.execute(
                "INSERT INTO datasets VALUES (?, ?, ?, ?, ?, ?, ?)", (name, dataset_id, head, ipns, key_name, now, now)
            )
            self.generation += 1

    def move_head(self, name: str, old: str, new: str) -> bool:
        """Compare-and-set: moves the head only if nobody moved it since ``old`` was read."""
        with self._locked():
            cur = self._db.execute(
                "UPDATE datasets SET head = ?, updated = ? WHERE name = ? AND head = ?", (new, clock.now(), name, old)
            )
            self.generation += cur.rowcount
        return cur.rowcount == 1

    def queue_pins(self, pins: list[tuple[str, bool, bool]], blocks: Sequence[tuple[str, bytes]] = ()) -> None:
        """Owe pins (cid, recursive, provide), and the blocks (cid, bytes) to put before them, in one transaction:
        all are queued or none."""
        now = clock.now()
        with self._locked():
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO pending_blocks VALUES (?, ?, ?)", [(c, d, now) for c, d in blocks]
                )
                self._db.executemany(
                    "INSERT OR IGNORE INTO pending_pins VALUES (?, ?, ?, ?)",
                    [(c, int(r), int(p), now) for c, r, p in pins],
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def pending_pins(self, limit: int = 1000) -> list[tuple[str, bool, bool]]:
        """The owed pins, oldest first."""
        with self._locked():
            rows = self._db.execute(
                "SELECT cid, recursive, provide FROM pending_pins ORDER BY added, rowid LIMIT ?", (limit,)
            ).fetchall()
        return [(c, bool(r), bool(p)) for c, r, p in rows]

    def pending_blocks(self, limit: int = 1000) -> list[tuple[str, bytes]]:
        """The owed blocks (cid, bytes), oldest first."""
        with self._locked():
            rows = self._db.execute(
                "SELECT cid, data FROM pending_blocks ORDER BY added, rowid LIMIT ?", (limit,)
            ).fetchall()
        return [(c, bytes(d)) for c, d in rows]

    def blocks_done(self, cids: Sequence[str]) -> None:
        with self._locked():
            self._db.executemany("DELETE FROM pending_blocks WHERE cid = ?", [(c,) for c in cids])

    def pin_done(self, cid: str, recursive: bool) -> None:
        with self._locked():
            self._db.execute("DELETE FROM pending_pins WHERE cid = ? AND recursive = ?", (cid, int(recursive)))

    def execution(self, invocation: str) -> ExecutionRow | None:
        with self._locked():
            row = self._db.execute(
                "SELECT invocation, query, execution, receipt, logical_hash, rows, structure, slices, source, created, "
                "trust, profile, failure FROM executions WHERE invocation = ?",
                (invocation,),
            ).fetchone()
        if not row:
            return None
        inv, query, execution, receipt, logical_hash, rows, structure, slices, source, created, trust, profile, fail = (
            row
        )
        return ExecutionRow(
            inv,
            query,
            execution,
            receipt,
            logical_hash,
            rows,
            structure,
            tuple(json.loads(slices)),
            source,
            created,
            trust,
            profile,
            _failure_of(fail),
        )

    def add_execution(self, e: ExecutionRow) -> None:
        """First writer wins, except that a better-checked answer replaces a looser one (a row computed here
        replaces a peer's unverified row): a stricter request that computed must find its own row. A result
        computed here also replaces a recorded failure (a retry that succeeded: issue 22 item 1)."""
        retried = int(e.failure is None and e.trust in ("computed", "recomputed-agreed"))
        with self._locked():
            self._db.execute(
                "INSERT INTO executions (invocation, query, execution, receipt, logical_hash, rows, structure, "
                "slices, source, created, trust, profile, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(invocation) DO UPDATE SET query = excluded.query, execution = excluded.execution, "
                "receipt = excluded.receipt, logical_hash = excluded.logical_hash, rows = excluded.rows, "
                "structure = excluded.structure, slices = excluded.slices, source = excluded.source, "
                "created = excluded.created, trust = excluded.trust, profile = excluded.profile, "
                "failure = excluded.failure WHERE ? > " + _STRENGTH_SQL + " OR (? AND executions.failure IS NOT NULL)",
                (
                    e.invocation,
                    e.query,
                    e.execution,
                    e.receipt,
                    e.logical_hash,
                    e.rows,
                    e.structure,
                    json.dumps(list(e.slices)),
                    e.source,
                    e.created,
                    e.trust,
                    e.profile,
                    _failure_json(e.failure),
                    trust_strength(e.trust),
                    retried,
                ),
            )
            self.generation += 1

    def executions(self, limit: int = 1000) -> list[ExecutionRow]:
        with self._locked():
            rows = self._db.execute(
                "SELECT invocation FROM executions ORDER BY created DESC LIMIT ?", (limit,)
            ).fetchall()
        return [e for (inv,) in rows if (e := self.execution(inv)) is not None]

    def add_divergence(self, d: Divergence) -> bool:
        """Record a disagreeing answer once (False if already known); our own answer stays the cached one."""
        with self._locked():
            cur = self._db.execute(
                "INSERT OR IGNORE INTO divergences VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    d.invocation,
                    d.execution,
                    d.profile,
                    d.logical_hash,
                    d.rows,
                    d.signer,
                    d.peer,
                    d.their_execution,
                    d.their_receipt,
                    d.their_profile,
                    d.their_logical_hash,
                    d.their_rows,
                    d.received,
                ),
            )
        return cur.rowcount == 1

    def divergences(self, invocation: str | None = None, limit: int = 100) -> list[Divergence]:
        sql = (
            "SELECT * FROM divergences"
            + (" WHERE invocation = ?" if invocation else "")
            + " ORDER BY received DESC LIMIT ?"
        )
        with self._locked():
            rows = self._db.execute(sql, ((invocation,) if invocation else ()) + (limit,)).fetchall()
        return [Divergence(*r) for r in rows]

    def log_refusal(self, peer: str, reason: str, keep: int = 1000) -> None:
        """A message too broken to be a claim at all (bad signature, not an an_0): kept for `cairn announcements`,
        the last ``keep`` only (peers choose how many they send)."""
        with self._locked():
            self._db.execute("INSERT INTO refusals VALUES (?, ?, ?)", (peer, reason, clock.now()))
            self._db.execute(
                "DELETE FROM refusals WHERE rowid <= (SELECT rowid FROM refusals ORDER BY rowid DESC LIMIT 1 OFFSET ?)",
                (keep,),
            )

    def refusals(self, limit: int = 100) -> list[tuple[str, str, float]]:
        with self._locked():
            return self._db.execute(
                "SELECT peer, reason, received FROM refusals ORDER BY received DESC LIMIT ?", (limit,)
            ).fetchall()

    def executions_by_cid(self, execution: str) -> ExecutionRow | None:
        with self._locked():
            row = self._db.execute("SELECT invocation FROM executions WHERE execution = ?", (execution,)).fetchone()
        return self.execution(row[0]) if row else None

    # -- peers' claims and trust ---------------------------------------------------------------

    def add_claim(self, c: ClaimRow) -> bool:
        """Record a claim as received (a refusal is recorded too, never as usable). False if known."""
        with self._locked():
            cur = self._db.execute(
                "INSERT OR IGNORE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    c.invocation,
                    c.signer,
                    c.execution,
                    c.receipt,
                    c.logical_hash,
                    c.rows,
                    c.peer,
                    c.announcement,
                    c.received,
                    c.status,
                    c.reason,
                    c.shape,
                ),
            )
        return cur.rowcount == 1

    def claim_count(self, peer: str | None = None, status: str | None = None) -> int:
        where = [(c, v) for c, v in (("peer", peer), ("status", status)) if v is not None]
        sql = "SELECT count(*) FROM claims" + (" WHERE " + " AND ".join(f"{c} = ?" for c, _ in where) if where else "")
        with self._locked():
            return int(self._db.execute(sql, tuple(v for _, v in where)).fetchone()[0])

    def prune_claims(self, peer: str, per_peer: int, total: int) -> int:
        """Keep at most ``per_peer`` claims received from ``peer`` and ``total`` in all (docs/peers.md "Floods
        and quotas"): the excess goes, claims not yet accepted before accepted ones, oldest first. How many went."""
        order = "ORDER BY status = 'accepted', received LIMIT max(0, (SELECT count(*) FROM claims {w}) - ?)"
        steps: tuple[tuple[str, tuple[object, ...]], ...] = (
            ("WHERE peer = ?", (peer, peer, per_peer)),
            ("", (total,)),
        )
        gone = 0
        with self._locked():
            for where, args in steps:
                sql = f"DELETE FROM claims WHERE rowid IN (SELECT rowid FROM claims {where} {order.format(w=where)})"
                gone += self._db.execute(sql, args).rowcount
        return gone

    def signer_mark(self, signer: str) -> float | None:
        """The newest time of ``signer``'s gossiped announcements taken here (None: none kept)."""
        with self._locked():
            row = self._db.execute("SELECT newest FROM signer_marks WHERE signer = ?", (signer,)).fetchone()
        return None if row is None else float(row[0])

    def set_signer_mark(self, signer: str, newest: float, keep: int) -> None:
        """Raise ``signer``'s mark to ``newest`` (never lower it); a new key past ``keep`` keys forgets the least
        recently moved one (its replays are then refused only while remembered in memory)."""
        with self._locked():
            cur = self._db.execute(
                "UPDATE signer_marks SET newest = max(newest, ?), moved = ? WHERE signer = ?",
                (newest, clock.now(), signer),
            )
            if cur.rowcount:
                return
            self._db.execute("INSERT INTO signer_marks VALUES (?, ?, ?)", (signer, newest, clock.now()))
            self._db.execute(
                "DELETE FROM signer_marks WHERE rowid IN (SELECT rowid FROM signer_marks ORDER BY moved "
                "LIMIT max(0, (SELECT count(*) FROM signer_marks) - ?))",
                (keep,),
            )

    def claims(self, invocation: str | None = None, limit: int = 100) -> list[ClaimRow]:
        sql = (
            "SELECT * FROM claims" + (" WHERE invocation = ?" if invocation else "") + " ORDER BY received DESC LIMIT ?"
        )
        with self._locked():
            rows = self._db.execute(sql, ((invocation,) if invocation else ()) + (limit,)).fetchall()
        return [ClaimRow(*r) for r in rows]

    def set_claim_status(
        self, invocation: str, signer: str, execution: str, status: str, reason: str = "", score: bool = True
    ) -> None:
        """``score``: whether this counts for or against the signer (a policy refusal, such as an untrusted
        signer in community mode, says nothing about the claim's truth and does not)."""
        with self._locked():
            self._db.execute(
                "UPDATE claims SET status = ?, reason = ? WHERE invocation = ? AND signer = ? AND execution = ?",
                (status, reason, invocation, signer, execution),
            )
            if not score:
                return
            col = "accepted" if status == "accepted" else "refused"
            self._db.execute(
                f"INSERT INTO signer_scores (key, {col}) VALUES (?, 1) "
                f"ON CONFLICT(key) DO UPDATE SET {col} = {col} + 1",
                (signer,),
            )

    def signer_score(self, key: str) -> tuple[int, int]:
        with self._locked():
            row = self._db.execute("SELECT accepted, refused FROM signer_scores WHERE key = ?", (key,)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def trust_add(self, key: str, community: str) -> None:
        with self._locked():
            self._db.execute("INSERT OR IGNORE INTO trust VALUES (?, ?, ?)", (key, community, clock.now()))

    def trust_rm(self, key: str, community: str | None) -> int:
        with self._locked():
            if community is None:
                return self._db.execute("DELETE FROM trust WHERE key = ?", (key,)).rowcount
            return self._db.execute("DELETE FROM trust WHERE key = ? AND community = ?", (key, community)).rowcount

    def trusted(self, community: str | None = None) -> list[tuple[str, str]]:
        with self._locked():
            if community is None:
                return self._db.execute("SELECT key, community FROM trust ORDER BY community, key").fetchall()
            return self._db.execute(
                "SELECT key, community FROM trust WHERE community = ? ORDER BY key", (community,)
            ).fetchall()

    def count(self, table: str) -> int:
        if table not in ("datasets", "executions", "divergences"):
            raise ValueError(table)
        with self._locked():
            return int(self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    def version_facts(self, head: str) -> tuple[str, int] | None:
        with self._locked():
            row = self._db.execute("SELECT logical_hash, rows FROM version_facts WHERE head = ?", (head,)).fetchone()
        return (row[0], row[1]) if row else None

    def set_version_facts(self, head: str, logical_hash: str, rows: int) -> None:
        with self._locked():
            self._db.execute("INSERT OR REPLACE INTO version_facts VALUES (?, ?, ?)", (head, logical_hash, rows))

    def output_names(self, execution: str) -> list[str] | None:
        with self._locked():
            row = self._db.execute("SELECT names FROM output_names WHERE execution = ?", (execution,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_output_names(self, execution: str, names: list[str]) -> None:
        """The column names a user's query gave an execution (computed or fetched from a peer): its
        outputs are positional (_0, _1, …), these are what `/data` shows. The first query to ask wins."""
        with self._locked():
            self._db.execute("INSERT OR IGNORE INTO output_names VALUES (?, ?)", (execution, json.dumps(names)))

    # -- answers from supersets (node.resolve.supersets, docs/queries.md "Answers from supersets") ------------

    def add_shape(
        self, shape: str, invocation: str, statement: str, outputs: int, now: float, public: str | None = None
    ) -> None:
        with self._locked():
            self._db.execute(
                "INSERT OR IGNORE INTO shapes VALUES (?, ?, ?, ?, ?, ?)",
                (shape, invocation, statement, outputs, now, public),
            )

    def shape_candidates(self, shape: str, limit: int = 32) -> list[tuple[str, str, int]]:
        """``(invocation, statement, outputs)`` of the executions over ``shape``, newest first."""
        with self._locked():
            rows = self._db.execute(
                "SELECT invocation, statement, outputs FROM shapes WHERE shape = ? ORDER BY created DESC LIMIT ?",
                (shape, limit),
            ).fetchall()
        return [(str(a), str(b), int(c)) for a, b, c in rows]

    def shape_of(self, invocation: str) -> str | None:
        """The public shape of a result computed here (``add_shape``), if any: its announcement names it."""
        with self._locked():
            row = self._db.execute(
                "SELECT public FROM shapes WHERE invocation = ? AND public IS NOT NULL LIMIT 1", (invocation,)
            ).fetchone()
        return str(row[0]) if row else None

    def shape_claims(self, shape: str, limit: int = 64) -> list[ClaimRow]:
        """Peers' claims whose announcement names ``shape`` (candidate supersets), newest first."""
        with self._locked():
            rows = self._db.execute(
                "SELECT * FROM claims WHERE shape = ? ORDER BY received DESC LIMIT ?", (shape, limit)
            ).fetchall()
        return [ClaimRow(*r) for r in rows]

    # -- provenance (node.provenance: docs/provenance.md "Lineage") --------------------------------

    def executions_with_slice(self, slice_cid: str, limit: int = 16) -> list[ExecutionRow]:
        """Executions whose output lists ``slice_cid``: no object links a slice back to what wrote it."""
        pattern = '%"' + slice_cid.replace("%", "").replace("_", "") + '"%'
        with self._locked():
            rows = self._db.execute(
                "SELECT invocation FROM executions WHERE slices LIKE ? ORDER BY created LIMIT ?", (pattern, limit)
            ).fetchall()
        found = [e for (inv,) in rows if (e := self.execution(inv)) is not None]
        return [e for e in found if slice_cid in e.slices]
