"""Finding a cached superset for a query (issue 22 item 3; docs/queries.md "Answers from supersets").

Every result computed here is indexed by its *shape* (``shape_of``: the input versions and structures, with the
selection and projection stripped). A new query over the same shape is tried against each candidate with
``node.query.rewrite.rewrite``; the first rule that proves a rewrite gives the statement the resolver runs on the
Spark worker over the candidate's result slices (so the bytes are the canonical writer's). Local only: peers are
not asked for shapes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Sequence

from node import clock
from node.datasets import Version
from node.index import ExecutionRow, Index
from node.model import cid_str
from node.query import CanonicalQuery
from node.query.rewrite import Rewrite, rewrite, shape_key


def shape_of(cq: CanonicalQuery, versions: Sequence[Version]) -> str | None:
    """The index key of ``cq``'s shape over these versions, or ``None`` when no rule could use it."""
    types = shape_key(cq)
    if types is None or cq.order_by is not None:
        return None
    blob = json.dumps({"types": types, "versions": [cid_str(v.head) for v in versions]}, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def remember(index: Index, cq: CanonicalQuery, versions: Sequence[Version], row: ExecutionRow) -> None:
    """Index a result computed here as a candidate superset of later queries."""
    shape = shape_of(cq, versions)
    if shape is not None:
        index.add_shape(shape, row.invocation, cq.statement, len(cq.output_names), clock.now())


async def candidates(
    index: Index, cq: CanonicalQuery, versions: Sequence[Version]
) -> AsyncIterator[tuple[ExecutionRow, Rewrite, int]]:
    """Cached executions over ``cq``'s shape that a rule proves can answer it, with the rewrite and the cached
    result's number of columns; only results this node computed (trust ``computed``): a peer's unverified result
    must not become our computed answer. The proofs (sqlglot parses) run in a thread, off the event loop; the
    index is read here, on the loop's thread (its SQLite connection is that thread's)."""
    shape = shape_of(cq, versions)
    if shape is None:
        return
    listed = index.shape_candidates(shape)
    if not listed:
        return

    def prove() -> list[tuple[str, Rewrite, int]]:
        proved = []
        for invocation, statement, outputs in listed:
            names = tuple(f"_{i}" for i in range(outputs))
            found = rewrite(CanonicalQuery(statement, cq.inputs, cq.input_types, names, None), cq)
            if found is not None:
                proved.append((invocation, found, outputs))
        return proved

    for invocation, found, outputs in await asyncio.to_thread(prove):
        row = index.execution(invocation)
        if row is not None and row.trust == "computed" and row.failure is None:  # a recorded failure has no rows
            yield row, found, outputs
