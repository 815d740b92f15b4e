"""Canonical statements run on real Spark (opt-in: ``CAIRN_SPARK_TESTS=1``; starts a local SparkSession).

For every query of test_query_canonical: Spark accepts the canonical statement over the abstract tables
(``a``, ``b``, … with columns ``col_i``), names its outputs ``_0, _1, …``, and returns the same rows as the
user's statement over the user's tables (compared as multisets; statements with LIMIT only when the user's
order has no ties to break).
"""

from __future__ import annotations

import collections
import datetime
import os
import shutil

import pytest

from node.query import CanonicalQuery, QueryRefused, canonicalize
from tests.unit import test_query_canonical as corpus

pytestmark = pytest.mark.skipif(
    not os.environ.get("CAIRN_SPARK_TESTS") or shutil.which("java") is None,
    reason="set CAIRN_SPARK_TESTS=1 to run the canonicalizer against Spark (needs Java)",
)

_DDL = {
    "int64": "BIGINT",
    "int32": "INT",
    "float64": "DOUBLE",
    "float32": "FLOAT",
    "utf8": "STRING",
    "date32": "DATE",
    "bool": "BOOLEAN",
    "list<int64>": "ARRAY<BIGINT>",
    "map<utf8,int64>": "MAP<STRING, BIGINT>",
    'struct<"f":int64,"G":utf8>': "STRUCT<f: BIGINT, G: STRING>",
}
_VALUES = {
    "int64": [1, 2, 2, None, 3, 1],
    "int32": [1, 2, 2, None, 3, 1],
    "float64": [1.5, 2.0, 2.0, None, -1.0, 1.5],
    "float32": [1.5, 2.0, 2.0, None, -1.0, 1.5],
    "utf8": ["a", "b", "b", None, "2020-01-02", "a"],
    "date32": [datetime.date(2020, 1, d) for d in (1, 2, 2, 3, 4)] + [None],
    "bool": [True, False, True, None, False, True],
    "list<int64>": [[1, 2], [3], [4], None, [2, 2], [1]],
    "map<utf8,int64>": [{"x": 1}, {"y": 2}, {}, None, {"x": 3}, {"x": 1}],
    'struct<"f":int64,"G":utf8>': [(1, "a"), (2, "b"), None, (3, None), (1, "a"), (2, "c")],
}


def _cases() -> list[tuple[str, dict]]:
    cases, seen = [], set()
    pairs = [(c[1], c[2]) for c in corpus.SAME + corpus.DIFFERENT] + [
        (c[3], c[4]) for c in corpus.SAME + corpus.DIFFERENT
    ]
    for sql, inputs in pairs + list(corpus.ACCEPTED):
        if (sql, repr(inputs)) not in seen:
            seen.add((sql, repr(inputs)))
            cases.append((sql, inputs))
    return cases


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.ansi.enabled", "false")  # test data, not the statements, would raise
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _register(spark, name: str, columns) -> None:
    schema = ", ".join(f"`{n}` {_DDL[t]}" for n, t in columns)
    rows = list(zip(*[_VALUES[t] for _, t in columns]))
    spark.createDataFrame(rows, schema).createOrReplaceTempView(name)


def _bag(rows) -> collections.Counter:
    return collections.Counter(repr(tuple(r)) for r in rows)


@pytest.mark.parametrize("sql,inputs", _cases(), ids=lambda v: v[:60] if isinstance(v, str) else "")
def test_spark_runs_the_canonical_statement(spark, sql, inputs):
    try:
        q: CanonicalQuery = canonicalize(sql, inputs)
    except QueryRefused:
        pytest.skip("refused")
    if any(t not in _DDL for types in q.input_types for t in types):
        pytest.skip("type without test data")
    for table in spark.catalog.listTables():
        spark.catalog.dropTempView(table.name)
    for alias, columns in inputs.items():
        _register(spark, alias, columns)
    try:
        expected = spark.sql(sql).collect()
    except Exception:  # noqa: BLE001 - the user's statement may be invalid Spark; the canonical one must not
        expected = None
    for table in spark.catalog.listTables():
        spark.catalog.dropTempView(table.name)
    for name, columns in q.abstract_inputs:
        _register(spark, name, columns)
    frame = spark.sql(q.statement)
    assert frame.columns == [f"_{i}" for i in range(len(q.output_names))]
    if expected is None:
        return
    got = frame.collect()
    has_ties = "LIMIT" in q.statement or "ROW_NUMBER" in q.statement or "LAG" in q.statement
    if not has_ties:
        assert _bag(got) == _bag(expected)
