"""Kubo API addresses: config may give a multiaddr (as Kubo writes them) or a URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from node.errors import ConfigError


def api_base_url(value: str) -> str:
    """``/ip4/127.0.0.1/tcp/5001`` or ``http://127.0.0.1:5001[/api/v0]`` -> ``http://127.0.0.1:5001``."""
    text = value.strip()
    if text.startswith("/"):
        return _from_multiaddr(text)
    if "://" not in text:
        text = "http://" + text  # a bare host:port
    try:
        parts = urlsplit(text)
    except ValueError as e:  # "[" alone: urlsplit's "Invalid IPv6 URL" (found by tests/unit/test_fuzz_decoders.py)
        raise ConfigError(f"not a Kubo API address: {value!r} ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"not a Kubo API address: {value!r} (want /ip4/HOST/tcp/PORT or http://HOST:PORT)")
    try:
        parts.port  # noqa: B018 -- raises on a malformed port
    except ValueError as e:
        raise ConfigError(f"not a Kubo API address: {value!r} ({e})") from e
    path = parts.path.rstrip("/")
    if path.endswith("/api/v0"):
        path = path[: -len("/api/v0")]
    return f"{parts.scheme}://{parts.netloc}{path}"


def _from_multiaddr(text: str) -> str:
    parts = [p for p in text.split("/") if p]
    scheme = "http"
    if parts and parts[-1] in ("http", "https"):
        scheme = parts.pop()
    if len(parts) != 4 or parts[2] != "tcp" or not parts[3].isdigit():
        raise ConfigError(f"unsupported Kubo API multiaddr {text!r} (want /ip4|ip6|dns|dns4|dns6/HOST/tcp/PORT)")
    proto, host, _, port = parts
    if proto == "ip6":
        host = f"[{host}]"
    elif proto not in ("ip4", "dns", "dns4", "dns6"):
        raise ConfigError(f"unsupported Kubo API multiaddr {text!r} ({proto} is not an IP or DNS address)")
    return f"{scheme}://{host}:{int(port)}"


api_url_from_address = api_base_url  # the name node/core.py uses
