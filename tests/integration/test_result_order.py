"""Results without ORDER BY are written in one canonical order (DESIGN.md "results are written in canonical order";
docs/queries.md "Order"), nested and float outputs included: real nodes, real Kubo, real Spark.

Node ``a`` cuts its data into 2-row slices (so Spark reads many files, many partitions), node ``b`` holds the same
rows in reverse order in one slice. Each computes the same query; the published results must be the same rows in
the same order (same logical hash, which is over rows in order), and those rows must be the ones an independent
computation in Python gives.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.nodes import NodeProcess
from tests.integration.test_query import post

ROWS = [
    ("north", 10),
    ("south", 7),
    ("north", 3),
    ("east", 12),
    ("south", 5),
    ("north", 1),
    ("east", 12),
    ("north", 6),
    ("south", 7),
    ("east", 0),
    ("north", 10),
    ("west", 2),
    ("west", 9),
]


def _csv(rows: list[tuple[str, int]]) -> bytes:
    return ("region,amount\n" + "".join(f"{r},{a}\n" for r, a in rows)).encode()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, NodeProcess]]:
    base = tmp_path_factory.mktemp("order")
    a = NodeProcess(base / "a", env={"CAIRN_SPARK_AUTOSTART": "true", "CAIRN_DATASETS_ROWS_PER_SLICE": "2"}).start()
    b = NodeProcess(base / "b", env={"CAIRN_SPARK_AUTOSTART": "true"}).start()
    try:
        for node, rows in ((a, ROWS), (b, ROWS[::-1])):
            path = base / f"{node.home.name}.csv"
            path.write_bytes(_csv(rows))
            r = node.cli("add", str(path), "--name", "sales")
            assert r.returncode == 0, r.stderr.decode()
        yield a, b
    finally:
        a.stop()
        b.stop()


def _z(amount: int) -> float:
    return float(amount - 6) * 0.0  # -0.0 below 6, else 0.0 (IEEE-754, as in Spark)


# Not IF(c, -0.0D, 0.0D): Spark's optimizer folds an IF whose branches are equal under its float equality.
Z = "CAST(amount - 6 AS DOUBLE) * 0.0D"


# (SQL, what each input row gives, in Python): outputs that tie under Spark's order (-0.0 = 0.0) and nested ones.
CASES = {
    "struct_and_array_zeros": (
        f"SELECT named_struct('r', region, 'z', {Z}) AS s, array({Z}) AS a FROM sales",
        lambda r, a: ({"r": r, "z": _z(a)}, [_z(a)]),
    ),
    "transform_array": (
        "SELECT transform(array(amount, amount * 2), e -> e + 1) AS t FROM sales",
        lambda r, a: ([a + 1, a * 2 + 1],),
    ),
    "flat_zeros": (
        f"SELECT {Z} AS z, region FROM sales",
        lambda r, a: (_z(a), r),
    ),
    "map_output": (
        "SELECT map(region, amount) AS m FROM sales",
        lambda r, a: ([(r, a)],),
    ),
}


def _exact(value: Any) -> Any:
    """Comparable, exact form of a cell: floats by their bits, so -0.0 and 0.0 differ."""
    if isinstance(value, float):
        return ("f", struct.pack(">d", value).hex())
    if isinstance(value, dict):
        return tuple((k, _exact(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_exact(v) for v in value)
    return value


def _result_rows(node: NodeProcess, sql: str, tmp: Path) -> list[tuple]:
    """The whole published result, in its order, read back from the node's Parquet slices."""
    import pyarrow.parquet as pq

    dest = tmp / f"{node.home.name}.parquet"
    r = node.cli("query", sql, "--input", "sales=sales", "-o", str(dest))
    assert r.returncode == 0, r.stderr.decode()
    table = pq.read_table(dest)
    columns = [c.to_pylist() for c in table.columns]
    return [tuple(_exact(v) for v in row) for row in zip(*columns)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_nested_and_float_results_have_one_order_across_layouts(nodes: Any, case: str, tmp_path: Path) -> None:
    a, b = nodes
    sql, expected = CASES[case]
    sa, ra = post(a, {"sql": sql, "inputs": {"sales": "sales"}})
    sb, rb = post(b, {"sql": sql, "inputs": {"sales": "sales"}})
    assert sa == sb == 200, (ra, rb)
    assert len(ra["slices"]) > 1 and len(rb["slices"]) == 1  # the layouts do differ
    assert ra["rows"] == rb["rows"]  # the rows shown (the head of the result)
    # One order: the result's logical hash is over its rows in order.
    assert ra["logicalHash"] == rb["logicalHash"]
    rows_a, rows_b = _result_rows(a, sql, tmp_path), _result_rows(b, sql, tmp_path)
    assert rows_a == rows_b
    # The rows themselves: an independent computation over the input rows.
    assert sorted(map(repr, rows_a)) == sorted(repr(_exact(expected(r, x))) for r, x in ROWS)
