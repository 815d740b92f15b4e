"""Finding a cached superset for a query (docs/queries.md "Answers from supersets").

Every result computed here is indexed by its *shape* (``shape_of``: the input versions and structures, with the
selection and projection stripped). A new query over the same shape is tried against each candidate with
``node.domain.sql.rewrite.rewrite``; the first rule that proves a rewrite gives the statement the resolver runs on the
Spark worker over the candidate's result slices (so the bytes are the canonical writer's).

Peers' results: an announcement (an_0) of a result its signer computed names the result's shape
(``public_shape``: over the inputs' content, not their version heads), recorded with the claim. On a miss no local
candidate answers, the resolver tries the newest claims of the query's shape (``peer_candidates``, at most
``MAX_PEER_CANDIDATES``): it reads their statements at once (``read_statement``: each iv_0 and qy_0, kept by
``statements``, else carried by a lookup or fetched with a short deadline) and proves the rewrites, all within
``PEER_PROOF_BUDGET``; then it obtains a proved one's result through the peer path with every check of the
request's trust mode, and derives from it.

Appends (``appended``): the same statement's result over a version the queried one extends by
AddData blocks only (found by the shape of that older head) is brought forward by ``node.domain.sql.rewrite.forward``
over the appended slices alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from multiformats import CID

from node.adapters.index import ClaimRow, ExecutionRow, Index
from node.domain.model import Block, Invocation, Query, cid_str, decode, decode_object
from node.domain.ports.block_store import BlockStore
from node.domain.sql import CanonicalQuery
from node.domain.sql.rewrite import Rewrite, forward, rewrite, shape_key
from node.services.datasets import SliceRef, Version, appends
from node.services.resolve.claim_checks import Blocks
from node.support import wall_clock as clock
from node.support.errors import CairnError
from node.support.lru import Lru

MAX_PEER_CANDIDATES = 4  # peers' candidate supersets tried for one miss, newest first: a bound on the time spent
STATEMENT_TIMEOUT = 3.0  # seconds for each of a peer candidate's iv_0 and qy_0 not carried by its lookup answer
# Seconds for reading and proving all of one miss's peer candidates, together (they are read at once): what a miss
# may spend before it knows whether a peer's result answers it. Fetching a proved one's result has the peer path's
# own deadline (peers.resolve_timeout, pushed on while its slices flow).
PEER_PROOF_BUDGET = 3.0
STATEMENTS_KEPT = 256  # peer candidates' statements kept read (small: an iv_0 and a qy_0 each)


def shape_of(cq: CanonicalQuery, versions: Sequence[Version]) -> str | None:
    """The index key of ``cq``'s shape over these versions, or ``None`` when no rule could use it."""
    types = shape_key(cq)
    if types is None or cq.order_by is not None:
        return None
    return _shape(types, [v.head for v in versions])


def public_shape(cq: CanonicalQuery, iv: Invocation) -> str | None:
    """The shape peers share (an announcement's ``shape``): ``cq``'s types over the inputs' content identities (an
    iv_0's structure, logical hash and rows) rather than version heads, which differ between nodes that ingested the
    same data (DESIGN.md "Deterministic queries": an input's identity is its content, not who published it)."""
    types = shape_key(cq)
    if types is None or cq.order_by is not None:
        return None
    inputs = [[cid_str(i.structure), i.logical_hash, i.rows] for i in iv.inputs]
    blob = json.dumps({"types": types, "inputs": inputs}, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _shape(types: tuple[tuple[str, ...], ...], heads: Sequence[CID]) -> str:
    blob = json.dumps({"types": types, "versions": [cid_str(h) for h in heads]}, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def remember(
    index: Index, cq: CanonicalQuery, versions: Sequence[Version], row: ExecutionRow, iv: Invocation | None = None
) -> None:
    """Index a result computed here as a candidate superset of later queries, with the shape its announcement
    names (``public_shape`` of its invocation ``iv``)."""
    shape = shape_of(cq, versions)
    if shape is not None:
        public = public_shape(cq, iv) if iv is not None else None
        index.shapes.add_shape(shape, row.invocation, cq.statement, len(cq.output_names), clock.now(), public)


async def candidates(
    index: Index, cq: CanonicalQuery, versions: Sequence[Version]
) -> AsyncIterator[tuple[ExecutionRow, Rewrite, int]]:
    """Cached executions over ``cq``'s shape that a rule proves can answer it, with the rewrite and the cached
    result's number of columns, the smallest result first; only results this node computed (trust ``computed``): a
    peer's unverified result must not become our computed answer (peers' results: ``peer_candidates``). The proofs
    (sqlglot parses) run in a thread, off the event loop; the index is read here, on the loop's thread (its SQLite
    connection is that thread's)."""
    shape = shape_of(cq, versions)
    if shape is None:
        return
    listed = index.shapes.shape_candidates(shape)
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

    usable = []
    for invocation, found, outputs in await asyncio.to_thread(prove):
        row = index.results.execution(invocation)
        if row is not None and row.trust == "computed" and row.failure is None:  # a recorded failure has no rows
            usable.append((row, found, outputs))
    for row, found, outputs in sorted(usable, key=lambda u: u[0].rows):  # the smallest result is the cheapest
        yield row, found, outputs


def appended(
    index: Index, cq: CanonicalQuery, versions: Sequence[Version]
) -> Iterator[tuple[ExecutionRow, Rewrite, int, list[SliceRef]]]:
    """Our computed results of ``cq``'s very statement over an older head of its one input that the queried version
    extends by AddData blocks only (append merges, no schema change nor retraction), nearest first: each with the
    ``forward`` statement, the cached result's number of columns and the slices appended since."""
    rw = forward(cq)
    if rw is None or len(versions) != 1:
        return
    for old_head, fresh in appends(versions[0]):
        shape = _shape(cq.input_types, [old_head])
        for invocation, statement, outputs in index.shapes.shape_candidates(shape):
            row = index.results.execution(invocation) if statement == cq.statement else None
            if row is not None and row.trust == "computed" and row.failure is None and fresh:
                yield row, rw, outputs, fresh


def peer_candidates(
    claims: Sequence[ClaimRow], own: str, invocation: str, usable: Callable[[ClaimRow], bool]
) -> list[ClaimRow]:
    """The peers' claims of a shape worth trying for ``invocation``: newest first, one per invocation, at most
    ``MAX_PEER_CANDIDATES``; never our own signer's (ours are local candidates), never ``invocation`` itself (the
    peer lookup of the exact question came first), never a claim ``usable`` rejects (refused for what it is)."""
    seen: set[str] = set()
    out: list[ClaimRow] = []
    for c in sorted(claims, key=lambda c: c.received, reverse=True):
        if c.signer == own or c.invocation == invocation or c.invocation in seen or not usable(c):
            continue
        seen.add(c.invocation)
        out.append(c)
        if len(out) == MAX_PEER_CANDIDATES:
            break
    return out


@dataclass(frozen=True)
class Statement:
    """A peer candidate's invocation and query, read and hash-checked (immutable: kept by ``statements``)."""

    iv_block: Block
    qy_block: Block
    invocation: Invocation
    query: Query

    def answers_inputs_of(self, ours: Invocation) -> bool:
        """Same inputs as ``ours``: a claimed shape is a hint, checked here."""
        return self.invocation.inputs == ours.inputs and list(self.query.inputs) == [i.structure for i in ours.inputs]


async def read_statement(
    kubo: BlockStore, invocation: str, carried: Mapping[bytes, bytes], providers: tuple[str, ...]
) -> Statement | None:
    """A peer candidate's iv_0 and qy_0, read from the blocks its lookup answer carried, else our Kubo (its
    providers dialled first) within ``STATEMENT_TIMEOUT`` each; ``None`` when they cannot be read or are not an
    invocation and its query."""
    src = Blocks(kubo, carried, providers)
    try:
        iv_cid = CID.decode(invocation)
        iv_block = Block(iv_cid, await src.get(iv_cid, STATEMENT_TIMEOUT))
        iv_block.verify()
        iv = decode_object(decode(iv_block.data, iv_cid.codec.code))
        if not isinstance(iv, Invocation):
            return None
        qy_block = Block(iv.query, await src.get(iv.query, STATEMENT_TIMEOUT))
        qy_block.verify()
        qy = decode_object(decode(qy_block.data, iv.query.codec.code))
    except (CairnError, ValueError):
        return None
    return Statement(iv_block, qy_block, iv, qy) if isinstance(qy, Query) else None


def statements() -> Lru[Statement]:
    """Peer candidates' statements already read, by invocation CID: a candidate seen again is proved with no
    network call (immutable: the CID names them; the oldest dropped beyond ``STATEMENTS_KEPT``)."""
    return Lru(STATEMENTS_KEPT)
