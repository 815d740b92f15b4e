"""The index's methods under their names from before the split into repositories, each handed to the repository
that holds its table: callers move to ``index.<repository>.<method>`` and this class then goes."""

from __future__ import annotations

from collections.abc import Sequence

from node.ports.records import ClaimRow, DatasetRow, Divergence, ExecutionRow
from node.ports.repositories import (
    CatalogRepository,
    ClaimRepository,
    ExecutionRepository,
    PendingPin,
    PinRepository,
    ShapeRepository,
    TrustRepository,
)


class FlatMethods:
    catalog: CatalogRepository
    results: ExecutionRepository
    peer_claims: ClaimRepository
    trust: TrustRepository
    pins: PinRepository
    shapes: ShapeRepository

    # -- catalog
    def dataset(self, name: str) -> DatasetRow | None:
        return self.catalog.dataset(name)

    def dataset_by_id(self, dataset_id: str) -> DatasetRow | None:
        return self.catalog.dataset_by_id(dataset_id)

    def datasets(self) -> list[DatasetRow]:
        return self.catalog.datasets()

    def create_dataset(self, name: str, dataset_id: str, head: str, ipns: str | None, key_name: str) -> None:
        self.catalog.create_dataset(name, dataset_id, head, ipns, key_name)

    def move_head(self, name: str, old: str, new: str) -> bool:
        return self.catalog.move_head(name, old, new)

    def version_facts(self, head: str) -> tuple[str, int] | None:
        return self.catalog.version_facts(head)

    def set_version_facts(self, head: str, logical_hash: str, rows: int) -> None:
        self.catalog.set_version_facts(head, logical_hash, rows)

    def count(self, table: str) -> int:
        counts = {"datasets": self.catalog.count, "executions": self.results.count}
        counts["divergences"] = self.results.divergence_count
        if table not in counts:
            raise ValueError(table)
        return counts[table]()

    # -- executions
    def execution(self, invocation: str) -> ExecutionRow | None:
        return self.results.execution(invocation)

    def add_execution(self, e: ExecutionRow) -> None:
        self.results.add_execution(e)

    def executions(self, limit: int = 1000) -> list[ExecutionRow]:
        return self.results.executions(limit)

    def executions_by_cid(self, execution: str) -> ExecutionRow | None:
        return self.results.executions_by_cid(execution)

    def executions_with_slice(self, slice_cid: str, limit: int = 16) -> list[ExecutionRow]:
        return self.results.executions_with_slice(slice_cid, limit)

    def add_divergence(self, d: Divergence) -> bool:
        return self.results.add_divergence(d)

    def divergences(self, invocation: str | None = None, limit: int = 100) -> list[Divergence]:
        return self.results.divergences(invocation, limit)

    def output_names(self, execution: str) -> list[str] | None:
        return self.results.output_names(execution)

    def set_output_names(self, execution: str, names: list[str]) -> None:
        self.results.set_output_names(execution, names)

    # -- claims
    def add_claim(self, c: ClaimRow) -> bool:
        return self.peer_claims.add_claim(c)

    def claims(self, invocation: str | None = None, limit: int = 100) -> list[ClaimRow]:
        return self.peer_claims.claims(invocation, limit)

    def claim_count(self, peer: str | None = None, status: str | None = None) -> int:
        return self.peer_claims.claim_count(peer, status)

    def shape_claims(self, shape: str, limit: int = 64) -> list[ClaimRow]:
        return self.peer_claims.shape_claims(shape, limit)

    def set_claim_status(
        self, invocation: str, signer: str, execution: str, status: str, reason: str = "", score: bool = True
    ) -> None:
        """``score``: whether this counts for or against the signer (a policy refusal, such as an untrusted
        signer in community mode, says nothing about the claim's truth and does not)."""
        self.peer_claims.set_claim_status(invocation, signer, execution, status, reason)
        if score:
            self.trust.score(signer, status == "accepted")

    def prune_claims(self, peer: str, per_peer: int, total: int) -> int:
        return self.peer_claims.prune_claims(peer, per_peer, total)

    def log_refusal(self, peer: str, reason: str, keep: int = 1000) -> None:
        self.peer_claims.log_refusal(peer, reason, keep)

    def refusals(self, limit: int = 100) -> list[tuple[str, str, float]]:
        return self.peer_claims.refusals(limit)

    def signer_mark(self, signer: str) -> float | None:
        return self.peer_claims.signer_mark(signer)

    def set_signer_mark(self, signer: str, newest: float, keep: int) -> None:
        self.peer_claims.set_signer_mark(signer, newest, keep)

    # -- trust
    def trust_add(self, key: str, community: str) -> None:
        self.trust.trust_add(key, community)

    def trust_rm(self, key: str, community: str | None) -> int:
        return self.trust.trust_rm(key, community)

    def trusted(self, community: str | None = None) -> list[tuple[str, str]]:
        return self.trust.trusted(community)

    def signer_score(self, key: str) -> tuple[int, int]:
        return self.trust.signer_score(key)

    # -- pins
    def queue_pins(self, pins: list[PendingPin], blocks: Sequence[tuple[str, bytes]] = ()) -> None:
        self.pins.queue_pins(pins, blocks)

    def pending_pins(self, limit: int = 1000) -> list[PendingPin]:
        return self.pins.pending_pins(limit)

    def pending_blocks(self, limit: int = 1000) -> list[tuple[str, bytes]]:
        return self.pins.pending_blocks(limit)

    def blocks_done(self, cids: Sequence[str]) -> None:
        self.pins.blocks_done(cids)

    def pin_done(self, cid: str, recursive: bool) -> None:
        self.pins.pin_done(cid, recursive)

    # -- shapes
    def add_shape(
        self, shape: str, invocation: str, statement: str, outputs: int, now: float, public: str | None = None
    ) -> None:
        self.shapes.add_shape(shape, invocation, statement, outputs, now, public)

    def shape_candidates(self, shape: str, limit: int = 32) -> list[tuple[str, str, int]]:
        return self.shapes.shape_candidates(shape, limit)

    def shape_of(self, invocation: str) -> str | None:
        return self.shapes.shape_of(invocation)
