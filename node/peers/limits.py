"""Admission of peers' announcements: token buckets per sending peer and per signing key, a bound on the new keys
one peer may bring, and strikes that get a misbehaving peer ignored for a while (docs/peers.md "Floods and quotas").

IO-free state machines (in the manner of iroh-gossip's): every decision takes ``now`` (seconds, any monotonic
clock) and touches no clock, socket or file, so that they are unit-tested over generated event sequences. Their
memory is bounded: tables of peers and keys are LRU-capped (an evicted entry starts again with full buckets, so
an attacker with more than ``MAX_TRACKED`` identities can reset some; the storage quotas bound what that gains).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from node.lru import Lru

MAX_TRACKED = 4096  # peers, and signing keys, whose buckets are remembered (LRU)
MAX_SIGNERS_PER_PEER = 256  # signing keys remembered as "already seen from this peer"


@dataclass
class TokenBucket:
    """``burst`` tokens at most, refilled at ``rate`` per second; ``allow`` takes one if there is one."""

    rate: float
    burst: float
    tokens: float = -1.0  # -1: full at the first call
    last: float | None = None

    def allow(self, now: float, cost: float = 1.0) -> bool:
        if self.last is None:
            self.tokens, self.last = self.burst, now
        elif now > self.last:  # a clock that steps back refills nothing and takes nothing away
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
        if self.tokens >= cost - 1e-9:  # refill arithmetic rounds: a sender at exactly the rate must pass
            self.tokens = max(0.0, self.tokens - cost)
            return True
        return False


@dataclass(frozen=True)
class Limits:
    rate: float = 2.0  # announcements per second, per sending peer and per signing key
    burst: float = 50.0
    new_signers_burst: float = 8.0  # keys one peer may bring at once (anyone can mint keys)
    new_signers_rate: float = 1.0 / 60.0  # then one more per minute
    catchups_burst: float = 2.0  # catch-up deliveries per peer (one per connection is normal)
    catchups_rate: float = 1.0 / 60.0
    strikes: int = 20  # bad messages from a peer before it is ignored
    ignore_for: float = 600.0  # seconds a peer is ignored after its last strike


@dataclass
class _Peer:
    announces: TokenBucket
    new_signers: TokenBucket
    catchups: TokenBucket
    signers: Lru[bool]
    strikes: int = 0
    ignored_until: float = float("-inf")


@dataclass
class Admission:
    """Decides whether one announcement from ``peer`` signed by ``signer`` may be looked at; None is yes, else
    the reason (one line, starting ``limit: ``)."""

    limits: Limits = field(default_factory=Limits)
    peers: Lru[_Peer] = field(default_factory=lambda: Lru(MAX_TRACKED))
    signers: Lru[TokenBucket] = field(default_factory=lambda: Lru(MAX_TRACKED))

    def _peer(self, peer: str) -> _Peer:
        p = self.peers.get(peer)
        if p is None:
            lim = self.limits
            p = _Peer(
                TokenBucket(lim.rate, lim.burst),
                TokenBucket(lim.new_signers_rate, lim.new_signers_burst),
                TokenBucket(lim.catchups_rate, lim.catchups_burst),
                Lru(MAX_SIGNERS_PER_PEER),
            )
            self.peers.put(peer, p)
        return p

    def ignored(self, peer: str, now: float) -> str | None:
        p = self.peers.get(peer)
        if p is not None and now < p.ignored_until:
            return f"limit: peer ignored after {self.limits.strikes} bad messages"
        return None

    def admit(self, peer: str, signer: str, now: float, bulk: bool = False) -> str | None:
        """``bulk``: an item of a catch-up or a lookup answer, admitted as a whole: the per-message buckets do not
        apply, the bound on new keys does."""
        return (None if bulk else self.admit_peer(peer, now)) or self.admit_signer(peer, signer, now, bulk)

    def admit_peer(self, peer: str, now: float) -> str | None:
        """The checks that need no decoding: run first, so that a flood costs no decoding past its limit."""
        if reason := self.ignored(peer, now):
            return reason
        return None if self._peer(peer).announces.allow(now) else "limit: too many announcements from this peer"

    def admit_signer(self, peer: str, signer: str, now: float, bulk: bool = False) -> str | None:
        if reason := self.ignored(peer, now):
            return reason
        p = self._peer(peer)
        if p.signers.get(signer) is None:
            if not p.new_signers.allow(now):
                return "limit: too many new signing keys from this peer"
            p.signers.put(signer, True)
        if bulk:
            return None
        bucket = self.signers.get(signer)
        if bucket is None:
            bucket = TokenBucket(self.limits.rate, self.limits.burst)
            self.signers.put(signer, bucket)
        return None if bucket.allow(now) else "limit: too many announcements from this signing key"

    def catchup(self, peer: str, now: float) -> str | None:
        if reason := self.ignored(peer, now):
            return reason
        return None if self._peer(peer).catchups.allow(now) else "limit: too many catch-ups from this peer"

    def strike(self, peer: str, now: float) -> bool:
        """A bad message from ``peer`` (malformed, badly signed). True when this strike gets it ignored."""
        p = self._peer(peer)
        p.strikes += 1
        if p.strikes >= self.limits.strikes:
            p.ignored_until = now + self.limits.ignore_for
            p.strikes = 0
            return True
        return False
