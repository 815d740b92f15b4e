"""Canonical equivalences on a real Spark worker (docs/queries.md "The rewrite", step 7).

Each pair that the canonicalizer makes collide (tests/unit/test_query_equivalences.py SAME) runs as the user wrote
both spellings, over the user's tables, on the Spark worker Cairn uses (its forced settings: ANSI, UTC…): the two
give the same rows, and so does their one canonical statement. The data holds what could tell the spellings apart:
NULLs, NaN, -0.0 and 0.0, infinities, duplicates.

Operand order: a binary comparison is swapped (``l = r`` → ``r = l``, ``l < r`` → ``r > l``) only if Spark's
implicit casts do not depend on the order. test_comparisons_do_not_depend_on_operand_order checks it for every
pair of operand types here (columns and literals of every primitive type Cairn ingests): same rows and same result
types, or both refused alike.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from node.domain.sql import CanonicalQuery, canonicalize
from node.support.errors import QueryRefused
from tests.fixtures.spark_oracle import ARROW, Engine, Failed, Later, arrow_table, bag, rows
from tests.unit import test_query_equivalences as pairs
from tests.unit.test_query_canonical import T

NAN, INF = float("nan"), float("inf")
Inputs = dict[str, list[tuple[str, str]]]
D = datetime.date
VALUES = {
    "int64": [1, 2, 2, None, 3, -1, 0, 1],
    "float64": [1.0, NAN, -0.0, None, 2.0, INF, 0.0, 1.5],
    "utf8": ["a", "b", "b", None, "", "é", "a", "B"],
    "date32": [D(2020, 1, d) for d in (1, 2, 2)] + [None] + [D(2021, 3, d) for d in (1, 4, 1, 9)],
    "bool": [True, False, True, None, False, True, None, False],
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    one = Engine(tmp_path_factory.mktemp("spark-eq"), master="local[2]")
    try:
        yield one.start()
    finally:
        one.stop()


@pytest.fixture(scope="module")
def paths(engine: Engine) -> dict:
    tables = {alias: arrow_table(columns, VALUES) for alias, columns in pairs.TWO.items()}
    return engine.write(tables, files=2, seed=3)


def _bag(result: pa.Table | Failed) -> object:
    return result if isinstance(result, Failed) else bag(result)


def _selected(request: pytest.FixtureRequest, test: str) -> list[dict[str, Any]]:
    """The parameters of this module's ``test`` cases that this run selected, in run order."""
    return [
        item.callspec.params
        for item in request.session.items
        if item.module is request.module and getattr(item, "originalname", "") == test
    ]


@pytest.fixture(scope="module")
def spellings(engine: Engine, paths: dict, request: pytest.FixtureRequest) -> dict[str, tuple[Later, ...]]:
    """Every selected pair's three statements handed to the worker at once, in test order: Spark answers the next
    pairs while a test checks its own (Spark jobs are what this module costs). A pair whose canonicalization fails
    here has only its two spellings handed over: its test canonicalizes again, after the rows, as always."""
    handed = {}
    for case in _selected(request, "test_both_spellings_give_the_same_rows"):
        try:
            q: CanonicalQuery | None = canonicalize(case["first"], case["inputs"])
        except Exception:  # noqa: BLE001
            q = None
        handed[case["name"]] = _submit_spellings(engine, paths, case["first"], case["second"], case["inputs"], q)
    return handed


def _submit_spellings(
    engine: Engine, paths: dict, first: str, second: str, inputs: Inputs, q: CanonicalQuery | None
) -> tuple[Later, ...]:
    used = {alias: paths[alias] for alias in inputs}
    spelt = (engine.submit_user(first, inputs, used), engine.submit_user(second, inputs, used))
    return spelt if q is None else (*spelt, engine.submit_canonical(q, used, published=False))


@pytest.mark.parametrize("name,first,second,inputs", pairs.SAME, ids=[c[0] for c in pairs.SAME])
def test_both_spellings_give_the_same_rows(
    engine: Engine, paths: dict, spellings: dict[str, tuple[Later, ...]], name, first, second, inputs
) -> None:
    handed = spellings.pop(name, None) or _submit_spellings(engine, paths, first, second, inputs, None)
    one, two = handed[0].result(), handed[1].result()
    assert isinstance(one, pa.Table), one
    assert isinstance(two, pa.Table), two
    assert one.schema.types == two.schema.types
    assert bag(one) == bag(two), (first, second)
    q = canonicalize(first, inputs)
    used = {alias: paths[alias] for alias in inputs}
    canonical = handed[2].result() if len(handed) == 3 else engine.run_canonical(q, used, published=False)
    assert isinstance(canonical, pa.Table), canonical
    assert canonical.schema.types == one.schema.types and bag(canonical) == bag(one)


# Column operands of every primitive type, and literals of each kind (the implicit casts a swap could change).
MATRIX_COLUMNS = [
    ("i", "int32"),
    ("l", "int64"),
    ("f", "float32"),
    ("x", "float64"),
    ("m", "decimal(10,2)"),
    ("s", "utf8"),
    ("n", "utf8"),  # texts that cast to every numeric type under ANSI, to dates, to booleans: the casts run
    ("ds", "utf8"),
    ("bs", "utf8"),
    ("d", "date32"),
    ("ts", 'timestamp[us,tz="UTC"]'),
    ("b", "bool"),
]
MATRIX = {
    "i": [1, 2, None, -3, 0],
    "l": [1, 3_000_000_000, None, -3, 2],
    "f": [1.5, float("nan"), None, -0.0, 2.0],
    "x": [1.5, float("nan"), None, 0.0, float("inf")],
    "m": [decimal.Decimal(v) if v is not None else None for v in ("1", "2.5", None, "-3.25", "0")],
    "s": ["a", "2020-01-01", None, "1", "true"],
    "n": ["1", "2", None, "-3", "0"],
    "ds": ["2020-01-01", "2021-06-30", None, "1999-12-31", "2020-01-01"],
    "bs": ["true", "false", None, "true", "false"],
    "d": [D(2020, 1, 1), D(2021, 1, 1), None, D(1999, 1, 1), D(2020, 1, 1)],
    "ts": [datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)] * 2 + [None] * 3,
    "b": [True, False, None, True, False],
}
LITERALS = ["1", "2.5", "1.5E0", "'1'", "'a'", "DATE '2020-01-01'", "TRUE", "NULL", "CAST(2 AS BIGINT)"]
OPERANDS = [c for c, _ in MATRIX_COLUMNS] + LITERALS
PAIRS = list(itertools.combinations(OPERANDS, 2))
OPS = ["=", "<>", "<=>", "IS DISTINCT FROM", "<", "<=", ">", ">="]
MIRROR = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}
SEEN: dict[str, set[tuple[str, str]]] = {"ran": set(), "failed alike": set()}


@pytest.fixture(scope="module")
def matrix(engine: Engine) -> dict:
    columns = {name: pa.array(MATRIX[name], ARROW[t]) for name, t in MATRIX_COLUMNS}
    return engine.write({"t": pa.table(columns)})


def _both_orders(left: str, right: str) -> tuple[str, str]:
    written = f"SELECT {', '.join(f'{left} {op} {right}' for op in OPS)} FROM t"
    swapped = f"SELECT {', '.join(f'{right} {MIRROR.get(op, op)} {left}' for op in OPS)} FROM t"
    return written, swapped


@pytest.fixture(scope="module")
def orders(engine: Engine, matrix: dict, request: pytest.FixtureRequest) -> dict[tuple[str, str], tuple[Later, Later]]:
    """Every selected pair's two statements handed to the worker at once, in test order (as ``spellings``)."""
    handed = {}
    for case in _selected(request, "test_comparisons_do_not_depend_on_operand_order"):
        pair = (case["left"], case["right"])
        handed[pair] = tuple(engine.submit_user(sql, {"t": MATRIX_COLUMNS}, matrix) for sql in _both_orders(*pair))
    return handed


@pytest.mark.parametrize("left,right", PAIRS, ids=[f"{a} vs {b}" for a, b in PAIRS])
def test_comparisons_do_not_depend_on_operand_order(
    engine: Engine, matrix: dict, orders: dict[tuple[str, str], tuple[Later, Later]], left: str, right: str
) -> None:
    """``l op r`` and ``r op' l`` on Spark: the same rows and types, or the same refusal."""
    inputs = {"t": MATRIX_COLUMNS}
    written, swapped = _both_orders(left, right)
    handed = orders.pop((left, right), None) or tuple(
        engine.submit_user(sql, inputs, matrix) for sql in (written, swapped)
    )
    one, two = (answer.result() for answer in handed)
    if isinstance(one, Failed) or isinstance(two, Failed):
        assert isinstance(one, Failed) and isinstance(two, Failed), (written, one, two)
        assert (one.kind, one.condition) == (two.kind, two.condition)
        SEEN["failed alike"].add((left, right))
        return
    SEEN["ran"].add((left, right))
    assert one.schema.types == two.schema.types
    assert rows(one) == rows(two), (written, swapped)
    try:
        q1, q2 = canonicalize(written, inputs), canonicalize(swapped, inputs)
    except QueryRefused as e:  # e.g. a float turned into text, a string reaching a timestamp
        with pytest.raises(QueryRefused) as other:
            canonicalize(swapped, inputs)
        assert other.value.rule == e.rule
        return
    assert q1.statement == q2.statement


# Pairs whose comparison involves an implicit cast that runs (numbers of every type and numeric text; dates and
# date text; booleans and boolean text): these must compare rows, not fail alike.
NUMERIC = ["i", "l", "f", "x", "m", "n", "1", "2.5", "1.5E0", "'1'", "CAST(2 AS BIGINT)", "NULL"]
MUST_RUN = {frozenset(p) for p in itertools.combinations(NUMERIC, 2)} | {
    frozenset(p) for p in (("d", "ds"), ("d", "DATE '2020-01-01'"), ("b", "bs"), ("b", "TRUE"))
}


def test_the_matrix_compared_most_pairs() -> None:
    """Not vacuous: every pair with a cast that runs compared rows (the others fail alike both ways: Spark's
    analyzer refuses e.g. a date with a boolean, ANSI refuses casting 'a' to a number, the guard a string reaching
    a timestamp); runs after the matrix, in file order."""
    assert len(SEEN["ran"]) + len(SEEN["failed alike"]) == len(PAIRS), SEEN
    must = {p for p in PAIRS if frozenset(p) in MUST_RUN}
    assert len(must) == len(MUST_RUN) == 66 + 4
    assert must <= SEEN["ran"], sorted(must & SEEN["failed alike"])


def test_in_lists_in_any_order_on_spark(engine: Engine, paths: dict) -> None:
    """Permuted literal lists with NULL and duplicates (NOT IN too, where NULL matters most)."""
    inputs = {"t": T}
    used = {"t": paths["t"]}
    handed = []  # every statement handed to the worker first, then each group's answers compared
    for negate in ("", "NOT "):
        for members in (["2", "1", "NULL", "2"], ["3", "1"], ["'b'", "NULL", "'é'", "'b'"]):
            column = "s" if members[0].startswith("'") else "k"
            answers = []
            for order in (members, list(reversed(members)), sorted(set(members))):
                sql = f"SELECT k, s FROM t WHERE {column} {negate}IN ({', '.join(order)})"
                answers.append(engine.submit_user(sql, inputs, used))
                assert (
                    canonicalize(sql, inputs).statement
                    == canonicalize(
                        f"SELECT k, s FROM t WHERE {column} {negate}IN ({', '.join(members)})", inputs
                    ).statement
                )
            handed.append((negate, members, answers))
    for negate, members, answers in handed:
        results = [_bag(answer.result()) for answer in answers]
        assert results[0] == results[1] == results[2], (negate, members)
