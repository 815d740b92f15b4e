"""Spelling (docs/queries.md "The rewrite", steps 1, 5 and 6): comments, literals, joins, parentheses, and the
last check that the rewritten tree holds only allowlisted constructs and abstract names."""

from __future__ import annotations

import math
import re

from sqlglot import exp

from node.domain.sql import allowlist
from node.domain.sql.dialect import DIALECT, SparkAggCall, SparkCall
from node.support.errors import QueryRefused


def sql_of(node: exp.Expr) -> str:
    try:
        return node.sql(dialect=DIALECT, comments=False)
    except Exception:  # noqa: BLE001 - only used for messages
        return type(node).__name__


def to_ident(name: str) -> exp.Identifier:
    return exp.Identifier(this=name, quoted=False)


def describe(node: exp.Expr) -> str:
    name = type(node).__name__
    return {
        "Lateral": "LATERAL VIEW",
        "Values": "VALUES",
        "Unnest": "UNNEST",
        "Pivot": "PIVOT",
    }.get(name, f"{name} ({sql_of(node)[:40]})")


def normalize_number(text: str) -> str:
    m = re.fullmatch(r"(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", text)
    if not m or not (m.group(1) or m.group(2)):
        return text
    whole, frac, exponent = m.groups()
    if exponent is not None:  # a DOUBLE literal in Spark: write its value, keeping the exponent form
        try:
            value = float(text)
        except ValueError:
            return text
        if not math.isfinite(value):
            return text
        mantissa, _, power = repr(value).partition("e")
        return f"{mantissa}E{int(power or 0)}"
    whole = whole.lstrip("0") or "0"
    # Trailing zeros stay: 1.0 is DECIMAL(2,1) and 1.00 is DECIMAL(3,2) in Spark.
    return whole if frac is None else f"{whole}.{frac}"


def _spell_numbers(root: exp.Expr) -> None:
    """Numbers: leading zeros dropped, exponents written from the value (``normalize_number``)."""
    for literal in list(root.find_all(exp.Literal)):
        if not literal.is_string:
            literal.set("this", normalize_number(str(literal.this)))


def _spell_joins(root: exp.Expr) -> None:
    """JOIN = INNER JOIN, LEFT JOIN = LEFT OUTER JOIN, a comma = CROSS JOIN."""
    for join in list(root.find_all(exp.Join)):
        kind = str(join.args.get("kind") or "").upper()
        if kind == "INNER" or (kind == "OUTER" and join.args.get("side")):
            join.set("kind", None)
        if (
            not join.args.get("kind")
            and not join.args.get("side")
            and not join.args.get("on")
            and not join.args.get("using")
        ):
            join.set("kind", "CROSS")


def _spell_set_branches(root: exp.Expr) -> None:
    """(SELECT …) UNION (SELECT …) = SELECT … UNION SELECT …."""
    for sub in list(root.find_all(exp.Subquery)):
        if (
            isinstance(sub.parent, exp.SetOperation)
            and isinstance(sub.this, exp.Select)
            and not any(v for k, v in sub.args.items() if k != "this")
            and not any(sub.this.args.get(k) for k in ("order", "limit", "offset", "with_"))
        ):
            sub.replace(sub.this)


def _spell_ascending(root: exp.Expr) -> None:
    """ASC is the default: never written."""
    for ordered in list(root.find_all(exp.Ordered)):
        if not ordered.args.get("desc"):
            ordered.set("desc", None)


def _spell_hex(root: exp.Expr) -> None:
    """Hex literals upper case."""
    for hexstring in list(root.find_all(exp.HexString)):
        hexstring.set("this", str(hexstring.this).upper())


def _spell_parentheses(root: exp.Expr) -> None:
    """Redundant parentheses (around an atom, a whole clause, a call argument) removed."""
    for paren in list(root.find_all(exp.Paren)):
        inner, parent = paren.this, paren.parent
        atomic = isinstance(
            inner,
            (
                exp.Column,
                exp.Literal,
                exp.Boolean,
                exp.Null,
                SparkCall,
                SparkAggCall,
                exp.Paren,
                exp.Cast,
                exp.TryCast,
                exp.Dot,
                exp.Bracket,
            ),
        )
        clause = (
            isinstance(
                parent,
                (
                    exp.Where,
                    exp.Having,
                    exp.Alias,
                    exp.Ordered,
                    exp.Paren,
                    exp.Tuple,
                    exp.Join,
                    exp.Group,
                    SparkCall,
                    SparkAggCall,
                    exp.Cast,
                    exp.TryCast,
                ),
            )
            and paren.arg_key != "alias"
            and (paren.arg_key == "on" or not isinstance(parent, exp.Join))
        )
        if atomic or clause:
            paren.replace(inner)


#: The spelling normalizations, applied in this order (docs/queries.md "The rewrite", steps 5 and 6).
SPELLING = (_spell_numbers, _spell_joins, _spell_set_branches, _spell_ascending, _spell_hex, _spell_parentheses)


def normalize_spelling(root: exp.Expr) -> None:
    """Every normalization of ``SPELLING``, in order."""
    for normalize in SPELLING:
        normalize(root)


def strip_comments(sql: str) -> str:
    """Replace ``--`` and (nested) ``/* */`` comments by a space, outside strings and quoted names; keep hints."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            raw = (
                c != "`" and i > 0 and sql[i - 1] in "rR" and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
            )
            j = i + 1
            while j < n:
                if sql[j] == "\\" and c != "`" and not raw:
                    j += 2
                    continue
                if sql[j] == c:
                    if c == "`" and sql.startswith("``", j):
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i : j + 1])
            i = j + 1
            continue
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
            continue
        if sql.startswith("/*", i) and not sql.startswith("/*+", i):
            depth, j = 0, i
            while j < n:
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                    if depth == 0:
                        break
                else:
                    j += 1
            if depth:
                raise QueryRefused("parse-error", "unterminated comment", sql[i:])
            out.append(" ")
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


_POST_NODES = frozenset(
    {getattr(exp, name) for name in allowlist.ALLOWED_NODES} | {SparkCall, SparkAggCall, exp.Coalesce}
)
_POST_CALLS = (
    allowlist.SCALAR_FUNCTIONS
    | allowlist.AGGREGATE_FUNCTIONS
    | allowlist.COLLECTING_AGGREGATES
    | allowlist.WINDOW_FUNCTIONS
)
_ABSTRACT_TABLE = re.compile(r"[a-z]+|cte[0-9]+")
_ABSTRACT_QUALIFIER = re.compile(r"(?:[a-z]+|cte[0-9]+)(?:_[0-9]+)?|sub[0-9]+")
_ABSTRACT_COLUMN = re.compile(r"col_[0-9]+|_[0-9]+|x[0-9]+_[0-9]+")


def post_check(root: exp.Expr) -> None:
    """Defence in depth: the rewritten tree holds only allowlisted constructs and abstract table names."""
    for node in root.dfs():
        bad = type(node) not in _POST_NODES
        if isinstance(node, exp.Table):
            bad = (
                bad
                or any(node.args.get(k) for k in ("db", "catalog"))
                or not (isinstance(node.this, exp.Identifier) and _ABSTRACT_TABLE.fullmatch(node.name))
            )
        elif isinstance(node, (SparkCall, SparkAggCall)):
            bad = node.fname not in _POST_CALLS
        elif isinstance(node, exp.Column):
            bad = (
                not _ABSTRACT_COLUMN.fullmatch(node.name)
                or bool(node.table and not _ABSTRACT_QUALIFIER.fullmatch(node.table))
                or any(node.args.get(k) for k in ("db", "catalog"))
            )
        elif isinstance(node, exp.Join):
            bad = bool(node.args.get("using"))
        elif isinstance(node, exp.Star):  # only COUNT(*) keeps a star once columns are expanded
            bad = not (isinstance(node.parent, SparkAggCall) and node.parent.fname == "count")
        elif isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier):
            bad = not re.fullmatch(r"x[0-9]+_[0-9]+", node.this.name)  # only a lambda variable can be bare
        elif isinstance(node, exp.TableAlias):
            bad = bool(node.args.get("columns")) or not _ABSTRACT_QUALIFIER.fullmatch(node.name)
        if bad:
            raise QueryRefused(
                "unsupported-construct", "the rewrite produced something outside the allowlist", sql_of(node)
            )
