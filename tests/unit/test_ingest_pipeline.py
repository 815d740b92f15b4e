"""The ingest's reader stage (node.services.datasets.ingest_slices ``Prefetch``): one slice ahead, never more than two
held."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pyarrow as pa

from node.services.datasets.ingest_slices import Prefetch


async def _until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.01)


async def test_reader_holds_at_most_two_slices_and_keeps_order() -> None:
    made: list[int] = []

    def tables() -> Iterator[pa.Table]:
        for i in range(5):
            made.append(i)
            yield pa.table({"i": [i]})

    got = []
    async with Prefetch(tables()) as reader:
        first = await reader.get()
        assert first is not None
        got.append(first.pop()["i"][0].as_py())
        # Not released: the reader makes one more slice, then waits for a slot before making a third.
        await _until(lambda: len(made) == 2, "the reader made the next slice")
        await _until(lambda: reader._slots._value == 0, "both slots are taken")
        assert len(made) == 2
        reader.release()
        await _until(lambda: len(made) == 3, "a released slot lets the reader make another slice")
        while (holder := await reader.get()) is not None:
            got.append(holder.pop()["i"][0].as_py())
            reader.release()
    assert got == [0, 1, 2, 3, 4]


async def test_a_reader_error_reaches_the_consumer_in_order() -> None:
    def tables() -> Iterator[pa.Table]:
        yield pa.table({"i": [0]})
        raise ValueError("bad input")

    async with Prefetch(tables()) as reader:
        holder = await reader.get()
        assert holder is not None and holder.pop()["i"][0].as_py() == 0
        reader.release()
        try:
            await reader.get()
        except ValueError as e:
            assert str(e) == "bad input"
        else:  # pragma: no cover
            raise AssertionError("the reader's error was lost")
