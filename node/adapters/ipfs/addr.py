"""Kubo API addresses: config may give a multiaddr (as Kubo writes them) or a URL.

A Kubo whose RPC API listens on a unix domain socket (the managed one does: only processes that may enter its
0700 directory reach it) is named ``unix:/abs/path/api.sock``; Kubo writes ``/unix/abs/path/api.sock``.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from node.support.errors import ConfigError

UNIX = "unix:"
SUN_PATH_MAX = 107  # bytes of a unix socket's path (sockaddr_un.sun_path is 108 with its NUL), Linux


def api_base_url(value: str) -> str:
    """``/ip4/127.0.0.1/tcp/5001`` or ``http://127.0.0.1:5001[/api/v0]`` -> ``http://127.0.0.1:5001``;
    ``/unix/run/kubo/api.sock`` or ``unix:/run/kubo/api.sock`` -> ``unix:/run/kubo/api.sock``."""
    text = value.strip()
    if text.startswith(("/unix/", UNIX)):
        return _from_unix(text)
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


def _from_unix(text: str) -> str:
    path = text.removeprefix(UNIX) if text.startswith(UNIX) else text.removeprefix("/unix")
    if not path.startswith("/") or path.endswith("/") or "\0" in path:
        raise ConfigError(f"not a Kubo API socket: {text!r} (want /unix/ABSOLUTE/PATH or unix:/ABSOLUTE/PATH)")
    try:
        size = len(os.fsencode(path))
    except UnicodeError:
        raise ConfigError(f"not a Kubo API socket: {text!r} (the path is not encodable)") from None
    if size > SUN_PATH_MAX:
        raise ConfigError(f"the Kubo API socket path {path!r} is longer than {SUN_PATH_MAX} bytes")
    return UNIX + path


def unix_socket_path(api_url: str) -> str | None:
    """The socket's path of a ``unix:`` API URL (as ``api_base_url`` gives), None for an HTTP one."""
    return api_url[len(UNIX) :] if api_url.startswith(UNIX) else None


api_url_from_address = api_base_url  # the name node/core/wiring.py uses
