"""Addresses told to others, most widely reachable first (p2p/addrs.py)."""

from __future__ import annotations

from p2p.addrs import reachability_order, scope

P = "/tcp/4001/p2p/12D3KooWExample"


def test_public_then_private_then_link_local_then_loopback() -> None:
    addrs = [
        f"/ip4/127.0.0.1{P}",
        f"/ip4/10.0.0.5{P}",
        f"/ip6/::1{P}",
        f"/ip4/169.254.1.2{P}",
        f"/ip4/8.8.4.4{P}",
        f"/dns4/node.example.org{P}",
        f"/ip4/192.168.1.9{P}",
        f"/ip4/100.64.3.4{P}",
    ]
    assert reachability_order(addrs) == [
        f"/ip4/8.8.4.4{P}",
        f"/dns4/node.example.org{P}",
        f"/ip4/10.0.0.5{P}",
        f"/ip4/192.168.1.9{P}",
        f"/ip4/100.64.3.4{P}",
        f"/ip4/169.254.1.2{P}",
        f"/ip4/127.0.0.1{P}",
        f"/ip6/::1{P}",
    ]


def test_what_is_not_an_ip_is_kept_in_front() -> None:
    assert scope("/ip4/not-an-ip/tcp/1") == 0 and scope("garbage") == 0 and scope("/ip4/0.0.0.0/tcp/1") == 3
