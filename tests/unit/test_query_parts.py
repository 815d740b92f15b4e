"""Each part of the canonicalizer alone: the allowlist checks per node class, inputs, naming,
spelling, order completion and qualification, without running the whole rewrite."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import given
from hypothesis import strategies as st
from sqlglot import exp

from node.domain.sql import checks, naming, order, printing, qualify
from node.domain.sql import declared_inputs as inputs
from node.domain.sql.dialect import DIALECT
from node.support.errors import QueryRefused

T = {"t": [("k", "int64"), ("x", "float64"), ("s", "utf8")]}


def ctx(sql: str = "") -> inputs.Context:
    return inputs.Context(sql, inputs.declare(T))


def first(sql: str, cls: type[exp.Expr]) -> exp.Expr:
    node = sqlglot.parse_one(sql, dialect=DIALECT).find(cls)
    assert node is not None
    return node


# --- checks: one entry of NODE_CHECKS at a time ---------------------------------------------------------


@pytest.mark.parametrize(
    "sql,cls,rule",
    [
        ("SELECT k FROM t LIMIT 3", exp.Select, "unordered-limit"),
        ("SELECT k FROM t SORT BY k", exp.Select, "forbidden-clause"),
        ("SELECT * EXCEPT (k) FROM t", exp.Star, "unsupported-construct"),
        ("SELECT k FROM t GROUP BY ALL", exp.Group, "unsupported-construct"),
        ("SELECT k FROM t ORDER BY k LIMIT k", exp.Limit, "unsupported-construct"),
        ("SELECT row_number() OVER (PARTITION BY k) FROM t", exp.Window, "unordered-window"),
        ("SELECT k FROM db.t", exp.Table, "qualified-table"),
        ("SELECT k FROM u", exp.Table, "unknown-table"),
        ("SELECT '${x}' FROM t", exp.Literal, "outside-reach"),
    ],
)
def test_each_node_check_alone(sql: str, cls: type[exp.Expr], rule: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        checks.check_node(ctx(sql), first(sql, cls))
    assert refused.value.rule == rule


def test_node_checks_table_covers_distinct_classes() -> None:
    kinds = [k for entry, _ in checks.NODE_CHECKS for k in (entry if isinstance(entry, tuple) else (entry,))]
    assert len(kinds) == len(set(kinds))
    allowed = checks.allowlist.ALLOWED_NODES
    for k in kinds:  # only allowed classes (or bases of allowed ones: SetOperation) get detailed checks
        assert k.__name__ in allowed or any(issubclass(getattr(exp, a), k) for a in allowed)


def test_check_node_allows_a_plain_select() -> None:
    sql = "SELECT k FROM t ORDER BY k LIMIT 3"
    for node in sqlglot.parse_one(sql, dialect=DIALECT).dfs():
        checks.check_node(ctx(sql), node)


def test_parse_refuses_two_statements_alone() -> None:
    with pytest.raises(QueryRefused) as refused:
        checks.parse(ctx("SELECT 1; SELECT 2"))
    assert refused.value.rule == "several-statements"


# --- inputs, naming, printing, order, qualify ------------------------------------------------------------


def test_declare_alone() -> None:
    (declared,) = inputs.declare({"T": [("K", "int64")]})
    assert (declared.alias, declared.key, declared.keys, declared.types) == ("T", "t", ("k",), ("int64",))
    with pytest.raises(QueryRefused):
        inputs.declare({"t": [("k", "int64"), ("K", "utf8")]})
    assert inputs.sqlglot_type('struct<"f":int64>').is_type(exp.DType.STRUCT)


@given(st.integers(0, 2000))
def test_abstract_names_are_unique_and_never_keywords(n: int) -> None:
    name = naming.abstract_table_name(n)
    assert name not in naming.KEYWORDS and naming.SAFE_IDENTIFIER.match(name)
    assert n == 0 or name != naming.abstract_table_name(n - 1)


@pytest.mark.parametrize("text,expected", [("007", "7"), ("1.50", "1.50"), ("1e2", "100.0E0"), ("1.5E-3", "0.0015E0")])
def test_normalize_number_alone(text: str, expected: str) -> None:
    assert printing.normalize_number(text) == expected


@pytest.mark.parametrize(
    "rule,sql,expected",
    [
        (printing._spell_joins, "SELECT 1 FROM a INNER JOIN b ON a.x = b.x", "SELECT 1 FROM a JOIN b ON a.x = b.x"),
        (printing._spell_ascending, "SELECT 1 FROM a ORDER BY x ASC", "SELECT 1 FROM a ORDER BY x"),
        (printing._spell_hex, "SELECT X'ab'", "SELECT X'AB'"),
        (printing._spell_parentheses, "SELECT (x) FROM a WHERE (x > 1)", "SELECT x FROM a WHERE x > 1"),
        (printing._spell_set_branches, "(SELECT 1) UNION (SELECT 2)", "SELECT 1 UNION SELECT 2"),
    ],
)
def test_each_spelling_rule_alone(rule, sql: str, expected: str) -> None:
    tree = sqlglot.parse_one(sql, dialect=DIALECT)
    rule(tree)
    assert tree.sql(dialect=DIALECT) == expected
    assert rule in printing.SPELLING


def test_sort_key_for_alone() -> None:
    column = exp.column("_0")
    assert order.sort_key_for("int64", column) == (column, False)
    how = order.sort_key_for("map<utf8,int64>", column)
    assert how is not None and how[1] and how[0].sql(dialect=DIALECT) == "MAP_ENTRIES(_0)"
    assert order.sort_key_for("list<map<utf8,int64>>", column) is None


def test_qualify_alone() -> None:
    c = ctx("SELECT k FROM t WHERE s = 'a'")
    root = checks.check_statement(c)
    qualify.prepare(c, root)
    qualified = qualify.qualify_statement(c, root)
    assert qualified.sql(dialect=DIALECT) == "SELECT t.k AS k FROM __in0 AS t WHERE t.s = 'a'"
    with pytest.raises(QueryRefused) as refused:
        c2 = ctx("SELECT nope FROM t")
        root2 = checks.check_statement(c2)
        qualify.prepare(c2, root2)
        qualify.qualify_statement(c2, root2)
    assert refused.value.rule == "unknown-column"
