"""The host's peer table: who we know, how to dial them, whether they are connected now.

Shared by the trio thread (connection events, dials) and the asyncio side (``peers()``), so
every access takes a lock. Persisted as JSON (``peerstore_path``), written atomically:

    {"version": 1,
     "peers": {"12D3KooW…": {"addrs": ["/ip4/127.0.0.1/tcp/4001"],
                             "last_seen": 1767225600.0, "source": "dialed"}}}

``addrs`` are dialable multiaddrs without the ``/p2p/<id>`` suffix (the id is the key), most
recent first, at most :data:`MAX_ADDRS`. ``source`` says how we first met the peer:
``dialed`` (we connected out), ``inbound``, ``bootstrap``, ``mdns``, ``remembered``.
Peers not seen for ``forget_after`` seconds are dropped when the file is loaded.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from node.domain.ports.peer_host import PeerEntry
from node.support.errors import one_line

log = logging.getLogger("cairn.p2p")

MAX_ADDRS = 8
VERSION = 1
_B58 = set("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz")


def strip_p2p(addr: str) -> str:
    """``/ip4/…/tcp/…/p2p/<id>`` → ``/ip4/…/tcp/…``."""
    i = addr.find("/p2p/")
    return addr[:i] if i > 0 else addr


class PeerTable:
    def __init__(self, self_id: str, path: Path | None = None, forget_after: float = 30 * 86400.0) -> None:
        self._self = self_id
        self._path = path
        self._forget_after = forget_after
        self._lock = threading.Lock()
        self._peers: dict[str, dict[str, Any]] = {}
        self._forgotten: set[str] = set()  # dropped on purpose: their disconnection must not bring them back
        self.dirty = False

    # ------------------------------------------------------------------ persistence

    def load(self) -> None:
        """Read the file (a missing or unreadable file is an empty table, with a warning)."""
        if self._path is None:
            return
        try:
            raw = json.loads(self._path.read_text())
            entries = raw.get("peers", {}) if isinstance(raw, dict) else {}
            if not isinstance(entries, dict):
                raise ValueError("'peers' is not an object")
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable peerstore %s: %s", self._path, one_line(e))
            return
        now = time.time()
        with self._lock:
            for pid, entry in entries.items():
                if not isinstance(entry, dict) or not _looks_like_peer_id(pid) or pid == self._self:
                    continue
                addrs = [strip_p2p(a) for a in entry.get("addrs", []) if isinstance(a, str) and a.startswith("/")]
                last = entry.get("last_seen")
                last = float(last) if isinstance(last, (int, float)) else None
                if not addrs or (last is not None and now - last > self._forget_after):
                    continue
                source = entry.get("source") if isinstance(entry.get("source"), str) else "remembered"
                self._peers[pid] = {
                    "addrs": addrs[:MAX_ADDRS],
                    "connected": False,
                    "last_seen": last,
                    "source": source,
                    "ephemeral": set(),
                }

    def save(self) -> None:
        """Write the table atomically (tmp file + rename). Errors are logged, not raised."""
        if self._path is None:
            return
        with self._lock:
            data = {
                "version": VERSION,
                "peers": {
                    pid: {"addrs": list(p["addrs"]), "last_seen": p["last_seen"], "source": p["source"]}
                    for pid, p in sorted(self._peers.items())
                    if p["addrs"]
                },
            }
            self.dirty = False
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_name(self._path.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self._path)
        except OSError as e:
            log.warning("cannot save peerstore %s: %s", self._path, one_line(e))

    # ------------------------------------------------------------------ updates

    def _entry(self, pid: str, source: str) -> dict[str, Any]:
        p = self._peers.get(pid)
        if p is None:
            p = self._peers[pid] = {
                "addrs": [],
                "connected": False,
                "last_seen": None,
                "source": source,
                "ephemeral": set(),
            }
        return p

    def remember(self, pid: str, addrs: Iterable[str], source: str) -> None:
        """Add addresses we can dial (most recent first)."""
        if pid == self._self:
            return
        with self._lock:
            self._forgotten.discard(pid)
            p = self._entry(pid, source)
            for a in map(strip_p2p, addrs):
                if a in p["addrs"]:
                    p["addrs"].remove(a)
                p["addrs"].insert(0, a)
            del p["addrs"][MAX_ADDRS:]
            self.dirty = True

    def learn(self, pid: str, addrs: Iterable[str]) -> None:
        """Add addresses a peer announced (identify), after the ones we know work; skips the
        ephemeral source address of an inbound connection."""
        with self._lock:
            p = self._peers.get(pid)
            if p is None:
                return
            for a in map(strip_p2p, addrs):
                if a in p["addrs"] or a in p["ephemeral"] or "/p2p-circuit" in a:
                    continue
                if len(p["addrs"]) < MAX_ADDRS:
                    p["addrs"].append(a)
                    self.dirty = True

    def set_connected(self, pid: str, connected: bool, *, source: str, inbound_from: str | None = None) -> bool:
        """Record a connection change; return True if the peer's state flipped."""
        if pid == self._self:
            return False
        with self._lock:
            if pid in self._forgotten and not connected:
                return False
            self._forgotten.discard(pid)
            p = self._entry(pid, source)
            flipped = p["connected"] != connected
            p["connected"] = connected
            p["last_seen"] = time.time()
            if inbound_from:
                p["ephemeral"].add(strip_p2p(inbound_from))
            self.dirty = True
            return flipped

    def connection_changed(self, pid: str, *, up: bool, live: bool, inbound: bool, remote: str | None) -> bool:
        """A connection to ``pid`` opened (``up``) or closed; ``live``: whether the peer still has one. Record it,
        and return True when the node should treat it as a (re)connection (send the peer what it missed)."""
        flipped = self.set_connected(pid, live, source="inbound" if inbound else "dialed", inbound_from=remote)
        # Every new connection counts as a (re)connection, not only a flip of the table: a peer that restarts
        # at once dials us before we saw its old connection close, so the table never flips and the peer
        # was never caught up (test_network_catchup). Duplicates (simultaneous dials) are harmless.
        return (flipped and live) or up

    def forget(self, pid: str) -> None:
        """Drop a peer (not re-dialled, not saved), e.g. one that turned out not to be a Cairn node."""
        with self._lock:
            self._peers.pop(pid, None)
            self._forgotten.add(pid)
            self.dirty = True

    def touch(self, pid: str) -> None:
        with self._lock:
            p = self._peers.get(pid)
            if p is not None:
                p["last_seen"] = time.time()

    def all_disconnected(self) -> None:
        now = time.time()
        with self._lock:
            for p in self._peers.values():
                if p["connected"]:
                    p["connected"], p["last_seen"] = False, now
            self.dirty = True

    # ------------------------------------------------------------------ reads

    def is_connected(self, pid: str) -> bool:
        with self._lock:
            p = self._peers.get(pid)
            return bool(p and p["connected"])

    def connected(self) -> list[str]:
        with self._lock:
            return sorted(pid for pid, p in self._peers.items() if p["connected"])

    def dial_targets(self) -> list[tuple[str, list[str], str]]:
        """(peer id, addrs, source) of every known, not connected peer with an address."""
        with self._lock:
            return [
                (pid, list(p["addrs"]), p["source"])
                for pid, p in sorted(self._peers.items())
                if p["addrs"] and not p["connected"]
            ]

    def snapshot(self) -> list[PeerEntry]:
        with self._lock:
            return [
                {
                    "peer_id": pid,
                    "addrs": list(p["addrs"]),
                    "connected": p["connected"],
                    "last_seen": p["last_seen"],
                    "source": p["source"],
                }
                for pid, p in sorted(self._peers.items())
            ]


def _looks_like_peer_id(pid: Any) -> bool:
    return isinstance(pid, str) and 40 <= len(pid) <= 60 and set(pid) <= _B58
