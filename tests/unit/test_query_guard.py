"""The worker guard's plan checks, each alone, on small JSON plans in Spark's ``TreeNode.toJSON`` layout.

The same checks run on real Spark plans in tests/integration/test_query_guard.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_worker import guard

E = "org.apache.spark.sql.catalyst.expressions."


def lit(value: Any, data_type: str) -> dict[str, Any]:
    return {"class": E + "Literal", "num-children": 0, "value": value, "dataType": data_type}


def col(name: str, data_type: Any) -> dict[str, Any]:
    return {"class": E + "AttributeReference", "num-children": 0, "name": name, "dataType": data_type}


def node(kind: str, children: int, **fields: Any) -> dict[str, Any]:
    return {"class": E + kind, "num-children": children, **fields}


def cast(to: Any) -> dict[str, Any]:
    return node("Cast", 1, child=0, dataType=to)


def project(*expressions: list[dict[str, Any]]) -> str:
    """A Project over a one-row relation, with one expression tree (pre-order list) per output."""
    return json.dumps(
        [
            {
                "class": "org.apache.spark.sql.catalyst.plans.logical.Project",
                "num-children": 1,
                "projectList": [list(e) for e in expressions],
                "child": 0,
            },
            {"class": "org.apache.spark.sql.catalyst.plans.logical.OneRowRelation", "num-children": 0},
        ]
    )


def refused(text: str) -> str:
    with pytest.raises(guard.Refused) as e:
        guard.check_json(text)
    return e.value.rule


def test_literal_strings_must_be_fixed_format() -> None:
    assert refused(project([cast("date"), lit("today", "string")])) == "clock-value"
    assert refused(project([cast("timestamp_ntz"), lit("Now", "string")])) == "clock-value"
    guard.check_json(project([cast("date"), lit("2024-02-29", "string")]))
    guard.check_json(project([cast("timestamp"), lit("2024-02-29T10:00:00Z", "string")]))
    guard.check_json(project([cast("date"), lit("19000", "integer")]))  # not a string: no clock word possible


def test_folded_strings_are_refused() -> None:
    concat = node("Concat", 2)
    assert refused(project([cast("date"), concat, lit("to", "string"), lit("day", "string")])) == "clock-value"
    # a date made of numbers is not a string
    guard.check_json(
        project([cast("timestamp"), node("MakeDate", 3), lit(2020, "integer"), lit(1, "integer"), lit(1, "integer")])
    )


def test_string_columns_never_reach_timestamp() -> None:
    assert refused(project([cast("timestamp"), col("s", "string")])) == "clock-value"
    guard.check_json(project([cast("date"), col("s", "string")]))  # stringToDate has no time-only form
    guard.check_json(project([cast("timestamp"), col("d", "date")]))
    # a comparison is a boolean whatever its operands are
    guard.check_json(
        project(
            [
                cast("timestamp"),
                node("If", 3),
                node("EqualTo", 2),
                col("s", "string"),
                lit("a", "string"),
                col("d", "date"),
                col("d", "date"),
            ]
        )
    )


def test_nondeterministic_classes_and_subqueries() -> None:
    assert refused(project([node("CurrentDate", 0)])) == "nondeterministic-function"
    inner = json.loads(project([cast("date"), lit("epoch", "string")]))
    assert refused(project([node("ScalarSubquery", 0, plan=inner)])) == "clock-value"


def test_float_to_string() -> None:
    assert refused(project([cast("string"), col("x", "double")])) == "float-format"
    array = {"type": "array", "elementType": "float", "containsNull": True}
    assert refused(project([cast("string"), col("xs", array)])) == "float-format"
    guard.check_json(project([cast("string"), col("k", "long")]))


def test_trees_rebuilds_pre_order() -> None:
    roots = list(guard.trees(json.loads(project([node("Add", 2), lit(1, "integer"), lit(2, "integer")]))))
    kinds = [[n.kind for n in r.walk()] for r in roots]
    assert ["Project", "OneRowRelation"] in kinds and ["Add", "Literal", "Literal"] in kinds
