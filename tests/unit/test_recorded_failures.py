"""Recorded failures (docs/queries.md "Recorded failures"): which Spark failures are recorded,
how a failure is written in rc_0/an_0 (optional keys: results keep their bytes) and kept in the index."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pyspark
import pytest

from node.adapters.identity import generate, public_key_from_did
from node.adapters.index import ExecutionRow, Index
from node.domain.model import Announcement, Failure, Receipt, block_of, decode, decode_object
from node.services.resolve.failures import DETERMINISTIC, deterministic, error_class
from node.services.resolve.resolver import recorded_failure
from node.support.errors import SparkError, SparkQueueFull, SparkRefused, SparkTimeout, SparkWorkerDied

LINK = block_of({"a": 1}).cid
DIV = Failure("DIVIDE_BY_ZERO", "22012", "[DIVIDE_BY_ZERO] Division by zero.")


def _spark_conditions() -> dict[str, dict[str, object]]:
    """Spark's own list of error conditions, from the jar the worker runs (the oracle for the allowlist)."""
    jars = Path(pyspark.__file__).parent / "jars"
    jar = next(jars.glob("spark-common-utils_*.jar"))
    with zipfile.ZipFile(jar) as z:
        loaded: dict[str, dict[str, object]] = json.loads(z.read("error/error-conditions.json"))
        return loaded


def test_the_allowlist_names_spark_data_errors_only() -> None:
    """Every class is one Spark 4.3 defines, with an SQLSTATE of class 22 (data exception): errors of the values."""
    conditions = _spark_conditions()
    for cls in DETERMINISTIC:
        assert cls in conditions, cls
        assert str(conditions[cls]["sqlState"]).startswith("22"), cls


@pytest.mark.parametrize(
    ("error", "recorded"),
    [
        (SparkError("x", kind="runtime", condition="DIVIDE_BY_ZERO", sqlstate="22012"), "DIVIDE_BY_ZERO"),
        (SparkError("x", kind="runtime", condition="CAST_INVALID_INPUT", sqlstate="22018"), "CAST_INVALID_INPUT"),
        (SparkError("x", condition="NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION"), "NUMERIC_VALUE_OUT_OF_RANGE"),
        (SparkError("x", kind="runtime", condition="ARITHMETIC_OVERFLOW"), "ARITHMETIC_OVERFLOW"),
        # Not facts about the question: never recorded.
        (SparkTimeout("the Spark job did not finish"), None),
        (SparkWorkerDied("the Spark JVM died (out of memory?)"), None),
        (SparkQueueFull("queue full"), None),
        (SparkRefused("result-rows over spark.max_result_rows", condition="result-rows"), None),
        (SparkError("job cancelled", kind="cancelled", condition="DIVIDE_BY_ZERO"), None),
        (SparkError("lost the worker", kind="worker"), None),
        (SparkError("x", kind="analysis", condition="UNRESOLVED_COLUMN.WITH_SUGGESTION"), None),
        (SparkError("x", kind="runtime", condition=None), None),
        (SparkError("x", kind="runtime", condition="TASK_WRITE_FAILED"), None),
        (SparkError("java.lang.OutOfMemoryError", kind="runtime"), None),
    ],
)
def test_classification(error: SparkError, recorded: str | None) -> None:
    assert deterministic(error) == recorded


def test_error_class_is_the_top_level_condition() -> None:
    assert error_class("A.B.C") == "A" and error_class(None) == "" and error_class("DIVIDE_BY_ZERO") == "DIVIDE_BY_ZERO"


def _receipt(failure: Failure | None = None) -> Receipt:
    return Receipt(
        LINK, LINK, "did:key:z6Mk", "2026-01-01T00:00:00Z", {"name": "spark"}, "", 0, LINK, (), {}, b"", LINK,
        failure=failure,
    )  # fmt: skip


def test_a_failure_receipt_and_announcement_round_trip_and_results_keep_their_bytes() -> None:
    failed = _receipt(DIV)
    assert decode_object(decode(block_of(failed).data)) == failed
    content = failed.to_ipld()["content"]["failure"]
    assert content == {"class": "DIVIDE_BY_ZERO", "sqlstate": "22012", "message": DIV.message}
    plain = _receipt()
    assert "failure" not in plain.to_ipld()["content"] and block_of(plain).cid != block_of(failed).cid
    key = generate()
    signed = Receipt(**{**failed.__dict__, "signer": key.node_key}).signed(key.sign)
    signed.verify(public_key_from_did(key.node_key))
    with pytest.raises(Exception, match="signature"):
        Receipt(**{**signed.__dict__, "failure": Failure("CAST_OVERFLOW", "22003", "x")}).verify(
            public_key_from_did(key.node_key)
        )
    an = Announcement(LINK, LINK, LINK, "", 0, {"name": "spark"}, (), key.node_key, "t", failure="DIVIDE_BY_ZERO")
    an = an.signed(key.sign)
    assert decode_object(decode(block_of(an).data)) == an
    assert "failure" not in Announcement(**{**an.__dict__, "failure": None}).to_ipld()["content"]
    with pytest.raises(Exception, match="failure"):
        decode_object({**an.to_ipld(), "content": {**an.to_ipld()["content"], "failure": 3}})


def _row(execution: str, failure: Failure | None, trust: str = "computed") -> ExecutionRow:
    return ExecutionRow(
        "iv", "qy", execution, "rc-" + execution, "" if failure else "h", 0, "st", (), "computed", 1.0,
        trust=trust, failure=failure,
    )  # fmt: skip


def test_the_index_keeps_a_failure_and_a_result_computed_here_replaces_it(tmp_path: Path) -> None:
    index = Index(tmp_path / "index.db")
    index.results.add_execution(_row("ex-failed", DIV, trust="trusted-signer"))
    got = index.results.execution("iv")
    assert got is not None and got.failure == DIV and got.slices == ()
    index.results.add_execution(_row("ex-failed-again", DIV, trust="trusted-signer"))  # first writer wins
    assert index.results.execution("iv").execution == "ex-failed"  # type: ignore[union-attr]
    index.results.add_execution(_row("ex-ok", None))  # a retry that succeeded here
    got = index.results.execution("iv")
    assert got is not None and got.failure is None and got.execution == "ex-ok"
    index.results.add_execution(_row("ex-failed-3", DIV))  # a failure never replaces a result
    assert index.results.execution("iv").execution == "ex-ok"  # type: ignore[union-attr]


def test_the_answer_is_one_line_naming_the_class_and_the_cids() -> None:
    e = recorded_failure(_row("bafyex", DIV), None)
    assert e.status == 422 and "\n" not in e.message
    assert e.message.startswith("recorded failure: DIVIDE_BY_ZERO (22012)") and "bafyex" in e.message
    assert "--retry" in e.message and e.error_class == "DIVIDE_BY_ZERO" and e.receipt == "rc-bafyex"
    assert recorded_failure(_row("x", DIV), {"signer": "did:key:z6MkA"}).message.startswith(
        "recorded by peer signer did:key:z6MkA: DIVIDE_BY_ZERO"
    )
