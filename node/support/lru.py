"""A bounded map that forgets its least recently used entry: for memos of immutable things (statements read by CID,
peers' admission state), where an entry dropped is only read again."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """A dict that forgets its least recently used entry beyond ``cap``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._d: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str) -> V | None:
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
        return v

    def put(self, key: str, value: V) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.cap:
            self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)
