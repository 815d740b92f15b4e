"""Qualification (docs/queries.md "The rewrite", step 3): sqlglot's ``qualify`` with the inputs as schema, keeping
what it would lose (display names, the case of struct field names)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from node.domain.sql.declared_inputs import Context, sqlglot_type
from node.domain.sql.dialect import DIALECT
from node.domain.sql.printing import sql_of, to_ident
from node.support.errors import QueryRefused, did_you_mean


def prepare(ctx: Context, root: exp.Expr) -> None:
    """Bind input tables to internal names and remember what qualify would lose (display names, case)."""
    for table in list(root.find_all(exp.Table)):
        key = table.name.lower()
        if key in ctx.by_key:
            if table.args.get("alias") is None:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", to_ident(f"__in{ctx.by_key[key]}"))
    for select in root.find_all(exp.Select):
        for projection in select.expressions:
            if isinstance(projection, exp.Alias):
                projection.meta["cairn_display"] = projection.alias
            elif not isinstance(projection, (exp.Column, exp.Star)):
                projection.meta["cairn_display"] = sql_of(projection)
    # A column alias list (`AS s (y)`, `WITH c (y) AS`) renames the outputs of the query it aliases; qualify
    # pushes it into that query's projections, so the display names are kept on its leftmost SELECT.
    for alias in root.find_all(exp.TableAlias):
        columns = alias.args.get("columns") or []
        body = alias.parent.this if isinstance(alias.parent, (exp.Subquery, exp.CTE)) else None
        while isinstance(body, (exp.SetOperation, exp.Subquery)):
            body = body.this
        if columns and isinstance(body, exp.Select):
            body.meta["cairn_alias_columns"] = [c.name for c in columns]
    # Field names are part of a result's type: keep their case through identifier normalization.
    for ident in root.find_all(exp.Identifier):
        parent = ident.parent
        if isinstance(parent, exp.ColumnDef) or (
            isinstance(parent, (exp.Alias, exp.PropertyEQ)) and isinstance(parent.parent, exp.Struct)
        ):
            ident.meta["cairn_case"] = ident.this


def qualify_statement(ctx: Context, root: exp.Expr) -> exp.Expr:
    mapping: dict[str, object] = {  # MappingSchema's own parameter type (dict is invariant)
        f"__in{i}": {name: sqlglot_type(t) for name, t in zip(d.keys, d.types)} for i, d in enumerate(ctx.declared)
    }
    # Names a misspelled column may have meant, gathered before qualify rewrites the tree (did-you-mean).
    known = [name for d in ctx.declared for name in d.names] + [a.alias for a in root.find_all(exp.Alias) if a.alias]
    try:
        root = qualify(
            root,
            dialect=DIALECT,
            schema=MappingSchema(mapping, dialect=DIALECT),
            quote_identifiers=False,
            identify=False,
            validate_qualify_columns=True,
        )
    except OptimizeError as e:
        refuse_unresolved(ctx, str(e), known)
    except SqlglotError as e:
        raise QueryRefused("unsupported-construct", f"cannot resolve the statement ({e})", ctx.sql) from None
    except RecursionError:
        raise
    except Exception as e:  # noqa: BLE001 - sqlglot's optimizer on a statement it does not expect
        raise QueryRefused(
            "unsupported-construct", f"cannot resolve the statement ({type(e).__name__})", ctx.sql
        ) from None
    for ident in root.find_all(exp.Identifier):
        original = ident.meta.get("cairn_case") if ident.meta else None
        if original is not None:
            ident.set("this", original)
    return root


def refuse_unresolved(ctx: Context, message: str, known: Sequence[str] = ()) -> None:
    m = re.search(r"Column '([^']*)' could not be resolved", message) or re.search(r"Unknown column: ([^\n]+)", message)
    if m:
        name = m.group(1).strip().lower()
        holders = [d.alias for d in ctx.declared if name in d.keys]
        if len(holders) > 1:
            raise QueryRefused(
                "ambiguous-column", f"column is in several inputs ({', '.join(holders)}): qualify it", m.group(1)
            )
        hint = did_you_mean(m.group(1).strip(), known)
        raise QueryRefused("unknown-column", f"no input or CTE in scope has this column{hint}", m.group(1).strip())
    first_line = message.splitlines()[0] if message else "cannot resolve the statement"
    if "table" in first_line.lower():
        raise QueryRefused("unknown-table", first_line, ctx.sql)
    raise QueryRefused("unknown-column", first_line, ctx.sql)
