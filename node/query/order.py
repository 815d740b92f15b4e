"""Order (docs/queries.md "Order: LIMIT, ORDER BY and windows"): every ORDER BY and every order-sensitive window
completed to a total order, and the statement's sort keys."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from node.query import allowlist
from node.query.dialect import DIALECT, SparkAggCall, SparkCall
from node.query.errors import QueryRefused
from node.query.inputs import Context
from node.query.printing import sql_of


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
    rows = spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS"
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
        inner_exprs = [
            p.this.sql(dialect=DIALECT) if isinstance(p, exp.Alias) else p.sql(dialect=DIALECT) for p in outputs
        ]
        keys: list[SortKey] = []
        present: set[int] = set()
        for ordered in order.expressions:
            this = ordered.this
            if isinstance(this, exp.Literal) and not this.is_string and re.fullmatch(r"[1-9][0-9]*", this.name):
                position = int(this.name) - 1  # ORDER BY <ordinal>
                if position >= len(outputs):
                    raise QueryRefused("unknown-column", "ORDER BY position is not in the select list", sql_of(this))
                this = exp.column(f"_{position}")
                ordered.set("this", this)
            k = output_ref(this)
            entries = False
            if (
                k is None
                and isinstance(this, SparkCall)
                and this.fname == "map_entries"
                and len(this.expressions) == 1
            ):
                k = output_ref(this.expressions[0])
                entries = k is not None
            if k is None and query is select:
                text = ordered.this.sql(dialect=DIALECT)
                if text in inner_exprs:
                    k = inner_exprs.index(text)
                    ordered.set("this", exp.column(f"_{k}"))
            if k is not None and k >= len(outputs):
                k = None
            keys.append(SortKey(k, bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first")), entries))
            if k is not None:
                present.add(k)
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
        if skipped and (query.args.get("limit") or query.args.get("offset")):
            raise QueryRefused(
                "unordered-limit", "the order cannot be made total: an output is a map", sql_of(outputs[skipped[0]])
            )
        if query is root:
            top = tuple(keys)
    return top


def complete_windows(
    ctx: Context,
    root: exp.Expr,
    visible: dict[int, list[exp.Expr]],
    qualifier_of: dict[int, str],
    occ_kind: dict[int, tuple[str, Any]],
    source_scope: dict[int, Scope],
) -> None:
    """Append tie-breakers to every row-positional window's ORDER BY: the GROUP BY keys, or every column it reads."""
    for window in list(root.find_all(exp.Window)):
        if window_kind(window) != "complete":
            continue
        select = window.find_ancestor(exp.Select)
        if select is None:
            raise QueryRefused("unordered-window", "cannot complete the window's order", sql_of(window))
        tiebreakers: list[exp.Expr] = []
        group = select.args.get("group")
        if group is not None:
            if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")) or any(
                isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions
            ):
                raise QueryRefused(
                    "unordered-window",
                    "cannot make a window order total over ROLLUP/CUBE/GROUPING SETS",
                    sql_of(window),
                )
            tiebreakers = [e.copy() for e in group.expressions]
        elif not is_aggregate_select(select):
            for occurrence in visible.get(id(select), []):
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
                        tiebreakers.append(how[0])
                else:
                    scope = source_scope.get(id(occurrence))
                    count = len(leftmost_select(scope.expression).expressions) if scope is not None else 0
                    tiebreakers.extend(exp.column(f"_{k}", table=qualifier) for k in range(count))
        order = window.args["order"]
        have = {o.this.sql(dialect=DIALECT) for o in order.expressions}
        have |= {e.sql(dialect=DIALECT) for e in window.args.get("partition_by") or []}
        for expression in tiebreakers:
            text = expression.sql(dialect=DIALECT)
            if text not in have:
                have.add(text)
                order.append("expressions", exp.Ordered(this=expression, nulls_first=True))
