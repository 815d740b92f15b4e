"""A small synchronous client of a running node's HTTP API, for the CLI.

The CLI never reaches into a running daemon's internals: it finds the node of its ``CAIRN_HOME``
through ``node.json`` and talks to it over HTTP, with the token from ``api.token``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from node.adapters.home import Home
from node.support.errors import NodeNotRunning, RemoteError


class NodeClient:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 3600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    @classmethod
    def for_home(cls, home: Home) -> NodeClient:
        info = home.read_runtime()
        if info is None:
            raise NodeNotRunning(f"no node is running for {home.path} (start one with `cairn node start`)")
        token = home.token() if home.token_file.exists() else None
        return cls(info["api"], token)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        length: int | None = None,
    ) -> tuple[int, bytes]:
        with self.open(method, path, body, content_type, length) as resp:
            return resp.status, resp.read()

    def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        length: int | None = None,
    ) -> Any:
        """The response as a file (stream it); ``body`` may be bytes, a file, or an iterable of chunks
        (sent chunked when ``length`` is unknown)."""
        req = urllib.request.Request(self.base_url + path, data=body, method=method)
        if body is not None:
            req.add_header("Content-Type", content_type)
        if length is not None:
            req.add_header("Content-Length", str(length))
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                message = json.loads(payload)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = payload.decode(errors="replace").strip() or e.reason
            raise RemoteError(message, e.code) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            raise NodeNotRunning(f"the node at {self.base_url} does not answer: {reason}") from None

    def is_local(self) -> bool:
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")

    def get_json(self, path: str) -> Any:
        return json.loads(self.request("GET", path)[1])

    def post_json(self, path: str, body: Any, content_type: str = "application/json", length: int | None = None) -> Any:
        return json.loads(self.request("POST", path, body, content_type, length)[1])
