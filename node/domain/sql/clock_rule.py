"""The clock rule (``clock-value``): no string may reach a date/time type unless it is a fixed-format literal.

Spark's optimizer rule ``SpecialDatetimeValues`` replaces any *foldable* string cast to DATE, TIMESTAMP or
TIMESTAMP_NTZ whose value is ``now``, ``today``, ``yesterday``, ``tomorrow`` or ``epoch`` (any case, spaces around,
a zone id after all but ``now``) by the current date or time, and the parser does the same for typed literals
(``DATE 'today'``). Implicit casts count: ``d < 'today'``, ``date_sub('today', 1)``, ``year('now')``. Besides, a
string cast to TIMESTAMP that holds only a time (``'12:00'``, from a column too) takes *today's* date
(``DateTimeUtils.stringToTimestamp``). So, following types rather than spellings:

- a string literal reaching a date/time type must be a date/time in a fixed format (``FIXED_FORMS``);
- a computed constant string (``concat('to', 'day')``) reaching a date/time type is refused;
- a string column reaching TIMESTAMP (with time zone) is refused: use ``to_timestamp(s, 'pattern')``.

Types are known for input columns (their canonical type strings), casts, and the date/time functions below; the
Spark worker checks Spark's own analyzed plan again before running (``spark_worker/guard.py``), so what this
static pass cannot type is still caught there.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from node.domain.sql.dialect import DIALECT, SparkAggCall, SparkCall
from node.support.errors import QueryRefused

RULE = "clock-value"
DATE, TIMESTAMP, NTZ = "date", "timestamp", "timestamp_ntz"

# The accepted spellings: Spark's stringToDate/stringToTimestamp read all of them the same way everywhere.
# A zone is Z or a numeric offset only: region ids ('Europe/Paris') depend on the JVM's time-zone database.
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIME = r"[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
_ZONE = r"(?:Z|[+-][0-9]{2}:[0-9]{2})"
FIXED_FORMS = re.compile(rf"{_DATE}(?:[ T]{_TIME}{_ZONE}?)?")
FIXED_FORMS_TEXT = "yyyy-MM-dd[( |T)HH:mm[:ss[.f…]][Z|±HH:mm]]"

_CAST_TARGETS = {
    exp.DType.DATE: DATE,
    exp.DType.DATE32: DATE,
    exp.DType.TIMESTAMP: TIMESTAMP,
    exp.DType.TIMESTAMPTZ: TIMESTAMP,
    exp.DType.TIMESTAMPLTZ: TIMESTAMP,
    exp.DType.DATETIME: TIMESTAMP,
    exp.DType.TIMESTAMPNTZ: NTZ,
}

#: One-argument calls that are casts (``to_date(s)`` is ``CAST(s AS DATE)``); with a pattern they parse by it.
CAST_CALLS = {
    "date": DATE, "to_date": DATE, "try_to_date": DATE,
    "timestamp": TIMESTAMP, "to_timestamp": TIMESTAMP, "try_to_timestamp": TIMESTAMP,
    "to_timestamp_ltz": TIMESTAMP, "to_timestamp_ntz": NTZ,
}  # fmt: skip

#: Date/time arguments of allowlisted functions: name -> (argument positions, the type Spark casts them to).
#: A negative position counts from the end (convert_timezone's timestamp is its last argument).
DATETIME_ARGS: dict[str, tuple[tuple[int, ...], str]] = {
    **dict.fromkeys(("date_add", "date_sub", "add_months", "last_day", "next_day", "trunc", "year", "month", "day",
                     "dayofweek", "dayofyear", "weekday", "weekofyear", "quarter", "dayname", "monthname",
                     "unix_date"), ((0,), DATE)),
    "datediff": ((0, 1), DATE),
    **dict.fromkeys(("hour", "minute", "second", "date_format", "from_utc_timestamp", "to_utc_timestamp",
                     "unix_seconds", "unix_millis", "unix_micros"), ((0,), TIMESTAMP)),
    "months_between": ((0, 1), TIMESTAMP),
    "date_trunc": ((1,), TIMESTAMP),
    "date_part": ((1,), TIMESTAMP),
    "convert_timezone": ((-1,), TIMESTAMP),
}  # fmt: skip

#: Calls whose result is a date/time (so a string compared with them is cast to it).
DATETIME_RESULTS = {
    **dict.fromkeys(("date_add", "date_sub", "add_months", "last_day", "next_day", "make_date", "trunc",
                     "date_from_unix_date"), DATE),
    **dict.fromkeys(("make_timestamp", "make_timestamp_ltz", "try_make_timestamp", "try_make_timestamp_ltz",
                     "timestamp_seconds", "timestamp_millis", "timestamp_micros", "from_utc_timestamp",
                     "to_utc_timestamp", "date_trunc", "convert_timezone"), TIMESTAMP),
    **dict.fromkeys(("make_timestamp_ntz", "try_make_timestamp_ntz"), NTZ),
    **CAST_CALLS,
}  # fmt: skip

#: Calls whose arguments meet in one type (a date among strings casts the strings to date).
UNIFYING_CALLS = frozenset({"coalesce", "nvl", "nvl2", "greatest", "least", "nullif", "if"})
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)

ColumnType = Callable[[exp.Column], "str | None"]


def check(root: exp.Expr, column_type: ColumnType) -> None:
    """Raise ``QueryRefused("clock-value", …)`` if a string can reach a date/time type in ``root``."""
    for node in root.walk():
        if isinstance(node, exp.Cast):
            target = _CAST_TARGETS.get(node.to.this) if isinstance(node.to, exp.DataType) else None
            if target is not None:
                check_value(node.this, target, node, column_type)
        elif isinstance(node, SparkCall):
            _check_call(node, column_type)
        elif isinstance(node, exp.Extract):
            check_value(node.expression, TIMESTAMP, node, column_type)
        elif (shifted := interval_operand(node)) is not None and datetime_kind(shifted, column_type) is None:
            check_value(shifted, TIMESTAMP, node, column_type)  # 'today' + INTERVAL 1 DAY casts the string
        elif isinstance(node, (*_COMPARISONS, exp.Between, exp.In, exp.Case, exp.If, exp.Coalesce)):
            _check_unified(node, _operands(node), column_type)


def _check_call(node: SparkCall, column_type: ColumnType) -> None:
    name, args = node.fname, node.expressions
    if name in CAST_CALLS and len(args) == 1:
        check_value(args[0], CAST_CALLS[name], node, column_type)
    elif name in DATETIME_ARGS:
        positions, target = DATETIME_ARGS[name]
        for position in positions:
            if -len(args) <= position < len(args):
                check_value(args[position], target, node, column_type)
    elif name in UNIFYING_CALLS:
        _check_unified(node, list(args)[1:] if name == "if" else list(args), column_type)


def _operands(node: exp.Expr) -> list[exp.Expr]:
    """The values that meet in one type (for CASE and IF: the results, not the conditions)."""
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    if isinstance(node, exp.In):
        return [node.this, *node.expressions]
    if isinstance(node, exp.Case):
        values = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
        if node.this is not None:  # CASE x WHEN v …: x and the v's are compared
            return [node.this, *(i.this for i in node.args.get("ifs") or [])] + values
        return [v for v in values if v is not None]
    if isinstance(node, exp.If):
        return [v for v in (node.args.get("true"), node.args.get("false")) if v is not None]
    if isinstance(node, exp.Coalesce):
        return [node.this, *node.expressions]
    return [node.this, node.expression]


def _check_unified(node: exp.Expr, operands: list[exp.Expr], column_type: ColumnType) -> None:
    kinds = [datetime_kind(o, column_type) for o in operands if o is not None]
    target = next((k for k in kinds if k is not None), None)
    if target is None:
        return
    for operand in operands:
        if operand is not None and datetime_kind(operand, column_type) is None:
            check_value(operand, target, node, column_type)


def check_value(value: exp.Expr, target: str, where: exp.Expr, column_type: ColumnType) -> None:
    """``value`` is cast to ``target`` (date, timestamp, timestamp_ntz): refuse it if that can read the clock."""
    while isinstance(value, exp.Paren):
        value = value.this
    if (shifted := interval_operand(value)) is not None:
        return check_value(shifted, target, where, column_type)  # '2020-01-01' + INTERVAL …: the string is cast
    if isinstance(value, exp.Literal) and value.is_string:
        if not FIXED_FORMS.fullmatch(value.name):
            raise QueryRefused(
                RULE,
                f"a string reaching {target.upper()} must be a fixed-format date/time ({FIXED_FORMS_TEXT}); "
                "Spark reads 'now', 'today'… from the clock",
                _fragment(where),
            )
        return
    if is_constant(value) and _has_string(value) and datetime_kind(value, column_type) is None:
        raise QueryRefused(
            RULE,
            f"a computed string reaching {target.upper()} could be read from the clock ('to' || 'day')",
            _fragment(where),
        )
    if target == TIMESTAMP and isinstance(value, exp.Column) and _is_string_type(column_type(value)):
        raise QueryRefused(
            RULE,
            "a string column cast to TIMESTAMP takes today's date for time-only values ('12:00'); "
            "use to_timestamp(s, 'pattern')",
            _fragment(where),
        )


def interval_operand(node: exp.Expr) -> exp.Expr | None:
    """The value an interval is added to or taken from (``x + INTERVAL …``, ``INTERVAL … + x``, ``x - INTERVAL …``)."""
    if isinstance(node, exp.Add) and isinstance(node.this, exp.Interval):
        return node.expression
    if isinstance(node, (exp.Add, exp.Sub)) and isinstance(node.expression, exp.Interval):
        return node.this
    return None


def datetime_kind(node: exp.Expr, column_type: ColumnType) -> str | None:
    """date, timestamp or timestamp_ntz when ``node`` is known to be of that type, else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if (shifted := interval_operand(node)) is not None:
        return datetime_kind(shifted, column_type)  # a date/time moved by an interval keeps its type
    if isinstance(node, exp.Cast):
        return _CAST_TARGETS.get(node.to.this) if isinstance(node.to, exp.DataType) else None
    if isinstance(node, SparkCall):
        if node.fname in CAST_CALLS or node.fname in DATETIME_RESULTS:
            return DATETIME_RESULTS[node.fname]
        return None
    if isinstance(node, exp.Column):
        return type_string_kind(column_type(node))
    return None


def type_string_kind(type_string: str | None) -> str | None:
    """The date/time kind of a canonical type string (docs/hashing.md): ``date32``, ``timestamp[us, tz=UTC]``…"""
    if not type_string:
        return None
    if type_string.startswith("date"):
        return DATE
    if type_string.startswith("timestamp"):
        return TIMESTAMP if "tz=" in type_string else NTZ
    return None


def is_constant(node: exp.Expr) -> bool:
    """No column, subquery or aggregate inside: Spark may fold it to one value before running."""
    return not any(isinstance(n, (exp.Column, exp.Select, exp.AggFunc, SparkAggCall, exp.Window)) for n in node.walk())


def _has_string(node: exp.Expr) -> bool:
    """A string literal inside, not counting those behind a cast to date/time (checked on their own)."""
    if isinstance(node, exp.Literal):
        return node.is_string
    if isinstance(node, exp.Interval):
        return False  # INTERVAL '1' YEAR: the quoted amount is an interval, never a date/time
    if isinstance(node, exp.Cast) and datetime_kind(node, lambda _c: None) is not None:
        return False
    return any(_has_string(child) for child in node.iter_expressions())


def _is_string_type(type_string: str | None) -> bool:
    return type_string in ("utf8", "large_utf8", "string", "large_string")


def _fragment(node: exp.Expr) -> str:
    try:
        return node.sql(dialect=DIALECT, comments=False)
    except Exception:  # noqa: BLE001 - only used for messages
        return type(node).__name__
