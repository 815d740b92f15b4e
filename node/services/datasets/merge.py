"""Merge strategies (ODF "Merge Strategies"): how new rows join a dataset's history.

- ``append``: every new row is added as it is.
- ``ledger``: rows whose primary key was already seen (earlier in the dataset or earlier in this
  input) are skipped; the rest are appended. History is immutable facts.
- ``snapshot``: the input is the full current state. It is compared with the state the history
  adds up to, and only the differences are appended, as change-data-capture rows with ODF's
  ``op`` codes (ODF "Change Data Capture"): 0 append, 1 retract, 2 correct-from, 3 correct-to.
  Snapshot datasets carry ``op`` as their first column; the others carry user columns only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from node.support.errors import InvalidInput

OP_COLUMN = "op"
OP_APPEND, OP_RETRACT, OP_CORRECT_FROM, OP_CORRECT_TO = 0, 1, 2, 3

Key = tuple[Any, ...]


def check_primary_key(schema: pa.Schema, strategy: str, primary_key: list[str]) -> None:
    if strategy == "append":
        if primary_key:
            raise InvalidInput("a primary key only means something with --merge ledger or snapshot")
        return
    if not primary_key:
        raise InvalidInput(f"--merge {strategy} needs a primary key (--primary-key COL[,COL…])")
    missing = [c for c in primary_key if c not in schema.names]
    if missing:
        raise InvalidInput(f"primary key column {missing[0]!r} is not in the data (columns: {', '.join(schema.names)})")


def _keys(batch: pa.RecordBatch | pa.Table, primary_key: list[str]) -> list[Key]:
    return list(zip(*(batch.column(c).to_pylist() for c in primary_key)))


def ledger(batches: Iterable[pa.RecordBatch], primary_key: list[str], seen: set[Key]) -> Iterator[pa.RecordBatch]:
    """Drop rows whose key is in ``seen`` (which grows as rows pass)."""
    for batch in batches:
        keep = []
        for key in _keys(batch, primary_key):
            fresh = key not in seen
            keep.append(fresh)
            if fresh:
                seen.add(key)
        if any(keep):
            yield batch.filter(pa.array(keep, pa.bool_()))


def with_op(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(OP_COLUMN, pa.int8())] + list(schema))


def fold_state(tables: Iterable[pa.Table], primary_key: list[str]) -> dict[Key, tuple[Any, ...]]:
    """The current state (key → row without ``op``) that a snapshot dataset's history adds up to."""
    state: dict[Key, tuple[Any, ...]] = {}
    for t in tables:
        ops = t.column(OP_COLUMN).to_pylist()
        user = t.drop_columns([OP_COLUMN])
        rows = list(zip(*(c.to_pylist() for c in user.columns)))
        keys = _keys(user, primary_key)
        for op, key, row in zip(ops, keys, rows):
            if op in (OP_APPEND, OP_CORRECT_TO):
                state[key] = row
            elif op == OP_RETRACT:
                state.pop(key, None)
    return state


def snapshot(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, primary_key: list[str], state: dict[Key, tuple[Any, ...]]
) -> Iterator[pa.RecordBatch]:
    """Change-data-capture of a full snapshot against ``state`` (consumed)."""
    out_schema = with_op(schema)
    seen: set[Key] = set()

    def emit(rows: list[tuple[int, tuple[Any, ...]]]) -> pa.RecordBatch:
        cols = [pa.array([op for op, _ in rows], pa.int8())]
        cols += [pa.array([r[i] for _, r in rows], f.type) for i, f in enumerate(schema)]
        return pa.RecordBatch.from_arrays(cols, schema=out_schema)

    for batch in batches:
        rows = list(zip(*(c.to_pylist() for c in batch.columns)))
        changes: list[tuple[int, tuple[Any, ...]]] = []
        for key, row in zip(_keys(batch, primary_key), rows):
            if key in seen:
                raise InvalidInput(f"snapshot has primary key {key!r} twice: a snapshot holds each key once")
            seen.add(key)
            old = state.pop(key, None)
            if old is None:
                changes.append((OP_APPEND, row))
            elif old != row:
                changes += [(OP_CORRECT_FROM, old), (OP_CORRECT_TO, row)]
        if changes:
            yield emit(changes)
    gone = [(OP_RETRACT, row) for row in state.values()]  # in the order the history added them
    if gone:
        yield emit(gone)
