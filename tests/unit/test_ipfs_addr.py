"""Kubo API address parsing: config may hold a multiaddr or a URL."""

from __future__ import annotations

import pytest

from node.adapters.ipfs import api_base_url
from node.support.errors import ConfigError


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("/ip4/127.0.0.1/tcp/5001", "http://127.0.0.1:5001"),
        ("/ip4/127.0.0.1/tcp/5001/http", "http://127.0.0.1:5001"),
        ("/ip6/::1/tcp/5001", "http://[::1]:5001"),
        ("/dns4/kubo.internal/tcp/5001", "http://kubo.internal:5001"),
        ("/dns/kubo/tcp/443/https", "https://kubo:443"),
        ("http://127.0.0.1:5001", "http://127.0.0.1:5001"),
        ("http://127.0.0.1:5001/", "http://127.0.0.1:5001"),
        ("http://127.0.0.1:5001/api/v0", "http://127.0.0.1:5001"),
        ("127.0.0.1:5001", "http://127.0.0.1:5001"),
        ("  /ip4/10.0.0.2/tcp/45011\n", "http://10.0.0.2:45011"),  # as read from <repo>/api
        ("/unix/tmp/kubo.rpc/api.sock", "unix:/tmp/kubo.rpc/api.sock"),  # the managed Kubo's, as Kubo writes it
        ("unix:/tmp/kubo.rpc/api.sock", "unix:/tmp/kubo.rpc/api.sock"),  # as the node shows it
    ],
)
def test_api_base_url(given: str, url: str) -> None:
    assert api_base_url(given) == url


@pytest.mark.parametrize(
    "bad",
    [
        "/unix/",
        "unix:relative/api.sock",
        "unix:/dir/",
        "/unix/" + "d" * 110,  # longer than a unix socket's path may be
        "/ip4/127.0.0.1/udp/5001",
        "/ip4/127.0.0.1",
        "ftp://host:21",
        "http://",
        "http://h:port",
    ],
)
def test_api_base_url_rejects(bad: str) -> None:
    with pytest.raises(ConfigError):
        api_base_url(bad)
