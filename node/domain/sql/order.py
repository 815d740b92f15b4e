"""Order (docs/queries.md "Order: LIMIT, ORDER BY and windows"): every ORDER BY and every order-sensitive window
completed to a total order, and the statement's sort keys."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from node.domain.sql import allowlist
from node.domain.sql.declared_inputs import Context
from node.domain.sql.dialect import DIALECT, SparkAggCall, SparkCall
from node.domain.sql.printing import sql_of
from node.support.errors import QueryRefused


@dataclass(frozen=True)
class SortKey:
    """One key of the top-level ORDER BY of a canonical statement.

    ``position`` is the output column the key sorts on, or ``None`` when it sorts on an expression that is not
    an output (then only the engine can reproduce the order: keep the rows in the order it returns them).
    Spark's defaults: ascending keys put NULLs first, descending keys last. A map output (which Spark cannot
    sort) is ordered by ``map_entries(output)``: then ``map_entries`` is true.
    """

    position: int | None
    descending: bool = False
    nulls_first: bool = True
    map_entries: bool = False  # the key is map_entries(output): how map outputs are ordered


def unwrap_nulls(node: exp.Expr | None) -> exp.Expr | None:
    while isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
        node = node.this
    return node


def leftmost_select(query: exp.Expr) -> exp.Select:
    node = query
    while not isinstance(node, exp.Select):
        if isinstance(node, (exp.SetOperation, exp.Subquery)):
            node = node.this
        else:
            raise QueryRefused("unsupported-construct", "cannot find the outputs of", sql_of(query))
    return node


_OUTPUT = re.compile(r"_(0|[1-9][0-9]*)\Z")


def output_ref(node: exp.Expr) -> int | None:
    """k if ``node`` is the bare output reference ``_k``."""
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        m = _OUTPUT.match(node.name)
        if m:
            return int(m.group(1))
    return None


def is_aggregate_select(select: exp.Select) -> bool:
    for agg in select.find_all(exp.AggFunc):
        node: exp.Expr | None = agg.parent
        windowed = False
        while node is not None and node is not select:
            if isinstance(node, exp.Window):
                windowed = True
            if isinstance(node, (exp.Select, exp.Subquery)) and node is not select:
                windowed = True  # belongs to a nested query
                break
            node = node.parent
        if not windowed:
            return True
    return False


def window_kind(window: exp.Window) -> str | None:
    """How a window must be ordered: ``"complete"`` (append tie-breakers) or None (any order is fine)."""
    func = unwrap_nulls(window.this)
    name = func.fname if isinstance(func, (SparkCall, SparkAggCall)) else None
    spec = window.args.get("spec")
    rows = whole = False
    if spec is not None:
        rows = str(spec.args.get("kind") or "").upper() == "ROWS"
        whole = (
            rows
            and str(spec.args.get("start") or "").upper() == "UNBOUNDED"
            and str(spec.args.get("start_side") or "").upper() == "PRECEDING"
            and str(spec.args.get("end") or "").upper() == "UNBOUNDED"
            and str(spec.args.get("end_side") or "").upper() == "FOLLOWING"
        )
    if name in allowlist.ROW_WINDOW_FUNCTIONS or name in allowlist.VALUE_WINDOW_FUNCTIONS:
        return "complete"
    if isinstance(func, SparkAggCall) and rows and not whole:
        return "complete"
    return None


def sort_key_for(type_string: str, expression: exp.Expr) -> tuple[exp.Expr, bool] | None:
    """How to sort a column of this type: (expression, via map_entries) or None when Spark cannot sort it."""
    if "map<" not in type_string:
        return expression, False
    if type_string.startswith("map<") and "map<" not in type_string[4:]:
        return SparkCall(this="MAP_ENTRIES", expressions=[expression]), True
    return None


_FLOAT_TYPE = re.compile(r"float|double")


def may_hold_float(type_string: str | None) -> bool:
    """Whether a sort key of this type (unknown: ``None`` or "") can hold a FLOAT/DOUBLE, even nested."""
    return not type_string or _FLOAT_TYPE.search(type_string) is not None


# Functions whose result never holds a float: their keys need no tie-breaker (a shorter statement, nothing more).
_NEVER_FLOAT_CALLS = frozenset(
    [
        "count",
        "count_if",
        "row_number",
        "rank",
        "dense_rank",
        "ntile",
        "length",
        "char_length",
        "character_length",
        "octet_length",
        "bit_length",
        "upper",
        "lower",
        "ucase",
        "lcase",
        "trim",
        "ltrim",
        "rtrim",
        "concat_ws",
        "substring",
        "substr",
        "year",
        "month",
        "day",
        "dayofmonth",
        "dayofweek",
        "dayofyear",
        "hour",
        "minute",
        "second",
        "quarter",
        "weekofyear",
        "to_date",
        "date_add",
        "date_sub",
        "datediff",
    ]
)


def never_float(expression: exp.Expr | None) -> bool:
    """Whether an expression of unknown type surely holds no FLOAT/DOUBLE (else it gets a tie-breaker)."""
    while isinstance(expression, (exp.Paren, exp.Window)):
        expression = unwrap_nulls(expression.this)
    if isinstance(expression, (SparkCall, SparkAggCall)):
        return expression.fname in _NEVER_FLOAT_CALLS
    if isinstance(expression, exp.Literal):
        return expression.is_string or re.fullmatch(r"[0-9]+", expression.name) is not None
    if isinstance(expression, (exp.Cast, exp.TryCast)) and isinstance(expression.to, exp.DataType):
        return not _FLOAT_TYPE.search(expression.to.sql(dialect=DIALECT).lower())
    return isinstance(expression, (exp.Predicate, exp.Connector, exp.Not))


def float_tiebreaker(key: exp.Expr) -> exp.Expr:
    """The key that makes a float sort key total: ``TO_JSON(NAMED_STRUCT('v', key))``.

    Spark's order ties -0.0 with 0.0 (and every NaN), so rows differing only there would come in the order of
    the input's layout. Their JSON differs ("-0.0" vs "0.0"); values Spark's order does not tie are never compared
    by it, so how a JVM writes other numbers cannot change the order. Measured on Spark 4: ``atan2(x, -1)`` does
    not work (Spark adds 0.0 to its arguments), ``x / 0`` fails under ANSI, casts to STRING are refused by the
    worker's guard; TO_JSON is accepted and works for any type (nested floats included).
    """
    return SparkCall(
        this="TO_JSON",
        expressions=[SparkCall(this="NAMED_STRUCT", expressions=[exp.Literal.string("v"), key.copy()])],
    )


def is_tiebreaker(node: exp.Expr, key: exp.Expr | None) -> bool:
    return key is not None and node.sql(dialect=DIALECT) == float_tiebreaker(key).sql(dialect=DIALECT)


def add_float_tiebreakers(order: exp.Expr, type_of: Callable[[exp.Expr], str | None]) -> None:
    """After each key of ``order`` that may hold a float, its ``float_tiebreaker`` (unless already there)."""
    keys = list(order.expressions)
    out: list[exp.Expr] = []
    for i, ordered in enumerate(keys):
        out.append(ordered)
        previous = keys[i - 1].this if i else None
        if is_tiebreaker(ordered.this, previous) or not may_hold_float(type_of(ordered.this)):
            continue
        if i + 1 < len(keys) and is_tiebreaker(keys[i + 1].this, ordered.this):
            continue
        out.append(exp.Ordered(this=float_tiebreaker(ordered.this), nulls_first=True))
    order.set("expressions", out)


def _key_type(
    ctx: Context, key: exp.Expr, outputs: list[exp.Expr], input_column: dict[int, tuple[int, int]]
) -> str | None:
    """The declared type of a sort key when it is an input column (or an output that is one), else None."""
    if isinstance(key, SparkCall) and key.fname == "map_entries" and len(key.expressions) == 1:
        key = key.expressions[0]  # how a map is sorted: its entries hold what the map holds
    k = output_ref(key)
    if k is not None and k < len(outputs):
        key = outputs[k].this if isinstance(outputs[k], exp.Alias) else outputs[k]
    source = input_column.get(id(key))
    if source is not None:
        return ctx.declared[source[0]].types[source[1]]
    return "other" if never_float(key) else None


def complete_orders(
    ctx: Context, root: exp.Expr, input_column: dict[int, tuple[int, int]]
) -> tuple[SortKey, ...] | None:
    """Complete every ORDER BY to a total order; the top-level one's keys (None without a top-level ORDER BY)."""
    top: tuple[SortKey, ...] | None = None
    for query in list(root.find_all(exp.Select, exp.SetOperation, exp.Subquery)):
        order = query.args.get("order")
        if not order:
            continue
        select = leftmost_select(query)
        outputs = list(select.expressions)
        keys = _given_keys(query, select, order, outputs)
        skipped = _append_output_keys(ctx, order, outputs, input_column, keys)
        add_float_tiebreakers(order, functools.partial(_output_key_type, ctx, outputs, input_column))
        if skipped and (query.args.get("limit") or query.args.get("offset")):
            raise QueryRefused(
                "unordered-limit", "the order cannot be made total: an output is a map", sql_of(outputs[skipped[0]])
            )
        if query is root:
            top = tuple(keys)
    return top


def _output_key_type(
    ctx: Context, outputs: list[exp.Expr], input_column: dict[int, tuple[int, int]], key: exp.Expr
) -> str | None:
    return _key_type(ctx, key, outputs, input_column)


def _given_keys(query: exp.Expr, select: exp.Select, order: exp.Expr, outputs: list[exp.Expr]) -> list[SortKey]:
    """The ORDER BY's own keys, each resolved to the output it sorts by (rewritten as `_k`) where it is one."""
    inner_exprs = [p.this.sql(dialect=DIALECT) if isinstance(p, exp.Alias) else p.sql(dialect=DIALECT) for p in outputs]
    keys: list[SortKey] = []
    previous: exp.Expr | None = None
    for ordered in order.expressions:
        if is_tiebreaker(ordered.this, previous):  # our own tie-breaker, read back: not a key of its own
            previous = None
            continue
        k, entries = _output_of(ordered, query is select, outputs, inner_exprs)
        previous = ordered.this
        keys.append(SortKey(k, bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first")), entries))
    return keys


def _output_of(
    ordered: exp.Expr, in_select: bool, outputs: list[exp.Expr], inner_exprs: list[str]
) -> tuple[int | None, bool]:
    """The output position an ORDER BY key sorts by (None if it is not one) and whether it sorts by map_entries."""
    this = ordered.this
    if isinstance(this, exp.Literal) and not this.is_string and re.fullmatch(r"[1-9][0-9]*", this.name):
        position = int(this.name) - 1  # ORDER BY <ordinal>
        if position >= len(outputs):
            raise QueryRefused("unknown-column", "ORDER BY position is not in the select list", sql_of(this))
        this = exp.column(f"_{position}")
        ordered.set("this", this)
    k = output_ref(this)
    entries = False
    if k is None and isinstance(this, SparkCall) and this.fname == "map_entries" and len(this.expressions) == 1:
        k = output_ref(this.expressions[0])
        entries = k is not None
    if k is None and in_select:
        text = ordered.this.sql(dialect=DIALECT)
        if text in inner_exprs:
            k = inner_exprs.index(text)
            ordered.set("this", exp.column(f"_{k}"))
    if k is not None and k >= len(outputs):
        k = None
    return k, entries


def _append_output_keys(
    ctx: Context,
    order: exp.Expr,
    outputs: list[exp.Expr],
    input_column: dict[int, tuple[int, int]],
    keys: list[SortKey],
) -> list[int]:
    """Append every output the ORDER BY does not sort by yet (to `order` and `keys`); the ones Spark cannot sort."""
    present = {key.position for key in keys if key.position is not None}
    skipped = []
    for k, projection in enumerate(outputs):
        if k in present:
            continue
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        source = input_column.get(id(inner))
        type_string = ctx.declared[source[0]].types[source[1]] if source is not None else ""
        how = sort_key_for(type_string, exp.column(f"_{k}"))
        if how is None:
            skipped.append(k)  # Spark cannot sort it (a map inside another type)
            continue
        order.append("expressions", exp.Ordered(this=how[0], nulls_first=True))
        keys.append(SortKey(k, False, True, how[1]))
    return skipped


def complete_windows(
    ctx: Context,
    root: exp.Expr,
    visible: dict[int, list[exp.Expr]],
    qualifier_of: dict[int, str],
    occ_kind: dict[int, tuple[str, Any]],
    source_scope: dict[int, Scope],
    input_column: dict[int, tuple[int, int]] | None = None,
) -> None:
    """Append tie-breakers to every row-positional window's ORDER BY: the GROUP BY keys, or every column it reads,
    each float key followed by its ``float_tiebreaker``."""
    columns = input_column or {}
    for window in list(root.find_all(exp.Window)):
        if window_kind(window) != "complete":
            continue
        select = window.find_ancestor(exp.Select)
        if select is None:
            raise QueryRefused("unordered-window", "cannot complete the window's order", sql_of(window))
        typed: dict[int, str] = {}  # id(tie-breaker column) -> its declared type
        group = select.args.get("group")
        if group is not None:
            tiebreakers = _group_tiebreakers(ctx, group, window, columns, typed)
        elif not is_aggregate_select(select):
            occurrences = visible.get(id(select), [])
            tiebreakers = _read_tiebreakers(ctx, occurrences, window, qualifier_of, occ_kind, source_scope, typed)
        else:
            tiebreakers = []
        order = window.args["order"]
        have = {o.this.sql(dialect=DIALECT) for o in order.expressions}
        have |= {e.sql(dialect=DIALECT) for e in window.args.get("partition_by") or []}
        for expression in tiebreakers:
            text = expression.sql(dialect=DIALECT)
            if text not in have:
                have.add(text)
                order.append("expressions", exp.Ordered(this=expression, nulls_first=True))
        add_float_tiebreakers(order, functools.partial(_window_key_type, ctx, typed, columns))


def _window_key_type(
    ctx: Context, typed: dict[int, str], input_column: dict[int, tuple[int, int]], key: exp.Expr
) -> str | None:
    if id(key) in typed:
        return typed[id(key)]
    return _key_type(ctx, key, [], input_column)


def _group_tiebreakers(
    ctx: Context,
    group: exp.Expr,
    window: exp.Window,
    input_column: dict[int, tuple[int, int]],
    typed: dict[int, str],
) -> list[exp.Expr]:
    """Copies of the GROUP BY keys (their types noted in `typed`): in a grouped select they identify a row."""
    if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")) or any(
        isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions
    ):
        raise QueryRefused(
            "unordered-window",
            "cannot make a window order total over ROLLUP/CUBE/GROUPING SETS",
            sql_of(window),
        )
    tiebreakers = []
    for key in group.expressions:
        copy = key.copy()
        source = input_column.get(id(key))
        if source is not None:  # the copy is not in input_column: keep the group key's type
            typed[id(copy)] = ctx.declared[source[0]].types[source[1]]
        tiebreakers.append(copy)
    return tiebreakers


def _read_tiebreakers(
    ctx: Context,
    occurrences: list[exp.Expr],
    window: exp.Window,
    qualifier_of: dict[int, str],
    occ_kind: dict[int, tuple[str, Any]],
    source_scope: dict[int, Scope],
    typed: dict[int, str],
) -> list[exp.Expr]:
    """Every column the select reads (inputs' columns typed in `typed`, subqueries' outputs)."""
    tiebreakers: list[exp.Expr] = []
    for occurrence in occurrences:
        kind, info = occ_kind[id(occurrence)]
        qualifier = qualifier_of[id(occurrence)]
        if kind == "input":
            for j, type_string in enumerate(ctx.declared[info].types):
                how = sort_key_for(type_string, exp.column(f"col_{j}", table=qualifier))
                if how is None:
                    raise QueryRefused(
                        "unordered-window",
                        "cannot make the window order total: an input column holds a nested map",
                        sql_of(window),
                    )
                typed[id(how[0])] = type_string
                tiebreakers.append(how[0])
        else:
            scope = source_scope.get(id(occurrence))
            count = len(leftmost_select(scope.expression).expressions) if scope is not None else 0
            tiebreakers.extend(exp.column(f"_{k}", table=qualifier) for k in range(count))
    return tiebreakers
