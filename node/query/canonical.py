"""The canonical form of a deterministic Spark SQL query (DESIGN.md "Deterministic queries"; docs/queries.md).

``canonicalize(sql, inputs)`` checks a statement against the allowlist (``node.query.allowlist``) and rewrites
it to the abstract form of Qri's deterministic querying (§2.3): inputs renamed ``a, b, …`` in order of first
appearance, columns ``col_<position>``, every column qualified, outputs positional (``_0, _1, …``), spelling
normalized. Two semantically identical queries over inputs of the same shape get the same ``statement``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, OptimizeError, ParseError, SqlglotError, TokenError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, build_scope, walk_in_scope
from sqlglot.schema import MappingSchema
from sqlglot.tokens import TokenType

from node.query import allowlist, clock, environment
from node.query.dialect import DIALECT, CairnSpark, SparkAggCall, SparkCall
from node.query.errors import QueryRefused
from node.query.spark_builtins import SPARK_BUILTINS

#: Revision of the rewrite itself (naming scheme, normalizations). Part of CANONICALIZER_VERSION.
FORM_REVISION = 1
MAX_SQL_CHARS = 100_000


def _rules_digest() -> str:
    blob = json.dumps({"form": FORM_REVISION, "allowlist": allowlist.manifest()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


#: Names the canonicalizer: the form revision, the exact sqlglot version and a digest of the allowlist and
#: rules. It is recorded in every query object, so changing any of them changes every query CID.
CANONICALIZER_VERSION = f"cairn-sql/{FORM_REVISION}+sqlglot-{sqlglot.__version__}+rules-{_rules_digest()}"


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


# --- abstract names ------------------------------------------------------------------------------------

# Short words that are SQL keywords: never used as abstract table names (they would need quoting).
_SHORT_KEYWORDS = frozenset(
    """
    as at by do go if in is no of on or to all and any asc end for key map not row set sql use add div
    """.split()
)
_SAFE_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*\Z")
_KEYWORDS = frozenset(k.lower() for k in CairnSpark.tokenizer_class.KEYWORDS if " " not in k) | _SHORT_KEYWORDS


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
        if name not in _KEYWORDS:
            names.append(name)
    return tuple(names)


def abstract_table_name(i: int) -> str:
    """The i-th abstract table name: ``a`` … ``z``, then ``aa``, ``ab``, … (skipping SQL keywords)."""
    return _table_name_sequence(i + 1)[i]


# --- inputs ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Input:
    alias: str
    key: str
    names: tuple[str, ...]
    types: tuple[str, ...]
    keys: tuple[str, ...]  # lower-case column names


def _declare(inputs: Mapping[str, Sequence[tuple[str, str]]]) -> tuple[_Input, ...]:
    if not isinstance(inputs, Mapping):
        raise QueryRefused("invalid-inputs", "inputs must map each input alias to its columns", repr(inputs))
    declared: list[_Input] = []
    seen: set[str] = set()
    for alias, columns in inputs.items():
        if not isinstance(alias, str) or not alias.strip():
            raise QueryRefused("invalid-inputs", "an input alias must be a non-empty string", repr(alias))
        key = alias.lower()
        if key in seen:
            raise QueryRefused("invalid-inputs", "input declared twice (names are case-insensitive)", alias)
        seen.add(key)
        if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
            raise QueryRefused("invalid-inputs", "an input's structure must be a list of (name, type)", alias)
        names: list[str] = []
        types: list[str] = []
        for column in columns:
            if (
                not isinstance(column, Sequence)
                or isinstance(column, (str, bytes))
                or len(column) != 2
                or not all(isinstance(part, str) and part for part in column)
            ):
                raise QueryRefused(
                    "invalid-inputs", f"column of input {alias!r} is not a (name, type) pair", repr(column)
                )
            names.append(column[0])
            types.append(column[1])
        keys = tuple(n.lower() for n in names)
        if len(set(keys)) != len(keys):
            raise QueryRefused("invalid-inputs", "input has two columns of the same name (case-insensitive)", alias)
        if not names:
            raise QueryRefused("invalid-inputs", "input has no columns", alias)
        declared.append(_Input(alias, key, tuple(names), tuple(types), keys))
    return tuple(declared)


# --- canonical type strings → sqlglot types (only struct fields matter: they let `s.f` resolve) ----------

_PRIMITIVES = {
    "bool": "BOOLEAN",
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "uint8": "SMALLINT",
    "uint16": "INT",
    "uint32": "BIGINT",
    "uint64": "DECIMAL(20, 0)",
    "float16": "FLOAT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "utf8": "STRING",
    "binary": "BINARY",
    "date32": "DATE",
    "date64": "DATE",
}


class _TypeParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def parse(self) -> exp.DataType:
        t = self._type()
        if self.i != len(self.text):
            raise ValueError(self.text)
        return t

    def _eat(self, s: str) -> bool:
        if self.text.startswith(s, self.i):
            self.i += len(s)
            return True
        return False

    def _expect(self, s: str) -> None:
        if not self._eat(s):
            raise ValueError(self.text)

    def _type(self) -> exp.DataType:
        m = re.compile(r"[a-z_0-9]+").match(self.text, self.i)
        if not m:
            raise ValueError(self.text)
        name = m.group(0)
        self.i = m.end()
        if name in ("list", "fixed_size_list"):
            self._expect("<")
            item = self._type()
            self._expect(">")
            if name == "fixed_size_list":
                self._skip_brackets()
            return exp.DataType(this=exp.DType.ARRAY, expressions=[item], nested=True)
        if name == "map":
            self._expect("<")
            k = self._type()
            self._expect(",")
            v = self._type()
            self._expect(">")
            return exp.DataType(this=exp.DType.MAP, expressions=[k, v], nested=True)
        if name == "struct":
            self._expect("<")
            fields = []
            while not self._eat(">"):
                if fields:
                    self._expect(",")
                field_name = self._json_string()
                self._expect(":")
                fields.append(exp.ColumnDef(this=exp.to_identifier(field_name, quoted=True), kind=self._type()))
            return exp.DataType(this=exp.DType.STRUCT, expressions=fields, nested=True)
        if name == "decimal":
            m = re.compile(r"\((\d+),(-?\d+)\)").match(self.text, self.i)
            if not m:
                raise ValueError(self.text)
            self.i = m.end()
            return exp.DataType.build(f"DECIMAL({m.group(1)}, {max(int(m.group(2)), 0)})")
        self._skip_brackets()
        if name.startswith("timestamp"):
            return exp.DataType.build("TIMESTAMP")
        if name in _PRIMITIVES:
            return exp.DataType.build(_PRIMITIVES[name])
        if name == "fixed_size_binary":
            return exp.DataType.build("BINARY")
        return exp.DataType.build("UNKNOWN")

    def _skip_brackets(self) -> None:
        if self._eat("["):
            depth = 1
            while depth:
                if self.i >= len(self.text):
                    raise ValueError(self.text)
                c = self.text[self.i]
                if c == '"':
                    self._json_string()
                    continue
                depth += {"[": 1, "]": -1}.get(c, 0)
                self.i += 1

    def _json_string(self) -> str:
        if not self.text.startswith('"', self.i):
            raise ValueError(self.text)
        decoder = json.JSONDecoder()
        value, end = decoder.raw_decode(self.text, self.i)
        self.i = end
        return value


def _sqlglot_type(type_string: str) -> exp.DataType:
    try:
        return _TypeParser(type_string).parse()
    except (ValueError, SqlglotError):
        return exp.DataType.build("UNKNOWN")


# --- helpers -------------------------------------------------------------------------------------------


def _sql(node: exp.Expr) -> str:
    try:
        return node.sql(dialect=DIALECT, comments=False)
    except Exception:  # noqa: BLE001 - only used for messages
        return type(node).__name__


def _ident(name: str) -> exp.Identifier:
    return exp.Identifier(this=name, quoted=False)


def _unwrap_nulls(node: exp.Expr | None) -> exp.Expr | None:
    while isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
        node = node.this
    return node


def _leftmost_select(query: exp.Expr) -> exp.Select:
    node = query
    while not isinstance(node, exp.Select):
        if isinstance(node, (exp.SetOperation, exp.Subquery)):
            node = node.this
        else:
            raise QueryRefused("unsupported-construct", "cannot find the outputs of", _sql(query))
    return node


_OUTPUT = re.compile(r"_(0|[1-9][0-9]*)\Z")


def _output_ref(node: exp.Expr) -> int | None:
    """k if ``node`` is the bare output reference ``_k``."""
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        m = _OUTPUT.match(node.name)
        if m:
            return int(m.group(1))
    return None


def _normalize_number(text: str) -> str:
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


def _is_aggregate_select(select: exp.Select) -> bool:
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


def _window_kind(window: exp.Window) -> str | None:
    """How a window must be ordered: ``"complete"`` (append tie-breakers) or None (any order is fine)."""
    func = _unwrap_nulls(window.this)
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


# sqlglot's names for some Spark functions it parses into its own classes.
_SQLGLOT_NAMES = {"arg_max": "max_by", "arg_min": "min_by", "array_unique_agg": "collect_set"}

_SPARK_TYPES = frozenset(
    "BOOLEAN TINYINT SMALLINT INT BIGINT FLOAT DOUBLE DECIMAL TEXT BINARY DATE TIMESTAMP TIMESTAMPTZ TIMESTAMPNTZ "
    "TIMESTAMPLTZ INTERVAL ARRAY MAP STRUCT".split()
)

_VAR_PARENTS = (exp.Interval, exp.IntervalSpan, exp.Extract, exp.DataType, exp.DataTypeParam, exp.WindowSpec)


def _sort_key_for(type_string: str, expression: exp.Expr) -> tuple[exp.Expr, bool] | None:
    """How to sort a column of this type: (expression, via map_entries) or None when Spark cannot sort it."""
    if "map<" not in type_string:
        return expression, False
    if type_string.startswith("map<") and "map<" not in type_string[4:]:
        return SparkCall(this="MAP_ENTRIES", expressions=[expression]), True
    return None


# --- the canonicalizer -----------------------------------------------------------------------------------


def canonicalize(sql: str, inputs: Mapping[str, Sequence[tuple[str, str]]]) -> CanonicalQuery:
    """Check ``sql`` against Cairn's rules and rewrite it to its canonical, abstract form.

    ``inputs`` maps each input alias (the table name the statement uses) to its structure: ordered
    ``(column name, canonical type string)`` pairs. Raises :class:`QueryRefused` (an ``InvalidInput``) naming
    the rule and the offending fragment when the statement is not a deterministic query over those inputs.
    """
    if not isinstance(sql, str):
        raise QueryRefused("parse-error", "the statement must be a string", repr(sql))
    declared = _declare(inputs)
    if len(sql) <= _CACHED_SQL_CHARS:  # repeated queries (cache hits) skip the work; big ones are not kept
        return _canonicalize_cached(sql, declared)
    return _canonicalize(sql, declared)


_CACHED_SQL_CHARS = 16_384


@lru_cache(maxsize=1024)
def _canonicalize_cached(sql: str, declared: tuple[_Input, ...]) -> CanonicalQuery:
    return _canonicalize(sql, declared)


def _canonicalize(sql: str, declared: tuple[_Input, ...]) -> CanonicalQuery:
    try:
        return _Canonicalizer(sql, declared).run()
    except RecursionError:
        raise QueryRefused("too-complex", "the statement nests too deeply", sql) from None


class _Canonicalizer:
    def __init__(self, sql: str, declared: tuple[_Input, ...]) -> None:
        self.sql = sql
        self.declared = declared
        self.by_key = {d.key: i for i, d in enumerate(declared)}
        self.cte_names: dict[str, exp.CTE] = {}

    # -- entry ---------------------------------------------------------------------------------------

    def run(self) -> CanonicalQuery:
        root = self._parse()
        root = self._check_root(root)
        self._collect_ctes(root)
        for node in root.dfs():
            self._check_node(node)
        self._prepare(root)
        root = self._qualify(root)
        return self._rewrite(root)

    # -- parsing -------------------------------------------------------------------------------------

    def _parse(self) -> exp.Expr:
        if len(self.sql) > MAX_SQL_CHARS:
            raise QueryRefused("too-large", f"statements are limited to {MAX_SQL_CHARS} characters", self.sql)
        text = _strip_comments(self.sql)  # comments never reach the canonical form (hints stay, to be refused)
        try:
            tokens = DIALECT.tokenize(text)
        except TokenError as e:
            raise QueryRefused("parse-error", f"cannot read the statement ({e})", self.sql) from None
        try:
            statements = DIALECT.parser(error_level=ErrorLevel.RAISE).parse(tokens, text)
        except ParseError as e:
            first = e.errors[0] if e.errors else {}
            why = str(first.get("description") or "invalid SQL")
            if first.get("line"):
                why += f" (line {first['line']}, column {first.get('col')})"
            fragment = f"{first.get('start_context', '')}{first.get('highlight', '')}" or self.sql
            raise QueryRefused("parse-error", why, fragment[-80:]) from None
        except SqlglotError as e:
            raise QueryRefused("parse-error", str(e), self.sql) from None
        except RecursionError:
            raise
        except Exception as e:  # noqa: BLE001 - sqlglot's parser can fail on garbage in other ways
            raise QueryRefused("parse-error", f"cannot parse the statement ({type(e).__name__})", self.sql) from None
        statements = [s for s in statements if s is not None]
        if not statements:
            raise QueryRefused("parse-error", "there is no statement", repr(self.sql))
        if len(statements) > 1:
            raise QueryRefused("several-statements", "exactly one statement is allowed", _sql(statements[1]))
        return statements[0]

    def _check_root(self, root: exp.Expr) -> exp.Expr:
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
                    raise QueryRefused("parse-error", "SELECT without a select list", _sql(select) or self.sql)
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
        raise QueryRefused("not-a-select", why, _sql(root))

    # -- the allowlist -------------------------------------------------------------------------------

    def _collect_ctes(self, root: exp.Expr) -> None:
        for cte in root.find_all(exp.CTE):
            name = cte.alias_or_name.lower()
            if name in self.by_key:
                raise QueryRefused(
                    "cte-name-clash", "a CTE may not have the name of a declared input", cte.alias_or_name
                )
            if name.startswith("__"):
                raise QueryRefused("cte-name-clash", "names starting with __ are reserved", cte.alias_or_name)
            if name in self.cte_names:
                raise QueryRefused("cte-name-clash", "two CTEs have the same name", cte.alias_or_name)
            self.cte_names[name] = cte

    def _check_node(self, node: exp.Expr) -> None:
        cls = type(node)
        if cls is SparkCall or cls is SparkAggCall:
            self._check_call(node)
            return
        name = cls.__name__
        if name in allowlist.FORBIDDEN_NODES:
            rule, why = allowlist.FORBIDDEN_NODES[name]
            raise QueryRefused(rule, why, _sql(node))
        if isinstance(node, exp.Func) and name not in allowlist.ALLOWED_NODES:
            self._refuse_function(node)
        if name not in allowlist.ALLOWED_NODES:
            raise QueryRefused("unsupported-construct", f"{_describe(node)} is not supported", _sql(node))

        if isinstance(node, (exp.Select, exp.SetOperation, exp.Subquery)):
            for key, why in allowlist.FORBIDDEN_CLAUSES.items():
                if node.args.get(key):
                    rule = (
                        "forbidden-clause"
                        if key in ("hint", "sample", "distribute", "sort", "cluster", "into")
                        else "unsupported-construct"
                    )
                    raise QueryRefused(rule, why, _sql(node))
            if isinstance(node, exp.SetOperation) and any(node.args.get(k) for k in ("side", "kind", "on")):
                raise QueryRefused("unsupported-construct", "this form of set operation is not supported", _sql(node))
            if isinstance(node, exp.Select) and node.args.get("kind"):
                raise QueryRefused("unsupported-construct", "SELECT AS STRUCT/VALUE is not supported", _sql(node))
            if (node.args.get("limit") or node.args.get("offset")) and not node.args.get("order"):
                raise QueryRefused(
                    "unordered-limit",
                    "LIMIT/OFFSET without ORDER BY picks arbitrary rows; add an ORDER BY",
                    _sql(node.args.get("limit") or node.args.get("offset")),
                )
        elif isinstance(node, exp.Table):
            self._check_table(node)
        elif isinstance(node, exp.Join):
            if node.args.get("method") not in (None, "", "NATURAL") or any(
                node.args.get(k) for k in ("global_", "hint", "match_condition", "nearest", "directed", "pivots")
            ):
                raise QueryRefused("unsupported-construct", "this kind of join is not supported", _sql(node))
            if str(node.args.get("kind") or "").upper() not in ("", "INNER", "OUTER", "CROSS", "SEMI", "ANTI"):
                raise QueryRefused("unsupported-construct", "this kind of join is not supported", _sql(node))
        elif isinstance(node, exp.With):
            if any(node.args.get(k) for k in ("recursive", "search", "cycle", "udfs")):
                raise QueryRefused("unsupported-construct", "recursive CTEs are not supported", _sql(node))
        elif isinstance(node, exp.CTE):
            if any(node.args.get(k) for k in ("scalar", "materialized", "key_expressions")):
                raise QueryRefused("unsupported-construct", "this form of CTE is not supported", _sql(node))
        elif isinstance(node, exp.Star):
            if any(node.args.get(k) for k in ("except_", "replace", "rename", "ilike")):
                raise QueryRefused("unsupported-construct", "SELECT * EXCEPT/REPLACE is not supported", _sql(node))
        elif isinstance(node, (exp.Transform, exp.Exists)):
            if isinstance(node, exp.Transform) and not isinstance(node.expression, exp.Lambda):
                raise QueryRefused("unsupported-construct", "TRANSFORM needs a lambda", _sql(node))
            if (
                isinstance(node, exp.Exists)
                and node.expression is not None
                and not isinstance(node.expression, exp.Lambda)
            ):
                raise QueryRefused("unsupported-construct", "EXISTS needs a subquery or a lambda", _sql(node))
        elif isinstance(node, (exp.Cast, exp.TryCast)):
            if any(node.args.get(k) for k in ("format", "action", "default")):
                raise QueryRefused("unsupported-construct", "CAST … FORMAT is not supported", _sql(node))
        elif isinstance(node, exp.Ordered):
            if node.args.get("with_fill"):
                raise QueryRefused("unsupported-construct", "WITH FILL is not supported", _sql(node))
        elif isinstance(node, exp.Group):
            if node.args.get("totals") or node.args.get("all"):
                raise QueryRefused(
                    "unsupported-construct", "GROUP BY ALL is not supported: name the columns", _sql(node)
                )
            if not any(node.args.get(k) for k in ("expressions", "grouping_sets", "cube", "rollup")):
                raise QueryRefused("parse-error", "GROUP BY without expressions", _sql(node.parent or node))
        elif isinstance(node, exp.Distinct):
            if node.args.get("on"):
                raise QueryRefused("unsupported-construct", "DISTINCT ON is not supported", _sql(node))
        elif isinstance(node, exp.Window):
            self._check_window(node)
        elif isinstance(node, (exp.Limit, exp.Offset)):
            count = node.args.get("expression")
            if (
                not (isinstance(count, exp.Literal) and not count.is_string and count.name.isdigit())
                or node.args.get("expressions")
                or node.args.get("limit_options")
                or node.args.get("offset")
            ):
                raise QueryRefused("unsupported-construct", "LIMIT and OFFSET take a whole number", _sql(node))
        elif isinstance(node, exp.DataType):
            kind = node.this
            if not (isinstance(kind, exp.Interval) or (isinstance(kind, exp.DType) and kind.name in _SPARK_TYPES)):
                raise QueryRefused("unsupported-construct", "not a Spark data type", _sql(node))
        elif isinstance(node, (exp.Literal, exp.Identifier)):
            if "${" in str(node.this):
                raise QueryRefused(
                    "outside-reach",
                    "${…} is Spark variable substitution (it reads the session and environment)",
                    _sql(node),
                )
        elif isinstance(node, exp.Var):
            if isinstance(node.parent, exp.Ordered) and node.name.upper() == "ALL":
                raise QueryRefused(
                    "unsupported-construct", "ORDER BY ALL is not supported: name the columns", _sql(node.parent)
                )
            if not isinstance(node.parent, _VAR_PARENTS):
                raise QueryRefused("unsupported-construct", "unexpected keyword", _sql(node.parent or node))

    def _check_call(self, node: exp.Expr) -> None:
        name = node.fname
        if name == "unix_timestamp" and not node.expressions:
            raise QueryRefused(
                "nondeterministic-function", "unix_timestamp() without arguments reads the clock", _sql(node)
            )
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
                    _sql(node),
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
                        _sql(node),
                    )
                raise QueryRefused("invalid-window", f"{name} needs OVER (…)", _sql(node))

    def _check_window(self, window: exp.Window) -> None:
        if window.args.get("alias") or window.args.get("over") not in (None, "", "OVER") or window.args.get("first"):
            raise QueryRefused(
                "unsupported-construct", "named windows are not supported: write the window inline", _sql(window)
            )
        func = _unwrap_nulls(window.this)
        name = func.fname if isinstance(func, (SparkCall, SparkAggCall)) else None
        has_order = bool(window.args.get("order"))
        spec = window.args.get("spec")
        rows = spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS"
        if spec is not None and spec.args.get("exclude"):
            raise QueryRefused("unsupported-construct", "frame EXCLUDE is not supported", _sql(window))
        if name is None or (isinstance(func, SparkCall) and name not in allowlist.WINDOW_FUNCTIONS):
            raise QueryRefused("invalid-window", "only window and aggregate functions take OVER", _sql(window))
        if name in allowlist.RANKING_WINDOW_FUNCTIONS or name in allowlist.ROW_WINDOW_FUNCTIONS:
            if not has_order:
                raise QueryRefused("unordered-window", f"{name} needs ORDER BY in its window", _sql(window))
        elif name in allowlist.VALUE_WINDOW_FUNCTIONS:
            if not has_order or not rows:
                raise QueryRefused(
                    "unordered-window",
                    f"{name} depends on the order of ties: it needs ORDER BY and a ROWS frame",
                    _sql(window),
                )
        elif _window_kind(window) == "complete" and not has_order:
            raise QueryRefused("unordered-window", "a ROWS frame needs ORDER BY in its window", _sql(window))

    def _check_table(self, table: exp.Table) -> None:
        if not isinstance(table.this, exp.Identifier):
            raise QueryRefused(
                "table-function", "table functions are not allowed; read declared inputs only", _sql(table)
            )
        db, catalog = table.args.get("db"), table.args.get("catalog")
        if db or catalog:
            qualifier = (db.name if isinstance(db, exp.Identifier) else "").lower()
            if qualifier in allowlist.FILE_FORMATS or "/" in table.name or ":" in table.name:
                raise QueryRefused(
                    "file-table", "reading files directly is not allowed; read declared inputs only", _sql(table)
                )
            raise QueryRefused(
                "qualified-table", "schema-qualified tables are not allowed; read declared inputs only", _sql(table)
            )
        for key, value in table.args.items():
            if key in ("this", "alias", "db", "catalog") or not value:
                continue
            if key == "sample":
                raise QueryRefused("forbidden-clause", "TABLESAMPLE reads a random sample", _sql(table))
            if key in ("version", "system_time", "changes", "when"):
                raise QueryRefused("forbidden-clause", "time travel is not allowed", _sql(table))
            if key == "hints":
                raise QueryRefused("forbidden-clause", "hints are not allowed", _sql(table))
            raise QueryRefused("unsupported-construct", "this form of table reference is not supported", _sql(table))
        alias = table.args.get("alias")
        if alias is not None and alias.args.get("columns"):
            raise QueryRefused("unsupported-construct", "column aliases on a table are not supported", _sql(table))
        name = table.name.lower()
        if name not in self.by_key and name not in self.cte_names:
            declared = ", ".join(d.alias for d in self.declared) or "none"
            raise QueryRefused(
                "unknown-table", f"not a declared input (declared: {declared}) nor a CTE of the statement", table.name
            )

    def _refuse_function(self, node: exp.Expr) -> None:
        name = self._function_name(node)
        name = _SQLGLOT_NAMES.get(name, name)
        fragment = _sql(node)
        if name in allowlist.NONDETERMINISTIC_FUNCTIONS:
            raise QueryRefused(
                "nondeterministic-function", f"{name} does not give the same result on every run", fragment
            )
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

    def _function_name(self, node: exp.Expr) -> str:
        meta = node.meta if node.meta else {}
        start, end = meta.get("start"), meta.get("end")
        if isinstance(start, int) and isinstance(end, int):
            text = self.sql[start : end + 1]
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
                return text.lower()
        if isinstance(node, (exp.Anonymous, exp.AnonymousAggFunc)):
            return str(node.name).lower()
        try:
            return node.sql_name().lower()
        except Exception:  # noqa: BLE001
            return type(node).__name__.lower()

    # -- qualification ---------------------------------------------------------------------------------

    def _prepare(self, root: exp.Expr) -> None:
        """Bind input tables to internal names and remember what qualify would lose (display names, case)."""
        for table in list(root.find_all(exp.Table)):
            key = table.name.lower()
            if key in self.by_key:
                if table.args.get("alias") is None:
                    table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
                table.set("this", _ident(f"__in{self.by_key[key]}"))
        for select in root.find_all(exp.Select):
            for projection in select.expressions:
                if isinstance(projection, exp.Alias):
                    projection.meta["cairn_display"] = projection.alias
                elif not isinstance(projection, (exp.Column, exp.Star)):
                    projection.meta["cairn_display"] = _sql(projection)
        # Field names are part of a result's type: keep their case through identifier normalization.
        for ident in root.find_all(exp.Identifier):
            parent = ident.parent
            if isinstance(parent, exp.ColumnDef) or (
                isinstance(parent, (exp.Alias, exp.PropertyEQ)) and isinstance(parent.parent, exp.Struct)
            ):
                ident.meta["cairn_case"] = ident.this

    def _qualify(self, root: exp.Expr) -> exp.Expr:
        mapping = {
            f"__in{i}": {name: _sqlglot_type(t) for name, t in zip(d.keys, d.types)}
            for i, d in enumerate(self.declared)
        }
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
            self._refuse_unresolved(str(e))
        except SqlglotError as e:
            raise QueryRefused("unsupported-construct", f"cannot resolve the statement ({e})", self.sql) from None
        except RecursionError:
            raise
        except Exception as e:  # noqa: BLE001 - sqlglot's optimizer on a statement it does not expect
            raise QueryRefused(
                "unsupported-construct", f"cannot resolve the statement ({type(e).__name__})", self.sql
            ) from None
        for ident in root.find_all(exp.Identifier):
            original = ident.meta.get("cairn_case") if ident.meta else None
            if original is not None:
                ident.set("this", original)
        return root

    def _refuse_unresolved(self, message: str) -> None:
        m = re.search(r"Column '([^']*)' could not be resolved", message)
        if m:
            name = m.group(1).lower()
            holders = [d.alias for d in self.declared if name in d.keys]
            if len(holders) > 1:
                raise QueryRefused(
                    "ambiguous-column", f"column is in several inputs ({', '.join(holders)}): qualify it", m.group(1)
                )
            raise QueryRefused("unknown-column", "no input or CTE in scope has this column", m.group(1))
        first_line = message.splitlines()[0] if message else "cannot resolve the statement"
        if "table" in first_line.lower():
            raise QueryRefused("unknown-table", first_line, self.sql)
        raise QueryRefused("unknown-column", first_line, self.sql)

    # -- the rewrite -----------------------------------------------------------------------------------

    def _rewrite(self, root: exp.Expr) -> CanonicalQuery:
        root_scope = build_scope(root)
        if root_scope is None:
            raise QueryRefused("unsupported-construct", "cannot find the query's scopes", self.sql)
        scopes = list(root_scope.traverse())

        # Occurrences: every table reference (input or CTE) and every derived table.
        input_occ: dict[int, list[exp.Table]] = {}
        cte_occ: dict[str, list[exp.Table]] = {name: [] for name in self.cte_names}
        derived: list[exp.Subquery] = []
        occ_kind: dict[int, tuple[str, Any]] = {}  # id(occurrence) -> ("input", i) | ("cte", name) | ("derived", Scope)
        for scope in scopes:
            for table in scope.tables:
                if id(table) in occ_kind:
                    continue
                if table.name.startswith("__in") and table.name[4:].isdigit():
                    i = int(table.name[4:])
                    input_occ.setdefault(i, []).append(table)
                    occ_kind[id(table)] = ("input", i)
                elif table.name.lower() in cte_occ:
                    cte_occ[table.name.lower()].append(table)
                    occ_kind[id(table)] = ("cte", table.name.lower())
                else:
                    raise QueryRefused("unknown-table", "not a declared input nor a CTE in scope", table.name)
        for scope in scopes:
            for sub in scope.derived_tables:
                if id(sub) not in occ_kind:
                    derived.append(sub)
                    occ_kind[id(sub)] = ("derived", None)

        unused = [d.alias for i, d in enumerate(self.declared) if i not in input_occ]
        if unused:
            raise QueryRefused("unused-input", "every declared input must be read by the statement", ", ".join(unused))
        unused_ctes = [self.cte_names[name].alias_or_name for name, refs in cte_occ.items() if not refs]
        if unused_ctes:
            raise QueryRefused("unused-cte", "every CTE must be used", ", ".join(unused_ctes))

        # Phase A: resolve every column (by position), alias reference and source, before renaming anything.
        col_plan: list[tuple[exp.Column, exp.Expr, int]] = []  # (column, occurrence, position)
        alias_refs: list[tuple[exp.Column, int]] = []
        visible: dict[int, list[exp.Expr]] = {}  # id(select) -> occurrences whose columns it sees
        source_scope: dict[int, Scope] = {}  # id(CTE reference or derived table) -> the scope it reads
        occ_by_alias: dict[int, dict[str, exp.Expr]] = {}
        for scope in scopes:
            occ_by_alias[id(scope)] = {t.alias_or_name: t for t in scope.tables}
            occ_by_alias[id(scope)].update({s.alias: s for s in scope.derived_tables})
            for name, source in scope.sources.items():
                node = occ_by_alias[id(scope)].get(name)
                if isinstance(source, Scope) and node is not None:
                    source_scope[id(node)] = source

        for scope in scopes:
            expression = scope.expression
            if isinstance(expression, exp.Select):
                visible[id(expression)] = self._visible_occurrences(expression, occ_by_alias[id(scope)])
            for node in walk_in_scope(expression):
                if not isinstance(node, exp.Column):
                    continue
                if not isinstance(node.this, exp.Identifier):
                    raise QueryRefused("unsupported-construct", "a star could not be expanded here", _sql(node))
                if node.args.get("db") or node.args.get("catalog"):
                    raise QueryRefused("unknown-column", "cannot resolve this reference", _sql(node))
                if _lambda_bound(node, expression):
                    continue
                qualifier = node.table
                if not qualifier:
                    alias_refs.append((node, self._alias_position(node, expression)))
                    continue
                found: tuple[exp.Expr, Any] | None = None
                s: Scope | None = scope
                while s is not None:
                    if qualifier in s.sources:
                        found = (occ_by_alias[id(s)].get(qualifier), s.sources[qualifier])
                        break
                    s = s.parent
                if found is None or found[0] is None:
                    raise QueryRefused("unknown-column", "cannot resolve this reference", _sql(node))
                occurrence, source = found
                kind, info = occ_kind[id(occurrence)]
                if kind == "input":
                    try:
                        position = self.declared[info].keys.index(node.name.lower())
                    except ValueError:
                        raise QueryRefused("unknown-column", "no such column in the input", _sql(node)) from None
                else:
                    names = list(source.expression.named_selects) if isinstance(source, Scope) else []
                    matches = [k for k, n in enumerate(names) if n == node.name]
                    if len(matches) != 1:
                        rule = "ambiguous-column" if matches else "unknown-column"
                        raise QueryRefused(rule, "cannot resolve this reference to a single column", _sql(node))
                    position = matches[0]
                col_plan.append((node, occurrence, position))

        # The clock and float-format rules need the input columns' types (docs/queries.md).
        typed = {id(c): self.declared[occ_kind[id(o)][1]].types[p] for c, o, p in col_plan if occ_kind[id(o)][0] == "input"}
        clock.check(root, lambda column: typed.get(id(column)))
        environment.check(root, lambda column: typed.get(id(column)))

        # Display names of every query's outputs (inner first), for output_names.
        display: dict[int, list[str]] = {}
        col_target = {id(col): (occ, pos) for col, occ, pos in col_plan}
        for scope in scopes:
            expression = scope.expression
            if isinstance(expression, exp.Select):
                display[id(expression)] = [
                    self._display_name(p, col_target, occ_kind, source_scope, display) for p in expression.expressions
                ]
            elif isinstance(expression, (exp.SetOperation, exp.Subquery)):
                display[id(expression)] = display.get(id(_leftmost_select(expression)), [])
        output_names = tuple(display.get(id(_leftmost_select(root)), []))

        # Phase B: order of first appearance, read off the generated text with placeholder names. The nonce
        # keeps a user's own identifiers from posing as placeholders; it never reaches the output.
        nonce = secrets.token_hex(6)
        all_tables = [t for occs in input_occ.values() for t in occs] + [t for occs in cte_occ.values() for t in occs]
        ctes = list(self.cte_names.values())
        placeholder: dict[str, exp.Expr] = {}
        for prefix, nodes in (("t", all_tables), ("c", ctes), ("d", derived)):
            for n, node in enumerate(nodes):
                name = f"__cq{nonce}{prefix}{n}"
                placeholder[name] = node
                if isinstance(node, exp.Table):
                    node.set("this", _ident(name))
                else:
                    node.set("alias", exp.TableAlias(this=_ident(name)))
        first_seen: dict[int, int] = {}
        for position, token in enumerate(DIALECT.tokenize(root.sql(dialect=DIALECT))):
            if token.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and token.text in placeholder:
                first_seen.setdefault(id(placeholder[token.text]), position)

        def seen(node: exp.Expr) -> int:
            return first_seen.get(id(node), 1 << 62)

        # Phase C: final names.
        qualifier_of: dict[int, str] = {}
        input_order = sorted(input_occ, key=lambda i: min(seen(t) for t in input_occ[i]))
        for rank, i in enumerate(input_order):
            self._name_occurrences(sorted(input_occ[i], key=seen), abstract_table_name(rank), qualifier_of)
        cte_order = sorted(ctes, key=seen)
        cte_final = {}
        for rank, cte in enumerate(cte_order):
            name = f"cte{rank}"
            cte_final[id(cte)] = name
            cte.set("alias", exp.TableAlias(this=_ident(name)))
        for key, cte in self.cte_names.items():
            self._name_occurrences(sorted(cte_occ[key], key=seen), cte_final[id(cte)], qualifier_of)
        for rank, sub in enumerate(sorted(derived, key=seen)):
            name = f"sub{rank}"
            sub.set("alias", exp.TableAlias(this=_ident(name)))
            qualifier_of[id(sub)] = name

        for col, occurrence, position in col_plan:
            is_input = occ_kind[id(occurrence)][0] == "input"
            col.set("this", _ident(f"col_{position}" if is_input else f"_{position}"))
            col.set("table", _ident(qualifier_of[id(occurrence)]))
        for col, k in alias_refs:
            col.set("this", _ident(f"_{k}"))
            col.set("table", None)
        for select in list(root.find_all(exp.Select)):
            for k, projection in enumerate(list(select.expressions)):
                if isinstance(projection, exp.Alias):
                    projection.set("alias", _ident(f"_{k}"))
                else:
                    alias = exp.Alias(alias=_ident(f"_{k}"))
                    projection.replace(alias)
                    alias.set("this", projection)

        _rename_lambdas(root)
        self._normalize_spelling(root)

        # Order: complete every ORDER BY and every order-sensitive window to a total order.
        input_column = {  # id(column node) -> (input index, position), for columns read straight from an input
            id(col): (occ_kind[id(occ)][1], pos) for col, occ, pos in col_plan if occ_kind[id(occ)][0] == "input"
        }
        order_by = self._complete_orders(root, input_column)
        self._complete_windows(root, visible, qualifier_of, occ_kind, source_scope)

        _normalize_identifiers(root)
        _post_check(root)
        try:
            statement = root.sql(dialect=DIALECT, comments=False)
        except SqlglotError as e:
            raise QueryRefused("unsupported-construct", f"cannot write the canonical form ({e})", self.sql) from None
        if "${" in statement:  # Spark substitutes ${…} anywhere in the text, strings included
            raise QueryRefused(
                "outside-reach", "${…} is Spark variable substitution", statement[statement.index("${") :]
            )
        return CanonicalQuery(
            statement=statement,
            inputs=tuple(self.declared[i].alias for i in input_order),
            input_types=tuple(self.declared[i].types for i in input_order),
            output_names=output_names,
            order_by=order_by,
        )

    # -- rewrite helpers ------------------------------------------------------------------------------

    @staticmethod
    def _name_occurrences(occurrences: list[exp.Table], base: str, qualifier_of: dict[int, str]) -> None:
        for m, table in enumerate(occurrences):
            table.set("this", _ident(base))
            if len(occurrences) == 1:
                table.set("alias", None)
                qualifier_of[id(table)] = base
            else:
                alias = f"{base}_{m}"
                table.set("alias", exp.TableAlias(this=_ident(alias)))
                qualifier_of[id(table)] = alias

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
            projections = list(_leftmost_select(query).expressions)
        else:
            projections = []
        matches = [k for k, p in enumerate(projections) if p.alias_or_name == column.name]
        if not matches:
            raise QueryRefused("unknown-column", "no input, CTE or output in scope has this column", column.name)
        inner = {_sql(p.this if isinstance(p, exp.Alias) else p) for k, p in enumerate(projections) if k in matches}
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
                return self.declared[info].names[position]
            scope = source_scope.get(id(occurrence))
            if scope is not None:
                names = display.get(id(_leftmost_select(scope.expression)), [])
                if position < len(names):
                    return names[position]
        if isinstance(inner, exp.Dot):
            return inner.expression.name if isinstance(inner.expression, exp.Identifier) else _sql(inner)
        return projection.alias_or_name

    def _normalize_spelling(self, root: exp.Expr) -> None:
        for literal in list(root.find_all(exp.Literal)):
            if not literal.is_string:
                literal.set("this", _normalize_number(str(literal.this)))
        for join in list(root.find_all(exp.Join)):  # JOIN = INNER JOIN, LEFT JOIN = LEFT OUTER JOIN, …
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
        for sub in list(root.find_all(exp.Subquery)):  # (SELECT …) UNION (SELECT …) = SELECT … UNION SELECT …
            if (
                isinstance(sub.parent, exp.SetOperation)
                and isinstance(sub.this, exp.Select)
                and not any(v for k, v in sub.args.items() if k != "this")
                and not any(sub.this.args.get(k) for k in ("order", "limit", "offset", "with_"))
            ):
                sub.replace(sub.this)
        for ordered in list(root.find_all(exp.Ordered)):  # ASC is the default: never written
            if not ordered.args.get("desc"):
                ordered.set("desc", None)
        for hexstring in list(root.find_all(exp.HexString)):
            hexstring.set("this", str(hexstring.this).upper())
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

    def _complete_orders(self, root: exp.Expr, input_column: dict[int, tuple[int, int]]) -> tuple[SortKey, ...] | None:
        top: tuple[SortKey, ...] | None = None
        for query in list(root.find_all(exp.Select, exp.SetOperation, exp.Subquery)):
            order = query.args.get("order")
            if not order:
                continue
            select = _leftmost_select(query)
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
                        raise QueryRefused("unknown-column", "ORDER BY position is not in the select list", _sql(this))
                    this = exp.column(f"_{position}")
                    ordered.set("this", this)
                k = _output_ref(this)
                entries = False
                if (
                    k is None
                    and isinstance(this, SparkCall)
                    and this.fname == "map_entries"
                    and len(this.expressions) == 1
                ):
                    k = _output_ref(this.expressions[0])
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
                type_string = self.declared[source[0]].types[source[1]] if source is not None else ""
                how = _sort_key_for(type_string, exp.column(f"_{k}"))
                if how is None:
                    skipped.append(k)  # Spark cannot sort it (a map inside another type)
                    continue
                order.append("expressions", exp.Ordered(this=how[0], nulls_first=True))
                keys.append(SortKey(k, False, True, how[1]))
            if skipped and (query.args.get("limit") or query.args.get("offset")):
                raise QueryRefused(
                    "unordered-limit", "the order cannot be made total: an output is a map", _sql(outputs[skipped[0]])
                )
            if query is root:
                top = tuple(keys)
        return top

    def _complete_windows(
        self,
        root: exp.Expr,
        visible: dict[int, list[exp.Expr]],
        qualifier_of: dict[int, str],
        occ_kind: dict[int, tuple[str, Any]],
        source_scope: dict[int, Scope],
    ) -> None:
        for window in list(root.find_all(exp.Window)):
            if _window_kind(window) != "complete":
                continue
            select = window.find_ancestor(exp.Select)
            if select is None:
                raise QueryRefused("unordered-window", "cannot complete the window's order", _sql(window))
            tiebreakers: list[exp.Expr] = []
            group = select.args.get("group")
            if group is not None:
                if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")) or any(
                    isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions
                ):
                    raise QueryRefused(
                        "unordered-window",
                        "cannot make a window order total over ROLLUP/CUBE/GROUPING SETS",
                        _sql(window),
                    )
                tiebreakers = [e.copy() for e in group.expressions]
            elif not _is_aggregate_select(select):
                for occurrence in visible.get(id(select), []):
                    kind, info = occ_kind[id(occurrence)]
                    qualifier = qualifier_of[id(occurrence)]
                    if kind == "input":
                        for j, type_string in enumerate(self.declared[info].types):
                            how = _sort_key_for(type_string, exp.column(f"col_{j}", table=qualifier))
                            if how is None:
                                raise QueryRefused(
                                    "unordered-window",
                                    "cannot make the window order total: an input column holds a nested map",
                                    _sql(window),
                                )
                            tiebreakers.append(how[0])
                    else:
                        scope = source_scope.get(id(occurrence))
                        count = len(_leftmost_select(scope.expression).expressions) if scope is not None else 0
                        tiebreakers.extend(exp.column(f"_{k}", table=qualifier) for k in range(count))
            order = window.args["order"]
            have = {o.this.sql(dialect=DIALECT) for o in order.expressions}
            have |= {e.sql(dialect=DIALECT) for e in window.args.get("partition_by") or []}
            for expression in tiebreakers:
                text = expression.sql(dialect=DIALECT)
                if text not in have:
                    have.add(text)
                    order.append("expressions", exp.Ordered(this=expression, nulls_first=True))


# --- module helpers ---------------------------------------------------------------------------------


def _describe(node: exp.Expr) -> str:
    name = type(node).__name__
    return {
        "Lateral": "LATERAL VIEW",
        "Values": "VALUES",
        "Unnest": "UNNEST",
        "Pivot": "PIVOT",
    }.get(name, f"{name} ({_sql(node)[:40]})")


def _strip_comments(sql: str) -> str:
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


def _lambda_bound(node: exp.Column, stop: exp.Expr) -> bool:
    if node.table:
        return False
    parent = node.parent
    while parent is not None and parent is not stop:
        if isinstance(parent, exp.Lambda) and any(p.name == node.name for p in parent.expressions):
            return True
        parent = parent.parent
    return False


def _rename_lambdas(root: exp.Expr) -> None:
    def visit(node: exp.Expr, env: dict[str, str], depth: int) -> None:
        if isinstance(node, exp.Lambda):
            env = dict(env)
            params = []
            for i, param in enumerate(node.expressions):
                new = f"x{depth}_{i}"
                env[param.name] = new
                params.append(_ident(new))
            node.set("expressions", params)
            visit(node.this, env, depth + 1)
            return
        if env and isinstance(node, exp.Column) and not node.table and node.name in env:
            node.set("this", _ident(env[node.name]))
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


def _post_check(root: exp.Expr) -> None:
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
                "unsupported-construct", "the rewrite produced something outside the allowlist", _sql(node)
            )


def _normalize_identifiers(root: exp.Expr) -> None:
    """Quote an identifier exactly when Spark needs it."""
    for ident in root.find_all(exp.Identifier):
        name = str(ident.this)
        ident.set("quoted", not _SAFE_IDENTIFIER.match(name) or name.lower() in _KEYWORDS)
