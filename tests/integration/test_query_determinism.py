"""Determinism, as a property: every query canonicalize() accepts gives identical rows on two differently set up
Spark workers (DESIGN.md: a result is shared under a key that names neither the machine nor the time of the run).

Hypothesis generates statements from a typed grammar (arithmetic, string functions on non-ASCII text, date/time
functions and casts of string literals, CASE, aggregates, ORDER BY + LIMIT, windows, joins) over tables of
int/double/decimal/string/date/timestamp/bool columns with NULLs. Each accepted statement runs on:

- ``home``: ``local[1]``, the machine's clock, ``TZ=UTC``, ``LANG=C.UTF-8``, one Parquet file per table;
- ``away``: ``local[3]``, the JVM's clock moved 400 days and 7 hours ahead (libfaketime), ``TZ=Pacific/Kiritimati``
  (UTC+14), a Turkish locale (``LANG``/``LC_ALL=tr_TR.UTF-8``; the JVM takes its default locale from
  ``-Duser.language=tr -Duser.country=TR`` in JAVA_TOOL_OPTIONS, as the C locale is all this machine has installed),
  rows shuffled over three Parquet files per table.

The published rows (node.services.resolve.execution.published_order) must be identical, or both runs must fail alike.
Disagreements are collected (with the SQL and both answers) and reported by the last test, so one run lists every
generated query that broke the property instead of stopping at the first.
"""

from __future__ import annotations

import datetime
import glob
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.domain.sql import canonicalize
from node.support.errors import QueryRefused
from tests.fixtures.spark_oracle import Engine, Failed, Later, column_table, rows

T = [
    ("i", "int64"),
    ("f", "float64"),
    ("m", "decimal(10,2)"),
    ("s", "utf8"),
    ("d", "date32"),
    ("ts", 'timestamp[us,tz="UTC"]'),
    ("b", "bool"),
]
U = [("k", "int64"), ("name", "utf8"), ("day", "date32")]
INPUTS = {"t": T, "u": U}


def inputs_of(sql: str) -> dict[str, list[tuple[str, str]]]:
    """Only the tables the statement reads (canonicalize refuses an unused input)."""
    return INPUTS if " u ON " in sql else {"t": T}


UTC = datetime.UTC
D, TS = datetime.date, datetime.datetime
T_ROWS = {  # chosen so that no generated expression raises under ANSI (no overflow, no bad cast)
    "i": [1, 2, None, 4, 2, 7, -3, 10],
    "f": [1.5, -0.25, None, 2.0, 1e6, 3.14159, 0.0, -7.5],
    "m": [Decimal(v) if v else None for v in ("1.25", "-3.50", None, "100.00", "0.01", "2.50", "7.75", "-0.99")],
    "s": ["i", "ß", "İstanbul", None, "ırmak", "straße", "Iİıi", "abc"],
    "d": [
        D(2020, 1, 1),
        D(2020, 2, 29),
        None,
        D(1999, 12, 31),
        D(2024, 7, 14),
        D(2021, 3, 28),
        D(2020, 1, 1),
        D(2000, 6, 15),
    ],
    "ts": [
        TS(2020, 1, 1, 23, 30, tzinfo=UTC),
        TS(2020, 3, 29, 1, 30, tzinfo=UTC),
        TS(2024, 2, 29, 12, 0, tzinfo=UTC),
        None,
        TS(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
        TS(2021, 10, 31, 0, 15, tzinfo=UTC),
        TS(2020, 1, 1, 0, 0, tzinfo=UTC),
        TS(2022, 6, 30, 10, 0, 1, tzinfo=UTC),
    ],
    "b": [True, False, None, True, False, True, False, True],
}
U_ROWS = {
    "k": [1, 2, 4, 5, None, 2],
    "name": ["x", "İ", "y", "ß", None, "i"],
    "day": [D(2020, 1, 1), D(2020, 1, 2), None, D(2024, 2, 29), D(2020, 1, 1), D(2001, 1, 1)],
}

MAX_EXAMPLES = int(os.environ.get("CAIRN_DETERMINISM_EXAMPLES", "100"))  # more for a deeper local search
MIN_ACCEPTED = MAX_EXAMPLES * 2 // 5  # at least this many generated statements must be accepted and run

# --- the grammar ---------------------------------------------------------------------------------------------

LEAVES = {
    "int": [
        "t.i",
        "1",
        "42",
        "length(t.s)",
        "year(t.d)",
        "month(t.d)",
        "dayofweek(t.d)",
        "hour(t.ts)",
        "datediff(t.d, DATE '2020-01-01')",
        "unix_timestamp(t.ts)",
        "day(t.ts)",
        "weekofyear(t.d)",
    ],
    "double": ["t.f", "2.5", "CAST('12.5' AS DOUBLE)", "t.i / 4"],
    "decimal": ["t.m", "1.25", "CAST('3.5' AS DECIMAL(10,2))"],
    "string": [
        "t.s",
        "'İi'",
        "'ßtraße'",
        "'ıI'",
        "date_format(t.ts, 'EEEE d MMMM yyyy HH:mm')",
        "CAST(t.ts AS STRING)",
        "CAST(t.d AS STRING)",
        "CAST(t.f AS STRING)",
        "from_unixtime(t.i)",
        "date_format(t.d, 'EEE MMM')",
        "format_number(t.f, 2)",
        "format_string('%.3f|%s', t.f, t.s)",
        "CAST(t.m AS STRING)",
        "date_format(t.ts, 'z XXX')",
        "to_char(t.m, '999.99')",
    ],
    "date": [
        "t.d",
        "DATE '2020-02-29'",
        "CAST('2021-02-03' AS DATE)",
        "CAST('today' AS DATE)",
        "DATE 'tomorrow'",
        "CAST(t.ts AS DATE)",
        "to_date('2020-05-06')",
        "to_date(t.ts)",
        "make_date(2020, 1, 31)",
        "CAST('yesterday' AS DATE)",
    ],
    "timestamp": [
        "t.ts",
        "CAST('2021-01-01 10:00:00' AS TIMESTAMP)",
        "CAST('now' AS TIMESTAMP)",
        "TIMESTAMP 'today'",
        "CAST(t.d AS TIMESTAMP)",
        "to_timestamp('2020-01-01 00:00:00')",
        "timestamp_seconds(t.i)",
        "from_utc_timestamp(t.ts, 'Asia/Tokyo')",
        "to_utc_timestamp(t.ts, 'America/New_York')",
        "CAST('epoch' AS TIMESTAMP)",
    ],
    "bool": [
        "t.b",
        "t.i > 2",
        "t.f IS NULL",
        "t.s LIKE 'i%'",
        "t.d < DATE '2020-06-01'",
        "upper(t.s) = 'I'",
        "t.ts > TIMESTAMP '2020-01-01 12:00:00'",
    ],
}
WRAP = {  # type -> templates taking one expression of the same type, or of the type named in the key
    "int": ["({0} + 3)", "({0} * 2)", "abs({0})", "CAST({0} AS STRING) IS NOT NULL AND {0} > 0"],
    "double": ["round({0}, 1)", "({0} * 1.5)", "sqrt(abs({0}))", "floor({0})"],
    "decimal": ["({0} * 2)", "({0} + 0.01)", "abs({0})"],
    "string": [
        "upper({0})",
        "lower({0})",
        "initcap({0})",
        "concat({0}, '-')",
        "substr({0}, 1, 2)",
        "length({0})",
        "reverse({0})",
        "lpad({0}, 6, '*')",
    ],
    "date": [
        "date_add({0}, 3)",
        "last_day({0})",
        "trunc({0}, 'MM')",
        "date_format({0}, 'yyyy-MM-dd EEEE')",
        "CAST({0} AS STRING)",
        "year({0})",
        "dayofweek({0})",
        "datediff({0}, DATE '2000-01-01')",
    ],
    "timestamp": [
        "date_trunc('HOUR', {0})",
        "({0} + INTERVAL 1 HOUR)",
        "CAST({0} AS DATE)",
        "CAST({0} AS STRING)",
        "date_format({0}, 'yyyy-MM-dd HH:mm')",
        "hour({0})",
        "unix_timestamp({0})",
        "to_date({0})",
    ],
    "bool": ["NOT {0}", "({0} OR t.i = 1)", "CAST({0} AS STRING)"],
}
TYPES = list(LEAVES)


@st.composite
def expression(draw: st.DrawFn, depth: int = 2) -> str:
    kind = draw(st.sampled_from(TYPES))
    e = draw(st.sampled_from(LEAVES[kind]))
    for _ in range(draw(st.integers(0, depth))):
        e = draw(st.sampled_from(WRAP[kind])).format(e)
        kind = _result_kind(e, kind)
    if draw(st.integers(0, 5)) == 0:
        e = f"CASE WHEN {draw(st.sampled_from(LEAVES['bool']))} THEN {e} END"
    return e


def _result_kind(e: str, kind: str) -> str:
    """The type after a wrapper (only what the wrappers above can change)."""
    for prefix, result in (
        ("length(", "int"),
        ("year(", "int"),
        ("dayofweek(", "int"),
        ("hour(", "int"),
        ("unix_timestamp(", "int"),
        ("datediff(", "int"),
        ("CAST(", None),
        ("date_format(", "string"),
        ("to_date(", "date"),
        ("NOT ", "bool"),
    ):
        if e.startswith(prefix):
            if prefix == "CAST(":
                return "date" if e.endswith("AS DATE)") else "string" if e.endswith("AS STRING)") else kind
            return result
    if " IS NOT NULL AND " in e:
        return "bool"
    return kind


@st.composite
def select_list(draw: st.DrawFn) -> list[str]:
    return draw(st.lists(expression(), min_size=1, max_size=4))


@st.composite
def plain(draw: st.DrawFn) -> str:
    where = draw(st.sampled_from(["", " WHERE " + draw(st.sampled_from(LEAVES["bool"]))]))
    return f"SELECT {', '.join(draw(select_list()))} FROM t{where}"


@st.composite
def grouped(draw: st.DrawFn) -> str:
    key = draw(expression(depth=1))
    aggs = draw(
        st.lists(
            st.sampled_from(
                [
                    "count(*)",
                    "sum(t.i)",
                    "avg(t.f)",
                    "min(t.s)",
                    "max(upper(t.s))",
                    "max(t.d)",
                    "sum(t.m)",
                    "max(t.ts)",
                    "count(DISTINCT lower(t.s))",
                    "min(date_format(t.ts, 'EEEE'))",
                    "sum(datediff(t.d, DATE '2000-01-01'))",
                ]
            ),
            min_size=1,
            max_size=3,
        )
    )
    having = draw(st.sampled_from(["", " HAVING count(*) > 0"]))
    return f"SELECT {key}, {', '.join(aggs)} FROM t GROUP BY {key}{having}"


@st.composite
def ordered(draw: st.DrawFn) -> str:
    outputs = draw(select_list())
    keys = draw(st.lists(st.integers(1, len(outputs)), min_size=1, max_size=2, unique=True))
    order = ", ".join(f"{k}{draw(st.sampled_from(['', ' DESC', ' NULLS LAST', ' DESC NULLS FIRST']))}" for k in keys)
    return f"SELECT {', '.join(outputs)} FROM t ORDER BY {order} LIMIT {draw(st.integers(1, 6))}"


@st.composite
def windowed(draw: st.DrawFn) -> str:
    part = draw(st.sampled_from(["t.b", "upper(t.s)", "year(t.d)", "CAST(t.ts AS DATE)"]))
    by = draw(st.sampled_from(["t.i", "t.f", "t.d", "t.ts", "lower(t.s)", "t.m"]))
    func = draw(
        st.sampled_from(
            ["row_number()", "rank()", "lag(t.s)", "lead(t.d, 1)", "sum(t.i)", "first_value(t.f)", "count(*)"]
        )
    )
    frame = (
        draw(st.sampled_from(["", " ROWS BETWEEN 1 PRECEDING AND CURRENT ROW"]))
        if func.startswith(("sum", "first", "count"))
        else ""
    )
    return f"SELECT {draw(expression(depth=1))}, {func} OVER (PARTITION BY {part} ORDER BY {by}{frame}) FROM t"


@st.composite
def joined(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["JOIN", "LEFT JOIN", "FULL OUTER JOIN"]))
    on = draw(st.sampled_from(["t.i = u.k", "upper(t.s) = upper(u.name)", "CAST(t.ts AS DATE) = u.day"]))
    extra = draw(st.sampled_from(["u.name", "lower(u.name)", "date_format(u.day, 'EEEE')", "u.day", "upper(u.name)"]))
    return f"SELECT {draw(expression(depth=1))}, {extra} FROM t {kind} u ON {on}"


QUERIES = st.one_of(plain(), grouped(), ordered(), windowed(), joined())

# --- the two workers ---------------------------------------------------------------------------------------------


def _libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    assert found and shutil.which("faketime"), "libfaketime is missing: run `make setup` (scripts/setup/faketime.sh)"
    return found[0]


# Only the JVM runs under libfaketime: Python's time.sleep fails with EINVAL under it (clock_nanosleep), which
# would kill the worker's own threads. The worker gets a JAVA_HOME whose bin/java preloads it (spark-class
# starts "$JAVA_HOME/bin/java").
CLOCK = {
    "FAKETIME": "+34585200",  # the wall clock 400 days and 7 hours ahead (seconds)
    "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # JVMs hang when their monotonic clock jumps
    # libfaketime's automatic "monotonic fix" (glibc) makes the JVM's timed waits (Object.wait(100)) return at
    # once: its threads spin and Spark starts ~7x slower. Measured here: 26 356 wakeups in 1 s instead of 10.
    "FAKETIME_FORCE_MONOTONIC_FIX": "0",
}
AWAY_ENV = {
    "TZ": "Pacific/Kiritimati",  # UTC+14
    "LANG": "tr_TR.UTF-8",
    "LC_ALL": "tr_TR.UTF-8",
    "JAVA_TOOL_OPTIONS": "-Duser.language=tr -Duser.country=TR",
}


def _faked_java_home(base: Path) -> str:
    java = os.path.realpath(shutil.which("java") or "java")
    home = base / "faked-jdk"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "java"
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**CLOCK, "LD_PRELOAD": _libfaketime()}.items())
    script.write_text(f'#!/bin/sh\nexport {exports}\nexec {shlex.quote(java)} "$@"\n')
    script.chmod(0o755)
    return str(home)


HOME_ENV = {"TZ": "UTC", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
STATS: dict[str, int] = {"generated": 0, "refused": 0, "accepted": 0, "ran": 0, "failed_alike": 0}
BROKEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine, dict, dict]]:
    home = Engine(tmp_path_factory.mktemp("home"), master="local[1]", env=HOME_ENV)
    base = tmp_path_factory.mktemp("away")
    away = Engine(base, master="local[3]", env={**AWAY_ENV, "JAVA_HOME": _faked_java_home(base)})
    tables = {"t": column_table(T, T_ROWS), "u": column_table(U, U_ROWS)}
    try:
        home.start()
        away.start()
        yield home, away, home.write(tables), away.write(tables, files=3, seed=11)
    finally:
        away.stop()
        home.stop()


def _jvm_clock(log: Path) -> datetime.datetime:
    """When the worker's JVM wrote its first log line, by its own clock (log4j's ``yy/MM/dd HH:mm:ss``)."""
    for line in log.read_text(errors="replace").splitlines():
        if re.match(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d ", line):
            return datetime.datetime.strptime(line[:17], "%y/%m/%d %H:%M:%S")
    raise AssertionError(f"no log4j line in {log}")


def test_the_away_worker_really_runs_elsewhere(workers: tuple[Engine, Engine, dict, dict]) -> None:
    """The away JVM's clock moved and its environment is hostile; the worker pins what answers depend on."""
    home, away, _, _ = workers
    # The clock cannot be read through SQL any more (the worker's guard refuses it on both sides) ...
    for engine in (home, away):
        refused = engine.run("SELECT current_date(), current_timestamp()", {})
        assert isinstance(refused, Failed) and refused.kind == "refused", refused
    # ... so it is read from the JVMs' own log lines: the away JVM lives 400 days and 7 hours ahead.
    ahead = _jvm_clock(away.worker.log_path) - _jvm_clock(home.worker.log_path)
    assert datetime.timedelta(days=400, hours=6) <= ahead <= datetime.timedelta(days=400, hours=8), ahead
    jvm = away.call(away.worker.ping())["jvm_pid"]
    environ = dict(
        kv.split("=", 1) for kv in Path(f"/proc/{jvm}/environ").read_bytes().decode().split("\0") if "=" in kv
    )
    assert {k: environ.get(k) for k in CLOCK} == CLOCK
    assert "libfaketime" in environ.get("LD_PRELOAD", "")
    assert environ.get("JAVA_TOOL_OPTIONS") == AWAY_ENV["JAVA_TOOL_OPTIONS"]  # the Turkish locale still asked for
    # The defence: both workers report the same engine profile (locale, time zone, settings) all the same.
    profiles = [e.call(e.worker.ping())["profile"] for e in (home, away)]
    assert profiles[0] == profiles[1]


def test_accepted_queries_give_identical_rows_everywhere(workers: tuple[Engine, Engine, dict, dict]) -> None:
    """Hypothesis generates the statements; each accepted one is handed to both workers at once, and its two
    answers are compared once all are handed over (the workers run two jobs each at a time while hypothesis goes on
    generating: Spark jobs are what this test costs)."""
    home, away, home_paths, away_paths = workers
    handed: list[tuple[str, str, Later, Later]] = []

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )
    @given(sql=QUERIES)
    def generate(sql: str) -> None:
        STATS["generated"] += 1
        try:
            q = canonicalize(sql, inputs_of(sql))
        except QueryRefused:
            STATS["refused"] += 1
            return
        STATS["accepted"] += 1
        handed.append((sql, q.statement, home.submit_canonical(q, home_paths), away.submit_canonical(q, away_paths)))

    generate()
    for sql, statement, at_home, far in handed:
        try:
            h, a = at_home.result(), far.result()
        except Exception as e:
            raise AssertionError(f"{sql}\n    canonical: {statement}\n    a worker broke: {e}") from e
        _compare(sql, statement, h, a)


def _compare(sql: str, statement: str, h: pa.Table | Failed, a: pa.Table | Failed) -> None:
    if isinstance(h, Failed) or isinstance(a, Failed):
        outcome = [(r.kind, r.condition) if isinstance(r, Failed) else "rows" for r in (h, a)]
        if outcome[0] == outcome[1]:
            STATS["failed_alike"] += 1
        else:
            BROKEN[sql] = f"{statement}\n    home: {_show(h)}\n    away: {_show(a)}"
        return
    STATS["ran"] += 1
    if rows(h) != rows(a):
        BROKEN[sql] = f"{statement}\n    home: {_show(h)}\n    away: {_show(a)}"


def _show(result: pa.Table | Failed) -> str:
    if isinstance(result, Failed):
        return f"failed ({result.kind} {result.condition}): {result.message[:200]}"
    return repr(result.to_pylist())[:600]


def test_no_generated_query_gave_two_answers() -> None:
    """Runs after the property test (file order): it must have run enough statements, and none disagreed."""
    assert STATS["accepted"] >= MIN_ACCEPTED and STATS["ran"] >= MIN_ACCEPTED * 3 // 4, STATS
    broken = sorted(BROKEN.items())
    report = "\n".join(
        [f"- {sql}\n    canonical: {why}" for sql, why in broken[:10]] + [f"- {sql}" for sql, _ in broken[10:]]
    )
    assert not BROKEN, (
        f"{len(BROKEN)} of {STATS['accepted']} accepted statements gave different rows ({STATS}):\n{report}"
    )
