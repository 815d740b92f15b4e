"""Semantic equivalences (docs/queries.md "The rewrite", step 7): spellings that Spark evaluates
alike, written one way so that they share a query CID.

- ``x [NOT] BETWEEN lo AND hi`` is ``[NOT] (x >= lo AND x <= hi)``: Spark's own replacement of ``Between``.
  Expanded before qualification (``expand_between``), so a copied ``x`` is named like the user's own spelling.
- ``COUNT(<non-null literal>)`` is ``COUNT(*)``: both count every row.
- ``IN`` lists of literals of one kind are sorted and their duplicates dropped.
- ``=``, ``<>``, ``<=>``, ``IS DISTINCT FROM`` have their operands in canonical order; ``<``/``>``/``<=``/``>=``
  are mirrored to it.
- A parenthesized ``AND`` under ``AND``/``OR`` and an ``OR`` under ``OR`` lose their parentheses (associativity
  and precedence: the text reads back as the same tree).

The other rewrites run on the abstract tree (``apply``), where the canonical text of an operand no longer holds
the user's names.
"""

from __future__ import annotations

from sqlglot import exp

from node.domain.sql.dialect import DIALECT, SparkAggCall

#: Operators whose operands may be swapped as they are (Spark's coercion of a binary comparison does not depend
#: on the operands' order: tests/integration/test_query_equivalences.py checks every pair of types on Spark).
SYMMETRIC: tuple[type[exp.Expr], ...] = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)
#: Operators swapped with their mirror: ``b > a`` is ``a < b``.
MIRRORED: dict[type[exp.Expr], type[exp.Expr]] = {exp.LT: exp.GT, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.GTE: exp.LTE}


def expand_between(root: exp.Expr) -> None:
    """``x BETWEEN lo AND hi`` → ``(x >= lo AND x <= hi)`` (NOT BETWEEN is a NOT above it: kept)."""
    for between in list(root.find_all(exp.Between)):
        if between.args.get("symmetric"):
            continue
        x = between.this
        both = exp.And(
            this=exp.GTE(this=x.copy(), expression=between.args["low"]),
            expression=exp.LTE(this=x.copy(), expression=between.args["high"]),
        )
        # sqlglot writes no parentheses of its own: NOT x >= lo AND x <= hi would read back differently.
        replacement = exp.Paren(this=both)
        replacement.meta.update(between.meta)  # the output's display name, when it is a projection
        between.replace(replacement)


def _count_rows(root: exp.Expr) -> None:
    """COUNT(1), COUNT('a'), COUNT(TRUE), COUNT(-2.5) → COUNT(*); never COUNT(NULL) or COUNT(DISTINCT 1)."""
    for call in list(root.find_all(SparkAggCall)):
        args = call.expressions
        if call.fname == "count" and len(args) == 1 and _literal_kind(args[0]) not in (None, "null"):
            call.set("expressions", [exp.Star()])


def _literal_kind(node: exp.Expr) -> str | None:
    """The Spark type family of a plain literal: ``integer`` (INT, BIGINT or DECIMAL(p,0): all widen alike),
    ``decimal<scale>``, ``double``, ``string``, ``boolean`` or ``null``; ``None`` for anything else."""
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return _literal_kind(node.this)
    if isinstance(node, exp.Literal):
        text = str(node.this).lower()
        if node.is_string:
            return "string"
        if "e" in text:
            return "double"
        return f"decimal{len(text.partition('.')[2])}" if "." in text else "integer"
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Null):
        return "null"
    return None


def _sort_in_lists(root: exp.Expr) -> None:
    """``x IN (3, 1, 3, NULL)`` → ``x IN (1, 3, NULL)``: only literal lists of one kind (besides NULL).

    Spark evaluates ``IN`` member by member and stops at a match, so a member that can fail at run time (a
    column cast under ANSI, a division) must keep its place; literals are folded before anything runs. Mixed
    kinds (``IN (1, 'a')``, ``IN (1, 2.5)``) are left as written: Spark widens the members' types pairwise, and
    decimal precision capped at 38 could make that order-dependent.
    """
    for node in list(root.find_all(exp.In)):
        members = node.expressions
        if not members or node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            continue
        kinds = [_literal_kind(m) for m in members]
        if None in kinds or len(set(kinds) - {"null"}) > 1:
            continue
        unique: dict[str, exp.Expr] = {}
        for member in members:
            unique.setdefault(_text(member), member)
        node.set("expressions", [unique[t] for t in sorted(unique)])


def _reads_data(node: exp.Expr) -> bool:
    return any(isinstance(n, (exp.Column, exp.Star)) for n in node.walk())


def _operand_key(node: exp.Expr) -> tuple[bool, str]:
    """Operands that read data first, then by canonical text (code-point order); equal operands compare with
    ``<``/``<=``, never ``>``/``>=``."""
    return (not _reads_data(node), _text(node))


def _order_comparisons(root: exp.Expr) -> None:
    """``1 = a.col_0`` → ``a.col_0 = 1``; ``b.col_0 > a.col_0`` → ``a.col_0 < b.col_0``.

    Deepest first, so that an operand's text is already canonical when it is compared. Operands holding a
    subquery keep their order: moving one could change which input appears first, hence the abstract names.
    """
    comparisons = [n for n in root.find_all(*SYMMETRIC, *MIRRORED) if type(n) in SYMMETRIC or type(n) in MIRRORED]
    for node in reversed(comparisons):
        left, right = node.this, node.expression
        if any(isinstance(n, exp.Query) for side in (left, right) for n in side.walk()):
            continue
        left_key, right_key = _operand_key(left), _operand_key(right)
        # Equal operands (``k > t.k``): the mirror pair is written with < or <=.
        if right_key > left_key or (right_key == left_key and type(node) not in (exp.GT, exp.GTE)):
            continue
        cls = MIRRORED.get(type(node), type(node))
        node.replace(cls(this=right, expression=left))


def _drop_associative_parentheses(root: exp.Expr) -> None:
    """``p AND (q AND r)`` → ``p AND q AND r``; ``p OR (q AND r)`` → ``p OR q AND r``; ``p OR (q OR r)``;
    ``CASE WHEN (p AND q)``: the text reads back as the same tree."""
    for paren in list(root.find_all(exp.Paren)):
        inner, parent = paren.this, paren.parent
        if (
            (isinstance(inner, exp.And) and isinstance(parent, (exp.And, exp.Or)))
            or (isinstance(inner, exp.Or) and isinstance(parent, exp.Or))
            or (isinstance(inner, exp.Connector) and isinstance(parent, exp.If) and paren.arg_key == "this")
        ):
            paren.replace(inner)


def _text(node: exp.Expr) -> str:
    return node.sql(dialect=DIALECT, comments=False)


#: Applied in this order on the abstract tree (docs/queries.md "The rewrite", step 7).
EQUIVALENCES = (_count_rows, _drop_associative_parentheses, _sort_in_lists, _order_comparisons)


def apply(root: exp.Expr) -> None:
    """Every rewrite of ``EQUIVALENCES``, in order."""
    for rewrite in EQUIVALENCES:
        rewrite(root)
