"""Rewritten statements evaluated in the node with Arrow, no Spark job (so that a superset's answer is ≥ 20×
faster than the miss). A derived answer over a small cached result spent ~95 % of its time in the Spark job's fixed
cost (a 7-row answer from a 7 000-row result: Spark 370–480 ms, publishing ~20 ms), so the statements whose Spark
result can be computed *exactly* here are.

``evaluate(statement, table)`` takes a statement ``node.domain.sql.rewrite`` produced (over ``a`` = ``table``, columns
``col_i``) and returns the table Spark would return for it (same values and Arrow types; the canonical writer then
gives the same bytes: every field nullable, rows in canonical order), or ``None`` when the statement is outside this
subset, where every step is exact by construction:

- outputs: plain columns; with a non-empty GROUP BY of plain columns, ``SUM``/``MIN``/``MAX``/``COUNT`` of a column
  and ``COUNT(*)``. ``SUM`` only over integers (Spark: ``bigint``; float addition is order-dependent) and only when
  no group can overflow (Spark's ANSI mode would raise: those go to Spark, which records the failure); ``MIN``/
  ``MAX`` only over integers, ``date32`` and ``utf8`` (binary order, Spark's UTF8_BINARY collation; floats refused:
  NaN and -0.0); ``COUNT`` is ``bigint``. NULLs: ignored by the aggregates, a group of NULL keys is one group,
  a SUM/MIN/MAX over only NULLs is NULL (Spark's rules, and Arrow's with ``min_count=1``).
- WHERE: a conjunction of ``column op integer`` on integer columns (the rule's atoms: exact comparisons; a NULL
  drops the row, as Spark's UNKNOWN does).

tests/integration/test_query_spark.py compares this with Spark's bytes for every rewrite it runs; the unit tests
with SQLite over generated rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

__all__ = ["evaluate", "forward", "warm"]

_INTEGER = (pa.types.is_int8, pa.types.is_int16, pa.types.is_int32, pa.types.is_int64)
_OPS: dict[type[exp.Expr], str] = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
}
_FLIPPED = {"equal": "equal", "not_equal": "not_equal", "greater": "less", "greater_equal": "less_equal"}
_FLIPPED |= {v: k for k, v in _FLIPPED.items()}
_INT64_MAX = (1 << 63) - 1


def warm() -> None:
    """Import what a first ``GROUP BY`` here needs (Table.group_by runs on pyarrow.acero, which imports
    pyarrow.dataset and pandas: 1.4 s), so that the first derived answer does not pay it. Blocking: call it off
    the event loop, once a result that later answers could be derived from exists."""
    import pyarrow.acero  # noqa: F401


def _integer(t: pa.DataType) -> bool:
    return any(test(t) for test in _INTEGER)


def _ordered(t: pa.DataType) -> bool:
    return _integer(t) or pa.types.is_date32(t) or pa.types.is_string(t)


def _groupable(t: pa.DataType) -> bool:
    """Keys grouped alike here and in Spark: not floats (Spark normalizes -0.0 and NaNs before grouping)."""
    return _ordered(t) or pa.types.is_boolean(t)


def _column(node: exp.Expr, table: pa.Table) -> str | None:
    """``a.col_i`` naming a column of ``table``, or ``None``."""
    if isinstance(node, exp.Column) and node.table == "a" and node.name in table.column_names:
        return node.name
    return None


def _number(node: exp.Expr) -> int | None:
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if not isinstance(inner, exp.Literal) or inner.is_string or not inner.this.isdigit():
        return None
    return -int(inner.this) if negative else int(inner.this)


def _mask(where: exp.Expr | None, table: pa.Table) -> pa.ChunkedArray | bool | None:
    """The rows the WHERE keeps (True: all), or ``None`` outside the subset."""
    if where is None:
        return True
    node = where.this if isinstance(where, exp.Where) else where
    atoms: list[exp.Expr] = []
    stack = [node]
    while stack:
        n = stack.pop()
        while isinstance(n, exp.Paren):
            n = n.this
        if isinstance(n, exp.And):
            stack += [n.left, n.right]
        else:
            atoms.append(n)
    mask: Any = True
    for atom in atoms:
        op = _OPS.get(type(atom))
        if op is None or not isinstance(atom, exp.Binary):
            return None
        left, right = atom.left, atom.right
        if _column(left, table) is None:
            left, right, op = right, left, _FLIPPED[op]
        name, value = _column(left, table), _number(right)
        if name is None or value is None or not _integer(table.schema.field(name).type):
            return None
        if not -_INT64_MAX - 1 <= value <= _INT64_MAX:  # Spark reads such a literal as a decimal
            return None
        kept = pc.fill_null(getattr(pc, op)(table[name], pa.scalar(value, pa.int64())), False)
        mask = kept if mask is True else pc.and_(mask, kept)
    return mask


def _aggregate(node: exp.Expr, table: pa.Table) -> tuple[str, str] | None:
    """``(column, Arrow hash aggregate)`` for an output aggregate in the subset, or ``None``."""
    if isinstance(node, exp.Count):
        if isinstance(node.this, exp.Star):
            return "", "count_all"
        name = _column(node.this, table)
        return (name, "count") if name is not None else None
    kinds: dict[type[exp.Expr], tuple[str, Any]] = {
        exp.Sum: ("sum", _integer),
        exp.Min: ("min", _ordered),
        exp.Max: ("max", _ordered),
    }
    kind = kinds.get(type(node))
    name = _column(node.this, table) if kind is not None else None
    if kind is None or name is None or not kind[1](table.schema.field(name).type):
        return None
    if kind[0] == "sum" and not _sums_fit(table[name]):
        return None
    return name, kind[0]


def _sums_fit(column: pa.ChunkedArray) -> bool:
    """No group's sum can overflow ``bigint``: the sum of all absolute values fits (exact, in decimal)."""
    magnitude = pc.sum(pc.abs_checked(column.cast(pa.decimal128(38, 0)))).as_py()
    return magnitude is None or magnitude <= _INT64_MAX


def evaluate(statement: str, table: pa.Table) -> pa.Table | None:
    """Spark's result of ``statement`` over ``a`` = ``table``, computed here; ``None`` outside the subset."""
    try:
        tree = sqlglot.parse_one(statement, read="spark")
    except SqlglotError:
        return None
    if not isinstance(tree, exp.Select) or _refused(tree):
        return None
    mask = _mask(tree.args.get("where"), table)
    if mask is None:
        return None
    rows = table if mask is True else table.filter(mask)
    group = tree.args.get("group")
    if group is None:
        return _project(tree, rows)
    return _grouped(tree, group, rows)


def _refused(tree: exp.Select) -> bool:
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None or not isinstance(source.this, exp.Table) or source.this.name != "a" or tree.args.get("joins"):
        return True
    return any(tree.args.get(k) for k in ("distinct", "having", "order", "limit", "offset", "qualify", "with_"))


def _outputs(tree: exp.Select) -> list[tuple[str, exp.Expr]] | None:
    found = []
    for i, e in enumerate(tree.expressions):
        if not isinstance(e, exp.Alias) or e.alias != f"_{i}":
            return None
        found.append((e.alias, e.this))
    return found


def _project(tree: exp.Select, rows: pa.Table) -> pa.Table | None:
    outs = _outputs(tree)
    if outs is None:
        return None
    names = [_column(e, rows) for _, e in outs]
    if any(n is None for n in names):
        return None
    return pa.table([rows[n] for n in names if n is not None], names=[alias for alias, _ in outs])


def _grouped(tree: exp.Select, group: exp.Group, rows: pa.Table) -> pa.Table | None:
    keys = [_column(g, rows) for g in group.expressions]
    outs = _outputs(tree)
    if not keys or None in keys or outs is None or group.args.get("rollup") or group.args.get("cube"):
        return None
    key_names = [k for k in keys if k is not None]
    if not all(_groupable(rows.schema.field(k).type) for k in key_names):
        return None
    wanted: list[tuple[str, str]] = []  # (column, aggregate) per output; aggregate "" for a key
    for _, e in outs:
        name = _column(e, rows)
        if name is not None and name in key_names:
            wanted.append((name, ""))
            continue
        agg = _aggregate(e, rows)
        if agg is None:
            return None
        wanted.append(agg)
    aggs = sorted({w for w in wanted if w[1]})
    specs: list[Any] = [([], "count_all") if f == "count_all" else (c, f, _options(f)) for c, f in aggs]
    done = rows.group_by(key_names, use_threads=False).aggregate(specs)
    result_name = {w: ("count_all" if w[1] == "count_all" else f"{w[0]}_{w[1]}") for w in aggs}
    columns = [done[c] if not f else done[result_name[(c, f)]] for c, f in wanted]
    columns = [c.cast(pa.int64()) if f in ("sum", "count", "count_all") else c for c, (_, f) in zip(columns, wanted)]
    return pa.table(columns, names=[alias for alias, _ in outs])


def _options(function: str) -> pc.FunctionOptions:
    if function == "count":
        return pc.CountOptions(mode="only_valid")
    return pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)


_AGAIN: dict[type[exp.Expr], str] = {exp.Count: "SUM", exp.Sum: "SUM", exp.Min: "MIN", exp.Max: "MAX"}


def forward(statement: str, old: pa.Table, new: pa.Table) -> pa.Table | None:
    """``statement``'s result over old rows ∪ ``new`` rows, from its result ``old`` over the old rows (columns
    ``_i``) and the appended rows ``new`` (columns ``col_j``): node.domain.sql.rewrite.forward's decomposition computed
    here. The statement over ``new``, then, with a GROUP BY, the union re-aggregated by the same keys
    (``COUNT`` and ``SUM`` by ``SUM``, ``MIN``, ``MAX``); without one, the union itself. ``None`` outside the subset
    or when the two parts' types differ (Spark's union would widen them)."""
    part = evaluate(statement, new)
    if part is None or part.schema != old.schema:
        return None
    union = pa.concat_tables([old, part])
    tree = sqlglot.parse_one(statement, read="spark")
    group = tree.args.get("group")
    if group is None:
        return union
    outs = _outputs(tree) if isinstance(tree, exp.Select) else None
    if outs is None:  # never: evaluate took the statement (a SELECT whose outputs are named _0, _1, …)
        return None
    keys = {g.sql(dialect="spark") for g in group.expressions}
    merged, by = [], []
    for i, (alias, e) in enumerate(outs):
        if e.sql(dialect="spark") in keys:
            merged.append(f"a.col_{i} AS {alias}")
            by.append(f"a.col_{i}")
            continue
        again = _AGAIN.get(type(e))
        if again is None:
            return None
        merged.append(f"{again}(a.col_{i}) AS {alias}")
    if len(by) != len(keys):
        return None  # a key not shown: its groups cannot be told apart in the union
    renamed = union.rename_columns([f"col_{i}" for i in range(union.num_columns)])
    return evaluate(f"SELECT {', '.join(merged)} FROM a GROUP BY {', '.join(by)}", renamed)
