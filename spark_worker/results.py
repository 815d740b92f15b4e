"""A job's result, handed on as Arrow record batches as Spark sends them (a large result is never held whole), each
its own frame within the job's budgets.

pyspark's ``DataFrame.toArrow`` (pyspark/sql/pandas/conversion.py) collects every batch the JVM sends, puts them in
order and builds one table; the worker then wrote that table as one Arrow IPC buffer, so a large result was held
twice before its first byte left. Here each batch goes on (``send``) as it comes from the JVM, in the order its
partition finished, and the order they belong in comes last, as pyspark's own ``ArrowCollectSerializer`` reads it:
the worker holds one batch at a time. Each batch is cast to the schema ``toArrow`` casts its table to, so the batches
make up the table ``toArrow`` gives.

Spark Connect's client has no batch iterator among its public calls: there the result comes whole (``toArrow``), and
goes on batch by batch, each freed once sent (no IPC copy of the whole).

Imports nothing from the node.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import pyarrow as pa

from spark_worker import budget
from spark_worker.jobs import Cancelled, ClientGone, Job

Send = Callable[[pa.RecordBatch], None]


class Batches:
    """Sends a job's result batch by batch (an Arrow IPC stream of one batch per frame), within its budgets."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.rows = self.bytes = self.frames = 0
        self.seconds = 0.0  # serialising and sending

    def __call__(self, batch: Any) -> None:
        t0 = time.perf_counter()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        buf = sink.getvalue()
        self.rows += batch.num_rows
        self.bytes += buf.size
        budget.check_result(self.rows, self.bytes, self.job.limits)  # before this batch is served
        if self.job.cancelled.is_set():
            raise Cancelled()
        if self.job.send is not None:
            try:
                self.job.send({"batch": self.frames}, buf)
            except OSError as e:
                raise ClientGone(f"job {self.job.id}: the client went away") from e
        self.frames += 1
        self.seconds += time.perf_counter() - t0


def arrow_schema(df: Any) -> pa.Schema:
    """The schema ``df.toArrow()`` casts its result to (pyspark's ``PandasConversionMixin.toArrow``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    large = str(df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    return to_arrow_schema(
        df.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC", prefers_large_types=large
    )


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def send_result(df: Any, send: Send, *, remote: bool, cancel: Callable[[], None]) -> list[int] | None:
    """Run ``df`` and ``send`` its result's batches (at least one: an empty result sends an empty batch, for its
    schema). Returns their order: the result is the batches sent, taken in the order ``[sent[i] for i in order]``;
    None when they were sent in order. An exception from ``send`` ends the Spark job (``cancel``) and is raised."""
    if remote:
        table = df.toArrow()
        batches = table.to_batches() or [_empty(table.schema)]
        del table
        while batches:
            send(batches.pop(0))  # popped: a batch is freed once sent
        return None
    return _send_classic(df, arrow_schema(df), send, cancel)


def _send_classic(df: Any, schema: pa.Schema, send: Send, cancel: Callable[[], None]) -> list[int] | None:
    from pyspark.errors.exceptions.captured import unwrap_spark_exception
    from pyspark.traceback_utils import SCCallSiteSync
    from pyspark.util import _load_from_socket

    with SCCallSiteSync(df._sc):
        port, secret, server = df._jdf.collectAsArrowToPython()
    order: list[int] = []
    sent = 0
    ours = False  # the failure is send's (refused, client gone), not Spark's
    try:
        with _load_from_socket((port, secret), _in_arrival_order()) as items:
            for item in items:
                if isinstance(item, list):
                    order = item
                    continue
                try:
                    send(item.cast(schema))
                except BaseException:
                    ours = True
                    raise
                sent += 1
        if not sent:
            send(_empty(schema))
            return None
    finally:
        if ours:
            with contextlib.suppress(Exception):  # the job's own error is ours, not the stopped stream's
                cancel()
                server.getResult()
        else:
            with unwrap_spark_exception():  # as toArrow: Spark's error, with its error class, wins
                server.getResult()
    if sorted(order) != list(range(sent)):
        raise RuntimeError(f"Spark sent {sent} Arrow batches but an order of {len(order)}")
    return None if order == list(range(sent)) else order


def _in_arrival_order() -> Any:
    """A serializer that yields the JVM's batches as they arrive, then the list of their order (pyspark's
    ``ArrowCollectSerializer`` holds them all to reorder them first)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.serializers import UTF8Deserializer, read_int
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    class InArrivalOrder(ArrowStreamSerializer):
        def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
            yield from super().load_stream(stream)
            num = read_int(stream)
            if num == -1:
                raise PySparkRuntimeError(
                    errorClass="ERROR_OCCURRED_WHILE_CALLING",
                    messageParameters={
                        "func_name": "collectAsArrowToPython",
                        "error_msg": UTF8Deserializer().loads(stream),
                    },
                )
            yield [read_int(stream) for _ in range(num)]

    return InArrivalOrder()
