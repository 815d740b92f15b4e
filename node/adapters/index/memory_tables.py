"""In-memory twins of the index's SQLite repositories (``node.domain.ports.repositories``), for tests and simulations.

Each keeps what its tables keep in dicts, in insertion order (SQLite's rowid order), and answers as the SQLite
repository does: the same first-writer-wins rules, orders, limits and counts (``tests/contract`` runs one suite
against both). Rows with equal sort keys (two claims received in the same instant) come in insertion order. Like the
event loop that uses them, a twin is meant for one thread at a time; nothing survives the process.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from node.domain.ports.records import ClaimRow, DatasetRow, Divergence, ExecutionRow, trust_strength
from node.domain.ports.repositories import PendingPin
from node.support import wall_clock as clock
from node.support.errors import Conflict

T = TypeVar("T")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # SQLite's LIKE folds ASCII only


def _first(rows: Iterable[T], key: Callable[[T], Any], limit: int) -> list[T]:
    """The first ``limit`` of ``rows`` sorted by ``key`` (stable: ties keep insertion order); SQLite's negative
    LIMIT means none."""
    ordered = sorted(rows, key=key)
    return ordered if limit < 0 else ordered[:limit]


class MemoryCatalog:
    def __init__(self) -> None:
        self.generation = 0
        self._rows: dict[str, DatasetRow] = {}
        self._facts: dict[str, tuple[str, int]] = {}

    def dataset(self, name: str) -> DatasetRow | None:
        return self._rows.get(name)

    def dataset_by_id(self, dataset_id: str) -> DatasetRow | None:
        return next((r for r in self._rows.values() if r.id == dataset_id), None)

    def datasets(self) -> list[DatasetRow]:
        return [self._rows[n] for n in sorted(self._rows)]

    def create_dataset(self, name: str, dataset_id: str, head: str, ipns: str | None, key_name: str) -> None:
        if name in self._rows or self.dataset_by_id(dataset_id) is not None:
            raise Conflict(f"dataset {name!r} (or its id) is in the index already")
        now = clock.now()
        self._rows[name] = DatasetRow(name, dataset_id, head, ipns, key_name, now, now)
        self.generation += 1

    def move_head(self, name: str, old: str, new: str) -> bool:
        row = self._rows.get(name)
        if row is None or row.head != old:
            return False
        self._rows[name] = replace(row, head=new, updated=clock.now())
        self.generation += 1
        return True

    def count(self) -> int:
        return len(self._rows)

    def version_facts(self, head: str) -> tuple[str, int] | None:
        return self._facts.get(head)

    def set_version_facts(self, head: str, logical_hash: str, rows: int) -> None:
        self._facts[head] = (logical_hash, rows)


class MemoryExecutions:
    def __init__(self) -> None:
        self.generation = 0
        self._rows: dict[str, ExecutionRow] = {}
        self._divergences: dict[tuple[str, str, str], Divergence] = {}
        self._names: dict[str, list[str]] = {}

    def execution(self, invocation: str) -> ExecutionRow | None:
        return self._rows.get(invocation)

    def add_execution(self, e: ExecutionRow) -> None:
        e = replace(e, slices=tuple(e.slices))
        held = self._rows.get(e.invocation)
        retried = e.failure is None and e.trust in ("computed", "recomputed-agreed")
        if held is None or trust_strength(e.trust) > trust_strength(held.trust) or (retried and held.failure):
            self._rows[e.invocation] = e
        self.generation += 1

    def executions(self, limit: int = 1000) -> list[ExecutionRow]:
        return _first(self._rows.values(), lambda r: -r.created, limit)

    def executions_by_cid(self, execution: str) -> ExecutionRow | None:
        return next((r for r in self._rows.values() if r.execution == execution), None)

    def executions_with_slice(self, slice_cid: str, limit: int = 16) -> list[ExecutionRow]:
        # The SQLite repository matches the JSON text of the lists first (LIKE), then the CIDs exactly.
        needle = ('"' + slice_cid.replace("%", "").replace("_", "") + '"').translate(_ASCII_LOWER)
        like = [r for r in self._rows.values() if needle in json.dumps(list(r.slices)).translate(_ASCII_LOWER)]
        return [r for r in _first(like, lambda r: r.created, limit) if slice_cid in r.slices]

    def count(self) -> int:
        return len(self._rows)

    def add_divergence(self, d: Divergence) -> bool:
        key = (d.invocation, d.signer, d.their_execution)
        if key in self._divergences:
            return False
        self._divergences[key] = d
        return True

    def divergences(self, invocation: str | None = None, limit: int = 100) -> list[Divergence]:
        rows = [d for d in self._divergences.values() if not invocation or d.invocation == invocation]
        return _first(rows, lambda d: -d.received, limit)

    def divergence_count(self) -> int:
        return len(self._divergences)

    def output_names(self, execution: str) -> list[str] | None:
        names = self._names.get(execution)
        return None if names is None else list(names)

    def set_output_names(self, execution: str, names: list[str]) -> None:
        self._names.setdefault(execution, list(names))


class MemoryClaims:
    def __init__(self) -> None:
        self._claims: dict[tuple[str, str, str], ClaimRow] = {}
        self._refusals: list[tuple[str, str, float]] = []
        self._marks: dict[str, tuple[float, float]] = {}  # signer -> (newest, moved)

    def add_claim(self, c: ClaimRow) -> bool:
        key = (c.invocation, c.signer, c.execution)
        if key in self._claims:
            return False
        self._claims[key] = replace(c, announcement=bytes(c.announcement))
        return True

    def claims(self, invocation: str | None = None, limit: int = 100) -> list[ClaimRow]:
        rows = [c for c in self._claims.values() if not invocation or c.invocation == invocation]
        return _first(rows, lambda c: -c.received, limit)

    def shape_claims(self, shape: str, limit: int = 64) -> list[ClaimRow]:
        return _first(
            [c for c in self._claims.values() if shape is not None and c.shape == shape], lambda c: -c.received, limit
        )

    def claim_count(self, peer: str | None = None, status: str | None = None) -> int:
        return sum(1 for c in self._claims.values() if peer in (None, c.peer) and status in (None, c.status))

    def set_claim_status(self, invocation: str, signer: str, execution: str, status: str, reason: str = "") -> None:
        key = (invocation, signer, execution)
        if key in self._claims:
            self._claims[key] = replace(self._claims[key], status=status, reason=reason)

    def prune_claims(self, peer: str, per_peer: int, total: int) -> int:
        gone = 0
        for of_peer, keep in ((True, per_peer), (False, total)):
            rows = [k for k, c in self._claims.items() if not of_peer or c.peer == peer]
            doomed = _first(rows, lambda k: (self._claims[k].status == "accepted", self._claims[k].received), -1)
            for key in doomed[: max(0, len(rows) - keep)]:
                del self._claims[key]
                gone += 1
        return gone

    def log_refusal(self, peer: str, reason: str, keep: int = 1000) -> None:
        self._refusals.append((peer, reason, clock.now()))
        del self._refusals[: max(0, len(self._refusals) - max(keep, 0))]

    def refusals(self, limit: int = 100) -> list[tuple[str, str, float]]:
        return _first(self._refusals, lambda r: -r[2], limit)

    def signer_mark(self, signer: str) -> float | None:
        mark = self._marks.get(signer)
        return None if mark is None else mark[0]

    def set_signer_mark(self, signer: str, newest: float, keep: int) -> None:
        held = self._marks.get(signer)
        self._marks[signer] = (newest if held is None else max(held[0], newest), clock.now())
        if held is not None:
            return
        for old in _first(self._marks, lambda s: self._marks[s][1], max(0, len(self._marks) - keep)):
            del self._marks[old]


class MemoryTrust:
    def __init__(self) -> None:
        self._trust: dict[tuple[str, str], float] = {}
        self._scores: dict[str, tuple[int, int]] = {}

    def trust_add(self, key: str, community: str) -> None:
        self._trust.setdefault((key, community), clock.now())

    def trust_rm(self, key: str, community: str | None) -> int:
        gone = [k for k in self._trust if k[0] == key and community in (None, k[1])]
        for k in gone:
            del self._trust[k]
        return len(gone)

    def trusted(self, community: str | None = None) -> list[tuple[str, str]]:
        rows = [k for k in self._trust if community in (None, k[1])]
        return sorted(rows, key=lambda k: (k[1], k[0]))

    def signer_score(self, key: str) -> tuple[int, int]:
        return self._scores.get(key, (0, 0))

    def score(self, signer: str, accepted: bool) -> None:
        a, r = self._scores.get(signer, (0, 0))
        self._scores[signer] = (a + 1, r) if accepted else (a, r + 1)


class MemoryPins:
    def __init__(self) -> None:
        self._pins: dict[tuple[str, bool], tuple[bool, float]] = {}  # (cid, recursive) -> (provide, added)
        self._blocks: dict[str, tuple[bytes, float]] = {}

    def queue_pins(self, pins: list[PendingPin], blocks: Sequence[tuple[str, bytes]] = ()) -> None:
        now = clock.now()
        owed = [((str(c), bool(r)), (bool(p), now)) for c, r, p in pins]  # built whole first: all or none
        carried = [(str(c), (bytes(d), now)) for c, d in blocks]
        for key, value in owed:
            self._pins.setdefault(key, value)
        for cid, held in carried:
            self._blocks.setdefault(cid, held)

    def pending_pins(self, limit: int = 1000) -> list[PendingPin]:
        owed = _first(self._pins.items(), lambda kv: kv[1][1], limit)
        return [(cid, recursive, provide) for (cid, recursive), (provide, _) in owed]

    def pending_blocks(self, limit: int = 1000) -> list[tuple[str, bytes]]:
        return [(cid, data) for cid, (data, _) in _first(self._blocks.items(), lambda kv: kv[1][1], limit)]

    def blocks_done(self, cids: Sequence[str]) -> None:
        for cid in cids:
            self._blocks.pop(cid, None)

    def pin_done(self, cid: str, recursive: bool) -> None:
        self._pins.pop((cid, bool(recursive)), None)


class MemoryShapes:
    def __init__(self) -> None:
        self._shapes: dict[tuple[str, str], tuple[str, int, float, str | None]] = {}

    def add_shape(
        self, shape: str, invocation: str, statement: str, outputs: int, now: float, public: str | None = None
    ) -> None:
        self._shapes.setdefault((shape, invocation), (statement, outputs, now, public))

    def shape_candidates(self, shape: str, limit: int = 32) -> list[tuple[str, str, int]]:
        rows = [(inv, v) for (s, inv), v in self._shapes.items() if s == shape]
        return [(inv, v[0], v[1]) for inv, v in _first(rows, lambda r: -r[1][2], limit)]

    def shape_of(self, invocation: str) -> str | None:
        return next((v[3] for (_, inv), v in self._shapes.items() if inv == invocation and v[3] is not None), None)
