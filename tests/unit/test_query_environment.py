"""Every other way a value can depend on when, where or by whom a query runs (docs/queries.md
"What a value may not depend on"): each is refused with its rule, or allowed for the reason the docs give."""

from __future__ import annotations

import pytest
import sqlglot

from node.domain.sql import canonicalize, environment
from node.domain.sql.dialect import DIALECT
from node.support.errors import QueryRefused

T = {
    "t": [
        ("k", "int64"),
        ("x", "float64"),
        ("f", "float32"),
        ("s", "utf8"),
        ("d", "date32"),
        ("ts", "timestamp[us, tz=UTC]"),
    ]
}


@pytest.mark.parametrize(
    "call",
    [
        "current_date()",
        "current_date",
        "curdate()",
        "current_timestamp()",
        "current_timestamp",
        "now()",
        "localtimestamp()",
        "current_time()",
        "current_timezone()",
        "unix_timestamp()",
        "current_user()",
        "user()",
        "session_user()",
        "current_database()",
        "current_schema()",
        "current_catalog()",
        "version()",
        "input_file_name()",
        "input_file_block_start()",
        "input_file_block_length()",
        "spark_partition_id()",
        "monotonically_increasing_id()",
        "rand()",
        "rand(42)",
        "randn(1)",
        "random()",
        "uuid()",
        "shuffle(array(1, 2))",
        "aes_encrypt(s, '0000111122223333')",
    ],
)
def test_session_clock_and_machine_functions_are_refused(call: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize(f"SELECT {call} FROM t", T)
    assert refused.value.rule == "nondeterministic-function"


@pytest.mark.parametrize("call", ["aes_decrypt(s, '0000111122223333')", "try_aes_decrypt(s, 'k')", "collation(s)"])
def test_not_on_the_allowlist(call: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize(f"SELECT {call} FROM t", T)
    assert refused.value.rule == "function-not-allowed"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT s COLLATE UNICODE_CI FROM t",
        "SELECT k FROM t WHERE s = 'a' COLLATE UTF8_LCASE",
    ],
)
def test_collations_are_refused(sql: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize(sql, T)
    assert refused.value.rule == "collation"


@pytest.mark.parametrize(
    "expression",
    [
        "CAST(x AS STRING)",
        "CAST(f AS VARCHAR(10))",
        "x || 'a'",
        "concat(s, x)",
        "concat_ws(',', s, f)",
    ],
)
def test_floats_as_text_are_refused(expression: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize(f"SELECT {expression} FROM t", T)
    assert refused.value.rule == "float-format"


@pytest.mark.parametrize(
    "expression",
    [
        # Fixed seeds and algorithms; Locale.US formatting; the pinned session time zone.
        "hash(s)",
        "xxhash64(s, k)",
        "crc32(s)",
        "md5(s)",
        "sha2(s, 256)",
        "format_number(x, 2)",
        "format_string('%.3f', x)",
        "date_format(ts, 'EEEE MMMM a z')",
        "from_unixtime(k)",
        "to_unix_timestamp(s)",
        "unix_timestamp(s, 'yyyy-MM-dd')",
        "CAST(CAST(x AS DECIMAL(20, 6)) AS STRING)",
        "CAST(k AS STRING)",
        "CAST(d AS STRING)",
        "upper(s)",
    ],
)
def test_pinned_or_fixed_dependences_are_allowed(expression: str) -> None:
    canonicalize(f"SELECT {expression} FROM t", T)


def test_environment_check_alone() -> None:
    tree = sqlglot.parse_one("SELECT CAST(c AS STRING), c || 'x'", dialect=DIALECT)
    environment.check(tree, lambda _c: "int64")  # not a float: fine
    environment.check(tree, lambda _c: None)  # unknown: left to the worker's guard
    with pytest.raises(QueryRefused):
        environment.check(tree, lambda _c: "list<float64>")
