"""What an execution of a question is made of: the rows an engine gave, in canonical order, and the ``ex_0``
blocks that record it (Holium "Execution": bytecode, handle, input, exitStatus, output)."""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from node.domain.model import CID, Block, Execution, RecursiveDataEnvelope, block_of
from node.domain.sql import CanonicalQuery, SortKey
from node.domain.sql.result_order import canonical_indices
from node.services.datasets import Version
from node.services.resolve.claim_checks import bytecode_of
from node.support.errors import InvalidInput
from node.support.lru import Lru

ENGINE_HANDLE = "cairn.spark-sql"  # the ex_0 handle: the engine entry point that ran the bytecode
INPUT_BLOCKS_KEPT = 64


@dataclass(frozen=True)
class Result:
    """An answer's rows as an engine gave them, before they are published."""

    table: pa.Table
    timings: dict[str, float]  # for the receipt
    profile: Mapping[str, Any] | Block  # the engine profile: the worker's report, or an ep_0 block
    order: pa.Array | None  # the indices that put the rows in canonical order (None: they are in it)


def execution_blocks(cq: CanonicalQuery, versions: Sequence[Version], slices: list[CID] | None) -> list[Block]:
    """The blocks of an execution of `cq` over `versions` giving `slices`, in storing order: the execution last.
    ``slices`` None: the execution failed (exitStatus true, no output)."""
    sql_leaf, mbe = bytecode_of(cq.statement)  # the same bytecode a peer's claim is checked against
    in_lists, in_root, in_env = input_blocks(versions)
    if slices is None:
        ex = block_of(Execution(mbe.cid, ENGINE_HANDLE, in_env.cid, True, None))
        return [sql_leaf, mbe, *in_lists, in_root, in_env, ex]
    out_list = block_of(list(slices))
    out_env = block_of(RecursiveDataEnvelope(out_list.cid))
    ex = block_of(Execution(mbe.cid, ENGINE_HANDLE, in_env.cid, False, out_env.cid))
    return [sql_leaf, mbe, *in_lists, in_root, out_list, in_env, out_env, ex]


_INPUT_BLOCKS: Lru[tuple[list[Block], Block, Block]] = Lru(INPUT_BLOCKS_KEPT)


def input_blocks(versions: Sequence[Version]) -> tuple[list[Block], Block, Block]:
    """An execution's input blocks: one link list of slices per version, their root and its envelope. The same for
    every query over the same slices, so encoded once, keyed by the slices (not the head: a snapshot dataset's
    changelog view has its head and other slices). A 10 M-row version's list took 2-3 ms of a derived answer's
    ~40 ms."""
    key = " ".join(",".join(str(s.cid) for s in v.slices) for v in versions)
    found = _INPUT_BLOCKS.get(key)
    if found is None:
        in_lists = [block_of([s.cid for s in v.slices]) for v in versions]
        in_root = block_of([b.cid for b in in_lists])
        found = (in_lists, in_root, block_of(RecursiveDataEnvelope(in_root.cid)))
        _INPUT_BLOCKS.put(key, found)
    return found


def engine_versions(cq: CanonicalQuery) -> dict[str, str]:
    # The installed distribution's version: importing pyspark here cost a first miss 0.25 s.
    return {"name": "spark", "spark": _pyspark_version(), "pyarrow": pa.__version__, "canonicalizer": cq.canonicalizer}


@functools.cache
def _pyspark_version() -> str:
    return importlib.metadata.version("pyspark")


def published_order(table: pa.Table, order_by: tuple[SortKey, ...] | None) -> pa.Table:
    """Rows in canonical order (DESIGN.md): the query's total ORDER BY if it has one, else all columns."""
    indices = order_indices(table, order_by)
    return table if indices is None else table.take(indices)


def order_indices(table: pa.Table, order_by: tuple[SortKey, ...] | None) -> pa.Array | None:
    """The indices that put ``table``'s rows in canonical order (``published_order``); None: they are in it."""
    if order_by:
        # The canonicalizer completed the statement's ORDER BY to a total order: Spark's order is canonical.
        return None
    try:  # every column, nested ones by their canonical byte encoding (docs/queries.md "Order")
        return canonical_indices(table)
    except (pa.ArrowException, TypeError) as e:  # a result type with no canonical order: say so, not a 500
        raise InvalidInput(f"cannot put the result in canonical order ({e}); add an ORDER BY") from None
