"""Whether peers' announcements are looked at, recorded or refused, decided without IO (docs/peers.md "Floods and
quotas").

``ClaimIntake`` is the inbound half of the peer protocol as a state machine over explicit time: it is told what
arrived (a gossiped message, a catch-up, a lookup answer, a checked announcement) with ``now``, keeps the
admission state (node/services/peers/admission.py) and the counters, and answers what to do: look further, record a
claim
(``Take``), or nothing. The refusals it decides wait in ``outbox`` (``Refused``), in order, for the caller to log
and to keep in the index. It touches no clock, socket, file or index: node/services/peers/claim_receiver.py does that
IO.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from config import PeerSettings
from node.domain.model import CID, Announcement, cid_for, cid_str, decode
from node.services.peers.admission import Admission, Limits
from node.services.resolve.carry import CARRY_BLOCKS, CARRY_CAP
from node.services.resolve.claim_checks import UNREACHABLE, check_announcement
from node.support.errors import ClaimRefused, EncodingError

# What inbound peer input is refused for (docs/peers.md "Floods and quotas"); "gossip-frame" is the host's count.
REFUSAL_KINDS = ("malformed", "signature", "providers", "limit", "ignored", "replay", "claim")
CATCHUP_LIMIT = 1000  # announcements per catch-up, sent or read
CATCHUP_MAX_BYTES = 2 * 1024 * 1024  # 1000 announcements take ~0.4 MB
LOOKUP_ITEMS = 8  # announcements read from one peer's lookup answer

# One item of a lookup answer: the announcement's bytes and the blocks it carried (CID bytes -> checked bytes).
Carried = tuple[bytes, dict[bytes, bytes]]


@dataclass(frozen=True)
class Refused:
    """A refusal decided: to log (``loud``: at warning level), and with ``strike``, to keep in the index.
    ``ignored_now``: this strike got the peer ignored."""

    peer: str
    kind: str
    reason: str
    count: int  # refusals of this kind so far
    strike: bool
    ignored_now: bool

    @property
    def loud(self) -> bool:
        """The 1st, 2nd, 4th, 8th… of a kind: a flood must not become a flood of log lines."""
        return self.count & (self.count - 1) == 0


@dataclass(frozen=True)
class Take:
    """A checked announcement within every limit: to record. ``mark``: its signer's newest time, moved (to keep
    across restarts), else None. ``origin``: the peer a gossiped one names as its publisher (None: catch-up)."""

    peer: str
    announcement: Announcement
    data: bytes
    origin: str | None
    mark: float | None


class ClaimIntake:
    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.received = 0  # announcements that arrived by gossip or catch-up
        self.refused = 0
        self.accepted = 0  # announcements checked and stored (metrics: cairn_announcements_total)
        self.refusals: Counter[str] = Counter()  # by kind; metrics read it
        self.pruned = 0  # claims dropped by the storage quotas
        self.outbox: list[Refused] = []

    def drain(self) -> list[Refused]:
        """The refusals decided since the last drain, oldest first."""
        out, self.outbox = self.outbox, []
        return out

    def refuse(self, peer: str, kind: str, reason: str, strike: bool, now: float) -> None:
        """Count a refusal; a bad message (``strike``) counts towards ignoring its peer. Refusals for limits are
        counted only (no strike): a flood must not become a flood of index writes."""
        self.refused += 1
        self.refusals[kind] += 1
        ignored_now = strike and self.admission.strike(peer, now)
        self.outbox.append(Refused(peer, kind, reason, self.refusals[kind], strike, ignored_now))

    def _refuse_limit(self, peer: str, reason: str, now: float) -> None:
        self.refuse(peer, limit_kind(reason), reason, False, now)

    # -- gossip and catch-up ------------------------------------------------------------------------

    def gossip_arrived(self, peer: str, now: float) -> bool:
        """A gossiped message from ``peer`` (the connection it came on): whether to check it. The peer's limits
        apply before any decoding, so that a flood costs no decoding past its limit."""
        self.received += 1
        if reason := self.admission.admit_peer(peer, now):
            self._refuse_limit(peer, reason, now)
            return False
        return True

    def catchup_arrived(self, peer: str, size: int, now: float) -> bool:
        """A catch-up of ``size`` bytes: whether to decode it (refused whole before decoding: decoding is the
        cost a flood would impose)."""
        if size > CATCHUP_MAX_BYTES:
            self.refuse(peer, "limit", f"limit: catch-up of {size} bytes, over {CATCHUP_MAX_BYTES}", False, now)
            return False
        if reason := self.admission.catchup(peer, now):
            self._refuse_limit(peer, reason, now)
            return False
        return True

    def catchup_items(self, peer: str, items: Any, now: float) -> list[bytes]:
        """A decoded catch-up's announcements to check: the first ``CATCHUP_LIMIT`` (as a sender of ours would
        have sent), the bytes items only."""
        if not isinstance(items, list):
            self.refuse(peer, "malformed", "catch-up is not a list of announcements", True, now)
            return []
        if len(items) > CATCHUP_LIMIT:
            self.refuse(peer, "limit", f"limit: catch-up of {len(items)} items, over {CATCHUP_LIMIT}", False, now)
        return [d for d in items[:CATCHUP_LIMIT] if isinstance(d, bytes)]

    def catchup_item(self, peer: str, data: bytes, checked: Announcement | ClaimRefused, now: float) -> Take | None:
        self.received += 1
        return self.checked(peer, data, checked, now, bulk=True)

    def checked(
        self,
        peer: str,
        data: bytes,
        checked: Announcement | ClaimRefused,
        now: float,
        bulk: bool,
        origin: str | None = None,
    ) -> Take | None:
        """An announcement checked on arrival (``check``): refused (a failed check is struck), or within its
        signer's limits and to be recorded. ``bulk``: a catch-up's item (``origin`` None), which no replay or
        per-message bucket applies to."""
        if reason := self.admission.ignored(peer, now):  # struck meanwhile (a catch-up's earlier items)
            self.refuse(peer, "ignored", reason, False, now)
            return None
        if isinstance(checked, ClaimRefused):
            self.refuse(peer, check_kind(checked.message), checked.message, True, now)
            return None
        seen = None if bulk else (hashlib.blake2b(data, digest_size=16).digest(), signed_at(checked))
        if reason := self.admission.admit_signer(peer, checked.signer, now, bulk, seen):
            self._refuse_limit(peer, reason, now)
            return None
        mark = None if seen is None else self.admission.replays.take(checked.signer, *seen)
        return Take(peer, checked, data, origin, mark)

    def recorded(self) -> None:
        """A ``Take`` the resolver recorded (it may decline one it already holds)."""
        self.accepted += 1

    def claim_refused(self, peer: str, reason: str, now: float) -> bool:
        """A claim from ``peer`` failed a check when used: counted, and the peer struck, unless the claim's
        providers could not be reached (which says nothing against the peer). True when this got it ignored."""
        self.refusals["claim"] += 1
        return not reason.startswith(UNREACHABLE) and self.admission.strike(peer, now)

    # -- lookup answers -----------------------------------------------------------------------------

    def lookup_answer(self, peer: str, answer: bytes, carrying: bool, now: float) -> list[Carried] | None:
        """The announcements of one peer's lookup answer that may be looked at: at most ``LOOKUP_ITEMS`` (a peer
        can sign for one execution per invocation; more is a flood), none from an ignored peer, within the bound
        on new keys; each with the blocks it carried (``carrying``: 1.1.0). None: the whole answer is refused
        (its peer ignored, or unreadable). The resolver checks and records what is kept
        (node/services/resolve/peer_answers.py)."""
        if reason := self.admission.ignored(peer, now):
            self.refuse(peer, "ignored", reason, False, now)
            return None
        try:
            items = decode(answer)
        except EncodingError as e:
            self.refuse(peer, "malformed", f"unreadable lookup answer: {e.message}", True, now)
            return None
        if not isinstance(items, list):
            self.refuse(peer, "malformed", "lookup answer is not a list of announcements", True, now)
            return None
        if len(items) > LOOKUP_ITEMS:
            self.refuse(peer, "limit", f"limit: lookup answer of {len(items)} items, over {LOOKUP_ITEMS}", False, now)
        first = items[:LOOKUP_ITEMS]
        pairs = self._carried_items(peer, first, now) if carrying else [(d, {}) for d in first]
        kept: list[Carried] = []
        for data, carried in pairs:
            if not isinstance(data, bytes):
                continue
            try:  # the signer it names, to bound minted keys; the resolver checks the whole announcement
                signer = check_announcement(data).signer
            except ClaimRefused:
                kept.append((data, {}))  # refused, logged and counted by the resolver
                continue
            if reason := self.admission.admit(peer, signer, now, bulk=True):
                self._refuse_limit(peer, reason, now)
                continue
            kept.append((data, carried))
        return kept

    def _carried_items(self, peer: str, items: list[Any], now: float) -> list[tuple[Any, dict[bytes, bytes]]]:
        """1.1.0 items as (announcement, carried blocks): at most ``CARRY_BLOCKS`` blocks an item and ``CARRY_CAP``
        bytes in all are kept (the rest is dropped, and fetched by CID if needed); a block whose bytes do not
        give its CID (BLAKE3, as Cairn writes every block) is a bad message."""
        budget = CARRY_CAP
        out: list[tuple[Any, dict[bytes, bytes]]] = []
        for item in items:
            if not isinstance(item, dict):
                self.refuse(peer, "malformed", "lookup answer item is not a map", True, now)
                continue
            carried: dict[bytes, bytes] = {}
            blocks = item.get("blocks")
            for pair in blocks[:CARRY_BLOCKS] if isinstance(blocks, list) else []:
                ok = isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], CID)
                if not ok or not isinstance(pair[1], bytes) or len(pair[1]) > budget:
                    continue
                if bytes(cid_for(pair[1], pair[0].codec.code)) != bytes(pair[0]):
                    self.refuse(peer, "malformed", f"carried block {cid_str(pair[0])} does not hash to it", True, now)
                    carried = {}
                    break
                carried[bytes(pair[0])] = pair[1]
                budget -= len(pair[1])
            out.append((item.get("an"), carried))
        return out


def check(data: bytes) -> Announcement | ClaimRefused:
    """An announcement's checks (decoding, signature, providers), the refusal returned rather than raised."""
    try:
        return check_announcement(data)
    except ClaimRefused as e:
        return e


def check_all(batch: list[bytes]) -> list[Announcement | ClaimRefused]:
    return [check(d) for d in batch]


def check_kind(reason: str) -> str:
    """The counter a check_announcement refusal goes to (node/services/resolve/claim_checks.py words its reasons)."""
    if reason.startswith("bad signature"):
        return "signature"
    if reason.startswith("announcement"):
        return "providers"
    return "malformed"


def limit_kind(reason: str) -> str:
    """The counter an admission refusal (node/services/peers/admission.py words its reasons) goes to."""
    if reason.startswith("replay"):
        return "replay"
    return "ignored" if reason.startswith("limit: peer ignored") else "limit"


def signed_at(an: Announcement) -> float:
    """An announcement's time (its signer's clock, unix seconds); unreadable: older than any (a replay)."""
    try:
        t = dt.datetime.fromisoformat(an.time)
        return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()
    except (ValueError, OverflowError):
        return float("-inf")


def intake_limits(s: PeerSettings) -> Limits:
    """The admission limits ``peers.*`` sets."""
    return Limits(
        rate=s.announce_rate,
        burst=s.announce_burst,
        new_signers_burst=s.new_signers_burst,
        new_signers_rate=s.new_signers_per_hour / 3600.0,
        strikes=s.bad_messages_before_ignore,
        ignore_for=s.ignore_seconds,
        replay_window=s.replay_window,
    )
