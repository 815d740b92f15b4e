"""The host's peer table and its JSON file (``p2p.peers``)."""

from __future__ import annotations

import json
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from p2p.ids import peer_id
from p2p.peers import PeerTable, strip_p2p


def peer_id_from_seed(seed: bytes) -> str:
    return peer_id(Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw())


ME = peer_id_from_seed(bytes([1]) * 32)
A = peer_id_from_seed(bytes([2]) * 32)
B = peer_id_from_seed(bytes([3]) * 32)


def test_strip_p2p():
    assert strip_p2p(f"/ip4/127.0.0.1/tcp/1/p2p/{A}") == "/ip4/127.0.0.1/tcp/1"
    assert strip_p2p("/ip4/127.0.0.1/tcp/1") == "/ip4/127.0.0.1/tcp/1"


def test_round_trip_through_the_file(tmp_path):
    path = tmp_path / "sub" / "peers.json"
    t = PeerTable(ME, path)
    t.remember(A, [f"/ip4/127.0.0.1/tcp/4001/p2p/{A}"], "dialed")
    t.set_connected(A, True, source="dialed")
    t.remember(ME, ["/ip4/127.0.0.1/tcp/9"], "dialed")  # never ourselves
    t.set_connected(B, True, source="inbound", inbound_from="/ip4/127.0.0.1/tcp/50123")
    t.save()
    assert not t.dirty and not list(path.parent.glob("*.tmp"))
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert set(data["peers"]) == {A}  # B has no dialable address yet
    assert data["peers"][A]["addrs"] == ["/ip4/127.0.0.1/tcp/4001"]

    t2 = PeerTable(ME, path)
    t2.load()
    (entry,) = t2.snapshot()
    assert entry["peer_id"] == A and entry["connected"] is False and entry["source"] == "dialed"
    assert t2.dial_targets() == [(A, ["/ip4/127.0.0.1/tcp/4001"], "dialed")]


def test_learned_addresses_skip_the_inbound_source_port():
    t = PeerTable(ME)
    assert t.set_connected(B, True, source="inbound", inbound_from="/ip4/127.0.0.1/tcp/50123")
    assert not t.set_connected(B, True, source="inbound")  # no flip
    t.learn(B, ["/ip4/127.0.0.1/tcp/50123", f"/ip4/127.0.0.1/tcp/4002/p2p/{B}", "/ip4/1.2.3.4/tcp/1/p2p-circuit"])
    assert t.snapshot()[0]["addrs"] == ["/ip4/127.0.0.1/tcp/4002"]
    assert t.connected() == [B]
    assert t.set_connected(B, False, source="inbound")
    assert t.connected() == [] and t.dial_targets() == [(B, ["/ip4/127.0.0.1/tcp/4002"], "inbound")]


def test_recent_address_first_and_capped():
    t = PeerTable(ME)
    for port in range(12):
        t.remember(A, [f"/ip4/127.0.0.1/tcp/{port}"], "dialed")
    t.remember(A, ["/ip4/127.0.0.1/tcp/5"], "dialed")
    addrs = t.snapshot()[0]["addrs"]
    assert addrs[0] == "/ip4/127.0.0.1/tcp/5" and len(addrs) == 8 and len(set(addrs)) == 8


def test_old_bad_and_foreign_entries_are_dropped(tmp_path, caplog):
    path = tmp_path / "peers.json"
    old = time.time() - 40 * 86400
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "peers": {
                    A: {"addrs": ["/ip4/127.0.0.1/tcp/1"], "last_seen": old},
                    B: {"addrs": ["/ip4/127.0.0.1/tcp/2"], "last_seen": None},
                    ME: {"addrs": ["/ip4/127.0.0.1/tcp/3"]},
                    "not a peer id": {"addrs": ["/ip4/127.0.0.1/tcp/4"]},
                    peer_id_from_seed(bytes([4]) * 32): {"addrs": []},
                },
            }
        )
    )
    t = PeerTable(ME, path, forget_after=30 * 86400)
    t.load()
    assert [p["peer_id"] for p in t.snapshot()] == [B]
    assert t.snapshot()[0]["source"] == "remembered"

    path.write_text("{not json")
    t3 = PeerTable(ME, path)
    t3.load()
    assert t3.snapshot() == [] and "ignoring unreadable peerstore" in caplog.text


def test_a_forgotten_peer_is_not_saved_and_its_disconnection_does_not_bring_it_back(tmp_path):
    """A peer that is not a Cairn node is forgotten; the disconnect that follows must not re-add it."""
    path = tmp_path / "peers.json"
    t = PeerTable(ME, path)
    t.remember(A, ["/ip4/127.0.0.1/tcp/4001"], "dialed")
    t.set_connected(A, True, source="dialed")
    t.forget(A)
    assert not t.set_connected(A, False, source="dialed")
    assert t.snapshot() == [] and t.dial_targets() == [] and t.connected() == []
    t.save()
    assert json.loads(path.read_text())["peers"] == {}
    t.remember(A, ["/ip4/127.0.0.1/tcp/4002"], "dialed")  # a deliberate connect later keeps it again
    assert [p["peer_id"] for p in t.snapshot()] == [A]
