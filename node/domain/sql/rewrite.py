"""Answering a query from a cached superset: sound, syntactic rewrite rules only.

``rewrite(cached, new)`` decides whether ``new`` can be computed from the *result* of ``cached`` (both canonical,
over the same single input) and returns the statement to run over that result, registered as table ``a`` whose
columns ``col_i`` are the cached outputs ``_i``. Anything not matched by a rule below is refused (``None``): there is
no containment guesswork.

Rules (both require: one input ``a``, same input structure, no ORDER BY/LIMIT/DISTINCT/HAVING/windows/subqueries/
joins in either statement, and the cached WHERE a conjunction of ``column op number`` atoms each implied by one
atom of the new WHERE's conjunction):

- ``select-project``: ``cached`` is a selection+projection (outputs plain columns). ``new`` may be any
  single-table query (filter, project, scalar expressions, GROUP BY + aggregates) whose columns are all cached
  outputs. Sound because the cached rows are exactly the base rows satisfying the cached predicate, with their
  multiplicity (no DISTINCT), and the new predicate implies it: filtering them by the new predicate gives the
  base rows the new query keeps. NULLs: an atom on NULL is UNKNOWN, the row is dropped by both WHERE clauses.
- ``rollup``: ``cached`` groups by plain columns with ``sum``/``count``/``min``/``max``; ``new`` groups by a
  non-empty subset of its output keys, filters only on those keys and asks for aggregates the cached result has:
  ``sum(x)`` and ``count(…)`` roll up by ``SUM``, ``min``/``max`` by themselves, and ``avg(x)`` over an integral
  column by ``SUM`` of its sums over ``SUM`` of its counts when the cached result has ``sum(x)``, ``count(x)``,
  ``min(x)`` and ``max(x)``. Spark averages integers by adding them as doubles (``Average``: sum type double), in
  an order it chooses; every partial sum is exact, so equal to the exact integer sum, while it stays below 2^53 in
  magnitude, and ``count × max(|min|, |max|)`` bounds them all. The statement checks that bound per group and
  raises an error when it does not hold (the resolver then computes from scratch: an error costs time, never
  different bytes); a group with no non-null value is NULL, as Spark's average is. Refused: ``sum`` over
  non-integral columns (float addition is not associative; decimal sums widen their type again), ``min``/``max``
  over floats (NaN, -0.0), ``avg`` without those four aggregates or over non-integral columns, and an empty GROUP
  BY (over no rows ``count`` is 0 but ``SUM`` of no counts is NULL).

Appends (``forward``): the same statement Q over a version that extends the cached one by AddData
blocks only reads the rows old ∪ new (a multiset). ``forward(Q)`` returns a statement over table ``b`` (the cached
result, columns ``col_i`` = outputs ``_i``) and table ``a`` (the *new* slices only, as Q reads its input):

- ``append`` for a selection+projection Q (no aggregate, no GROUP BY; DISTINCT, LIMIT, ORDER BY, windows,
  subqueries, joins refused by ``_select``): each output row depends on one input row only, so
  Q(old ∪ new) = Q(old) ∪ Q(new) as multisets; the canonical writer orders all rows, so the bytes are equal.
- ``append`` for a GROUP BY Q whose keys are plain columns, all of them outputs (float keys refused, as in
  ``rollup``), and whose other outputs are exactly ``rollup``'s allowlist (``count``; ``sum`` over integral
  columns; ``min``/``max`` over ordered types): a group of old ∪ new is the union of its old and new parts, so
  re-aggregating Q(old) ∪ Q(new) by the same keys gives it (count and sum → SUM, min → MIN, max → MAX). Types:
  ``count`` and integral ``sum`` are bigint, and SUM of bigint is bigint; MIN/MAX keep their type. Refused: an
  empty GROUP BY (one row over no rows: a new part with no rows would still add a row), ``avg``, float/decimal sums,
  HAVING. A row-wise WHERE is applied to both parts alike. An ANSI overflow of a partial sum fails the merge and
  the resolver computes from scratch instead: an error costs time, never different bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from node.domain.sql.canonical import CanonicalQuery

# The plain Spark dialect: Cairn's own (node.domain.sql.dialect) parses calls into opaque SparkCall nodes.
DIALECT = "spark"
__all__ = ["Rewrite", "forward", "rewrite", "shape_key"]

INTEGRAL = frozenset({"int8", "int16", "int32", "int64"})
ORDERED = INTEGRAL | {"date32", "utf8"}  # min/max roll up exactly; floats refused (NaN, -0.0)
# Input types a cached result carries unchanged (Spark reads them as it writes them back): a column passed through
# a cached result must mean the same to the new statement. Unsigned, timestamps, decimals, nested types: refused.
CARRIED = ORDERED | {"float32", "float64", "bool"}
_COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}
_FLIP = {"=": "=", "!=": "!=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}
_REFUSED_ANYWHERE = (exp.Window, exp.Subquery, exp.Join, exp.Distinct, exp.Having, exp.Order, exp.Limit, exp.Star)
_ROLLED = "rolled"  # marks columns that already name cached outputs while the rest are renamed
Atom = tuple[int, str, int]  # (input column position, operator, integer literal)


@dataclass(frozen=True)
class Rewrite:
    """``statement`` (Spark SQL over ``a``/``col_i`` = the cached outputs) answers the new query; ``rule`` names the
    rule that proved it (recorded in the receipt as ``derived.rule``)."""

    rule: str
    statement: str


def shape_key(cq: CanonicalQuery) -> tuple[tuple[str, ...], ...] | None:
    """The abstract shape cached supersets are indexed by: the input structure (selection and projection stripped);
    ``None`` for queries no rule can use (not one input)."""
    return cq.input_types if len(cq.input_types) == 1 else None


def rewrite(cached: CanonicalQuery, new: CanonicalQuery) -> Rewrite | None:
    """The statement computing ``new`` from ``cached``'s result, or ``None`` when no rule proves it sound."""
    if shape_key(cached) is None or cached.input_types != new.input_types:
        return None
    if cached.order_by is not None or new.order_by is not None:
        return None
    types = new.input_types[0]
    c, n = _select(cached.statement), _select(new.statement)
    if c is None or n is None:
        return None
    if c.args.get("group"):
        return _rollup(c, n, types)
    return _select_project(c, n, types)


def _select(statement: str) -> exp.Select | None:
    """The statement as one plain SELECT over ``a``, or ``None``."""
    try:
        tree = sqlglot.parse_one(statement, read=DIALECT)
    except SqlglotError:
        return None
    if not isinstance(tree, exp.Select) or tree.args.get("with_") or tree.args.get("with"):
        return None
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None or not isinstance(source.this, exp.Table) or source.this.name != "a":
        return None
    if len(list(tree.find_all(exp.Select))) != 1 or len(list(tree.find_all(exp.Table))) != 1:
        return None  # a nested query would read the cached rows where it meant the whole input
    # Star: count(*) is a Star under Count, allowed; a bare SELECT * is never canonical output.
    if any(isinstance(node, _REFUSED_ANYWHERE) and not _count_star(node) for node in tree.walk()):
        return None
    if any(tree.args.get(k) for k in ("distinct", "having", "order", "limit", "offset", "qualify", "laterals")):
        return None
    return tree


def _count_star(node: exp.Expr) -> bool:
    return isinstance(node, exp.Star) and isinstance(node.parent, exp.Count)


def _position(node: exp.Expr) -> int | None:
    """``a.col_<i>`` → i."""
    if not isinstance(node, exp.Column) or node.table != "a" or not node.name.startswith("col_"):
        return None
    digits = node.name[4:]
    return int(digits) if digits.isdigit() else None


def _number(node: exp.Expr) -> int | None:
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if not isinstance(inner, exp.Literal) or inner.is_string:
        return None
    if not inner.this.isdigit():
        return None
    value = int(inner.this)
    return -value if negative else value


def _conjuncts(where: exp.Expr | None) -> list[exp.Expr]:
    if where is None:
        return []
    node = where.this if isinstance(where, exp.Where) else where
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _atom(node: exp.Expr, types: tuple[str, ...]) -> Atom | None:
    """``a.col_i op integer`` (either side) on an integral column, or ``None``. Integers only: Spark compares a
    float column after rounding the literal to its type, where ``f >= 16777217`` no longer implies
    ``f > 16777216``; integer comparisons are exact."""
    op = _COMPARISONS.get(type(node))
    if op is None or not isinstance(node, exp.Binary):
        return None
    left, right = node.left, node.right
    if _position(left) is None:
        left, right, op = right, left, _FLIP[op]
    pos, value = _position(left), _number(right)
    if pos is None or value is None or pos >= len(types) or types[pos] not in INTEGRAL:
        return None
    return (pos, op, value)


def implies(n: Atom, c: Atom) -> bool:
    """Every value satisfying ``n`` satisfies ``c`` (same column; integers: exact, totally ordered)."""
    if n[0] != c[0]:
        return False
    _, nop, v = n
    _, cop, w = c
    if nop == "=":
        return _holds(v, cop, w)
    if nop == "!=":
        return cop == "!=" and v == w
    lower = nop in (">", ">=")
    if cop == "!=":  # w outside n's half-line
        return w < v or (w == v and nop == ">") if lower else w > v or (w == v and nop == "<")
    if lower != (cop in (">", ">=")) or cop == "=":
        return False
    strict_ok = nop in (">", "<") or cop in (">=", "<=")  # at the bound, n's strictness must be at least c's
    return (w < v or (w == v and strict_ok)) if lower else (w > v or (w == v and strict_ok))


def _holds(x: int, op: str, w: int) -> bool:
    return {"=": x == w, "!=": x != w, ">": x > w, ">=": x >= w, "<": x < w, "<=": x <= w}[op]


def _predicate_implied(c: exp.Select, n: exp.Select, types: tuple[str, ...]) -> bool:
    """Each cached conjunct is a simple atom implied by some simple atom of the new conjunction."""
    new_atoms = [a for a in (_atom(x, types) for x in _conjuncts(n.args.get("where"))) if a is not None]
    for conjunct in _conjuncts(c.args.get("where")):
        atom = _atom(conjunct, types)
        if atom is None or not any(implies(na, atom) for na in new_atoms):
            return False
    return True


def _without_cached_conjuncts(c: exp.Select, n: exp.Select) -> exp.Select:
    """``n`` without the WHERE conjuncts the cached statement has verbatim: every cached row satisfies them, and
    they may name columns the cached result dropped."""
    done = {x.sql(dialect=DIALECT) for x in _conjuncts(c.args.get("where"))}
    keep = [x for x in _conjuncts(n.args.get("where")) if x.sql(dialect=DIALECT) not in done]
    out = n.copy()
    out.set("where", exp.Where(this=exp.and_(*keep)) if keep else None)
    return out


def _outputs(select: exp.Select) -> list[tuple[str, exp.Expr]] | None:
    """``(alias, expression)`` per output, aliases ``_0, _1, …`` in order."""
    found = []
    for i, e in enumerate(select.expressions):
        if not isinstance(e, exp.Alias) or e.alias != f"_{i}":
            return None
        found.append((e.alias, e.this))
    return found


def _remap(tree: exp.Select, columns: dict[int, int]) -> exp.Select | None:
    """``tree`` with each ``a.col_i`` replaced by ``a.col_<columns[i]>``; ``None`` if one is not there."""
    out = tree.copy()
    for col in list(out.find_all(exp.Column)):
        if col.table == _ROLLED:  # already a cached output (a rolled-up aggregate)
            col.set("table", exp.to_identifier("a"))
            continue
        pos = _position(col)
        if pos is None or pos not in columns:
            return None
        col.replace(exp.column(f"col_{columns[pos]}", table="a"))
    return out


def _select_project(c: exp.Select, n: exp.Select, types: tuple[str, ...]) -> Rewrite | None:
    outs = _outputs(c)
    if outs is None or c.args.get("group") or any(isinstance(x, exp.AggFunc) for x in c.walk()):
        return None
    columns: dict[int, int] = {}
    for i, (_, e) in enumerate(outs):
        pos = _position(e)
        if pos is None or pos >= len(types) or types[pos] not in CARRIED:
            return None
        columns.setdefault(pos, i)
    if not _predicate_implied(c, n, types):
        return None
    out = _remap(_without_cached_conjuncts(c, n), columns)
    return None if out is None else Rewrite("select-project", out.sql(dialect=DIALECT))


_ROLLUP: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.Sum: exp.Sum,
    exp.Count: exp.Sum,
    exp.Min: exp.Min,
    exp.Max: exp.Max,
}


def _aggregate_key(e: exp.Expr, types: tuple[str, ...]) -> str | None:
    """A canonical text for a roll-up-able aggregate, or ``None``."""
    if type(e) not in _ROLLUP:
        return None
    arg = e.this
    if isinstance(e, exp.Count):
        if isinstance(arg, exp.Star) or _position(arg) is not None:
            return e.sql(dialect=DIALECT)
        return None
    pos = _position(arg)
    allowed = INTEGRAL if isinstance(e, exp.Sum) else ORDERED
    if pos is None or pos >= len(types) or types[pos] not in allowed:
        return None
    return e.sql(dialect=DIALECT)


def _cached_parts(c: exp.Select, types: tuple[str, ...]) -> tuple[dict[int, int], dict[str, int]] | None:
    """The cached roll-up's key columns (input position → output) and aggregates (text → output)."""
    outs = _outputs(c)
    group = c.args.get("group")
    if outs is None or group is None or group.args.get("rollup") or group.args.get("cube"):
        return None
    keys = {_position(g) for g in group.expressions}
    if None in keys:
        return None
    columns: dict[int, int] = {}
    aggregates: dict[str, int] = {}
    for i, (_, e) in enumerate(outs):
        pos = _position(e)
        if pos is not None and pos in keys:
            # Float keys refused: Spark's grouping normalizes -0.0 and NaN, which a second grouping need not see alike.
            if pos >= len(types) or types[pos] not in CARRIED - {"float32", "float64"}:
                return None
            columns.setdefault(pos, i)
            continue
        key = _aggregate_key(e, types)
        if key is None:
            return None
        aggregates.setdefault(key, i)
    return columns, aggregates


def _rollup(c: exp.Select, n: exp.Select, types: tuple[str, ...]) -> Rewrite | None:
    parts = _cached_parts(c, types)
    group, outs = n.args.get("group"), _outputs(n)
    if parts is None or group is None or outs is None or not group.expressions:
        return None
    if group.args.get("rollup") or group.args.get("cube") or not _predicate_implied(c, n, types):
        return None
    columns, aggregates = parts
    keys = [_position(g) for g in group.expressions]
    if any(k is None or k not in columns for k in keys):
        return None
    out = _without_cached_conjuncts(c, n)
    for (_, e), target in zip(outs, out.expressions, strict=True):
        if _position(e) in keys:
            continue
        if isinstance(e, exp.Avg):
            average = _average(e, types, aggregates)
            if average is None:
                return None
            target.set("this", average)
            continue
        key = _aggregate_key(e, types)
        if key is None or key not in aggregates:
            return None
        target.set("this", _ROLLUP[type(e)](this=exp.column(f"col_{aggregates[key]}", table=_ROLLED)))
    # Only key columns may be left (WHERE, GROUP BY, outputs): a filter on a key filters whole groups.
    remapped = _remap(out, columns)
    return None if remapped is None else Rewrite("rollup", remapped.sql(dialect=DIALECT))


EXACT_DOUBLE = 2**53  # doubles hold every integer of smaller magnitude: sums of integers below it are exact


def _average(e: exp.Avg, types: tuple[str, ...], aggregates: dict[str, int]) -> exp.Expr | None:
    """``avg(x)`` over an integral ``x`` from the cached ``sum(x)``, ``count(x)``, ``min(x)``, ``max(x)`` (module
    docstring, ``rollup``), guarded by the bound that makes Spark's double sum exact; ``None`` without them."""
    pos = _position(e.this)
    if pos is None or pos >= len(types) or types[pos] not in INTEGRAL:
        return None
    parts = [f(this=e.this.copy()).sql(dialect=DIALECT) for f in (exp.Sum, exp.Count, exp.Min, exp.Max)]
    if any(p not in aggregates for p in parts):
        return None
    s, c, lo, hi = (f"{_ROLLED}.col_{aggregates[p]}" for p in parts)
    return sqlglot.parse_one(
        f"CASE WHEN SUM({c}) = 0 THEN NULL"
        f" WHEN SUM({c}) * GREATEST(ABS(MIN({lo})), ABS(MAX({hi}))) < {EXACT_DOUBLE}"
        f" THEN CAST(SUM({s}) AS DOUBLE) / SUM({c})"
        " ELSE RAISE_ERROR('avg roll-up: a partial sum may be inexact in double: compute from the inputs') END",
        read=DIALECT,
    )


def forward(q: CanonicalQuery) -> Rewrite | None:
    """The statement bringing ``q``'s cached result (table ``b``) forward over appended slices (table ``a``), or
    ``None`` when ``q`` is not decomposable (module docstring, "Appends")."""
    if shape_key(q) is None or q.order_by is not None:
        return None
    tree, outs = _select(q.statement), None
    if tree is not None:
        outs = _outputs(tree)
    if tree is None or outs is None or any(isinstance(x, _NONDETERMINISTIC) for x in tree.walk()):
        return None
    old = ", ".join(f"b.col_{i} AS {alias}" for i, (alias, _) in enumerate(outs))
    union = f"SELECT {old} FROM b UNION ALL {q.statement}"
    group = tree.args.get("group")
    if group is None:
        if any(isinstance(x, exp.AggFunc) for x in tree.walk()):
            return None  # an aggregate over the whole input: one row, not a union of rows
        return Rewrite("append", union)
    keys = _forward_keys(tree, q.input_types[0])
    if keys is None:
        return None
    merged = []
    for alias, e in outs:
        pos = _position(e)
        if pos is not None and pos in keys:
            merged.append(f"u.{alias} AS {alias}")
        elif _aggregate_key(e, q.input_types[0]) is not None:
            merged.append(f"{_ROLLUP[type(e)].__name__.upper()}(u.{alias}) AS {alias}")
        else:
            return None
    by = ", ".join(f"u.{keys[p]}" for p in sorted(keys))
    return Rewrite("append", f"SELECT {', '.join(merged)} FROM ({union}) AS u GROUP BY {by}")


_NONDETERMINISTIC = (exp.Rand, exp.Randn, exp.Uuid)


def _forward_keys(tree: exp.Select, types: tuple[str, ...]) -> dict[int, str] | None:
    """GROUP BY input positions → the output alias showing each (every key shown, plain, not a float)."""
    group = tree.args["group"]
    if not group.expressions or group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
        return None
    positions = [_position(g) for g in group.expressions]
    shown: dict[int, str] = {}
    for e in tree.expressions:
        pos = _position(e.this)
        if pos is not None and pos in positions:
            shown.setdefault(pos, e.alias)
    for pos in positions:
        if pos is None or pos not in shown or pos >= len(types) or types[pos] not in CARRIED - {"float32", "float64"}:
            return None
    return shown
