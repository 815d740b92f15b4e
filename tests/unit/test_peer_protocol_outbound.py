"""What the node sends to peers and whom it asks, without IO (node/services/peers/outbound_choices.py)."""

from __future__ import annotations

from node.adapters.index import ExecutionRow
from node.domain.model import cid_for, cid_str, encode
from node.services.peers.outbound_choices import (
    ProvidersCache,
    announceable,
    announcement_key,
    catch_up_rows,
    have_addrs,
    near,
    not_cairn,
    provider_addrs,
    sort_answers,
)
from node.services.resolve.claim_checks import MAX_PROVIDERS
from p2p.errors import P2PError, P2PTimeout

NOT_CAIRN = P2PError("peer 12D3KooWx does not speak that protocol")
KUBO = "12D3KooWKubo"


def _row(name: str, trust: str, profile: str | None = None) -> ExecutionRow:
    iv, ex, rc = (cid_str(cid_for(f"{name}{part}".encode())) for part in ("", "-ex", "-rc"))
    return ExecutionRow(iv, "q", ex, rc, "f1e2", 3, "st", (), "local", 0.0, trust, profile)


def test_only_results_checked_here_are_announced_and_sent_in_a_catch_up() -> None:
    rows = [_row("a", "computed"), _row("b", "unverified"), _row("c", "recomputed-agreed"), _row("d", "peer")]
    assert [announceable(r) for r in rows] == [True, False, True, False]
    assert catch_up_rows(rows) == [rows[0], rows[2]]
    assert catch_up_rows([rows[1]]) == []  # nothing to send: the peer is probed instead


def test_an_announcement_is_signed_again_only_when_what_it_says_changes() -> None:
    row = _row("a", "computed")
    key = announcement_key(row, ["/ip4/1.2.3.4/tcp/4001/p2p/x"])
    assert key == announcement_key(_row("a", "computed"), ["/ip4/1.2.3.4/tcp/4001/p2p/x"])
    assert key != announcement_key(row, [])
    assert key != announcement_key(_row("a", "computed", profile="bafyprofile"), ["/ip4/1.2.3.4/tcp/4001/p2p/x"])
    assert key != announcement_key(_row("b", "computed"), ["/ip4/1.2.3.4/tcp/4001/p2p/x"])


def test_our_kubos_addresses_name_its_peer_id_most_reachable_first_and_bounded() -> None:
    addrs = ["/ip4/127.0.0.1/tcp/4001", "/ip4/192.168.1.2/tcp/4001", f"/ip4/8.8.8.8/tcp/4001/p2p/{KUBO}"]
    assert provider_addrs(KUBO, addrs) == [
        f"/ip4/8.8.8.8/tcp/4001/p2p/{KUBO}",
        f"/ip4/192.168.1.2/tcp/4001/p2p/{KUBO}",
        f"/ip4/127.0.0.1/tcp/4001/p2p/{KUBO}",
    ]
    many = [f"/ip4/10.0.0.{i}/tcp/4001" for i in range(MAX_PROVIDERS + 3)]
    assert len(provider_addrs(KUBO, many)) == MAX_PROVIDERS


def test_providers_are_reused_within_their_ttl_of_the_given_clock() -> None:
    cache = ProvidersCache(ttl=30.0)
    assert cache.fresh(100.0) is None
    cache.keep(100.0, ["/ip4/1.2.3.4/tcp/4001/p2p/x"])
    assert cache.fresh(129.9) == ["/ip4/1.2.3.4/tcp/4001/p2p/x"]
    assert cache.fresh(130.0) is None


def test_lookup_answers_sorted_into_answers_and_peers_to_ask_the_older_protocol() -> None:
    got, old = sort_answers({"a": b"answer", "b": NOT_CAIRN, "c": P2PTimeout("no answer"), "d": P2PError("reset")})
    assert got == {"a": b"answer"} and old == ["b"]
    assert not_cairn(NOT_CAIRN) and not not_cairn(P2PTimeout("no answer"))


def test_have_answers_give_the_addresses_worth_dialling() -> None:
    ok = f"/ip4/1.2.3.4/tcp/4001/p2p/{KUBO}"
    assert have_addrs(encode([ok, "not a multiaddr", 7])) == [ok]
    assert have_addrs(encode([ok] * (MAX_PROVIDERS + 2))) == [ok] * MAX_PROVIDERS
    assert have_addrs(encode({"a": ok})) == []
    assert have_addrs(b"\xff not cbor") == []
    assert have_addrs(P2PTimeout("no answer")) == []
    assert have_addrs(encode([])) == []


def test_a_claim_is_near_when_its_gossip_publisher_is_connected() -> None:
    assert near("p1", ["p1", "p2"])
    assert not near("p3", ["p1", "p2"])
    assert not near(None, ["p1"])  # a catch-up's item names no publisher
