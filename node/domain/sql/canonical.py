"""The canonical form of a deterministic Spark SQL query (DESIGN.md "Deterministic queries"; docs/queries.md).

``canonicalize(sql, inputs)`` checks a statement against the allowlist (``node.domain.sql.allowlist``) and rewrites
it to the abstract form of Qri's deterministic querying (§2.3): inputs renamed ``a, b, …`` in order of first
appearance, columns ``col_<position>``, every column qualified, outputs positional (``_0, _1, …``), spelling
normalized. Two semantically identical queries over inputs of the same shape get the same ``statement``.

The steps live in their own modules, each testable alone: ``checks`` (the table-driven allowlist walk), ``clock``
and ``environment`` (what a value may not depend on), ``qualify``, ``naming``, ``order`` and ``printing``; this
module resolves every column to its source and position and assigns the abstract names.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, build_scope, walk_in_scope
from sqlglot.tokens import TokenType

from node.domain.sql import allowlist, environment, equivalences
from node.domain.sql import clock_rule as clock
from node.domain.sql.checks import MAX_SQL_CHARS, check_statement
from node.domain.sql.declared_inputs import Context, Input, declare
from node.domain.sql.dialect import DIALECT
from node.domain.sql.naming import (
    abstract_table_name,
    lambda_bound,
    name_occurrences,
    normalize_identifiers,
    rename_lambdas,
)
from node.domain.sql.order import SortKey, complete_orders, complete_windows, leftmost_select
from node.domain.sql.printing import normalize_spelling, post_check, sql_of, to_ident
from node.domain.sql.qualify import prepare, qualify_statement
from node.support.errors import QueryRefused, did_you_mean

__all__ = [
    "CANONICALIZER_VERSION",
    "MAX_SQL_CHARS",
    "CanonicalQuery",
    "SortKey",
    "abstract_table_name",
    "canonicalize",
    "canonicalize_declared",
]

FORM_REVISION = 3  # 2: float tie-breakers in completed orders; 3: semantic equivalences (equivalences.py)


def _rules_digest() -> str:
    blob = json.dumps({"form": FORM_REVISION, "allowlist": allowlist.manifest()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


#: Names the canonicalizer: the form revision, the exact sqlglot version and a digest of the allowlist and
#: rules. It is recorded in every query object, so changing any of them changes every query CID.
CANONICALIZER_VERSION = f"cairn-sql/{FORM_REVISION}+sqlglot-{sqlglot.__version__}+rules-{_rules_digest()}"


@dataclass(frozen=True)
class CanonicalQuery:
    """A query in canonical, abstract form.

    ``statement`` is Spark SQL over tables ``a, b, …`` whose columns are ``col_0, col_1, …``; its outputs are
    named ``_0, _1, …``. ``inputs[i]`` is the user's alias bound to the i-th abstract table, ``input_types[i]``
    that input's column types (its abstract structure). ``output_names`` are the user's names for the outputs
    (display only). ``order_by`` is ``None`` when the statement has no top-level ORDER BY (results are then
    written sorted by all columns); otherwise the complete, total sort order of the statement.
    """

    statement: str
    inputs: tuple[str, ...]
    input_types: tuple[tuple[str, ...], ...]
    output_names: tuple[str, ...]
    order_by: tuple[SortKey, ...] | None
    dialect: str = "spark"
    canonicalizer: str = CANONICALIZER_VERSION
    syntax: str = "sql"

    @property
    def table_names(self) -> tuple[str, ...]:
        """The abstract table names, in order: ``("a", "b", …)``."""
        return tuple(abstract_table_name(i) for i in range(len(self.inputs)))

    @property
    def abstract_inputs(self) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """``((table, ((col_0, type), …)), …)``: what the engine must register before running ``statement``."""
        return tuple(
            (abstract_table_name(i), tuple((f"col_{j}", t) for j, t in enumerate(types)))
            for i, types in enumerate(self.input_types)
        )


def canonicalize(sql: str, inputs: Mapping[str, Sequence[tuple[str, str]]]) -> CanonicalQuery:
    """Check ``sql`` against Cairn's rules and rewrite it to its canonical, abstract form.

    ``inputs`` maps each input alias (the table name the statement uses) to its structure: ordered
    ``(column name, canonical type string)`` pairs. Raises :class:`QueryRefused` (an ``InvalidInput``) naming
    the rule and the offending fragment when the statement is not a deterministic query over those inputs.
    """
    if not isinstance(sql, str):
        raise QueryRefused("parse-error", "the statement must be a string", repr(sql))
    return canonicalize_declared(sql, declare(inputs))


def canonicalize_declared(sql: str, declared: tuple[Input, ...]) -> CanonicalQuery:
    """:func:`canonicalize` with the inputs already checked (``node.domain.sql.declared_inputs.declare``): the child
    processes
    of ``node.domain.sql.sandbox`` receive them so."""
    if len(sql) <= _CACHED_SQL_CHARS:  # repeated queries (cache hits) skip the work; big ones are not kept
        return _canonicalize_cached(sql, declared)
    return _canonicalize(sql, declared)


_CACHED_SQL_CHARS = 16_384


@lru_cache(maxsize=1024)
def _canonicalize_cached(sql: str, declared: tuple[Input, ...]) -> CanonicalQuery:
    return _canonicalize(sql, declared)


def _canonicalize(sql: str, declared: tuple[Input, ...]) -> CanonicalQuery:
    try:
        return _Canonicalizer(sql, declared).run()
    except RecursionError:
        raise QueryRefused("too-complex", "the statement nests too deeply", sql) from None


class _Canonicalizer:
    def __init__(self, sql: str, declared: tuple[Input, ...]) -> None:
        self.ctx = Context(sql, declared)

    def run(self) -> CanonicalQuery:
        root = check_statement(self.ctx)
        prepare(self.ctx, root)
        equivalences.expand_between(root)
        root = qualify_statement(self.ctx, root)
        return self._rewrite(root)

    def _rewrite(self, root: exp.Expr) -> CanonicalQuery:
        self._find_occurrences(root)
        self._resolve_columns()
        self._check_types(root)
        self._collect_output_names(root)
        self._first_appearance(root)
        self._assign_names(root)
        return self._finish(root)

    def _find_occurrences(self, root: exp.Expr) -> None:
        """Every table reference (input or CTE) and every derived table, by scope; unused inputs/CTEs refused."""
        root_scope = build_scope(root)
        if root_scope is None:
            raise QueryRefused("unsupported-construct", "cannot find the query's self.scopes", self.ctx.sql)
        self.scopes = list(root_scope.traverse())

        # Occurrences: every table reference (input or CTE) and every derived table.
        self.input_occ: dict[int, list[exp.Table]] = {}
        self.cte_occ: dict[str, list[exp.Table]] = {name: [] for name in self.ctx.cte_names}
        self.derived: list[exp.Subquery] = []
        # id(occurrence) -> ("input", i) | ("cte", name) | ("derived", None)
        self.occ_kind: dict[int, tuple[str, Any]] = {}
        for scope in self.scopes:
            for table in scope.tables:
                if id(table) in self.occ_kind:
                    continue
                if table.name.startswith("__in") and table.name[4:].isdigit():
                    i = int(table.name[4:])
                    self.input_occ.setdefault(i, []).append(table)
                    self.occ_kind[id(table)] = ("input", i)
                elif table.name.lower() in self.cte_occ:
                    self.cte_occ[table.name.lower()].append(table)
                    self.occ_kind[id(table)] = ("cte", table.name.lower())
                else:
                    raise QueryRefused("unknown-table", "not a declared input nor a CTE in scope", table.name)
        for scope in self.scopes:
            for sub in scope.derived_tables:
                if id(sub) not in self.occ_kind:
                    self.derived.append(sub)
                    self.occ_kind[id(sub)] = ("self.derived", None)

        unused = [d.alias for i, d in enumerate(self.ctx.declared) if i not in self.input_occ]
        if unused:
            raise QueryRefused("unused-input", "every declared input must be read by the statement", ", ".join(unused))
        unused_ctes = [self.ctx.cte_names[name].alias_or_name for name, refs in self.cte_occ.items() if not refs]
        if unused_ctes:
            raise QueryRefused("unused-cte", "every CTE must be used", ", ".join(unused_ctes))

    def _resolve_columns(self) -> None:
        """Resolve every column (by position), alias reference and source, before renaming anything."""
        # Phase A: resolve every column (by position), alias reference and source, before renaming anything.
        self.col_plan: list[tuple[exp.Column, exp.Expr, int]] = []  # (column, occurrence, position)
        self.alias_refs: list[tuple[exp.Column, int]] = []
        self.visible: dict[int, list[exp.Expr]] = {}  # id(select) -> occurrences whose columns it sees
        self.source_scope: dict[int, Scope] = {}  # id(CTE reference or derived table) -> the scope it reads
        self.occ_by_alias: dict[int, dict[str, exp.Expr]] = {}
        for scope in self.scopes:
            self.occ_by_alias[id(scope)] = {t.alias_or_name: t for t in scope.tables}
            self.occ_by_alias[id(scope)].update({s.alias: s for s in scope.derived_tables})
            for name, source in scope.sources.items():
                node = self.occ_by_alias[id(scope)].get(name)
                if isinstance(source, Scope) and node is not None:
                    self.source_scope[id(node)] = source

        for scope in self.scopes:
            expression = scope.expression
            if isinstance(expression, exp.Select):
                self.visible[id(expression)] = self._visible_occurrences(expression, self.occ_by_alias[id(scope)])
            for node in walk_in_scope(expression):
                if not isinstance(node, exp.Column):
                    continue
                if not isinstance(node.this, exp.Identifier):
                    raise QueryRefused("unsupported-construct", "a star could not be expanded here", sql_of(node))
                if node.args.get("db") or node.args.get("catalog"):
                    raise QueryRefused("unknown-column", "cannot resolve this reference", sql_of(node))
                if lambda_bound(node, expression):
                    continue
                qualifier = node.table
                if not qualifier:
                    self.alias_refs.append((node, self._alias_position(node, expression)))
                    continue
                found: tuple[exp.Expr, Any] | None = None
                s: Scope | None = scope
                while s is not None:
                    if qualifier in s.sources:
                        occ = self.occ_by_alias[id(s)].get(qualifier)
                        found = (occ, s.sources[qualifier]) if occ is not None else None
                        break
                    s = s.parent
                if found is None:
                    raise QueryRefused("unknown-column", "cannot resolve this reference", sql_of(node))
                occurrence, source = found
                kind, info = self.occ_kind[id(occurrence)]
                if kind == "input":
                    position = self._input_position(info, node)
                else:
                    query = source.expression if isinstance(source, Scope) else None
                    names = list(query.named_selects) if isinstance(query, exp.Query) else []
                    matches = [k for k, n in enumerate(names) if n == node.name]
                    if len(matches) != 1:
                        rule = "ambiguous-column" if matches else "unknown-column"
                        raise QueryRefused(rule, "cannot resolve this reference to a single column", sql_of(node))
                    position = matches[0]
                self.col_plan.append((node, occurrence, position))

    def _input_position(self, i: int, column: exp.Column) -> int:
        """The position of ``column`` in the i-th declared input's structure."""
        try:
            return self.ctx.declared[i].keys.index(column.name.lower())
        except ValueError:
            hint = did_you_mean(column.name, self.ctx.declared[i].names)
            raise QueryRefused("unknown-column", f"no such column in the input{hint}", sql_of(column)) from None

    def _check_types(self, root: exp.Expr) -> None:
        """The rules that need the input columns' types: clock-value and float-format."""
        # The clock and float-format rules need the input columns' types (docs/queries.md).
        typed = {
            id(c): self.ctx.declared[self.occ_kind[id(o)][1]].types[p]
            for c, o, p in self.col_plan
            if self.occ_kind[id(o)][0] == "input"
        }
        clock.check(root, lambda column: typed.get(id(column)))
        environment.check(root, lambda column: typed.get(id(column)))

    def _collect_output_names(self, root: exp.Expr) -> None:
        """Display names of every query's outputs (inner first), for output_names."""
        # Display names of every query's outputs (inner first), for output_names.
        display: dict[int, list[str]] = {}
        col_target = {id(col): (occ, pos) for col, occ, pos in self.col_plan}
        for scope in self.scopes:
            expression = scope.expression
            if isinstance(expression, exp.Select):
                names = [
                    self._display_name(p, col_target, self.occ_kind, self.source_scope, display)
                    for p in expression.expressions
                ]
                renamed = expression.meta.get("cairn_alias_columns") if expression.meta else None
                for k, name in enumerate(renamed or []):  # a column alias list names these outputs
                    if k < len(names):
                        names[k] = name
                display[id(expression)] = names
            elif isinstance(expression, (exp.SetOperation, exp.Subquery)):
                display[id(expression)] = display.get(id(leftmost_select(expression)), [])
        self.output_names = tuple(display.get(id(leftmost_select(root)), []))

    def _first_appearance(self, root: exp.Expr) -> None:
        """Where each table reference, CTE and derived table first appears in the statement's text."""
        # Phase B: order of first appearance, read off the generated text with placeholder names. The nonce
        # keeps a user's own identifiers from posing as placeholders; it never reaches the output.
        nonce = secrets.token_hex(6)
        all_tables = [t for occs in self.input_occ.values() for t in occs]
        all_tables += [t for occs in self.cte_occ.values() for t in occs]
        ctes = list(self.ctx.cte_names.values())
        placeholder: dict[str, exp.Expr] = {}
        for prefix, nodes in (("t", all_tables), ("c", ctes), ("d", self.derived)):
            for n, node in enumerate(nodes):
                name = f"__cq{nonce}{prefix}{n}"
                placeholder[name] = node
                if isinstance(node, exp.Table):
                    node.set("this", to_ident(name))
                else:
                    node.set("alias", exp.TableAlias(this=to_ident(name)))
        self.first_seen: dict[int, int] = {}
        for position, token in enumerate(DIALECT.tokenize(root.sql(dialect=DIALECT))):
            if token.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and token.text in placeholder:
                self.first_seen.setdefault(id(placeholder[token.text]), position)

    def _assign_names(self, root: exp.Expr) -> None:
        """The final abstract names of tables, CTEs, derived tables, columns and outputs."""
        # Phase C: final names.
        self.qualifier_of: dict[int, str] = {}
        self.input_order = sorted(self.input_occ, key=lambda i: min(self._seen(t) for t in self.input_occ[i]))
        for rank, i in enumerate(self.input_order):
            name_occurrences(sorted(self.input_occ[i], key=self._seen), abstract_table_name(rank), self.qualifier_of)
        cte_order = sorted(self.ctx.cte_names.values(), key=self._seen)
        cte_final = {}
        for rank, cte in enumerate(cte_order):
            name = f"cte{rank}"
            cte_final[id(cte)] = name
            cte.set("alias", exp.TableAlias(this=to_ident(name)))
        for key, cte in self.ctx.cte_names.items():
            name_occurrences(sorted(self.cte_occ[key], key=self._seen), cte_final[id(cte)], self.qualifier_of)
        for rank, sub in enumerate(sorted(self.derived, key=self._seen)):
            name = f"sub{rank}"
            sub.set("alias", exp.TableAlias(this=to_ident(name)))
            self.qualifier_of[id(sub)] = name

        for col, occurrence, position in self.col_plan:
            is_input = self.occ_kind[id(occurrence)][0] == "input"
            col.set("this", to_ident(f"col_{position}" if is_input else f"_{position}"))
            col.set("table", to_ident(self.qualifier_of[id(occurrence)]))
        for col, k in self.alias_refs:
            col.set("this", to_ident(f"_{k}"))
            col.set("table", None)
        for select in list(root.find_all(exp.Select)):
            for k, projection in enumerate(list(select.expressions)):
                if isinstance(projection, exp.Alias):
                    projection.set("alias", to_ident(f"_{k}"))
                else:
                    alias = exp.Alias(alias=to_ident(f"_{k}"))
                    projection.replace(alias)
                    alias.set("this", projection)

    def _finish(self, root: exp.Expr) -> CanonicalQuery:
        """Spelling, order completion, the last check, and the statement's text."""
        rename_lambdas(root)
        normalize_spelling(root)
        equivalences.apply(root)  # before order completion, so that its keys match outputs written alike

        # Order: complete every ORDER BY and every order-sensitive window to a total order.
        input_column = {  # id(column node) -> (input index, position), for columns read straight from an input
            id(col): (self.occ_kind[id(occ)][1], pos)
            for col, occ, pos in self.col_plan
            if self.occ_kind[id(occ)][0] == "input"
        }
        order_by = complete_orders(self.ctx, root, input_column)
        complete_windows(
            self.ctx, root, self.visible, self.qualifier_of, self.occ_kind, self.source_scope, input_column
        )

        normalize_identifiers(root)
        equivalences.apply(root)  # again on the final text (quoting), which the operand order reads
        post_check(root)
        try:
            statement = root.sql(dialect=DIALECT, comments=False)
        except SqlglotError as e:
            raise QueryRefused(
                "unsupported-construct", f"cannot write the canonical form ({e})", self.ctx.sql
            ) from None
        if "${" in statement:  # Spark substitutes ${…} anywhere in the text, strings included
            raise QueryRefused(
                "outside-reach", "${…} is Spark variable substitution", statement[statement.index("${") :]
            )
        return CanonicalQuery(
            statement=statement,
            inputs=tuple(self.ctx.declared[i].alias for i in self.input_order),
            input_types=tuple(self.ctx.declared[i].types for i in self.input_order),
            output_names=self.output_names,
            order_by=order_by,
        )

    def _seen(self, node: exp.Expr) -> int:
        return self.first_seen.get(id(node), 1 << 62)

    @staticmethod
    def _visible_occurrences(select: exp.Select, by_alias: dict[str, exp.Expr]) -> list[exp.Expr]:
        out: list[exp.Expr] = []
        sources: list[exp.Expr] = []
        from_ = select.args.get("from_")
        if from_ is not None:
            sources.append(from_.this)
        for join in select.args.get("joins") or []:
            if str(join.args.get("kind") or "").upper() in ("SEMI", "ANTI"):
                continue
            sources.append(join.this)
        for source in sources:
            node = by_alias.get(source.alias_or_name) if isinstance(source, (exp.Table, exp.Subquery)) else None
            if node is not None:
                out.append(node)
        return out

    @staticmethod
    def _alias_position(column: exp.Column, query: exp.Expr) -> int:
        if isinstance(query, (exp.Select, exp.SetOperation, exp.Subquery)):
            projections = list(leftmost_select(query).expressions)
        else:
            projections = []
        matches = [k for k, p in enumerate(projections) if p.alias_or_name == column.name]
        if not matches:
            hint = did_you_mean(column.name, [p.alias_or_name for p in projections])
            raise QueryRefused("unknown-column", f"no input, CTE or output in scope has this column{hint}", column.name)
        inner = {sql_of(p.this if isinstance(p, exp.Alias) else p) for k, p in enumerate(projections) if k in matches}
        if len(inner) > 1:  # two different outputs share the name
            raise QueryRefused("ambiguous-column", "several outputs have this name", column.name)
        return matches[0]

    def _display_name(
        self,
        projection: exp.Expr,
        col_target: dict[int, tuple[exp.Expr, int]],
        occ_kind: dict[int, tuple[str, Any]],
        source_scope: dict[int, Scope],
        display: dict[int, list[str]],
    ) -> str:
        for node in (projection, projection.this if isinstance(projection, exp.Alias) else None):
            if node is not None and node.meta and "cairn_display" in node.meta:
                return str(node.meta["cairn_display"])
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(inner, exp.Column) and id(inner) in col_target:
            occurrence, position = col_target[id(inner)]
            kind, info = occ_kind[id(occurrence)]
            if kind == "input":
                return self.ctx.declared[info].names[position]
            scope = source_scope.get(id(occurrence))
            if scope is not None:
                names = display.get(id(leftmost_select(scope.expression)), [])
                if position < len(names):
                    return names[position]
        if isinstance(inner, exp.Dot):
            return inner.expression.name if isinstance(inner.expression, exp.Identifier) else sql_of(inner)
        return projection.alias_or_name
