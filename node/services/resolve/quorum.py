"""Trust mode ``quorum:K`` (docs/peers.md "Quorum"): a peer's answer is used when K distinct
signers announced the same output (logical hash and rows) for the invocation; ``quorum:K:communities`` also needs
them from K different trusted communities (the index's trust table). Pure counting: the resolver fetches and checks
the claim chosen, and refuses the outvoted ones (which lowers their signers' scores)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from node.support.errors import InvalidInput

PREFIX = "quorum:"
MAX_K = 64  # more signers than any lookup brings (8 per peer answer)

Output = tuple[str, int]  # (logical hash, rows); a recorded failure is ("", 0) and its class: kept apart
Vote = tuple[str, Output]  # (signer, output)


@dataclass(frozen=True)
class Mode:
    k: int
    communities: bool  # the K signers must come from K different communities


@dataclass(frozen=True)
class Tally:
    output: Output | None  # the output K signers agree on (None: no quorum)
    agree: tuple[str, ...]  # the signers of the winning output (else of the most-agreed one), sorted
    dissent: tuple[str, ...]  # signers of any other output, sorted
    counted: int  # what counts toward K: distinct signers, or distinct communities among them


def parse(mode: str) -> Mode | None:
    """``quorum:K`` or ``quorum:K:communities`` → Mode; None for the other modes; InvalidInput when malformed."""
    if not mode.startswith(PREFIX):
        return None
    parts = mode[len(PREFIX) :].split(":")
    if len(parts) > 2 or (len(parts) == 2 and parts[1] != "communities") or not parts[0].isdigit():
        raise InvalidInput(f"trust mode {mode!r}: use quorum:K or quorum:K:communities (K from 1 to {MAX_K})")
    k = int(parts[0])
    if not 1 <= k <= MAX_K:
        raise InvalidInput(f"trust mode {mode!r}: K must be from 1 to {MAX_K}")
    return Mode(k, len(parts) == 2)


def tally(votes: Iterable[Vote], mode: Mode, communities: Mapping[str, frozenset[str]] | None = None) -> Tally:
    """Count distinct signers per output. A signer that announced two outputs counts for neither (it contradicts
    itself). With ``mode.communities`` an output counts the distinct communities its signers are trusted in
    (``communities``: signer → its communities; a signer in none counts for nothing), so K signers of one community
    are one vote. The output with the most counted wins if it reaches K; ties have no winner."""
    by_signer: dict[str, set[Output]] = {}
    for signer, output in votes:
        by_signer.setdefault(signer, set()).add(output)
    groups: dict[Output, set[str]] = {}
    for signer, outputs in by_signer.items():
        if len(outputs) == 1:
            groups.setdefault(next(iter(outputs)), set()).add(signer)
    contradicting = {s for s, outs in by_signer.items() if len(outs) > 1}

    def count(signers: set[str]) -> int:
        if not mode.communities:
            return len(signers)
        return len(set().union(*((communities or {}).get(s, frozenset()) for s in signers)))

    ranked = sorted(groups.items(), key=lambda g: (count(g[1]), len(g[1]), g[0]), reverse=True)
    if not ranked:
        return Tally(None, (), tuple(sorted(contradicting)), 0)
    best, signers = ranked[0]
    n = count(signers)
    tie = len(ranked) > 1 and count(ranked[1][1]) == n
    others = {s for out, ss in ranked[1:] for s in ss} | contradicting
    return Tally(best if n >= mode.k and not tie else None, tuple(sorted(signers)), tuple(sorted(others)), n)
