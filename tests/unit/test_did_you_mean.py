""" "Did you mean": an unknown column, table or dataset name is refused with the closest
existing names (difflib), never a bare "unknown"."""

from __future__ import annotations

import pytest

from node.domain.sql import canonicalize
from node.support.errors import QueryRefused, did_you_mean

SALES = {"sales": [("region", "utf8"), ("product", "utf8"), ("amount", "int64")]}


def test_close_names_are_offered_case_insensitively() -> None:
    assert did_you_mean("ordrs", ["orders", "customers"]) == " (did you mean 'orders'?)"
    assert did_you_mean("AMONT", ["amount", "Amount", "region"]) == " (did you mean 'amount'?)"
    assert did_you_mean("x", ["orders"]) == ""
    assert did_you_mean("ordrs", []) == ""


@pytest.mark.parametrize(
    "sql,column,meant",
    [
        ("SELECT amont FROM sales", "amont", "amount"),
        ("SELECT s.amont FROM sales s", "amont", "amount"),
        ("SELECT sales.regoin FROM sales", "regoin", "region"),
        ("SELECT region FROM sales GROUP BY regin", "regin", "region"),
        ("SELECT amount AS total FROM sales ORDER BY totl", "totl", "total"),
        ("WITH c AS (SELECT amount AS total FROM sales) SELECT c.totl FROM c", "totl", "total"),
        ("SELECT x.total FROM (SELECT amount AS total FROM sales) x WHERE x.totl > 1", "totl", "total"),
    ],
)
def test_unknown_columns_name_the_closest(sql: str, column: str, meant: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize(sql, SALES)
    assert refused.value.rule == "unknown-column" and refused.value.fragment == column
    assert f"did you mean '{meant}'" in str(refused.value)


def test_no_suggestion_when_nothing_is_close() -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize("SELECT zzz FROM sales", SALES)
    assert str(refused.value) == "query refused (unknown-column): no input or CTE in scope has this column: zzz"
