"""Appends brought forward (node/domain/sql/rewrite.py ``forward``, node/services/resolve/supersets.py ``appended``):
which statements decompose over old ∪ new, and that the merge is sound.

Oracle: SQLite (the standard library's) runs the canonical statement over old ∪ new rows from scratch, and the
``forward`` statement over table ``b`` = the statement's result over the old rows and ``a`` = the new rows; the
multisets must be equal. Byte identity on the real engine: tests/integration/test_query_spark.py
(test_appends_give_the_from_scratch_bytes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.adapters.index import Index
from node.domain.model import block_of
from node.domain.sql import arrow_eval
from node.domain.sql.rewrite import Rewrite, forward
from node.services.datasets import SliceRef, Version
from node.services.resolve import supersets
from tests.unit.test_query_rewrite import COLUMNS, TABLE, _bag, _pair, _q, _row, _rows, _sqlite


def _sqlite_ab(statement: str, new: Sequence[Sequence[Any]], old: Sequence[Sequence[Any]], width: int) -> list[Any]:
    db = sqlite3.connect(":memory:")
    try:
        for name, columns, rows in (("a", len(COLUMNS), new), ("b", width, old)):
            db.execute(f"CREATE TABLE {name} ({', '.join(f'col_{i}' for i in range(columns))})")
            if rows:
                db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * columns)})", rows)
        return db.execute(sqlglot.transpile(statement, read="spark", write="sqlite")[0]).fetchall()
    finally:
        db.close()


def check_forward(sql: str, old: Sequence[Sequence[Any]], new: Sequence[Sequence[Any]]) -> Rewrite | None:
    """The forward statement, if any, gives the from-scratch rows over old ∪ new."""
    q = _q(sql)
    r = forward(q)
    if r is not None:
        cached = _sqlite(q.statement, len(COLUMNS), old)
        merged = _sqlite_ab(r.statement, new, cached, len(q.output_names))
        scratch = _bag(_sqlite(q.statement, len(COLUMNS), [*old, *new]))
        assert _bag(merged) == scratch, (sql, r)
        before = arrow_eval.evaluate(q.statement, _input(old))
        here = None if before is None else arrow_eval.forward(q.statement, before, _input(new))
        if here is not None:  # computed in the node with Arrow (Spark's bytes: tests/integration/test_query_spark.py)
            FORWARDED_HERE.append(sql)
            assert _bag([tuple(row.values()) for row in here.to_pylist()]) == scratch, (sql, here)
    return r


FORWARDED_HERE: list[str] = []
_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "utf8": pa.string(), "float64": pa.float64()}


def _input(rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Rows of the input ``t`` as the Arrow table a dataset's slices read as (columns ``col_j``, their types)."""
    return pa.table({f"col_{j}": pa.array([r[j] for r in rows], _TYPES[t]) for j, (_, t) in enumerate(COLUMNS)})


FORWARDED = [
    "SELECT x, y, s FROM t",
    "SELECT x + 1, s FROM t WHERE k < 10 AND x > y",
    "SELECT x, sum(k), count(*), count(k), min(s), max(y) FROM t GROUP BY x",
    "SELECT s, x, max(k) FROM t WHERE k > 0 OR y IS NULL GROUP BY x, s",
]
REFUSED = [
    ("SELECT count(*) FROM t", "empty GROUP BY: one row over no rows"),
    ("SELECT sum(k) FROM t GROUP BY x", "a key not shown"),
    ("SELECT x, avg(k) FROM t GROUP BY x", "avg"),
    ("SELECT x, sum(f) FROM t GROUP BY x", "float sum"),
    ("SELECT x, min(f) FROM t GROUP BY x", "float min"),
    ("SELECT f, count(*) FROM t GROUP BY f", "float key"),
    ("SELECT x, count(*) FROM t GROUP BY x HAVING count(*) > 1", "HAVING"),
    ("SELECT x, count(DISTINCT k) FROM t GROUP BY x", "distinct"),
    ("SELECT DISTINCT x FROM t", "DISTINCT"),
    ("SELECT x FROM t ORDER BY x LIMIT 2", "LIMIT"),
    ("SELECT x FROM t ORDER BY x", "ORDER BY"),
    ("SELECT x, row_number() OVER (ORDER BY k) FROM t", "a window"),
    ("SELECT x, k + sum(y) FROM t GROUP BY x, k", "an expression over an aggregate"),
    ("SELECT x FROM t WHERE x IN (SELECT k FROM t)", "a nested query"),
]


@pytest.mark.parametrize("sql", FORWARDED)
def test_decomposable_statements_are_forwarded_soundly(sql: str) -> None:
    for cut in (0, 3, len(TABLE)):
        r = check_forward(sql, TABLE[:cut], TABLE[cut:])
        assert r is not None and r.rule == "append"


def test_arrow_forwards_plain_statements() -> None:
    """Not vacuous: node.domain.sql.arrow_eval.forward computes the plain forwarded statements (a projection, an integer
    GROUP BY) and declines the rest (an expression, a float), which Spark then runs."""
    FORWARDED_HERE.clear()
    for sql in FORWARDED:
        check_forward(sql, TABLE[:3], TABLE[3:])
    assert [FORWARDED[0], FORWARDED[2]] == FORWARDED_HERE, FORWARDED_HERE


@pytest.mark.parametrize(("sql", "why"), REFUSED)
def test_other_statements_are_refused(sql: str, why: str) -> None:
    assert forward(_q(sql)) is None, why


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pair(), _rows, st.integers(0, 8))
def test_no_unsound_forward_is_taken(pair: tuple[str, str], table: list[tuple[Any, ...]], cut: int) -> None:
    for sql in pair:
        check_forward(sql, table[:cut], table[cut:])


def _block(kind: str, **event: Any) -> Any:
    """What ``appended`` reads of a metadata block (its kind and event): real blocks need signed, full events."""
    return SimpleNamespace(kind=kind, event={"kind": kind, **event})


def _add(seq: int, offset: int, rows: int, strategy: str = "append") -> tuple[Any, Any]:
    cid = block_of({"s": seq, "o": offset}).cid
    block = _block(
        "AddData",
        slices=[{"data": cid, "rows": rows}],
        offsets=[offset, offset + rows - 1],
        merge={"strategy": strategy, "primaryKey": []},
    )
    return block_of({"b": seq, "strategy": strategy}).cid, block


def _version(strategy: str) -> tuple[Version, Version]:
    seed = (block_of({"seed": 1}).cid, _block("Seed"))
    one = _add(1, 0, 5)
    two = _add(2, 5, 3, strategy)
    old = Version(one[0], [one, seed], slices=[SliceRef(block_of({"s": 1}).cid, 5, 1, "h", 0)])
    new = Version(two[0], [two, one, seed], slices=[*old.slices, SliceRef(block_of({"s": 2}).cid, 3, 1, "h", 5)])
    return old, new


def test_appended_finds_our_result_over_the_version_before_the_appends(tmp_path: Path) -> None:
    """supersets.appended over a real index: the same statement over a head the new version extends by AddData
    only, computed here; its new slices only. A peer's row, another statement or another merge: not forwarded."""
    index = Index(tmp_path / "index.db")
    q, other = _q("SELECT x, count(*) FROM t GROUP BY x"), _q("SELECT y, count(*) FROM t GROUP BY y")
    old, new = _version("append")
    for invocation, trust, cq in (("mine", "computed", q), ("theirs", "unverified", q), ("else", "computed", other)):
        index.results.add_execution(_row(invocation, trust))
        index.shapes.add_shape(supersets.shape_of(cq, [old]) or "", invocation, cq.statement, 2, 0.0)
    found = [(row.invocation, rw.rule, width, fresh) for row, rw, width, fresh in supersets.appended(index, q, [new])]
    assert found == [("mine", "append", 2, new.slices[1:])]
    assert list(supersets.appended(index, q, [old])) == []  # nothing computed before the first version
    _, ledger = _version("ledger")
    ledger.blocks[1:] = new.blocks[1:]
    assert list(supersets.appended(index, q, [ledger])) == []  # only append merges lie between
    index.close()
