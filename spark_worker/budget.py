"""Per-query budgets the worker enforces (docs/spark.md "Budgets").

- ``plan_bytes``: the work a plan will do, estimated from Spark's optimized plan statistics
  (``LogicalPlan.stats.sizeInBytes``) before the job runs. Spark's own estimate of a join is the
  product of its sides' sizes even when the join has equal keys, which would refuse every TPC-H
  join; so the estimate here is: a relation's ``sizeInBytes`` at the leaves, the sum of the
  children elsewhere (what is scanned and shuffled), and the product of the children for a join
  without equal keys (a cartesian or nested-loop join pairs every row with every row). A 25-way
  CROSS JOIN of a 3-row table is refused here, before Spark runs anything.
- ``rows`` and ``bytes``: the result's row count and Arrow IPC size, checked before it is served.

Imports nothing from the node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from spark_worker.guard import Refused  # one refusal type: sent as kind "refused", the rule as condition


@dataclass(frozen=True)
class Limits:
    """0 (or absent) means no limit."""

    rows: int = 0
    bytes: int = 0
    plan_bytes: int = 0

    @classmethod
    def parse(cls, raw: Any) -> Limits:
        """From a run request's ``limits`` object; ValueError (one line) for a bad one."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or set(raw) - {"rows", "bytes", "plan_bytes"}:
            raise ValueError("run: 'limits' must be an object with rows, bytes and plan_bytes")
        for key, value in raw.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"run: limits.{key} must be a non-negative integer")
        return cls(**raw)


def _equi_join(jvm: Any, plan: Any) -> bool:
    extract = getattr(getattr(jvm.org.apache.spark.sql.catalyst.planning, "ExtractEquiJoinKeys$"), "MODULE$")
    return bool(extract.unapply(plan).isDefined())


def plan_work(jvm: Any, plan: Any) -> int:
    """The estimated bytes ``plan`` (a Catalyst LogicalPlan, optimized) scans, shuffles and pairs."""
    children = plan.children()
    kids = [plan_work(jvm, children.apply(i)) for i in range(children.size())]
    if not kids:
        size = plan.stats().sizeInBytes()  # a scala BigInt; py4j may already give a Python int
        return size if isinstance(size, int) else int(str(size.toString()))
    if plan.nodeName() == "Join" and not _equi_join(jvm, plan):
        return math.prod(max(k, 1) for k in kids)
    return sum(kids)


def check_plan(spark: Any, df: Any, limits: Limits) -> int:
    """Raise Refused if ``df``'s estimated work is above ``limits.plan_bytes``; the estimate otherwise."""
    if not limits.plan_bytes:
        return 0
    work = plan_work(spark._jvm, df._jdf.queryExecution().optimizedPlan())
    if work > limits.plan_bytes:
        raise Refused(
            "plan-too-large",
            f"Spark estimates this query's work at {_size(work)}, above spark.max_plan_bytes "
            f"({_size(limits.plan_bytes)}); join on equal keys or filter the inputs first",
        )
    return work


def check_result(rows: int, size: int, limits: Limits) -> None:
    if limits.rows and rows > limits.rows:
        raise Refused("result-rows", f"the result has {rows} rows, above spark.max_result_rows ({limits.rows})")
    if limits.bytes and size > limits.bytes:
        raise Refused(
            "result-bytes", f"the result is {_size(size)}, above spark.max_result_bytes ({_size(limits.bytes)})"
        )


def _size(n: int) -> str:
    if n >= 10**15:
        return f"about 10^{len(str(n)) - 1} bytes"
    return f"{n} bytes"
