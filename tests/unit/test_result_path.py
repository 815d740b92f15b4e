"""The result path without holding a large result twice (docs/spark.md "The result path"): the
worker's batch frames and budgets, the node putting batches back in order, and slices taken by sort indices giving
the bytes the whole sorted table gave."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from node.domain.sql.result_order import canonical_indices, canonical_order
from node.services.datasets.slices import iter_slices, slice_bytes
from node.services.resolve.spark import _answer_table
from node.services.resolve.spark_wire import own_batch as _own_batch
from node.support.errors import SparkError, SparkRefused
from spark_worker import budget, guard
from spark_worker.jobs import ClientGone, Job
from spark_worker.results import Batches

SCHEMA = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("s", pa.string())])


def _table(n: int, seed: int = 7) -> pa.Table:
    rng = random.Random(seed)
    rows = {
        "k": [rng.randrange(5) for _ in range(n)],
        "x": [rng.choice([0.5, -0.0, 0.0, None, float("nan"), 2.25]) for _ in range(n)],
        "s": [rng.choice(["a", "bb", None, "é"]) for _ in range(n)],
    }
    return pa.table(rows, schema=SCHEMA)


def _frames(table: pa.Table, max_rows: int, limits: budget.Limits | None = None) -> list[tuple[dict, pa.Buffer]]:
    """What the worker sends for ``table``'s batches (each its own frame)."""
    sent: list[tuple[dict, pa.Buffer]] = []
    job = Job("j1", "SELECT 1", {}, limits=limits or budget.Limits())
    job.send = lambda header, payload: sent.append((header, payload))
    batches = Batches(job)
    for b in table.to_batches(max_chunksize=max_rows):
        batches(b)
    assert (batches.rows, batches.frames) == (table.num_rows, len(sent))
    assert batches.bytes == sum(p.size for _, p in sent)
    return sent


def test_batches_out_of_order_come_back_in_order_one_chunk_per_column() -> None:
    table = _table(50)
    frames = _frames(table, 7)
    assert [h for h, _ in frames] == [{"batch": i} for i in range(8)]
    arrival = [3, 0, 7, 1, 6, 2, 5, 4]  # the result's batches in the order the JVM sent them (partitions finish)
    arrived = [frames[k][1] for k in arrival]
    received = [_own_batch(p) for p in arrived]
    # each column is copied out of its frame: no buffer of the batch points into the frame's bytes
    lo, hi = arrived[0].address, arrived[0].address + arrived[0].size
    assert all(not lo <= b.address < hi for col in received[0].columns for b in col.buffers() if b is not None)
    order = [arrival.index(k) for k in range(8)]  # the k-th batch of the result is the order[k]-th sent
    got = _answer_table({"ok": True, "batches": 8, "order": order}, received, "j")
    assert not received  # taken: the caller's list no longer holds them
    assert slice_bytes(got) == slice_bytes(table)  # (NaN != NaN: compared as bytes)
    assert all(c.num_chunks == 1 for c in got.columns)


def test_bad_answers_are_worker_errors_and_void_the_batches() -> None:
    frames = _frames(_table(20), 7)
    batches = [_own_batch(p) for _, p in frames]
    with pytest.raises(SparkError, match="bad batch order") as e:
        _answer_table({"ok": True, "batches": 3, "order": [0, 0, 2]}, list(batches), "j")
    assert e.value.kind == "worker"
    with pytest.raises(SparkError, match="sent 2 of the result's batches"):
        _answer_table({"ok": True, "batches": 3}, batches[:2], "j")
    sent = list(batches)
    with pytest.raises(SparkRefused, match="above"):
        _answer_table({"ok": False, "kind": "refused", "error": "the result has 9 rows, above"}, sent, "j")
    assert not sent


def test_budgets_stop_the_stream_before_the_batch_that_passes_them() -> None:
    table = _table(30)
    sent: list[dict] = []
    job = Job("j2", "SELECT 1", {}, limits=budget.Limits(rows=20))
    job.send = lambda header, payload: sent.append(header)
    batches = Batches(job)
    with pytest.raises(guard.Refused) as e:
        for b in table.to_batches(max_chunksize=7):
            batches(b)
    assert e.value.rule == "result-rows" and len(sent) == 2  # 14 rows went; the batch reaching 21 did not

    def gone(header: dict, payload: pa.Buffer) -> None:
        raise BrokenPipeError("the client closed")

    job = Job("j3", "SELECT 1", {})
    job.send = gone
    with pytest.raises(ClientGone):
        Batches(job)(table.to_batches()[0])


@pytest.mark.parametrize("rows_per_slice", [1, 7, 64, 1000])
def test_slices_taken_by_indices_are_the_bytes_of_the_sorted_table(rows_per_slice: int) -> None:
    """node.services.resolve.publish.Publisher._write_result takes each slice's rows by the sort indices instead of
    sorting the
    whole table: the slices' bytes must be those of the whole sorted table cut into slices."""
    table = pa.Table.from_batches(_table(300, seed=3).to_batches(max_chunksize=11))
    whole = canonical_order(table)
    expected = [slice_bytes(p) for p in iter_slices(whole.to_batches(), whole.schema, rows_per_slice)]
    indices = canonical_indices(table)
    assert indices is not None
    taken = [
        slice_bytes(table.take(indices.slice(start, rows_per_slice)))
        for start in range(0, table.num_rows, rows_per_slice)
    ]
    assert taken == expected
