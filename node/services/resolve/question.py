"""The question being answered, hashed before it runs, and what answers it.

The query is hashed before it runs: canonical statement + abstract input structures give the ``qy_0``, and with the
content identities of the inputs (abstract structure, logical hash, rows) the ``iv_0``, whose CID is the cache key
(DESIGN.md "Deterministic queries"). ``Question`` carries that, with how the asker may be answered, through every
step of resolving it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from node.adapters.index import ExecutionRow
from node.domain.model import CID, Block, InputIdentity, Invocation, Query, Structure, block_of, cid_str, parse_cid
from node.domain.sql import CanonicalQuery
from node.domain.sql.sandbox import Sandbox
from node.services.datasets import Datasets, Version
from node.services.resolve.trust_modes import VERIFIED_LABELS
from node.support.errors import CairnError, InvalidInput, QueryRefused

MAX_PREPARED = 1024  # questions remembered (statement + versions → canonical form, qy_0, iv_0)
MAX_IMPLICIT_INPUTS = 32  # tables a statement may read by dataset name without --input (one canonicalization each)
Event = Callable[[str, dict[str, Any]], None]
Prepared = tuple[CanonicalQuery, list[Block], Invocation, list[Version]]


def silent(kind: str, data: dict[str, Any]) -> None:
    """The progress of a question no one listens to."""


@dataclass(frozen=True)
class Question:
    """One question being answered: its canonical form and hashed objects, the versions it reads (frozen when it
    was asked), and how the asker may be answered."""

    cq: CanonicalQuery
    objects: tuple[Block, ...]  # the inputs' abstract structures, then the qy_0 (last)
    iv_block: Block
    versions: tuple[Version, ...]  # in the invocation's input order
    mode: str  # the trust mode (node/services/resolve/trust_modes.py)
    emit: Event = silent  # progress events, for the asker
    may_compute: bool = True  # False: answered from the index or peers only (the asker has no API token)
    retry: bool = False  # a recorded failure (here or a peer's) is not the answer: computed again

    @property
    def key(self) -> str:
        """The invocation's CID, as the index keys it."""
        return cid_str(self.iv_block.cid)

    @property
    def qy_block(self) -> Block:
        return self.objects[-1]


@dataclass(frozen=True)
class Outcome:
    row: ExecutionRow
    source: str
    trust: str  # one of TRUST_LABELS: how this answer was checked
    peer: dict[str, Any] | None = None
    hints: tuple[str, ...] = ()  # what peers had that could not be used, and what the asker could do


@dataclass
class Answer:
    query: CID
    invocation: CID
    execution: ExecutionRow
    source: str  # local | peer | computed
    elapsed_ms: float
    output_names: tuple[str, ...]
    versions: dict[str, str] = field(default_factory=dict)  # alias → dataset version used
    peer: dict[str, Any] | None = None  # for source "peer": which peer, which signer, which mode
    trust: str = "computed"  # one of TRUST_LABELS
    hints: tuple[str, ...] = ()  # e.g. a peer has this answer but its signer is not trusted: what to do about it

    @property
    def verified(self) -> bool:
        return self.trust in VERIFIED_LABELS


class Questions:
    """Hashing questions: input refs resolved to versions (when asked, once), the statement canonicalized (off the
    event loop, bounded, refusals remembered: docs/queries.md "Limits"), qy_0 and iv_0 built; each remembered."""

    def __init__(self, datasets: Datasets, canonicalizer: Sandbox) -> None:
        self.datasets, self.canonicalizer = datasets, canonicalizer
        self._prepared: OrderedDict[Any, tuple[Prepared, tuple[tuple[str, str], ...]]] = OrderedDict()

    async def prepare(self, sql: str, inputs: Mapping[str, str]) -> Prepared:
        """Resolve input refs to versions (now, once), canonicalize, and build qy_0 and iv_0. A table the statement
        reads that is neither an input nor a CTE is the dataset of that name (implicit inputs): the invocation is
        the one ``--input NAME=NAME`` gives."""
        versions: dict[str, Version] = {}
        for alias, ref in inputs.items():
            versions[alias] = with_schema(alias, ref, await self.datasets.input(ref))  # snapshot: its state
        # The question is a pure function of the statement and the versions it reads (a version never changes):
        # remembered, a hit skips canonicalizing and hashing it again.
        key = (sql, tuple((a, cid_str(v.head), type(v).__name__) for a, v in versions.items()))
        memo = self._prepared.get(key)
        if memo is not None and self._same_implicit(memo[1]):
            self._prepared.move_to_end(key)
            cq, objects, iv, ordered = memo[0]
            return cq, list(objects), iv, list(ordered)  # lists of its own: the caller may extend them
        explicit = set(versions)
        prepared = await self._prepare(sql, versions)
        implicit = tuple((a, cid_str(v.head)) for a, v in versions.items() if a not in explicit)
        self._prepared[key] = (prepared, implicit)
        if len(self._prepared) > MAX_PREPARED:
            self._prepared.popitem(last=False)
        return prepared

    def _same_implicit(self, implicit: tuple[tuple[str, str], ...]) -> bool:
        """The tables read by dataset name still name the same versions (an ingest moves a head)."""
        for name, head in implicit:
            row = self.datasets.find_table(name)
            if row is None or row.head != head:
                return False
        return True

    async def _prepare(self, sql: str, versions: dict[str, Version]) -> Prepared:
        cq = await self._canonicalize(sql, versions)
        if not versions:  # a statement that reads no table (SELECT 1): nothing to answer from
            raise InvalidInput("a query reads at least one dataset: FROM a dataset's name, or --input NAME=DATASET")
        ordered = [versions[a] for a in cq.inputs]
        abstract = [block_of(input_structure(v).abstract()) for v in ordered]
        qy = Query(cq.syntax, cq.dialect, cq.canonicalizer, cq.statement, tuple(b.cid for b in abstract))
        qy_block = block_of(qy)
        idents = []
        for v, ab in zip(ordered, abstract):
            logical, rows = await self.datasets.version_hash(v)
            idents.append(InputIdentity(ab.cid, logical, rows))
        iv = Invocation(qy_block.cid, tuple(idents))
        return cq, [*abstract, qy_block], iv, ordered

    async def _canonicalize(self, sql: str, versions: dict[str, Version]) -> CanonicalQuery:
        """Canonicalize over ``versions``; a table the canonicalizer finds undeclared (``unknown-table``) is looked
        up as a dataset name, added to ``versions`` and the statement canonicalized again (each round is one
        remembered sandbox call; at most ``MAX_IMPLICIT_INPUTS`` rounds)."""
        for _ in range(MAX_IMPLICIT_INPUTS + 1):
            try:
                return await self.canonicalizer.canonicalize(
                    sql, {a: list(input_structure(v).schema) for a, v in versions.items()}
                )
            except QueryRefused as e:
                name = e.fragment  # the table's name; the whole statement when sqlglot's resolver refused it
                if e.rule != "unknown-table" or name in ("", QueryRefused("", "", sql).fragment):
                    raise
                if name.lower() in {a.lower() for a in versions}:
                    raise
                if len(versions) >= MAX_IMPLICIT_INPUTS:
                    raise InvalidInput(f"a query reads at most {MAX_IMPLICIT_INPUTS} datasets") from None
                versions[name] = await self._implicit_input(name)
        raise CairnError("unreachable: the last round returns or raises")  # for mypy's flow analysis

    async def _implicit_input(self, name: str) -> Version:
        """The version of the dataset named like the table, as ``--input NAME=NAME`` resolves it."""
        row = self.datasets.find_table(name)
        if row is None:
            hint = self.datasets.suggest(name)
            why = f"not a declared input, a CTE of the statement, nor a dataset of this node{hint}"
            raise QueryRefused("unknown-table", why, name) from None
        v = await self.datasets.as_input(await self.datasets.version(parse_cid(row.head)))  # snapshot: its state
        return with_schema(name, row.name, v)


def with_schema(alias: str, ref: str, v: Version) -> Version:
    if v.structure is None:  # no schema yet; a known schema with 0 rows is a table
        raise InvalidInput(f"input {alias!r} ({ref}) has no schema yet: add rows before querying it")
    return v


def input_structure(v: Version) -> Structure:
    """The version's schema; a query's inputs are checked to have one when it is planned."""
    if v.structure is None:
        raise InvalidInput(f"dataset version {cid_str(v.head)} has no schema yet: add rows before querying it")
    return v.structure
