"""Abstract names (docs/queries.md "The rewrite", step 4): tables ``a, b, …``, lambda variables ``x<depth>_<i>``,
and identifiers quoted exactly when Spark needs it."""

from __future__ import annotations

import re
from functools import cache

from sqlglot import exp

from node.domain.sql.dialect import CairnSpark
from node.domain.sql.printing import to_ident

# Short words that are SQL keywords: never used as abstract table names (they would need quoting).
_SHORT_KEYWORDS = frozenset(
    """
    as at by do go if in is no of on or to all and any asc end for key map not row set sql use add div
    """.split()
)

SAFE_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*\Z")
KEYWORDS = frozenset(k.lower() for k in CairnSpark.tokenizer_class.KEYWORDS if " " not in k) | _SHORT_KEYWORDS


def _letters(n: int) -> str:
    s = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(97 + r) + s
    return s


@cache
def _table_name_sequence(count: int) -> tuple[str, ...]:
    names: list[str] = []
    n = 0
    while len(names) < count:
        name = _letters(n)
        n += 1
        if name not in KEYWORDS:
            names.append(name)
    return tuple(names)


def abstract_table_name(i: int) -> str:
    """The i-th abstract table name: ``a`` … ``z``, then ``aa``, ``ab``, … (skipping SQL keywords)."""
    return _table_name_sequence(i + 1)[i]


def name_occurrences(occurrences: list[exp.Table], base: str, qualifier_of: dict[int, str]) -> None:
    for m, table in enumerate(occurrences):
        table.set("this", to_ident(base))
        if len(occurrences) == 1:
            table.set("alias", None)
            qualifier_of[id(table)] = base
        else:
            alias = f"{base}_{m}"
            table.set("alias", exp.TableAlias(this=to_ident(alias)))
            qualifier_of[id(table)] = alias


def lambda_bound(node: exp.Column, stop: exp.Expr) -> bool:
    if node.table:
        return False
    parent = node.parent
    while parent is not None and parent is not stop:
        if isinstance(parent, exp.Lambda) and any(p.name == node.name for p in parent.expressions):
            return True
        parent = parent.parent
    return False


def rename_lambdas(root: exp.Expr) -> None:
    def visit(node: exp.Expr, env: dict[str, str], depth: int) -> None:
        if isinstance(node, exp.Lambda):
            env = dict(env)
            params = []
            for i, param in enumerate(node.expressions):
                new = f"x{depth}_{i}"
                env[param.name] = new
                params.append(to_ident(new))
            node.set("expressions", params)
            visit(node.this, env, depth + 1)
            return
        if env and isinstance(node, exp.Column) and not node.table and node.name in env:
            node.set("this", to_ident(env[node.name]))
            return
        if (
            env
            and isinstance(node, exp.Identifier)
            and node.name in env
            and not (isinstance(node.parent, exp.Dot) and node.arg_key == "expression")  # a field name
        ):
            node.set("this", env[node.name])
            return
        for child in list(node.iter_expressions()):
            visit(child, env, depth)

    visit(root, {}, 0)


def normalize_identifiers(root: exp.Expr) -> None:
    """Quote an identifier exactly when Spark needs it."""
    for ident in root.find_all(exp.Identifier):
        name = str(ident.this)
        ident.set("quoted", not SAFE_IDENTIFIER.match(name) or name.lower() in KEYWORDS)
