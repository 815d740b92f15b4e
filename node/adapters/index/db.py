"""The index's one SQLite connection (WAL), its schema and the lock every repository takes.

SQLite is the node's memory of what it holds; IPFS holds the objects themselves. Every write is one transaction,
so a crash leaves either the old or the new state, never half of one.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from node.support.errors import InsufficientStorage

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
    -- profile: added by migrate (ep_0 CID of the engine that computed it; NULL if unknown)
    -- failure: added by migrate (JSON {class, sqlstate, message} of a recorded failure; NULL for a result)
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
-- written in the transaction that owes their pins, before the answer; put right after it, then deleted.
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
    shape        TEXT NOT NULL,         -- node.services.resolve.supersets.shape_of: input versions + structures
    invocation   TEXT NOT NULL,         -- an execution computed here over them (a candidate superset)
    statement    TEXT NOT NULL,         -- its canonical statement
    outputs      INTEGER NOT NULL,      -- its number of output columns
    created      REAL NOT NULL,
    public       TEXT,                  -- supersets.public_shape: the shape its announcement names (NULL: none)
    PRIMARY KEY (shape, invocation)
);
CREATE INDEX IF NOT EXISTS shapes_by_invocation ON shapes (invocation);
-- Each signing key's watermark (node/services/peers/admission.py Replays): a gossiped announcement of the key at or
-- below it after a restart is a replay.
CREATE TABLE IF NOT EXISTS signer_marks (
    signer   TEXT PRIMARY KEY,          -- did:key
    newest   REAL NOT NULL,             -- the newest an_0 time (its clock, unix seconds) taken here by gossip
    moved    REAL NOT NULL              -- when it last moved (our clock): the least recent go past the cap
);
CREATE INDEX IF NOT EXISTS signer_marks_by_moved ON signer_marks (moved);
"""


class Db:
    """The connection, shared by the SQLite repositories; one statement (or transaction) at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Columns added after a table was first created (rows already there keep NULL)."""
        db = self.conn
        cols = {r[1] for r in db.execute("PRAGMA table_info(executions)")}
        if "profile" not in cols:
            db.execute("ALTER TABLE executions ADD COLUMN profile TEXT")
        if "trust" not in cols:
            # An index from before trust labels: what we computed keeps "computed"; a peer's row is unverified.
            db.execute("ALTER TABLE executions ADD COLUMN trust TEXT NOT NULL DEFAULT 'unverified'")
            db.execute("UPDATE executions SET trust = 'computed' WHERE source = 'computed'")
        if "failure" not in cols:
            db.execute("ALTER TABLE executions ADD COLUMN failure TEXT")
        if "shape" not in {r[1] for r in db.execute("PRAGMA table_info(claims)")}:
            db.execute("ALTER TABLE claims ADD COLUMN shape TEXT")
        db.execute("CREATE INDEX IF NOT EXISTS claims_by_shape ON claims (shape, received)")
        if "public" not in {r[1] for r in db.execute("PRAGMA table_info(shapes)")}:
            db.execute("ALTER TABLE shapes ADD COLUMN public TEXT")

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def locked(self) -> Iterator[sqlite3.Connection]:
        """The connection, alone; a full disk (SQLITE_FULL) is the caller's clear 507, not a 500.
        SQLite rolls the failed statement back, so the index stays as it was."""
        with self._lock:
            try:
                yield self.conn
            except sqlite3.OperationalError as e:
                if e.sqlite_errorcode == sqlite3.SQLITE_FULL or InsufficientStorage.is_disk_full(e):
                    raise InsufficientStorage("the index", f"$CAIRN_HOME/{self.path.name}") from None
                raise
