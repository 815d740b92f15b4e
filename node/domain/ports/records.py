"""The records the index's repositories hold (``node.domain.ports.repositories``), one frozen dataclass per kind of
row."""

from __future__ import annotations

from dataclasses import dataclass

from node.domain.model import Failure


@dataclass(frozen=True)
class DatasetRow:
    name: str
    id: str
    head: str
    ipns: str | None
    key_name: str
    created: float
    updated: float


# Trust labels (DESIGN.md "Trust labels are facts"), weakest first; docs/peers.md.
TRUST_LABELS = ("unverified", "trusted-signer", "recomputed-agreed", "computed")
STRENGTH = {"unverified": 0, "trusted-signer": 1, "recomputed-agreed": 2, "computed": 2}  # computed here = checked


def trust_strength(label: str) -> int:
    return STRENGTH.get(label, 0)


@dataclass(frozen=True)
class ExecutionRow:
    invocation: str
    query: str
    execution: str
    receipt: str
    logical_hash: str
    rows: int
    structure: str
    slices: tuple[str, ...]
    source: str
    created: float
    trust: str = "computed"  # one of TRUST_LABELS
    profile: str | None = None  # ep_0 CID of the engine that computed it (None: not known here)
    failure: Failure | None = None  # a recorded deterministic failure: no slices, 0 rows


@dataclass(frozen=True)
class Divergence:
    """A peer's answer for an invocation we hold that disagrees with ours (DESIGN.md "Engine profile")."""

    invocation: str
    execution: str
    profile: str | None
    logical_hash: str
    rows: int
    signer: str
    peer: str
    their_execution: str
    their_receipt: str
    their_profile: str | None
    their_logical_hash: str
    their_rows: int
    received: float


@dataclass(frozen=True)
class ClaimRow:
    invocation: str
    signer: str
    execution: str
    receipt: str
    logical_hash: str
    rows: int
    peer: str
    announcement: bytes
    received: float
    status: str
    reason: str
    shape: str | None = None  # the announcement's query shape, if it names one
