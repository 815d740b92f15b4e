"""Answers from supersets (node/domain/sql/rewrite.py): the rules' decisions and their soundness.

Oracle: SQLite (the standard library's, not Cairn's engine) runs the canonical statements translated by sqlglot
over tiny generated tables: the new query from scratch must give the same multiset of rows as the rewritten
statement over the cached query's result. Byte identity on the real engine is tests/integration/test_query_spark.py
(test_rewrites_give_the_from_scratch_bytes).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.adapters.index import ExecutionRow, Index
from node.domain.model import block_of
from node.domain.sql import CanonicalQuery, arrow_eval, canonicalize
from node.domain.sql.rewrite import Rewrite, _holds, implies, rewrite, shape_key
from node.services.datasets import Version
from node.services.resolve import supersets

COLUMNS = [("x", "int64"), ("y", "int32"), ("k", "int64"), ("s", "utf8"), ("f", "float64")]
MORE = {"t": [*COLUMNS, ("u", "uint32"), ("ts", "timestamp[us]")]}
INPUTS = {"t": COLUMNS}
OPS = ["=", "!=", "<", "<=", ">", ">="]


def _q(sql: str) -> CanonicalQuery:
    return canonicalize(sql, INPUTS)


def _rw(cached: str, new: str) -> Rewrite | None:
    return rewrite(_q(cached), _q(new))


def _sqlite(statement: str, columns: int, rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """``statement`` (canonical Spark SQL over ``a``/``col_i``) on SQLite over ``rows``."""
    db = sqlite3.connect(":memory:")
    db.create_function("RAISE_ERROR", 1, _raise)  # Spark's raise_error (the avg roll-up's guard)
    try:
        db.execute(f"CREATE TABLE a ({', '.join(f'col_{i}' for i in range(columns))})")
        if rows:
            db.executemany(f"INSERT INTO a VALUES ({', '.join('?' * columns)})", rows)
        return db.execute(sqlglot.transpile(statement, read="spark", write="sqlite")[0]).fetchall()
    finally:
        db.close()


def _raise(message: str) -> None:
    raise ValueError(message)


def _bag(rows: list[tuple[Any, ...]]) -> list[str]:
    return sorted(repr(r) for r in rows)


def check_sound(cached: str, new: str, table: Sequence[Sequence[Any]]) -> Rewrite | None:
    """The rewrite, if any, gives the from-scratch rows (the oracle of every test here)."""
    c, n = _q(cached), _q(new)
    r = rewrite(c, n)
    if r is not None:
        cached_rows = _sqlite(c.statement, len(COLUMNS), table)
        derived = _sqlite(r.statement, len(c.output_names), cached_rows)
        scratch = _bag(_sqlite(n.statement, len(COLUMNS), table))
        assert _bag(derived) == scratch, (cached, new, r)
        here = arrow_eval.evaluate(r.statement, _arrow(cached_rows, len(c.output_names)))
        if here is not None:  # Spark's own bytes: tests/integration/test_query_spark.py
            EVALUATED.append(r.rule)
            assert _bag([tuple(row.values()) for row in here.to_pylist()]) == scratch, (cached, new, r, here)
    return r


EVALUATED: list[str] = []  # rules whose rewritten statement node.domain.sql.arrow_eval computed


def _arrow(rows: Sequence[Sequence[Any]], columns: int) -> pa.Table:
    """SQLite's rows of the cached result as an Arrow table (types inferred from the values)."""
    return pa.table({f"col_{i}": pa.array([r[i] for r in rows]) for i in range(columns)})


TABLE = [
    (1, 1, 5, "a", 0.5),
    (1, 2, None, "b", 1.5),
    (2, 1, 12, None, -1.0),
    (2, 1, 3, "c", 2.0),
    (None, 3, 8, "a", None),
    (3, None, 20, "d", 0.0),
    (1, 1, -4, "e", 3.0),
]

TAKEN = [  # (cached, new, rule): every rule, with and without predicates
    ("SELECT x, y, k FROM t", "SELECT x, y FROM t WHERE k < 10", "select-project"),
    ("SELECT k, x, y FROM t WHERE k < 20", "SELECT y, x FROM t WHERE k < 10 AND x > y", "select-project"),
    ("SELECT k, x FROM t WHERE k > 0 AND x <> 2", "SELECT x FROM t WHERE k >= 3 AND x = 1", "select-project"),
    (
        "SELECT k, x, s FROM t WHERE k < 20",
        "SELECT x, count(*), max(s) FROM t WHERE k < 20 GROUP BY x",
        "select-project",
    ),
    ("SELECT x, y, sum(k), count(*) FROM t GROUP BY x, y", "SELECT x, sum(k), count(*) FROM t GROUP BY x", "rollup"),
    (
        "SELECT x, y, sum(k), count(k), min(k), max(s) FROM t WHERE k < 20 GROUP BY x, y",
        "SELECT y, max(s), min(k), count(k) FROM t WHERE k < 20 AND x > 1 GROUP BY y",
        "rollup",
    ),
    (
        "SELECT x, y, max(k), count(k), sum(k), min(k) FROM t GROUP BY x, y",
        "SELECT y, avg(k), count(k) FROM t WHERE x > 1 GROUP BY y",
        "rollup",
    ),
]

REFUSED = [  # (cached, new, why)
    ("SELECT x, y FROM t", "SELECT x FROM t WHERE k < 10", "k not in the cached result"),
    ("SELECT x, k FROM t WHERE k < 5", "SELECT x FROM t WHERE k < 10", "the cached predicate is not implied"),
    ("SELECT x, k FROM t WHERE k < 5 OR x = 1", "SELECT x FROM t WHERE k < 1", "a disjunction in the cached predicate"),
    ("SELECT DISTINCT x, k FROM t", "SELECT x FROM t", "DISTINCT loses multiplicity"),
    ("SELECT x, k FROM t ORDER BY k LIMIT 3", "SELECT x FROM t", "LIMIT"),
    ("SELECT x, k FROM t ORDER BY k", "SELECT x FROM t", "ORDER BY"),
    ("SELECT x, k FROM t", "SELECT x FROM t ORDER BY x", "ORDER BY in the new query"),
    ("SELECT x, k FROM t", "SELECT x, row_number() OVER (ORDER BY k) FROM t", "a window"),
    ("SELECT x, k + 1 FROM t", "SELECT x FROM t", "a computed cached output"),
    ("SELECT x, f FROM t WHERE f > 1", "SELECT x FROM t WHERE f > 2", "float comparisons are not exact"),
    ("SELECT x, y, sum(f) FROM t GROUP BY x, y", "SELECT x, sum(f) FROM t GROUP BY x", "float sums"),
    ("SELECT x, y, min(f) FROM t GROUP BY x, y", "SELECT x, min(f) FROM t GROUP BY x", "float min"),
    ("SELECT x, y, avg(k) FROM t GROUP BY x, y", "SELECT x, avg(k) FROM t GROUP BY x", "avg"),
    ("SELECT x, y, sum(k), count(k) FROM t GROUP BY x, y", "SELECT x, avg(k) FROM t GROUP BY x", "avg: no min, max"),
    (
        "SELECT x, y, sum(f), count(f), min(f), max(f) FROM t GROUP BY x, y",
        "SELECT x, avg(f) FROM t GROUP BY x",
        "avg of floats",
    ),
    ("SELECT x, y, count(*) FROM t GROUP BY x, y", "SELECT count(*) FROM t", "empty GROUP BY"),
    ("SELECT x, y, sum(k) FROM t GROUP BY x, y", "SELECT x, sum(k) FROM t WHERE k > 1 GROUP BY x", "filter on a value"),
    ("SELECT x, y, sum(k) FROM t GROUP BY x, y HAVING sum(k) > 1", "SELECT x, sum(k) FROM t GROUP BY x", "HAVING"),
    (
        "SELECT x, y, count(DISTINCT k) FROM t GROUP BY x, y",
        "SELECT x, count(DISTINCT k) FROM t GROUP BY x",
        "distinct",
    ),
    ("SELECT x, sum(k) FROM t GROUP BY x", "SELECT y, sum(k) FROM t GROUP BY y", "y is not a cached key"),
    ("SELECT x, k FROM t", "SELECT t.x, t.k FROM t JOIN t AS u ON t.x = u.x", "two inputs"),
    ("SELECT x, k FROM t", "SELECT x FROM t WHERE x IN (SELECT k FROM t)", "a nested query"),
    ("SELECT x, y, sum(k) FROM t GROUP BY GROUPING SETS ((x, y), (x))", "SELECT x, sum(k) FROM t GROUP BY x", "sets"),
    ("SELECT x, y, sum(k) FROM t GROUP BY x, y", "SELECT x, sum(k) FROM t GROUP BY ROLLUP (x)", "ROLLUP"),
    ("SELECT x, f, count(*) FROM t GROUP BY x, f", "SELECT f, count(*) FROM t GROUP BY f", "a float key"),
]


@pytest.mark.parametrize(("cached", "new", "rule"), TAKEN)
def test_rules_are_taken_and_sound(cached: str, new: str, rule: str) -> None:
    r = check_sound(cached, new, TABLE)
    assert r is not None and r.rule == rule


def test_arrow_evaluates_the_rules_plain_forms() -> None:
    """Not vacuous: node.domain.sql.arrow_eval computes both rules' rewritten statements (sound: check_sound); outside
    its subset (a scalar expression, a float sum, a float key) it declines and Spark runs them."""
    EVALUATED.clear()
    for cached, new, _ in TAKEN:
        check_sound(cached, new, TABLE)
    assert {"select-project", "rollup"} <= set(EVALUATED), EVALUATED
    table = pa.table({"col_0": pa.array([1, 2], pa.int64()), "col_1": pa.array([0.5, -0.0])})
    for statement in (
        "SELECT a.col_0 + 1 AS _0 FROM a",
        "SELECT SUM(a.col_1) AS _0 FROM a GROUP BY a.col_0",
        "SELECT a.col_1 AS _0, COUNT(*) AS _1 FROM a GROUP BY a.col_1",
        "SELECT a.col_0 AS _0 FROM a WHERE a.col_0 > 99999999999999999999",
        "SELECT SUM(a.col_0) AS _0 FROM a",  # no GROUP BY: Spark gives one row over none
    ):
        assert arrow_eval.evaluate(statement, table) is None, statement
    big = pa.table({"col_0": pa.array([1, 1]), "col_1": pa.array([2**62, 2**62])})
    assert arrow_eval.evaluate("SELECT a.col_0 AS _0, SUM(a.col_1) AS _1 FROM a GROUP BY a.col_0", big) is None


@pytest.mark.parametrize(("cached", "new", "why"), REFUSED)
def test_uncovered_queries_are_refused(cached: str, new: str, why: str) -> None:
    assert _rw(cached, new) is None, why


@pytest.mark.parametrize(
    ("cached", "new"),
    [
        ("SELECT x, u FROM t", "SELECT u FROM t WHERE x > 1"),
        ("SELECT x, ts FROM t", "SELECT ts FROM t WHERE x > 1"),
        ("SELECT x, u, count(*) FROM t GROUP BY x, u", "SELECT u, count(*) FROM t GROUP BY u"),
        ("SELECT x, y, sum(u) FROM t GROUP BY x, y", "SELECT x, sum(u) FROM t GROUP BY x"),
    ],
)
def test_columns_whose_type_a_result_may_not_carry_are_refused(cached: str, new: str) -> None:
    """Spark reads uint32 as bigint and timestamps by its own rules: a cached column must mean what the input did."""
    assert rewrite(canonicalize(cached, MORE), canonicalize(new, MORE)) is None


def test_shape_key_strips_selection_and_projection() -> None:
    assert (
        shape_key(_q("SELECT x FROM t WHERE k < 1"))
        == shape_key(_q("SELECT s, y FROM t"))
        == (tuple(t for _, t in COLUMNS),)
    )
    assert shape_key(canonicalize("SELECT t.x FROM t JOIN u ON t.x = u.x", {"t": COLUMNS, "u": COLUMNS})) is None


def test_implies_matches_brute_force() -> None:
    """Over the integers -6..6 (every literal used is in -3..3): implies(n, c) iff no value satisfies n but not c."""
    for nop in OPS:
        for cop in OPS:
            for v in range(-3, 4):
                for w in range(-3, 4):
                    claimed = implies((0, nop, v), (0, cop, w))
                    # Only claimed implications must hold; a missed one (over integers) costs a cache hit, not truth.
                    if claimed:
                        assert all(_holds(x, cop, w) for x in range(-6, 7) if _holds(x, nop, v)), (nop, v, cop, w)


_ints = st.one_of(st.none(), st.integers(-3, 3))
_rows = st.lists(
    st.tuples(_ints, _ints, _ints, st.sampled_from([None, "a", "b"]), st.sampled_from([None, 0.5, -1.0])),
    max_size=8,
)
_atom = st.builds(
    lambda c, op, v: f"{c} {op} {v}", st.sampled_from(["x", "y", "k"]), st.sampled_from(OPS), st.integers(-3, 3)
)
_other = st.sampled_from(["x > y", "k IS NULL", "x = 1 OR k < 0", "f > 0"])
_AGGS = ["sum(k)", "count(*)", "count(k)", "min(k)", "max(k)", "max(s)", "sum(x)", "min(s)", "avg(k)", "sum(f)"]


@st.composite
def _pair(draw: st.DrawFn) -> tuple[str, str]:
    """A cached query and a new one, often a restriction of it (so rules are exercised, not only refusals)."""
    cached_atoms = draw(st.lists(_atom, max_size=2))
    new_atoms = draw(st.lists(st.sampled_from(cached_atoms), max_size=2)) if cached_atoms else []
    new_atoms += draw(st.lists(st.one_of(_atom, _other), max_size=2))
    cw = f" WHERE {' AND '.join(cached_atoms)}" if cached_atoms else ""
    nw = f" WHERE {' AND '.join(new_atoms)}" if new_atoms else ""
    names = ["x", "y", "k", "s", "f"]
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(["x", "y"]), min_size=1, max_size=2, unique=True))
        aggs = draw(st.lists(st.sampled_from(_AGGS), min_size=1, max_size=4, unique=True))
        cached = f"SELECT {', '.join(keys + aggs)} FROM t{cw} GROUP BY {', '.join(keys)}"
        nkeys = draw(st.lists(st.sampled_from(keys), max_size=len(keys), unique=True))
        naggs = draw(
            st.lists(st.sampled_from(aggs if draw(st.booleans()) else _AGGS), min_size=1, max_size=3, unique=True)
        )
        group = f" GROUP BY {', '.join(nkeys)}" if nkeys else ""
        return cached, f"SELECT {', '.join(nkeys + naggs)} FROM t{nw}{group}"
    cols = draw(st.lists(st.sampled_from(names), min_size=1, max_size=5, unique=True))
    ncols = draw(st.lists(st.sampled_from(cols if draw(st.booleans()) else names), min_size=1, max_size=3, unique=True))
    if draw(st.booleans()):
        return f"SELECT {', '.join(cols)} FROM t{cw}", f"SELECT {', '.join(ncols)} FROM t{nw}"
    key = ncols[0]
    naggs = draw(st.lists(st.sampled_from(_AGGS), min_size=1, max_size=2, unique=True))
    return f"SELECT {', '.join(cols)} FROM t{cw}", f"SELECT {key}, {', '.join(naggs)} FROM t{nw} GROUP BY {key}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pair(), _rows)
def test_no_unsound_rewrite_is_taken(pair: tuple[str, str], table: list[tuple[Any, ...]]) -> None:
    check_sound(pair[0], pair[1], table)


def _row(invocation: str, trust: str) -> ExecutionRow:
    return ExecutionRow(invocation, "qy", f"ex-{invocation}", "rc", "h", 1, "st", (), "computed", 0.0, trust)


def test_candidates_are_local_computed_rows_over_the_same_versions(tmp_path: Path) -> None:
    """node.services.resolve.supersets over a real index: same shape and a proved rule; a peer's row is never a
    superset."""
    index = Index(tmp_path / "index.db")
    here, other = [Version(block_of({"v": 1}).cid, [])], [Version(block_of({"v": 2}).cid, [])]
    wide, narrow = _q("SELECT x, y, k FROM t"), _q("SELECT x FROM t WHERE k < 10")
    for invocation, trust in (("mine", "computed"), ("theirs", "unverified")):
        index.results.add_execution(_row(invocation, trust))
        index.shapes.add_shape(supersets.shape_of(wide, here) or "", invocation, wide.statement, 3, 0.0)

    async def found(versions: list[Version]) -> list[tuple[str, str, int]]:
        return [
            (row.invocation, rw.rule, width) async for row, rw, width in supersets.candidates(index, narrow, versions)
        ]

    assert asyncio.run(found(here)) == [("mine", "select-project", 3)]
    assert asyncio.run(found(other)) == []  # another version: another shape
    assert supersets.shape_of(_q("SELECT x FROM t ORDER BY x"), here) is None
    index.close()


@st.composite
def _avg_pair(draw: st.DrawFn) -> tuple[str, str]:
    """A cached roll-up with sum, count, min and max of k (and maybe more), and an avg(k) over fewer keys."""
    keys = draw(st.lists(st.sampled_from(["x", "y", "s"]), min_size=1, max_size=3, unique=True))
    extra = draw(st.lists(st.sampled_from(["count(*)", "sum(x)", "max(s)"]), max_size=2, unique=True))
    aggs = draw(st.permutations(["sum(k)", "count(k)", "min(k)", "max(k)", *extra]))
    nkeys = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=len(keys), unique=True))
    where = draw(st.sampled_from(["", f" WHERE {keys[0]} IS NOT NULL", f" WHERE {keys[-1]} IS NULL"]))
    cached = f"SELECT {', '.join(keys + list(aggs))} FROM t GROUP BY {', '.join(keys)}"
    return cached, f"SELECT {', '.join(nkeys)}, avg(k) FROM t{where} GROUP BY {', '.join(nkeys)}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_avg_pair(), _rows)
def test_an_avg_rolled_up_from_sums_and_counts_is_the_average(pair: tuple[str, str], table: list[Any]) -> None:
    """Over values whose sums doubles hold exactly, the rolled-up average is the from-scratch one (SQLite's avg adds
    integers exactly, as Spark's double sum does below 2^53; Spark's bytes: test_query_spark.py)."""
    assert check_sound(pair[0], pair[1], table) is not None, pair


def test_an_avg_whose_sums_doubles_may_not_hold_is_an_error_not_an_answer() -> None:
    """count × max(|min|, |max|) ≥ 2^53: Spark's double sum may round, so the rewritten statement raises instead
    (the resolver then computes from the inputs)."""
    r = _rw("SELECT x, sum(k), count(k), min(k), max(k) FROM t GROUP BY x", "SELECT avg(k) FROM t GROUP BY x")
    assert r is not None
    big = 2**52
    cached = [(1, 3 * big, 3, big, big)]  # three values of 2^52: a partial sum reaches 2^53 + 2^52
    with pytest.raises(sqlite3.OperationalError):
        _sqlite(r.statement, 5, cached)
    assert _sqlite(r.statement, 5, [(1, 3 * 7, 3, 7, 7)]) == [(7.0,)]
    assert _sqlite(r.statement, 5, [(1, None, 0, None, None)]) == [(None,)]  # no value: NULL, as avg gives
