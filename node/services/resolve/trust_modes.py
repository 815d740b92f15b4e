"""Trust modes: which stored trust labels an answer to each request may come from (docs/peers.md "Trust labels")."""

from __future__ import annotations

from node.adapters.index import TRUST_LABELS
from node.services.resolve import quorum

TRUST_MODES = ("self", "community", "verify", "any")
# Which stored trust labels each mode may answer with (DESIGN.md: "a stricter request never receives a looser
# row"); a row it may not use is a miss for it: it goes to peers or computes. docs/peers.md.
ACCEPTS: dict[str, tuple[str, ...]] = {
    "self": ("computed", "recomputed-agreed"),
    "verify": ("computed", "recomputed-agreed"),
    "community": ("computed", "recomputed-agreed", "trusted-signer"),
    "any": TRUST_LABELS,
}
VERIFIED_LABELS = ("computed", "recomputed-agreed")  # "verified": true only for these
# quorum:K[:communities]: a local row is used only if checked here, since a row kept from one peer says nothing of
# how many signers agree; a peer's answer only when K signers agree on it, counted again at each ask
# (node/services/resolve/quorum.py, docs/peers.md "Quorum").
POLICY = "policy: "  # a refusal reason that judges the signer or the mode, not the claim: not counted, not final


def accepts(mode: str) -> tuple[str, ...]:
    """The stored trust labels a mode may answer with (quorum modes: only what was checked here)."""
    return VERIFIED_LABELS if quorum.parse(mode) is not None else ACCEPTS[mode]


def valid_mode(mode: str) -> bool:
    """One of TRUST_MODES or a well-formed quorum:K[:communities] (a malformed quorum raises InvalidInput)."""
    return mode in TRUST_MODES or quorum.parse(mode) is not None
