"""Which Spark failures are facts about the question (recorded and reused), and which are accidents of one run.

docs/queries.md "Recorded failures": a deterministic failure is kept and reused like a result, so that asking again
does not run the same failing job again. A failure is recorded only when Spark names an error
class on this allowlist: runtime errors that ANSI mode raises from the values alone (arithmetic, casts, indexes,
datetime fields), so the same statement over the same input content fails the same way on every run of the
pinned engine profile (DESIGN.md "Engine profile": ANSI is pinned). The class names are Spark's error conditions
(``error/error-conditions.json`` in ``spark-common-utils``, Spark 4.3; their SQLSTATE in the comment). Anything
else (out of memory, a worker killed, timeouts, budgets, cancellations, an unknown class) is never recorded: an
allowlist, never a blocklist, as for the canonicalizer's functions (DESIGN.md "Deterministic queries").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.adapters.index import ExecutionRow
from node.support.errors import CairnError, RecordedFailure, SparkError

DETERMINISTIC: frozenset[str] = frozenset(
    {
        "DIVIDE_BY_ZERO",  # 22012
        "INTERVAL_DIVIDED_BY_ZERO",  # 22012
        "ARITHMETIC_OVERFLOW",  # 22003
        "BINARY_ARITHMETIC_OVERFLOW",  # 22003
        "INTERVAL_ARITHMETIC_OVERFLOW",  # 22015
        "NUMERIC_VALUE_OUT_OF_RANGE",  # 22003
        "NUMERIC_OUT_OF_SUPPORTED_RANGE",  # 22003
        "CAST_INVALID_INPUT",  # 22018
        "CAST_OVERFLOW",  # 22003
        "CONVERSION_INVALID_INPUT",  # 22018
        "INVALID_ARRAY_INDEX",  # 22003
        "INVALID_ARRAY_INDEX_IN_ELEMENT_AT",  # 22003
        "INVALID_INDEX_OF_ZERO",  # 22003
        "DATETIME_OVERFLOW",  # 22008
        "DATETIME_FIELD_OUT_OF_BOUNDS",  # 22023
        "INVALID_FRACTION_OF_SECOND",  # 22023
        "CANNOT_PARSE_TIMESTAMP",  # 22007
    }
)


def error_class(condition: str | None) -> str:
    """The top-level class of a Spark condition (``NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION`` → its first
    part): the allowlist names classes, their subclasses only say more of the same error."""
    return (condition or "").split(".", 1)[0]


def deterministic(e: SparkError) -> str | None:
    """The error class to record ``e`` under, or None when ``e`` is not a deterministic data error: only a
    ``runtime`` failure of the job (not a timeout, a dead worker, a cancellation, a budget or a refusal) whose
    class is on the allowlist."""
    if type(e) is not SparkError or e.kind != "runtime":
        return None  # SparkTimeout, SparkWorkerDied, SparkQueueFull, SparkRefused, …: accidents or policy
    cls = error_class(e.condition)
    return cls if cls in DETERMINISTIC else None


def recorded(cls: str) -> bool:
    """A peer's recorded failure is usable only for a class this node would record itself."""
    return cls in DETERMINISTIC


def recorded_failure(row: ExecutionRow, peer: Mapping[str, Any] | None, first: bool = False) -> RecordedFailure:
    """The one-line 4xx a recorded failure answers with (docs/queries.md "Recorded failures")."""
    f = row.failure
    if f is None:
        raise CairnError(f"execution {row.execution} is a result, not a recorded failure")
    by = f"recorded by peer signer {peer['signer']}" if peer else "failed here" if first else "recorded failure"
    return RecordedFailure(
        f"{by}: {f.error_class}{f' ({f.sqlstate})' if f.sqlstate else ''}: {f.message} [execution "
        f"{row.execution}, receipt {row.receipt}]; it fails the same way on these inputs: "
        f'--retry (API: "retry": true) computes it again',
        error_class=f.error_class,
        execution=row.execution,
        receipt=row.receipt,
    )
