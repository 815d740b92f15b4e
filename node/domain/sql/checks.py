"""The allowlist check (docs/queries.md "The rules"): parsing, the root, then every node of the parsed tree.

Table-driven: ``allowlist.py`` says which sqlglot classes and functions may appear; ``NODE_CHECKS`` maps a class to
the one function that checks its clauses and arguments, so each rule can be tested alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError, TokenError

from node.domain.sql import allowlist
from node.domain.sql.declared_inputs import Context
from node.domain.sql.dialect import DIALECT, SparkAggCall, SparkCall
from node.domain.sql.order import unwrap_nulls, window_kind
from node.domain.sql.printing import describe, sql_of, strip_comments
from node.domain.sql.spark_builtins import SPARK_BUILTINS
from node.domain.sql.token_limits import check_tokens
from node.support.errors import QueryRefused

MAX_SQL_CHARS = 100_000

# sqlglot's names for some Spark functions it parses into its own classes.
_SQLGLOT_NAMES = {"arg_max": "max_by", "arg_min": "min_by", "array_unique_agg": "collect_set"}

_SPARK_TYPES = frozenset(
    """
    BOOLEAN TINYINT SMALLINT INT BIGINT FLOAT DOUBLE DECIMAL TEXT BINARY DATE TIMESTAMP TIMESTAMPTZ TIMESTAMPNTZ
    TIMESTAMPLTZ INTERVAL ARRAY MAP STRUCT
    """.split()
)

_VAR_PARENTS = (exp.Interval, exp.IntervalSpan, exp.Extract, exp.DataType, exp.DataTypeParam, exp.WindowSpec)


def check_statement(ctx: Context) -> exp.Expr:
    """Parse ``ctx.sql`` and check every node against the allowlist; returns the parsed root."""
    root = check_root(ctx, parse(ctx))
    collect_ctes(ctx, root)
    for node in root.dfs():
        check_node(ctx, node)
    return root


def parse(ctx: Context) -> exp.Expr:
    """The one statement of ``ctx.sql``, parsed (comments dropped), or ``parse-error``/``several-statements``."""
    if len(ctx.sql) > MAX_SQL_CHARS:
        raise QueryRefused("too-large", f"statements are limited to {MAX_SQL_CHARS} characters", ctx.sql)
    text = strip_comments(ctx.sql)  # comments never reach the canonical form (hints stay, to be refused)
    try:
        tokens = DIALECT.tokenize(text)
    except TokenError as e:
        raise QueryRefused("parse-error", f"cannot read the statement ({e})", ctx.sql) from None
    check_tokens(tokens, ctx.sql)  # cheap counts first: the parser is slow on some shapes (query/limits.py)
    try:
        statements = DIALECT.parser(error_level=ErrorLevel.RAISE).parse(tokens, text)
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        why = str(first.get("description") or "invalid SQL")
        if first.get("line"):
            why += f" (line {first['line']}, column {first.get('col')})"
        fragment = f"{first.get('start_context', '')}{first.get('highlight', '')}" or ctx.sql
        raise QueryRefused("parse-error", why, fragment[-80:]) from None
    except SqlglotError as e:
        raise QueryRefused("parse-error", str(e), ctx.sql) from None
    except RecursionError:
        raise
    except Exception as e:  # noqa: BLE001 - sqlglot's parser can fail on garbage in other ways
        raise QueryRefused("parse-error", f"cannot parse the statement ({type(e).__name__})", ctx.sql) from None
    found = [s for s in statements if s is not None]
    if not found:
        raise QueryRefused("parse-error", "there is no statement", repr(ctx.sql))
    if len(found) > 1:
        raise QueryRefused("several-statements", "exactly one statement is allowed", sql_of(found[1]))
    return found[0]


def check_root(ctx: Context, root: exp.Expr) -> exp.Expr:
    """The query at the root (outer parentheses folded in), or ``not-a-select``."""
    while isinstance(root, exp.Subquery):
        # (query) ORDER BY … LIMIT … is query ORDER BY … LIMIT … when the query has no order of its own
        inner = root.this
        while isinstance(inner, exp.Subquery) and not any(v for k, v in inner.args.items() if k != "this"):
            inner = inner.this
        if not isinstance(inner, (exp.Select, exp.SetOperation)):
            break
        modifiers = {k: v for k, v in root.args.items() if k != "this" and v}
        if set(modifiers) - {"order", "limit", "offset"} or any(inner.args.get(k) for k in modifiers):
            root.set("this", inner)
            break
        for key, value in modifiers.items():
            inner.set(key, value)
        root = inner
        root.parent = None  # detach from the parentheses
    if isinstance(root, (exp.Select, exp.SetOperation)) or (
        isinstance(root, exp.Subquery) and isinstance(root.unnest(), (exp.Select, exp.SetOperation))
    ):
        for select in root.find_all(exp.Select):
            if not select.expressions:
                raise QueryRefused("parse-error", "SELECT without a select list", sql_of(select) or ctx.sql)
        return root
    if isinstance(root, exp.Command):
        why = "commands (ADD JAR, EXECUTE IMMEDIATE, …) are not queries"
    elif isinstance(root, exp.Set):
        why = "SET changes the session; only a query is allowed"
    elif isinstance(root, (exp.Create, exp.Drop, exp.Alter)) or type(root).__name__ in (
        "TruncateTable",
        "Cache",
        "Uncache",
        "Refresh",
        "Use",
    ):
        why = "DDL is not allowed; only a query is allowed"
    elif isinstance(root, (exp.Insert, exp.Delete, exp.Update, exp.Merge)):
        why = "DML is not allowed; only a query is allowed"
    else:
        why = "the statement must be a query (SELECT, set operations, CTEs)"
    raise QueryRefused("not-a-select", why, sql_of(root))


def collect_ctes(ctx: Context, root: exp.Expr) -> None:
    for cte in root.find_all(exp.CTE):
        name = cte.alias_or_name.lower()
        if name in ctx.by_key:
            raise QueryRefused("cte-name-clash", "a CTE may not have the name of a declared input", cte.alias_or_name)
        if name.startswith("__"):
            raise QueryRefused("cte-name-clash", "names starting with __ are reserved", cte.alias_or_name)
        if name in ctx.cte_names:
            raise QueryRefused("cte-name-clash", "two CTEs have the same name", cte.alias_or_name)
        ctx.cte_names[name] = cte


def check_node(ctx: Context, node: exp.Expr) -> None:
    """Refuse ``node`` unless it is on the allowlist; then run the checks its class has in ``NODE_CHECKS``."""
    cls = type(node)
    if isinstance(node, (SparkCall, SparkAggCall)):  # exactly these classes: nothing subclasses them
        check_call(ctx, node)
        return
    name = cls.__name__
    if name in allowlist.FORBIDDEN_NODES:
        rule, why = allowlist.FORBIDDEN_NODES[name]
        raise QueryRefused(rule, why, sql_of(node))
    if isinstance(node, exp.Func) and name not in allowlist.ALLOWED_NODES:
        refuse_function(ctx, node)
    if name not in allowlist.ALLOWED_NODES:
        raise QueryRefused("unsupported-construct", f"{describe(node)} is not supported", sql_of(node))
    for kinds, check in NODE_CHECKS:  # the first entry whose classes match (the order matters: Cast before …)
        if isinstance(node, kinds):
            check(ctx, node)
            return


def _check_query(ctx: Context, node: exp.Select | exp.SetOperation | exp.Subquery) -> None:
    for key, why in allowlist.FORBIDDEN_CLAUSES.items():
        if node.args.get(key):
            rule = (
                "forbidden-clause"
                if key in ("hint", "sample", "distribute", "sort", "cluster", "into")
                else "unsupported-construct"
            )
            raise QueryRefused(rule, why, sql_of(node))
    if isinstance(node, exp.SetOperation) and any(node.args.get(k) for k in ("side", "kind", "on")):
        raise QueryRefused("unsupported-construct", "this form of set operation is not supported", sql_of(node))
    if isinstance(node, exp.Select) and node.args.get("kind"):
        raise QueryRefused("unsupported-construct", "SELECT AS STRUCT/VALUE is not supported", sql_of(node))
    cut = node.args.get("limit") or node.args.get("offset")
    if cut and not node.args.get("order"):
        raise QueryRefused(
            "unordered-limit", "LIMIT/OFFSET without ORDER BY picks arbitrary rows; add an ORDER BY", sql_of(cut)
        )


def _check_join(ctx: Context, node: exp.Join) -> None:
    if node.args.get("method") not in (None, "", "NATURAL") or any(
        node.args.get(k) for k in ("global_", "hint", "match_condition", "nearest", "directed", "pivots")
    ):
        raise QueryRefused("unsupported-construct", "this kind of join is not supported", sql_of(node))
    if str(node.args.get("kind") or "").upper() not in ("", "INNER", "OUTER", "CROSS", "SEMI", "ANTI"):
        raise QueryRefused("unsupported-construct", "this kind of join is not supported", sql_of(node))


def _check_with(ctx: Context, node: exp.With) -> None:
    if any(node.args.get(k) for k in ("recursive", "search", "cycle", "udfs")):
        raise QueryRefused("unsupported-construct", "recursive CTEs are not supported", sql_of(node))


def _check_cte(ctx: Context, node: exp.CTE) -> None:
    if any(node.args.get(k) for k in ("scalar", "materialized", "key_expressions")):
        raise QueryRefused("unsupported-construct", "this form of CTE is not supported", sql_of(node))


def _check_star(ctx: Context, node: exp.Star) -> None:
    if any(node.args.get(k) for k in ("except_", "replace", "rename", "ilike")):
        raise QueryRefused("unsupported-construct", "SELECT * EXCEPT/REPLACE is not supported", sql_of(node))


def _check_lambda_call(ctx: Context, node: exp.Transform | exp.Exists) -> None:
    if isinstance(node, exp.Transform) and not isinstance(node.expression, exp.Lambda):
        raise QueryRefused("unsupported-construct", "TRANSFORM needs a lambda", sql_of(node))
    if isinstance(node, exp.Exists) and node.expression is not None and not isinstance(node.expression, exp.Lambda):
        raise QueryRefused("unsupported-construct", "EXISTS needs a subquery or a lambda", sql_of(node))


def _check_cast(ctx: Context, node: exp.Cast) -> None:
    if any(node.args.get(k) for k in ("format", "action", "default")):
        raise QueryRefused("unsupported-construct", "CAST … FORMAT is not supported", sql_of(node))


def _check_ordered(ctx: Context, node: exp.Ordered) -> None:
    if node.args.get("with_fill"):
        raise QueryRefused("unsupported-construct", "WITH FILL is not supported", sql_of(node))


def _check_group(ctx: Context, node: exp.Group) -> None:
    if node.args.get("totals") or node.args.get("all"):
        raise QueryRefused("unsupported-construct", "GROUP BY ALL is not supported: name the columns", sql_of(node))
    if not any(node.args.get(k) for k in ("expressions", "grouping_sets", "cube", "rollup")):
        raise QueryRefused("parse-error", "GROUP BY without expressions", sql_of(node.parent or node))


def _check_distinct(ctx: Context, node: exp.Distinct) -> None:
    if node.args.get("on"):
        raise QueryRefused("unsupported-construct", "DISTINCT ON is not supported", sql_of(node))


def _check_limit(ctx: Context, node: exp.Limit | exp.Offset) -> None:
    count = node.args.get("expression")
    if (
        not (isinstance(count, exp.Literal) and not count.is_string and count.name.isdigit())
        or node.args.get("expressions")
        or node.args.get("limit_options")
        or node.args.get("offset")
    ):
        raise QueryRefused("unsupported-construct", "LIMIT and OFFSET take a whole number", sql_of(node))


def _check_data_type(ctx: Context, node: exp.DataType) -> None:
    kind = node.this
    if not (isinstance(kind, exp.Interval) or (isinstance(kind, exp.DType) and kind.name in _SPARK_TYPES)):
        raise QueryRefused("unsupported-construct", "not a Spark data type", sql_of(node))


def _check_substitution(ctx: Context, node: exp.Literal | exp.Identifier) -> None:
    if "${" in str(node.this):
        raise QueryRefused(
            "outside-reach",
            "${…} is Spark variable substitution (it reads the session and environment)",
            sql_of(node),
        )


def _check_var(ctx: Context, node: exp.Var) -> None:
    if isinstance(node.parent, exp.Ordered) and node.name.upper() == "ALL":
        raise QueryRefused(
            "unsupported-construct", "ORDER BY ALL is not supported: name the columns", sql_of(node.parent)
        )
    if not isinstance(node.parent, _VAR_PARENTS):
        raise QueryRefused("unsupported-construct", "unexpected keyword", sql_of(node.parent or node))


def check_call(ctx: Context, node: SparkCall | SparkAggCall) -> None:
    name = node.fname
    if name == "unix_timestamp" and not node.expressions:
        raise QueryRefused(
            "nondeterministic-function", "unix_timestamp() without arguments reads the clock", sql_of(node)
        )
    inner: exp.Expr
    if name in allowlist.COLLECTING_AGGREGATES:
        inner, parent = node, node.parent
        while isinstance(parent, (exp.Window, exp.Filter)):
            inner, parent = parent, parent.parent
        if not (
            isinstance(parent, SparkCall)
            and parent.fname in allowlist.SORTING_WRAPPERS
            and len(parent.expressions) == 1
            and parent.expressions[0] is inner
        ):
            raise QueryRefused(
                "order-sensitive-aggregate",
                f"{name} returns rows in arrival order; wrap it as sort_array({name}(…))",
                sql_of(node),
            )
    if name in allowlist.WINDOW_FUNCTIONS:
        inner, parent = node, node.parent
        while isinstance(parent, (exp.IgnoreNulls, exp.RespectNulls)):
            inner, parent = parent, parent.parent
        if not (isinstance(parent, exp.Window) and parent.this is inner):
            if name in allowlist.VALUE_WINDOW_FUNCTIONS:
                raise QueryRefused(
                    "order-sensitive-aggregate",
                    f"{name} without OVER (ORDER BY …) depends on row order",
                    sql_of(node),
                )
            raise QueryRefused("invalid-window", f"{name} needs OVER (…)", sql_of(node))


def check_window(ctx: Context, window: exp.Window) -> None:
    if window.args.get("alias") or window.args.get("over") not in (None, "", "OVER") or window.args.get("first"):
        raise QueryRefused(
            "unsupported-construct", "named windows are not supported: write the window inline", sql_of(window)
        )
    func = unwrap_nulls(window.this)
    name = func.fname if isinstance(func, (SparkCall, SparkAggCall)) else None
    has_order = bool(window.args.get("order"))
    spec = window.args.get("spec")
    rows = spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS"
    if spec is not None and spec.args.get("exclude"):
        raise QueryRefused("unsupported-construct", "frame EXCLUDE is not supported", sql_of(window))
    if name is None or (isinstance(func, SparkCall) and name not in allowlist.WINDOW_FUNCTIONS):
        raise QueryRefused("invalid-window", "only window and aggregate functions take OVER", sql_of(window))
    if name in allowlist.RANKING_WINDOW_FUNCTIONS or name in allowlist.ROW_WINDOW_FUNCTIONS:
        if not has_order:
            raise QueryRefused("unordered-window", f"{name} needs ORDER BY in its window", sql_of(window))
    elif name in allowlist.VALUE_WINDOW_FUNCTIONS:
        if not has_order or not rows:
            raise QueryRefused(
                "unordered-window",
                f"{name} depends on the order of ties: it needs ORDER BY and a ROWS frame",
                sql_of(window),
            )
    elif window_kind(window) == "complete" and not has_order:
        raise QueryRefused("unordered-window", "a ROWS frame needs ORDER BY in its window", sql_of(window))


def check_table(ctx: Context, table: exp.Table) -> None:
    if not isinstance(table.this, exp.Identifier):
        raise QueryRefused(
            "table-function", "table functions are not allowed; read declared inputs only", sql_of(table)
        )
    db, catalog = table.args.get("db"), table.args.get("catalog")
    if db or catalog:
        qualifier = (db.name if isinstance(db, exp.Identifier) else "").lower()
        if qualifier in allowlist.FILE_FORMATS or "/" in table.name or ":" in table.name:
            raise QueryRefused(
                "file-table", "reading files directly is not allowed; read declared inputs only", sql_of(table)
            )
        raise QueryRefused(
            "qualified-table", "schema-qualified tables are not allowed; read declared inputs only", sql_of(table)
        )
    for key, value in table.args.items():
        if key in ("this", "alias", "db", "catalog") or not value:
            continue
        if key == "sample":
            raise QueryRefused("forbidden-clause", "TABLESAMPLE reads a random sample", sql_of(table))
        if key in ("version", "system_time", "changes", "when"):
            raise QueryRefused("forbidden-clause", "time travel is not allowed", sql_of(table))
        if key == "hints":
            raise QueryRefused("forbidden-clause", "hints are not allowed", sql_of(table))
        raise QueryRefused("unsupported-construct", "this form of table reference is not supported", sql_of(table))
    alias = table.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise QueryRefused("unsupported-construct", "column aliases on a table are not supported", sql_of(table))
    name = table.name.lower()
    if name not in ctx.by_key and name not in ctx.cte_names:
        declared = ", ".join(d.alias for d in ctx.declared) or "none"
        raise QueryRefused(
            "unknown-table", f"not a declared input (declared: {declared}) nor a CTE of the statement", table.name
        )


def refuse_function(ctx: Context, node: exp.Expr) -> None:
    name = function_name(ctx, node)
    name = _SQLGLOT_NAMES.get(name, name)
    fragment = sql_of(node)
    if name in allowlist.NONDETERMINISTIC_FUNCTIONS:
        raise QueryRefused("nondeterministic-function", f"{name} does not give the same result on every run", fragment)
    if name in allowlist.OUTSIDE_REACH_FUNCTIONS:
        raise QueryRefused("outside-reach", f"{name} reaches outside the query (JVM, files, network)", fragment)
    if name in allowlist.ORDER_SENSITIVE_FUNCTIONS:
        raise QueryRefused("order-sensitive-aggregate", f"{name} depends on the order rows arrive in", fragment)
    if name in allowlist.TABLE_FUNCTIONS:
        raise QueryRefused("unsupported-construct", f"generators ({name}) are not supported", fragment)
    if name in SPARK_BUILTINS or not isinstance(node, (exp.Anonymous, exp.AnonymousAggFunc)):
        raise QueryRefused(
            "function-not-allowed", f"{name} is not on Cairn's allowlist of deterministic functions", fragment
        )
    raise QueryRefused("unknown-function", f"{name} is not a Spark built-in function", fragment)


def function_name(ctx: Context, node: exp.Expr) -> str:
    meta = node.meta if node.meta else {}
    start, end = meta.get("start"), meta.get("end")
    if isinstance(start, int) and isinstance(end, int):
        text = ctx.sql[start : end + 1]
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
            return text.lower()
    if isinstance(node, (exp.Anonymous, exp.AnonymousAggFunc)):
        return str(node.name).lower()
    if isinstance(node, exp.Func):
        try:
            return node.sql_name().lower()
        except (NotImplementedError, AssertionError):  # what sqlglot raises for a Func without an SQL name
            pass
    return type(node).__name__.lower()


#: Class -> the function that checks its clauses (first match wins, as in an if/elif chain).
NODE_CHECKS: tuple[tuple[Any, Callable[[Context, Any], None]], ...] = (
    ((exp.Select, exp.SetOperation, exp.Subquery), _check_query),
    (exp.Table, check_table),
    (exp.Join, _check_join),
    (exp.With, _check_with),
    (exp.CTE, _check_cte),
    (exp.Star, _check_star),
    ((exp.Transform, exp.Exists), _check_lambda_call),
    ((exp.Cast, exp.TryCast), _check_cast),
    (exp.Ordered, _check_ordered),
    (exp.Group, _check_group),
    (exp.Distinct, _check_distinct),
    (exp.Window, check_window),
    ((exp.Limit, exp.Offset), _check_limit),
    (exp.DataType, _check_data_type),
    ((exp.Literal, exp.Identifier), _check_substitution),
    (exp.Var, _check_var),
)
