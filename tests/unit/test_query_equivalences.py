"""Canonical equivalences (docs/queries.md "The rewrite", step 7): spellings Spark evaluates alike
share one canonical statement, hence one qy_0 and one invocation; a near miss beside each must not.

tests/integration/test_query_equivalences.py runs these same pairs on a real Spark worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.domain.sql import canonicalize
from node.domain.sql.equivalences import MIRRORED
from tests.unit.test_query_canonical import ONE, TWO, key, roundtrip

# (name, first spelling, second spelling, inputs): must collide.
SAME = [
    ("count 1", "SELECT count(1) FROM t", "SELECT count(*) FROM t", ONE),
    ("count string", "SELECT s, count('x') FROM t GROUP BY s", "SELECT s, count(*) FROM t GROUP BY s", ONE),
    ("count true", "SELECT count(TRUE) FROM t WHERE k > 1", "SELECT count(*) FROM t WHERE k > 1", ONE),
    ("count negative decimal", "SELECT count(-2.5) FROM t", "SELECT count(1) FROM t", ONE),
    (
        "count window",
        "SELECT k, count(1) OVER (PARTITION BY s) FROM t",
        "SELECT k, count(*) OVER (PARTITION BY s) FROM t",
        ONE,
    ),
    ("count filter", "SELECT count(1) FILTER (WHERE b) FROM t", "SELECT count(*) FILTER (WHERE b) FROM t", ONE),
    (
        "count having",
        "SELECT s FROM t GROUP BY s HAVING count(1) > 1",
        "SELECT s FROM t GROUP BY s HAVING count(*) > 1",
        ONE,
    ),
    ("eq operands", "SELECT k FROM t WHERE k = 2", "SELECT k FROM t WHERE 2 = k", ONE),
    ("neq operands", "SELECT k FROM t WHERE s <> 'a'", "SELECT k FROM t WHERE 'a' != s", ONE),
    ("null-safe eq operands", "SELECT k FROM t WHERE k <=> 2", "SELECT k FROM t WHERE 2 <=> k", ONE),
    (
        "is distinct from operands",
        "SELECT k FROM t WHERE k IS DISTINCT FROM 2",
        "SELECT k FROM t WHERE 2 IS DISTINCT FROM k",
        ONE,
    ),
    ("eq columns", "SELECT k FROM t WHERE x = k", "SELECT k FROM t WHERE k = x", ONE),
    ("join condition operands", "SELECT t.k FROM t JOIN u ON t.k = u.k", "SELECT t.k FROM t JOIN u ON u.k = t.k", TWO),
    ("mirrored lt", "SELECT k FROM t WHERE x < 3", "SELECT k FROM t WHERE 3 > x", ONE),
    ("mirrored gte", "SELECT k FROM t WHERE k >= 1", "SELECT k FROM t WHERE 1 <= k", ONE),
    ("mirrored columns", "SELECT k FROM t WHERE x > k", "SELECT k FROM t WHERE k < x", ONE),
    ("nested comparisons", "SELECT k FROM t WHERE (k = 1) = b", "SELECT k FROM t WHERE b = (1 = k)", ONE),
    (
        "eq in projection and group",
        "SELECT k = 1, count(*) FROM t GROUP BY k = 1",
        "SELECT 1 = k, count(1) FROM t GROUP BY 1 = k",
        ONE,
    ),
    ("in list order", "SELECT k FROM t WHERE k IN (3, 1, 2)", "SELECT k FROM t WHERE k IN (1, 2, 3)", ONE),
    ("in list duplicates", "SELECT k FROM t WHERE k IN (2, 1, 2, 1)", "SELECT k FROM t WHERE k IN (1, 2)", ONE),
    (
        "in list with null",
        "SELECT k FROM t WHERE s IN ('b', NULL, 'a')",
        "SELECT k FROM t WHERE s IN (NULL, 'a', 'b', 'a')",
        ONE,
    ),
    ("in list decimals", "SELECT k FROM t WHERE x IN (2.5, -1.5, 2.5)", "SELECT k FROM t WHERE x IN (-1.5, 2.5)", ONE),
    ("not in list order", "SELECT k FROM t WHERE k NOT IN (5, 4)", "SELECT k FROM t WHERE NOT k IN (4, 5)", ONE),
    ("between", "SELECT k FROM t WHERE x BETWEEN 1 AND 2", "SELECT k FROM t WHERE x >= 1 AND x <= 2", ONE),
    ("between mirrored", "SELECT k FROM t WHERE x BETWEEN 1 AND 2", "SELECT k FROM t WHERE 1 <= x AND 2 >= x", ONE),
    (
        "not between",
        "SELECT k FROM t WHERE x NOT BETWEEN 1 AND 2",
        "SELECT k FROM t WHERE NOT (x >= 1 AND x <= 2)",
        ONE,
    ),
    (
        "between under or",
        "SELECT k FROM t WHERE b OR k BETWEEN 1 AND 3",
        "SELECT k FROM t WHERE b OR (k >= 1 AND k <= 3)",
        ONE,
    ),
    (
        "between under and",
        "SELECT k FROM t WHERE b AND k BETWEEN 1 AND 3",
        "SELECT k FROM t WHERE b AND k >= 1 AND k <= 3",
        ONE,
    ),
    ("between projected", "SELECT k BETWEEN 1 AND 3 FROM t", "SELECT k >= 1 AND k <= 3 FROM t", ONE),
    (
        "between in case",
        "SELECT CASE WHEN k BETWEEN 1 AND 3 THEN s END FROM t",
        "SELECT CASE WHEN k >= 1 AND k <= 3 THEN s END FROM t",
        ONE,
    ),
    (
        "between expression",
        "SELECT k FROM t WHERE k + 1 BETWEEN x AND 9",
        "SELECT k FROM t WHERE k + 1 >= x AND k + 1 <= 9",
        ONE,
    ),
]

# (name, first, second, inputs): must not collide (each a near miss of a rule above).
DIFFERENT = [
    ("count column", "SELECT count(k) FROM t", "SELECT count(*) FROM t", ONE),
    ("count null", "SELECT count(NULL) FROM t", "SELECT count(*) FROM t", ONE),
    ("count distinct literal", "SELECT count(DISTINCT 1) FROM t", "SELECT count(*) FROM t", ONE),
    ("count cast null", "SELECT count(CAST(NULL AS INT)) FROM t", "SELECT count(*) FROM t", ONE),
    ("lt is not its swap", "SELECT k FROM t WHERE k < 1", "SELECT k FROM t WHERE 1 < k", ONE),
    ("lt vs lte", "SELECT k FROM t WHERE 1 > k", "SELECT k FROM t WHERE k <= 1", ONE),
    ("eq vs null-safe eq", "SELECT k FROM t WHERE 1 = k", "SELECT k FROM t WHERE k <=> 1", ONE),
    ("in list member", "SELECT k FROM t WHERE k IN (2, 1)", "SELECT k FROM t WHERE k IN (1, 2, 3)", ONE),
    ("in list null", "SELECT k FROM t WHERE k IN (2, 1)", "SELECT k FROM t WHERE k IN (1, NULL, 2)", ONE),
    ("in list literal type", "SELECT k FROM t WHERE k IN (1, 2)", "SELECT k FROM t WHERE k IN (2, 1.0)", ONE),
    (
        "in list of mixed types keeps its order",
        "SELECT k FROM t WHERE x IN (2.5, 1)",
        "SELECT k FROM t WHERE x IN (1, 2.5)",
        ONE,
    ),
    ("not in", "SELECT k FROM t WHERE k IN (2, 1)", "SELECT k FROM t WHERE k NOT IN (1, 2)", ONE),
    # A member that can fail at run time keeps its place (Spark stops at the first match).
    ("in list with a column", "SELECT k FROM t WHERE k IN (x, 1)", "SELECT k FROM t WHERE k IN (1, x)", ONE),
    ("between bounds", "SELECT k FROM t WHERE x BETWEEN 1 AND 2", "SELECT k FROM t WHERE x BETWEEN 2 AND 1", ONE),
    ("between strict", "SELECT k FROM t WHERE x BETWEEN 1 AND 2", "SELECT k FROM t WHERE x > 1 AND x <= 2", ONE),
    (
        "not between precedence",
        "SELECT k FROM t WHERE x NOT BETWEEN 1 AND 2",
        "SELECT k FROM t WHERE NOT x >= 1 AND x <= 2",
        ONE,
    ),
    (
        "and/or grouping",
        "SELECT k FROM t WHERE b AND (k = 1 OR x > 2)",
        "SELECT k FROM t WHERE b AND k = 1 OR x > 2",
        ONE,
    ),
]


@pytest.mark.parametrize("name,first,second,inputs", SAME, ids=[c[0] for c in SAME])
def test_equivalent_spellings_collide(name, first, second, inputs):
    q1, q2 = canonicalize(first, inputs), canonicalize(second, inputs)
    assert q1.statement == q2.statement
    assert key(q1) == key(q2) and q1.inputs == q2.inputs and q1.order_by == q2.order_by
    roundtrip(q1)


@pytest.mark.parametrize("name,first,second,inputs", DIFFERENT, ids=[c[0] for c in DIFFERENT])
def test_near_misses_do_not_collide(name, first, second, inputs):
    q1, q2 = canonicalize(first, inputs), canonicalize(second, inputs)
    assert q1.statement != q2.statement
    roundtrip(q1)
    roundtrip(q2)


def test_the_canonical_spellings():
    """What the form looks like: documented in docs/queries.md."""
    cases = {
        "SELECT count(1) FROM t": "SELECT COUNT(*) AS _0 FROM a",
        "SELECT k FROM t WHERE 2 > k": "SELECT a.col_0 AS _0 FROM a WHERE a.col_0 < 2",
        "SELECT k FROM t WHERE s IN ('b', NULL, 'a', 'b')": (
            "SELECT a.col_0 AS _0 FROM a WHERE a.col_2 IN ('a', 'b', NULL)"
        ),
        "SELECT k FROM t WHERE x NOT BETWEEN 1 AND 2": (
            "SELECT a.col_0 AS _0 FROM a WHERE NOT (a.col_1 >= 1 AND a.col_1 <= 2)"
        ),
    }
    docs = (Path(__file__).resolve().parents[2] / "docs" / "queries.md").read_text()
    for sql, statement in cases.items():
        assert canonicalize(sql, ONE).statement == statement
        assert f"| `{sql}` | `{statement}` |" in docs


def test_display_names_keep_the_users_spelling():
    q = canonicalize("SELECT count(1), k BETWEEN 1 AND 3, 2 > k FROM t GROUP BY k", ONE)
    assert q.output_names == ("COUNT(1)", "k BETWEEN 1 AND 3", "2 > k")


def test_subquery_operands_keep_their_order():
    """Moving a subquery would move the first appearance of its input, hence the abstract names."""
    q = canonicalize("SELECT k FROM t WHERE (SELECT max(k) FROM u) = k", TWO)
    assert q.statement.endswith("WHERE (SELECT MAX(b.col_0) AS _0 FROM b) = a.col_0")
    roundtrip(q)


# --- properties ----------------------------------------------------------------------------------------------

LITERALS = {  # one Spark type family per list (mixed families keep their order)
    "integer": st.integers(-50, 3_000_000_000).map(str),
    "decimal": st.integers(-999, 999).map(lambda n: f"{n / 100:.2f}"),
    "double": st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: f"{v:e}"),
    "string": st.text("abcAB é'", max_size=3).map(lambda v: "'" + v.replace("'", "''") + "'"),
}


@st.composite
def in_list(draw):
    """A literal IN list of one kind (maybe with NULL), and a shuffled copy of it with duplicates."""
    column, kind = draw(st.sampled_from([("k", "integer"), ("x", "decimal"), ("x", "double"), ("s", "string")]))
    members = draw(st.lists(LITERALS[kind], min_size=1, max_size=8))
    if draw(st.booleans()):
        members.append("NULL")
    shuffled = draw(st.permutations(members + draw(st.lists(st.sampled_from(members), max_size=4))))
    negate = draw(st.sampled_from(["", "NOT "]))
    return (
        f"SELECT k FROM t WHERE {column} {negate}IN ({', '.join(members)})",
        f"SELECT k FROM t WHERE {column} {negate}IN ({', '.join(shuffled)})",
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(in_list())
def test_in_lists_in_any_order_collide(pair):
    q1, q2 = canonicalize(pair[0], ONE), canonicalize(pair[1], ONE)
    assert q1.statement == q2.statement
    roundtrip(q1)


OPERANDS = ["k", "x", "k + 1", "x * 2", "length(s)", "1", "2.5", "'a'", "abs(k)", "coalesce(x, 0.0)", "t.k"]
OPERATORS = ["=", "<>", "!=", "<=>", "<", ">", "<=", ">="]
MIRROR = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


@st.composite
def swapped_comparison(draw):
    """``l op r`` and ``r op' l`` (op' the mirror of op), inside a random predicate."""
    left, right = draw(st.sampled_from(OPERANDS)), draw(st.sampled_from(OPERANDS))
    op = draw(st.sampled_from(OPERATORS))
    rest = draw(st.sampled_from(["", " AND b", " OR s = 'z'"]))
    return (
        f"SELECT k FROM t WHERE {left} {op} {right}{rest}",
        f"SELECT k FROM t WHERE {right} {MIRROR.get(op, op)} {left}{rest}",
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(swapped_comparison())
def test_swapped_comparisons_collide(pair):
    q1, q2 = canonicalize(pair[0], ONE), canonicalize(pair[1], ONE)
    assert q1.statement == q2.statement
    roundtrip(q1)


def test_mirrors_are_an_involution():
    assert all(MIRRORED[MIRRORED[op]] is op for op in MIRRORED)
