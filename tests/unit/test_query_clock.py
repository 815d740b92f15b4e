"""The clock rule (docs/queries.md "clock-value"): every spelling that lets Spark read the clock
through a string reaching a date/time type is refused; fixed-format literals still pass."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from node.domain.sql import canonicalize
from node.domain.sql import clock_rule as clock
from node.domain.sql.dialect import DIALECT
from node.support.errors import QueryRefused

T = {
    "t": [
        ("k", "int64"),
        ("s", "utf8"),
        ("d", "date32"),
        ("ts", "timestamp[us, tz=UTC]"),
        ("n", "timestamp[us]"),
    ]
}

# Each spelling of a clock value (node/domain/sql/clock_rule.py), plus the other places Spark casts a string to a
# date/time.
CLOCK_QUERIES = [
    "SELECT CAST('now' AS TIMESTAMP) FROM t",
    "SELECT DATE 'today' FROM t",
    "SELECT TIMESTAMP('now') FROM t",
    "SELECT TO_DATE('yesterday') FROM t",
    "SELECT TRY_CAST('now' AS DATE) FROM t",
    "SELECT CAST('tomorrow' AS TIMESTAMP_NTZ) FROM t",
    "SELECT k FROM t WHERE d < 'today'",
    "SELECT date_sub('today', 1) FROM t",
    "SELECT CAST('epoch' AS DATE) FROM t",
    "SELECT TIMESTAMP 'now' FROM t",
    "SELECT TIMESTAMP_NTZ 'now' FROM t",
    "SELECT TIMESTAMP_LTZ 'now' FROM t",
    "SELECT 'now'::date FROM t",
    "SELECT DATE('today') FROM t",
    "SELECT to_timestamp('now') FROM t",
    "SELECT try_to_timestamp('now') FROM t",
    "SELECT to_timestamp_ntz('now') FROM t",
    "SELECT year('today') FROM t",
    "SELECT hour('now') FROM t",
    "SELECT date_format('now', 'y') FROM t",
    "SELECT date_trunc('MM', 'now') FROM t",
    "SELECT datediff(d, 'yesterday') FROM t",
    "SELECT months_between(ts, 'now') FROM t",
    "SELECT add_months('today', 1) FROM t",
    "SELECT EXTRACT(YEAR FROM 'now') FROM t",
    "SELECT k FROM t WHERE ts > 'now'",
    "SELECT k FROM t WHERE n <= 'tomorrow'",
    "SELECT k FROM t WHERE d BETWEEN '2020-01-01' AND 'today'",
    "SELECT k FROM t WHERE d IN ('2020-01-01', 'today')",
    "SELECT coalesce(d, 'today') FROM t",
    "SELECT nvl(d, 'today') FROM t",
    "SELECT greatest(d, 'today') FROM t",
    "SELECT if(k > 1, d, 'today') FROM t",
    "SELECT CASE WHEN k > 1 THEN d ELSE 'today' END FROM t",
    "SELECT CASE d WHEN 'today' THEN 1 END FROM t",
    "SELECT k FROM t WHERE d < date_add('today', 1)",
    "SELECT CAST(concat('to', 'day') AS DATE) FROM t",
    "SELECT CAST(' Today UTC ' AS DATE) FROM t",
    "SELECT k FROM t WHERE d = (CAST('yesterday' AS STRING))",
    "SELECT k FROM t WHERE d < 'today' + INTERVAL '1' DAY",
    "SELECT 'now' - INTERVAL '1' HOUR FROM t",
    "SELECT k FROM t WHERE d < CAST('to' || 'day' AS DATE) + INTERVAL '3' MONTH",
]


@pytest.mark.parametrize("sql", CLOCK_QUERIES)
def test_clock_spellings_are_refused(sql: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize(sql, T)
    assert refused.value.rule == "clock-value"
    assert "\n" not in str(refused.value)


# The words Spark's SpecialDatetimeValues accepts: any case, spaces around, a zone id after all but `now`.
special = st.builds(
    lambda word, case, left, right, zone: (
        left + "".join(c.upper() if up else c for c, up in zip(word, case)) + zone + right
    ),
    st.sampled_from(["now", "today", "yesterday", "tomorrow", "epoch"]),
    st.lists(st.booleans(), min_size=9, max_size=9),
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from(["", " UTC", " Europe/Paris", " +01:00"]),
)


@settings(max_examples=60, deadline=None)
@given(word=special, target=st.sampled_from(["DATE", "TIMESTAMP", "TIMESTAMP_NTZ"]))
def test_every_special_word_variant_is_refused(word: str, target: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        canonicalize(f"SELECT CAST('{word}' AS {target}) FROM t", T)
    assert refused.value.rule == "clock-value"


def _fixed(value: dt.datetime, form: int) -> str:
    date = value.strftime("%Y-%m-%d")
    if form == 0:
        return date
    sep = " " if form % 2 else "T"
    time = value.strftime("%H:%M:%S.%f") if form >= 3 else value.strftime("%H:%M")
    return f"{date}{sep}{time}" + ("Z" if form == 4 else "+02:30" if form == 5 else "")


@settings(max_examples=60, deadline=None)
@given(
    value=st.datetimes(min_value=dt.datetime(1000, 1, 1)),
    form=st.integers(0, 5),
    target=st.sampled_from(["DATE", "TIMESTAMP", "TIMESTAMP_NTZ"]),
)
def test_fixed_format_literals_pass(value: dt.datetime, form: int, target: str) -> None:
    text = _fixed(value, form)
    assert dt.datetime.fromisoformat(text.replace("Z", "+00:00"))  # an independent reader agrees it is a date/time
    q = canonicalize(f"SELECT k FROM t WHERE ts > CAST('{text}' AS {target}) AND d < '{text}'", T)
    assert f"'{text}'" in q.statement


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k FROM t WHERE d > DATE '2020-01-01'",
        "SELECT to_date(s, 'yyyy-MM-dd') FROM t",  # a pattern: parsed by the formatter, no special words
        "SELECT to_timestamp(s, 'HH:mm') FROM t",
        "SELECT CAST(s AS DATE) FROM t",  # non-foldable: Spark's stringToDate has no clock words
        "SELECT CAST(s AS TIMESTAMP_NTZ) FROM t",  # time-only strings are an error for TIMESTAMP_NTZ
        "SELECT k FROM t WHERE s = 'today'",  # a string compared with a string stays a string
        "SELECT CAST(CAST('2020-01-01' AS DATE) AS TIMESTAMP) FROM t",
        "SELECT date_add(DATE '2020-01-01', k) FROM t",
        "SELECT date_format(ts, 'EEEE') FROM t",
        # TPC-H's date arithmetic: a fixed date moved by an interval is a date (the quoted amount is no date string)
        "SELECT k FROM t WHERE d < CAST('1994-01-01' AS DATE) + INTERVAL '1' YEAR",
        "SELECT k FROM t WHERE d <= DATE '1998-12-01' - INTERVAL '90' DAY",
        "SELECT k FROM t WHERE d >= INTERVAL '3' MONTH + DATE '1993-07-01'",
        "SELECT k FROM t WHERE ts < '2020-01-01 00:00:00' + INTERVAL '1' HOUR",
        "SELECT k FROM t WHERE d < DATE '1996-01-01' + INTERVAL '3' MONTH",  # TPC-H q15: the '3' is a count
    ],
)
def test_deterministic_date_uses_pass(sql: str) -> None:
    canonicalize(sql, T)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT CAST(s AS TIMESTAMP) FROM t",
        "SELECT to_timestamp(s) FROM t",
        "SELECT k FROM t WHERE ts = s",
    ],
)
def test_string_columns_never_reach_timestamp(sql: str) -> None:
    # '12:00' cast to TIMESTAMP takes today's date (DateTimeUtils.stringToTimestamp), from a column too.
    with pytest.raises(QueryRefused, match="time-only") as refused:
        canonicalize(sql, T)
    assert refused.value.rule == "clock-value"


# --- each piece alone ----------------------------------------------------------------------------------


def _expr(sql: str) -> sqlglot.exp.Expr:
    return sqlglot.parse_one(f"SELECT {sql}", dialect=DIALECT).expressions[0]


def test_check_value_alone() -> None:
    untyped = lambda _c: None  # noqa: E731
    clock.check_value(_expr("'2020-01-01'"), clock.DATE, _expr("1"), untyped)
    with pytest.raises(QueryRefused):
        clock.check_value(_expr("'today'"), clock.DATE, _expr("1"), untyped)
    with pytest.raises(QueryRefused):
        clock.check_value(_expr("upper('now')"), clock.TIMESTAMP, _expr("1"), untyped)
    clock.check_value(_expr("x"), clock.TIMESTAMP, _expr("1"), untyped)  # an untyped column: left to the worker
    with pytest.raises(QueryRefused):
        clock.check_value(_expr("x"), clock.TIMESTAMP, _expr("1"), lambda _c: "utf8")


def test_datetime_kind_alone() -> None:
    assert clock.type_string_kind("date32") == clock.DATE
    assert clock.type_string_kind("timestamp[us, tz=UTC]") == clock.TIMESTAMP
    assert clock.type_string_kind("timestamp[ns]") == clock.NTZ
    assert clock.type_string_kind("utf8") is None
    assert clock.datetime_kind(_expr("make_date(2020, 1, 1)"), lambda _c: None) == clock.DATE
    assert clock.datetime_kind(_expr("CAST(x AS TIMESTAMP_NTZ)"), lambda _c: None) == clock.NTZ
    assert clock.datetime_kind(_expr("upper(x)"), lambda _c: None) is None


def test_fixed_forms_alone() -> None:
    for ok in ("2020-01-01", "2020-01-01 10:00", "2020-01-01T10:00:00.123456789Z", "2020-01-01 10:00:00-05:00"):
        assert clock.FIXED_FORMS.fullmatch(ok)
    for bad in ("now", " 2020-01-01", "2020-1-1", "10:00", "T10:00", "2020-01-01 10:00 Europe/Paris", "2020"):
        assert not clock.FIXED_FORMS.fullmatch(bad)
