"""The second wall behind the canonicalizer: Spark's own analyzed plan, checked before a job runs.

The canonicalizer types what it can see in the SQL text; Spark's analyzer adds the casts it needs (``d < 'today'``
becomes ``d < CAST('today' AS DATE)``), so here every cast is visible. The plan is checked as the optimizer first
sees it: after ``ReplaceExpressions`` (``to_date('today')`` is then ``CAST('today' AS DATE)``), the step before
``SpecialDatetimeValues`` reads the clock. Refused (docs/queries.md "Environment"):

- ``clock-value``: ``SpecialDatetimeValues`` would change the plan (Spark's own rule, exactly); a constant string
  cast to DATE/TIMESTAMP/TIMESTAMP_NTZ that is not a literal in a fixed format; any string expression cast to
  TIMESTAMP (time-only values such as ``'12:00'`` take today's date);
- ``nondeterministic-function``: an expression class that reads the clock, randomness, the session or the files
  (``CurrentDate``, ``Rand``, ``InputFileName``…), whatever SQL spelled it;
- ``float-format``: a FLOAT/DOUBLE cast to a string (Java's ``Double.toString`` changed in JDK 19, JDK-4511638).

Imports nothing from the node: the rules it shares with the canonicalizer are restated here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_EXPR = "org.apache.spark.sql.catalyst.expressions."

# The fixed forms node/domain/sql/clock_rule.py accepts (keep the two in step).
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIME = r"[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
FIXED_FORMS = re.compile(rf"{_DATE}(?:[ T]{_TIME}(?:Z|[+-][0-9]{{2}}:[0-9]{{2}})?)?")

DATETIME_TYPES = frozenset({"date", "timestamp", "timestamp_ntz"})

#: Expression classes (simple names) whose value depends on when, where or by whom a query runs.
NONDETERMINISTIC_CLASSES = frozenset(
    """
    CurrentDate CurrentTimestamp Now LocalTimestamp CurrentTime LocalTime CurrentTimeZone CurrentUser
    CurrentDatabase CurrentCatalog SessionUser SparkVersion Rand Randn Uniform RandStr Uuid Shuffle
    MonotonicallyIncreasingID SparkPartitionID InputFileName InputFileBlockStart InputFileBlockLength
    """.split()
)

#: Classes whose value is a boolean or a number whatever their inputs: they end a "is this a string" search.
_NOT_STRING = frozenset(
    """
    EqualTo EqualNullSafe LessThan LessThanOrEqual GreaterThan GreaterThanOrEqual And Or Not In InSet IsNull
    IsNotNull Like ILike RLike StartsWith EndsWith Contains Length OctetLength BitLength StringInstr StringLocate
    Levenshtein Ascii TruncTimestamp TruncDate TimeAdd DateAdd DateSub DateAddInterval DatetimeSub
    TimestampAddYMInterval TimestampAddInterval AddMonths MakeDate MakeTimestamp MakeInterval ParseToDate
    ParseToTimestamp GetTimestamp ToUnixTimestamp UnixTimestamp DateDiff MonthsBetween Year Month Quarter DayOfMonth
    DayOfWeek DayOfYear WeekDay WeekOfYear Hour Minute Second Add Subtract Multiply Divide IntegralDivide Remainder
    Pmod UnaryMinus Abs
    """.split()
)
_COLUMNS = frozenset({"AttributeReference", "OuterReference", "BoundReference", "NamedLambdaVariable"})


class Refused(Exception):
    """The plan can give a different answer depending on when, where or by whom it runs."""

    def __init__(self, rule: str, why: str) -> None:
        super().__init__(f"query refused ({rule}): {why}")
        self.rule = rule


@dataclass
class Node:
    """One expression or plan node of Spark's JSON plan, with its children."""

    fields: dict[str, Any]
    children: list[Node] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.fields.get("class", "")).rsplit(".", 1)[-1]

    @property
    def data_type(self) -> Any:
        return self.fields.get("dataType")

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()


def check(spark: Any, df: Any) -> None:
    """Raise :class:`Refused` if ``df``'s plan can read the clock, the session or the machine."""
    jvm = spark._jvm
    plan = df._jdf.queryExecution().analyzed()
    plan = _rule(jvm, "ReplaceExpressions").apply(plan)
    if not _rule(jvm, "SpecialDatetimeValues").apply(plan).fastEquals(plan):
        raise Refused("clock-value", "Spark would replace a date/time string by the current date or time")
    check_json(plan.toJSON())


def _rule(jvm: Any, name: str) -> Any:
    """A Scala object of Spark's optimizer (``ReplaceExpressions$.MODULE$``)."""
    return getattr(getattr(jvm.org.apache.spark.sql.catalyst.optimizer, f"{name}$"), "MODULE$")


def check_json(text: str) -> None:
    """The checks that need only the plan's JSON (``TreeNode.toJSON``): each tree, subqueries included."""
    for root in trees(json.loads(text)):
        for node in root.walk():
            check_node(node)


def trees(value: Any) -> Iterator[Node]:
    """Every tree serialized anywhere in ``value``: a list of nodes in pre-order with ``num-children``."""
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and "class" in v and "num-children" in v for v in value):
            position = 0
            while position < len(value):
                root, position = _build(value, position)
                yield root
            for node in value:
                for key, inner in node.items():
                    if key not in ("class", "num-children"):
                        yield from trees(inner)
            return
        for item in value:
            yield from trees(item)
    elif isinstance(value, dict):
        for inner in value.values():
            yield from trees(inner)


def _build(nodes: list[dict[str, Any]], position: int) -> tuple[Node, int]:
    node = Node(nodes[position])
    position += 1
    for _ in range(int(nodes[position - 1].get("num-children") or 0)):
        child, position = _build(nodes, position)
        node.children.append(child)
    return node, position


def check_node(node: Node) -> None:
    kind = node.kind
    if kind in NONDETERMINISTIC_CLASSES:
        raise Refused("nondeterministic-function", f"{kind} does not give the same result on every run")
    if kind != "Cast" or not node.children:
        return
    child, target = node.children[0], node.data_type
    if target in DATETIME_TYPES:
        _check_datetime_cast(child, str(target))
    elif target == "string" and _has_float(child.data_type):
        raise Refused(
            "float-format",
            "FLOAT/DOUBLE as text depends on the JVM's Double.toString (it changed in JDK 19); "
            "use format_number(x, d) or a DECIMAL cast",
        )


def _check_datetime_cast(child: Node, target: str) -> None:
    if child.kind == "Literal":
        value = child.fields.get("value")
        if child.data_type == "string" and value is not None and not FIXED_FORMS.fullmatch(str(value)):
            raise Refused(
                "clock-value",
                f"the string {str(value)[:40]!r} reaching {target.upper()} is not a "
                "fixed-format date/time (yyyy-MM-dd[ HH:mm[:ss[.f]]][Z|±HH:mm])",
            )
        return
    if not is_string(child):
        return
    if is_constant(child):
        raise Refused("clock-value", f"a computed string reaching {target.upper()} could be read from the clock")
    if target == "timestamp":
        raise Refused(
            "clock-value",
            "a string cast to TIMESTAMP takes today's date for time-only values "
            "('12:00'); use to_timestamp(s, 'pattern')",
        )


def is_string(node: Node) -> bool:
    """Whether ``node``'s value is a string, as far as the JSON tells (types of literals, columns and casts)."""
    data_type = node.data_type
    if data_type is not None and node.kind in ("Literal", "Cast", *_COLUMNS):
        return isinstance(data_type, str) and data_type.startswith("string")
    if node.kind in _NOT_STRING or node.kind in NONDETERMINISTIC_CLASSES:
        return False
    return any(is_string(c) for c in node.children)


def is_constant(node: Node) -> bool:
    """No column and no subquery inside: the optimizer may fold it."""
    return not any(n.kind in _COLUMNS or "plan" in n.fields for n in node.walk())


def _has_float(data_type: Any) -> bool:
    return data_type in ("float", "double") or (
        isinstance(data_type, dict) and re.search(r'"(float|double)"', json.dumps(data_type)) is not None
    )
