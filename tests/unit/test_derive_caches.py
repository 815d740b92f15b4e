"""What a derived answer keeps between asks: decoded cached results (``Results.tables``) and the input blocks of an
execution (``input_blocks``). Both must give what reading or encoding afresh gives."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from node.adapters.index import ExecutionRow
from node.domain.model import RecursiveDataEnvelope, block_of, cid_for
from node.services.datasets import SliceRef, Version
from node.services.resolve import result_reading as results
from node.services.resolve.execution import input_blocks
from node.services.resolve.result_reading import Results


def _row(execution: str, slices: int = 1) -> ExecutionRow:
    cids = tuple(str(cid_for(f"{execution}-{i}".encode())) for i in range(slices))
    return ExecutionRow("iv", "qy", execution, "rc", "h", 1, "st", cids, "computed", 0.0)


class _Reads:
    """``datasets.read_cid`` that counts its reads: a table of ``rows`` int64 rows per slice."""

    def __init__(self, rows: int) -> None:
        self.rows, self.reads = rows, 0

    async def read_cid(self, cid: Any) -> pa.Table:
        self.reads += 1
        return pa.table({"x": pa.array(range(self.rows), pa.int64())})


async def test_a_cached_result_is_decoded_once_and_the_least_recently_used_goes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(results, "RESULTS_KEPT_BYTES", 4 * 8 * 1000)  # four 1 000-row results of one int64 column
    reads = _Reads(250)  # 2 000 bytes a slice
    kept = Results(reads)  # type: ignore[arg-type]  # the one call it makes
    first = await kept.tables(_row("a", slices=4))
    assert reads.reads == 4 and sum(t.num_rows for t in first) == 1000
    assert await kept.tables(_row("a", slices=4)) is first
    assert reads.reads == 4  # from memory
    for name in "bcd":
        await kept.tables(_row(name, slices=4))
    await kept.tables(_row("a", slices=4))  # a: the most recent now
    await kept.tables(_row("e", slices=4))  # over the bound: b goes
    assert list(kept._kept) == ["c", "d", "a", "e"]


async def test_a_result_over_a_quarter_of_the_bound_is_read_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "RESULTS_KEPT_BYTES", 4 * 8 * 1000)
    reads = _Reads(1001)  # one result of more than a quarter of the bound
    kept = Results(reads)  # type: ignore[arg-type]
    for _ in range(2):
        await kept.tables(_row("big"))
    assert reads.reads == 2 and not kept._kept


def _version(head: bytes, slices: list[bytes]) -> Version:
    refs = [SliceRef(cid_for(s), 1, 1, "h", i) for i, s in enumerate(slices)]
    return Version(cid_for(head), [], slices=refs)


def test_input_blocks_are_those_encoding_gives_keyed_by_slices_not_heads() -> None:
    """A snapshot dataset's changelog view has the head of its snapshot and other slices: other input blocks."""
    snapshot, changelog = _version(b"head", [b"s1"]), _version(b"head", [b"c1", b"c2"])
    lists, root, env = input_blocks([snapshot])
    assert lists == [block_of([cid_for(b"s1")])] and root == block_of([lists[0].cid])
    assert env == block_of(RecursiveDataEnvelope(root.cid))
    assert input_blocks([_version(b"head", [b"s1"])])[2] is env  # the same slices: encoded once
    other = input_blocks([changelog])
    assert other[0] == [block_of([cid_for(b"c1"), cid_for(b"c2")])] and other[2] != env
    two = input_blocks([snapshot, changelog])  # the input boundary is part of the key
    assert two[0] == [lists[0], other[0][0]] and two[2] not in (env, other[2])
