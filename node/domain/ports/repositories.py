"""The node's index, split by what it holds: one ``Protocol`` per repository.

SQLite implements them all over one connection (``node.adapters.index``); ``node.adapters.index.memory_tables`` holds
their in-memory twins.
``tests/contract/test_index_repositories.py`` runs one suite against both. Lists are newest first unless a method
says otherwise; "first writer wins" means a second write of the same key changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from node.domain.ports.records import ClaimRow, DatasetRow, Divergence, ExecutionRow

# An owed pin: (cid, recursive, provide once pinned).
PendingPin = tuple[str, bool, bool]


class CatalogRepository(Protocol):
    """Dataset names and their heads, and facts about versions (logical hash, rows)."""

    @property
    def generation(self) -> int:
        """Counts writes to the heads: an answer read at one generation is stale at another."""

    def dataset(self, name: str) -> DatasetRow | None: ...
    def dataset_by_id(self, dataset_id: str) -> DatasetRow | None: ...

    def datasets(self) -> list[DatasetRow]:
        """Every dataset, by name."""

    def create_dataset(self, name: str, dataset_id: str, head: str, ipns: str | None, key_name: str) -> None:
        """A new name (``Conflict`` if the name or the id is taken)."""

    def move_head(self, name: str, old: str, new: str) -> bool:
        """Compare-and-set: moves the head only if it is still ``old``."""

    def count(self) -> int: ...
    def version_facts(self, head: str) -> tuple[str, int] | None: ...

    def set_version_facts(self, head: str, logical_hash: str, rows: int) -> None:
        """Last writer wins."""


class ExecutionRepository(Protocol):
    """Answers held here (results and recorded failures) by invocation, the disagreeing answers peers gave, and
    the output names users' queries gave them."""

    @property
    def generation(self) -> int:
        """Counts writes of executions (see ``CatalogRepository.generation``)."""

    def execution(self, invocation: str) -> ExecutionRow | None: ...

    def add_execution(self, e: ExecutionRow) -> None:
        """First writer wins, except that a better-checked answer (``trust_strength``) replaces a looser one, and
        a result computed or recomputed here replaces a recorded failure."""

    def executions(self, limit: int = 1000) -> list[ExecutionRow]:
        """Newest ``created`` first."""

    def executions_by_cid(self, execution: str) -> ExecutionRow | None: ...

    def executions_with_slice(self, slice_cid: str, limit: int = 16) -> list[ExecutionRow]:
        """Executions whose output lists ``slice_cid``, oldest first."""

    def count(self) -> int: ...

    def add_divergence(self, d: Divergence) -> bool:
        """Record once per (invocation, signer, their execution): False if already known."""

    def divergences(self, invocation: str | None = None, limit: int = 100) -> list[Divergence]: ...
    def divergence_count(self) -> int: ...
    def output_names(self, execution: str) -> list[str] | None: ...

    def set_output_names(self, execution: str, names: list[str]) -> None:
        """First writer wins."""


class ClaimRepository(Protocol):
    """Peers' claims (signed announcements) and their status, refused messages, each signer's replay mark."""

    def add_claim(self, c: ClaimRow) -> bool:
        """Record once per (invocation, signer, execution): False if already known."""

    def claims(self, invocation: str | None = None, limit: int = 100) -> list[ClaimRow]: ...
    def claim_count(self, peer: str | None = None, status: str | None = None) -> int: ...

    def shape_claims(self, shape: str, limit: int = 64) -> list[ClaimRow]:
        """Claims whose announcement names ``shape``."""

    def set_claim_status(self, invocation: str, signer: str, execution: str, status: str, reason: str = "") -> None:
        """Set a known claim's status (an unknown claim: nothing)."""

    def prune_claims(self, peer: str, per_peer: int, total: int) -> int:
        """Keep at most ``per_peer`` claims from ``peer`` and ``total`` in all: claims not yet accepted go before
        accepted ones, oldest first. How many went."""

    def log_refusal(self, peer: str, reason: str, keep: int = 1000) -> None:
        """Keep a message too broken to be a claim; the last ``keep`` only."""

    def refusals(self, limit: int = 100) -> list[tuple[str, str, float]]:
        """(peer, reason, received), newest first."""

    def signer_mark(self, signer: str) -> float | None:
        """The newest time of ``signer``'s gossiped announcements taken here (None: none kept)."""

    def set_signer_mark(self, signer: str, newest: float, keep: int) -> None:
        """Raise the mark (never lower it); a new signer past ``keep`` forgets the least recently moved one."""


class TrustRepository(Protocol):
    """Trusted keys by community, and each signer's score (claims accepted, refused)."""

    def trust_add(self, key: str, community: str) -> None: ...

    def trust_rm(self, key: str, community: str | None) -> int:
        """Remove ``key`` from ``community`` (None: from all): how many entries went."""

    def trusted(self, community: str | None = None) -> list[tuple[str, str]]:
        """(key, community) by community then key."""

    def signer_score(self, key: str) -> tuple[int, int]:
        """(accepted, refused); (0, 0) for a key never scored."""

    def score(self, signer: str, accepted: bool) -> None:
        """Count one accepted (or refused) claim for ``signer``."""


class PinRepository(Protocol):
    """Pins and blocks owed to the block store for answers already given: kept until done, across restarts."""

    def queue_pins(self, pins: list[PendingPin], blocks: Sequence[tuple[str, bytes]] = ()) -> None:
        """Owe ``pins`` and the ``blocks`` (cid, bytes) to put before them: all are queued or none."""

    def pending_pins(self, limit: int = 1000) -> list[PendingPin]:
        """Oldest first."""

    def pending_blocks(self, limit: int = 1000) -> list[tuple[str, bytes]]:
        """Oldest first."""

    def blocks_done(self, cids: Sequence[str]) -> None: ...
    def pin_done(self, cid: str, recursive: bool) -> None: ...


class ShapeRepository(Protocol):
    """Results computed here indexed by the shape of their inputs: candidate supersets of later queries."""

    def add_shape(
        self, shape: str, invocation: str, statement: str, outputs: int, now: float, public: str | None = None
    ) -> None:
        """First writer wins per (shape, invocation)."""

    def shape_candidates(self, shape: str, limit: int = 32) -> list[tuple[str, str, int]]:
        """(invocation, statement, outputs) over ``shape``, newest first."""

    def shape_of(self, invocation: str) -> str | None:
        """The public shape of a result computed here, if it has one."""
