"""The sqlglot dialect the canonicalizer reads and writes: Spark SQL, with allowlisted functions kept verbatim.

sqlglot's own Spark dialect turns many function calls into generic expressions and back (``date_format`` format
strings go through a strftime mapping, ``to_date(s, 'yyyy-MM-dd HH:mm:ss')`` loses its format, ``date_trunc``
units are renamed…). Round trips like these could change what Spark computes, so every function on the
allowlist is parsed into a :class:`SparkCall` / :class:`SparkAggCall` holding its (upper-case, synonym-resolved)
name and its arguments, and written back exactly so. Functions that are not on the allowlist keep sqlglot's
parsing, so the rules can say what they are (``Rand``, ``Anonymous``…) and refuse them.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.generators.spark import SparkGenerator
from sqlglot.parsers.spark import SparkParser

from node.domain.sql import allowlist


class SparkCall(exp.Expression, exp.Func):
    """A call of an allowlisted Spark scalar or window function: ``this`` is the upper-case name."""

    arg_types = {"this": True, "expressions": False}
    is_var_len_args = True

    @property
    def name(self) -> str:
        return str(self.this)

    @property
    def fname(self) -> str:
        """The Spark function name, lower case (after synonyms)."""
        return str(self.this).lower()


class SparkAggCall(exp.Expression, exp.AggFunc):
    """A call of an allowlisted Spark aggregate function: ``this`` is the upper-case name."""

    arg_types = {"this": True, "expressions": False}
    is_var_len_args = True

    @property
    def name(self) -> str:
        return str(self.this)

    @property
    def fname(self) -> str:
        return str(self.this).lower()


def _builder(cls: type[exp.Expression], name: str) -> t.Callable[[list[exp.Expr]], exp.Expr]:
    canonical = allowlist.SYNONYMS.get(name, name).upper()

    def build(args: list[exp.Expr]) -> exp.Expr:
        return cls(this=canonical, expressions=list(args))

    return build


_SCALARS = allowlist.SCALAR_FUNCTIONS | allowlist.WINDOW_FUNCTIONS
_AGGREGATES = allowlist.AGGREGATE_FUNCTIONS | allowlist.COLLECTING_AGGREGATES
# sqlglot parses these with special-purpose parsers; Spark has no special syntax for them: parse verbatim.
_VERBATIM_OVER_SPECIAL = {"CEIL", "FLOOR", "CHAR", "CHR", "INITCAP", "DECODE", "PERCENTILE"}


class CairnSparkParser(SparkParser):
    FUNCTIONS = {
        **SparkParser.FUNCTIONS,
        **{name.upper(): _builder(SparkCall, name) for name in sorted(_SCALARS)},
        **{name.upper(): _builder(SparkAggCall, name) for name in sorted(_AGGREGATES)},
    }
    FUNCTION_PARSERS = {k: v for k, v in SparkParser.FUNCTION_PARSERS.items() if k not in _VERBATIM_OVER_SPECIAL}


def _call_sql(self: SparkGenerator, expression: exp.Expr) -> str:
    return self.func(str(expression.this), *expression.expressions)


class CairnSparkGenerator(SparkGenerator):
    TRANSFORMS = {**SparkGenerator.TRANSFORMS, SparkCall: _call_sql, SparkAggCall: _call_sql}


class CairnSpark(Spark):
    """Spark SQL as the canonicalizer reads and writes it (registered in sqlglot as ``cairnspark``)."""

    class Tokenizer(Spark.Tokenizer):
        # Spark 4 reads a doubled quote inside a string as one quote ('it''s' is "it's"); sqlglot's Spark
        # dialect reads it as two adjacent literals ('it' 's' = "its").
        STRING_ESCAPES = ["\\", "'", '"']

    Parser = CairnSparkParser
    Generator = CairnSparkGenerator


DIALECT = CairnSpark()
