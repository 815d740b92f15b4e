"""Results without ORDER BY are written in one canonical order (DESIGN.md "results are written in canonical order";
docs/queries.md "Order"), nested and float outputs included: two in-process nodes, real Kubo, real Spark.

Node ``a`` cuts its data into 2-row slices (so Spark reads many files, many partitions), node ``b`` holds the same
rows in reverse order in one slice. Each computes the same query; the published results must be the same rows in
the same order (same logical hash, which is over rows in order), and those rows must be the ones an independent
computation in Python gives.
"""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import AsyncIterator
from typing import Any

import pyarrow.parquet as pq
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, add_csv, inprocess_node, query

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the nodes and their workers live for the module

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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nodes(
    kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[InNode, InNode]]:
    base = tmp_path_factory.mktemp("order")
    async with (
        inprocess_node(base / "a", kubo_session, **{"datasets.rows_per_slice": 2}) as a,
        inprocess_node(base / "b", kubo_session) as b,
    ):
        await asyncio.gather(a[0].spark.ensure(), b[0].spark.ensure())
        for node, rows in ((a, ROWS), (b, ROWS[::-1])):
            await add_csv(node[1], "sales", _csv(rows))
        yield a, b


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


async def _result_rows(node: InNode, execution: str) -> list[tuple]:
    """The whole published result, in its order, read back as Parquet from the node's execution data."""
    resp = await node[1].get(f"/api/v0/executions/{execution}/data", params={"format": "parquet"})
    assert resp.status == 200, await resp.text()
    table = pq.read_table(io.BytesIO(await resp.read()))
    columns = [c.to_pylist() for c in table.columns]
    return [tuple(_exact(v) for v in row) for row in zip(*columns)]


@pytest.mark.parametrize("case", sorted(CASES))
async def test_nested_and_float_results_have_one_order_across_layouts(nodes: Any, case: str) -> None:
    a, b = nodes
    sql, expected = CASES[case]
    sa, ra = await query(a[1], {"sql": sql, "inputs": {"sales": "sales"}})
    sb, rb = await query(b[1], {"sql": sql, "inputs": {"sales": "sales"}})
    assert sa == sb == 200, (ra, rb)
    assert len(ra["slices"]) > 1 and len(rb["slices"]) == 1  # the layouts do differ
    assert ra["rows"] == rb["rows"]  # the rows shown (the head of the result)
    # One order: the result's logical hash is over its rows in order.
    assert ra["logicalHash"] == rb["logicalHash"]
    rows_a, rows_b = await _result_rows(a, ra["execution"]), await _result_rows(b, rb["execution"])
    assert rows_a == rows_b
    # The rows themselves: an independent computation over the input rows.
    assert sorted(map(repr, rows_a)) == sorted(repr(_exact(expected(r, x))) for r, x in ROWS)
