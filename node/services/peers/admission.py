"""Admission of peers' announcements: token buckets per sending peer and per signing key, a bound on the new keys
one peer may bring, strikes that get a misbehaving peer ignored for a while, and a watermark per signing key that
tells a replayed announcement from a new one (docs/peers.md "Floods and quotas").

A "peer" here is whoever must hold a connection to send: the Noise-authenticated peer a message came from (for
gossip, the forwarder, never the origin a message names, which a sender mints per message at no cost).

IO-free state machines (in the manner of iroh-gossip's): every decision takes ``now`` (seconds, any monotonic
clock) and touches no clock, socket or file, so that they are unit-tested over generated event sequences. Their
memory is bounded: tables of peers and keys are LRU-capped (an evicted entry starts again with full buckets, so
an attacker with more than ``MAX_TRACKED`` identities can reset some; the storage quotas bound what that gains).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from node.support.lru import Lru

MAX_TRACKED = 4096  # peers, and signing keys, whose buckets are remembered (LRU)
MAX_SIGNERS_PER_PEER = 256  # signing keys remembered as "already seen from this peer"
# Announcements of one key remembered above its floor: more than its burst (50). Past it the floor rises to the
# oldest: a key sending at its full rate (2/s) keeps a window of ~30 s, more than gossip reorders by; it refuses
# more, never admits a replay. 4096 keys * 64 ids: ~30 MB at most.
RECENT_PER_SIGNER = 64


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
    replay_window: float = 60.0  # seconds (of the signer's clock) a gossiped announcement may lag its newest


@dataclass
class _Mark:
    """One key's gossiped announcements taken: all at or below ``floor`` (a time of its clock), and those above it
    by identity (digest of their bytes) with their time."""

    floor: float
    newest: float
    recent: dict[bytes, float] = field(default_factory=dict)


@dataclass
class Replays:
    """A watermark per signing key: a gossiped announcement is taken once; again, or older than the key's newest
    by more than ``window``, it is a replay (gossip carries news; older announcements come by catch-up and
    lookup, which do not pass here). ``stored(key)`` reads a key's newest time kept across restarts (None: never
    seen); after a restart, or once forgotten here, everything at or below it is a replay."""

    window: float = 60.0
    stored: Callable[[str], float | None] = lambda _key: None
    keys: Lru[_Mark] = field(default_factory=lambda: Lru(MAX_TRACKED))

    def _mark(self, signer: str) -> _Mark:
        m = self.keys.get(signer)
        if m is None:
            newest = self.stored(signer)
            m = _Mark(float("-inf"), float("-inf")) if newest is None else _Mark(newest, newest)
            self.keys.put(signer, m)
        return m

    def check(self, signer: str, ident: bytes, t: float) -> str | None:
        m = self._mark(signer)
        if ident in m.recent or t <= m.floor:
            return "replay: an announcement of this signing key already taken, or older than its watermark"
        return None

    def take(self, signer: str, ident: bytes, t: float) -> float | None:
        """Remember a new announcement as taken; its key's new newest time if it moved (to store), else None."""
        m = self._mark(signer)
        m.recent[ident] = t
        moved = t > m.newest
        m.newest = max(m.newest, t)
        floor = m.newest - self.window
        while len(m.recent) > RECENT_PER_SIGNER:
            oldest = min(m.recent, key=m.recent.__getitem__)
            floor = max(floor, m.recent.pop(oldest))
        if floor > m.floor:
            m.floor = floor
            m.recent = {k: v for k, v in m.recent.items() if v > floor}
        return m.newest if moved else None


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
    replays: Replays = field(default_factory=Replays)

    def __post_init__(self) -> None:
        self.replays.window = self.limits.replay_window

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

    def admit_signer(
        self, peer: str, signer: str, now: float, bulk: bool = False, seen: tuple[bytes, float] | None = None
    ) -> str | None:
        """``seen``: a gossiped announcement's identity and time (its key's clock): a replay is refused before it
        costs its key anything (the peer that sent it paid its own token, ``admit_peer``)."""
        if reason := self.ignored(peer, now):
            return reason
        p = self._peer(peer)
        if p.signers.get(signer) is None:
            if not p.new_signers.allow(now):
                return "limit: too many new signing keys from this peer"
            p.signers.put(signer, True)
        if bulk:
            return None
        if seen is not None and (reason := self.replays.check(signer, *seen)):
            return reason
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
