"""Recent local hits, kept whole: the same request asked again is answered without touching the index.

A local hit's answer is a pure function of the request (statement, inputs, limit, trust mode, whether the asker may
compute) and of the index rows it was read from: the datasets its names resolve to and the invocation's execution.
The index counts every write to those two tables (``Index.generation``); an entry made at another generation is
stale and dropped on sight, so an ingest, a pull or a better-checked row is seen by the very next request. This
brings a repeated hit down to the cost of the HTTP layer itself. Only ``elapsed_ms`` differs between two such
answers.

Bounded by bytes (the answer's JSON size, its preview rows included) and by entries; least recently used first out.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

Key = tuple[str, tuple[tuple[str, str], ...], int, str, bool]

MAX_BYTES = 32 * 1024 * 1024
MAX_ENTRIES = 4096
MAX_ONE = 1024 * 1024  # a larger answer (many preview rows) is cheap to rebuild next to its size on the wire


def key_of(sql: str, inputs: Mapping[str, str], limit: int, mode: str, may_compute: bool) -> Key:
    return (sql, tuple(inputs.items()), limit, mode, may_compute)


class AnswerCache:
    def __init__(self, max_bytes: int = MAX_BYTES, max_entries: int = MAX_ENTRIES) -> None:
        self._max_bytes, self._max_entries = max_bytes, max_entries
        self._entries: OrderedDict[Key, tuple[int, int, dict[str, Any]]] = OrderedDict()  # generation, size, answer
        self._bytes = 0

    def get(self, key: Key, generation: int) -> dict[str, Any] | None:
        """A copy of the answer kept for ``key`` at this index generation (the caller sets ``elapsed_ms``)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] != generation:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return dict(entry[2])

    def put(self, key: Key, generation: int, answer: dict[str, Any]) -> None:
        """Keep ``answer`` (a local hit's, read at ``generation``) unless it is too large to be worth it."""
        size = len(json.dumps(answer, default=str))
        if size > MAX_ONE:
            return
        self._drop(key)
        self._entries[key] = (generation, size, dict(answer))
        self._bytes += size
        while self._bytes > self._max_bytes or len(self._entries) > self._max_entries:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry[1]

    def __len__(self) -> int:
        return len(self._entries)
