"""Structural limits before parsing (node/domain/sql/token_limits.py): statements the parser handles
slowly are refused from their token counts, each refusal naming its limit; statements within the limits are not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.domain.sql import canonicalize
from node.domain.sql.dialect import DIALECT
from node.domain.sql.token_limits import (
    MAX_BOOLEAN_TERMS,
    MAX_NESTING,
    MAX_SET_OPERATIONS,
    MAX_SQL_TOKENS,
    check_tokens,
)
from node.support.errors import QueryRefused

ONE = {"t": [("id", "int64"), ("name", "utf8")]}


def or_chain(terms: int) -> str:
    return "SELECT id FROM t WHERE " + " OR ".join(["id = 1"] * terms)


def test_the_5000_term_chain_is_refused_by_the_boolean_limit() -> None:
    # Before the limits this took 13.7 s and ended in "nests too deeply".
    with pytest.raises(QueryRefused) as info:
        canonicalize(or_chain(5000), ONE)
    e = info.value
    assert e.rule == "too-complex" and e.status == 400
    assert f"more than {MAX_BOOLEAN_TERMS} AND/OR operators (4999)" in str(e)
    assert "\n" not in str(e)


def test_the_100kb_chain_is_refused_by_the_boolean_limit() -> None:
    sql = or_chain(9_900)
    assert 95_000 < len(sql) <= 100_000  # under MAX_SQL_CHARS: the limits, not the size, refuse it
    with pytest.raises(QueryRefused, match="AND/OR operators"):  # before the parser (it took 43.8 s on it)
        canonicalize(sql, ONE)


@pytest.mark.parametrize(
    "sql,limit",
    [
        ("SELECT id FROM t WHERE id IN (" + ", ".join(["1"] * 12_000) + ")", f"more than {MAX_SQL_TOKENS} tokens"),
        ("SELECT " + "(" * 60 + "id" + ")" * 60 + " FROM t", f"nested more than {MAX_NESTING} levels"),
        (" UNION ALL ".join(["SELECT id FROM t"] * 300), f"more than {MAX_SET_OPERATIONS} UNION/INTERSECT/EXCEPT"),
    ],
    ids=["tokens", "nesting", "set-operations"],
)
def test_each_limit_names_itself(sql: str, limit: str) -> None:
    with pytest.raises(QueryRefused) as info:
        canonicalize(sql, ONE)
    assert info.value.rule == "too-complex"
    assert limit in str(info.value)


def test_statements_just_within_the_limits_are_canonicalized() -> None:
    assert canonicalize(or_chain(MAX_BOOLEAN_TERMS + 1), ONE).statement.count(" OR ") == MAX_BOOLEAN_TERMS
    nested = "SELECT " + "(" * 40 + "id" + ")" * 40 + " FROM t"
    assert canonicalize(nested, ONE).statement.startswith("SELECT")


def statement(booleans: int, depth: int, unions: int, in_items: int) -> str:
    where = " OR ".join(["id = 1"] * (booleans + 1))
    items = ", ".join(["1"] * in_items)
    head = f"SELECT {'(' * depth}id{')' * depth} FROM t WHERE ({where}) AND id IN ({items or '0'})"
    return head + " UNION ALL SELECT id FROM t" * unions


@settings(max_examples=60, deadline=None)
@given(
    booleans=st.integers(0, MAX_BOOLEAN_TERMS + 40),
    depth=st.integers(0, MAX_NESTING + 10),
    unions=st.integers(0, MAX_SET_OPERATIONS + 20),
    in_items=st.integers(0, 9_000),
)
def test_refused_exactly_when_a_count_exceeds_its_limit(booleans: int, depth: int, unions: int, in_items: int) -> None:
    sql = statement(booleans, depth, unions, in_items)
    tokens = DIALECT.tokenize(sql)
    # Counted from the generator, not from the scan: one AND joins the OR group and the IN list.
    expected = [
        (booleans + 1 > MAX_BOOLEAN_TERMS, "AND/OR operators"),
        (unions > MAX_SET_OPERATIONS, "UNION/INTERSECT/EXCEPT"),
        (depth > MAX_NESTING, "levels"),  # the WHERE group and the IN list are one level each, beside depth
        (len(tokens) > MAX_SQL_TOKENS, "tokens"),
    ]
    first = next((words for over, words in expected if over), None)
    if first is None:
        check_tokens(tokens, sql)
        return
    with pytest.raises(QueryRefused, match=first):
        check_tokens(tokens, sql)
