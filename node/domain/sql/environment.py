"""Environment rules besides the clock (docs/queries.md "What a value may not depend on").

``float-format``: a FLOAT/DOUBLE turned into text is written by the JVM's ``Double.toString``, whose output changed
in JDK 19 (JDK-4511638: ``2.0E23`` instead of ``1.9999999999999998E23``), so the same query would give different
strings on peers with different Java versions. Refused when the canonicalizer can see it (an input column of a
floating type cast to a string, or concatenated); the worker's guard checks every cast in Spark's plan.
Write ``format_number(x, d)`` or ``CAST(CAST(x AS DECIMAL(p, s)) AS STRING)`` instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from node.domain.sql.dialect import DIALECT, SparkCall
from node.support.errors import QueryRefused

FLOAT_RULE = "float-format"
_FLOAT_TYPE = re.compile(r"\bfloat(16|32|64)\b")
_TEXT_TYPES = frozenset({exp.DType.TEXT, exp.DType.VARCHAR, exp.DType.CHAR, exp.DType.NVARCHAR, exp.DType.NCHAR})
_CONCATS = frozenset({"concat", "concat_ws"})

ColumnType = Callable[[exp.Column], "str | None"]


def check(root: exp.Expr, column_type: ColumnType) -> None:
    """Raise ``QueryRefused("float-format", …)`` where a floating-point input column becomes text."""
    for node in root.walk():
        if isinstance(node, exp.Cast) and isinstance(node.to, exp.DataType) and node.to.this in _TEXT_TYPES:
            operands = [node.this]
        elif isinstance(node, (exp.DPipe, exp.Concat)):
            operands = [node.this, node.expression] if isinstance(node, exp.DPipe) else list(node.expressions)
        elif isinstance(node, SparkCall) and node.fname in _CONCATS:
            operands = list(node.expressions)
        else:
            continue
        for operand in operands:
            while isinstance(operand, exp.Paren):
                operand = operand.this
            if isinstance(operand, exp.Column) and _FLOAT_TYPE.search(column_type(operand) or ""):
                raise QueryRefused(
                    FLOAT_RULE,
                    "FLOAT/DOUBLE as text depends on the JVM's Double.toString (it changed in JDK 19); "
                    "use format_number(x, d) or a DECIMAL cast",
                    node.sql(dialect=DIALECT, comments=False),
                )
