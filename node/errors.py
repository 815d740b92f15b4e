"""The error types every layer raises.

Each carries a one-line, user-facing message; the CLI prints it as ``error: <message>`` and
exits non-zero, the HTTP API returns it as ``{"error": {"type", "message"}}`` with ``status``.
"""

from __future__ import annotations


class CairnError(Exception):
    """Base of every error Cairn raises on purpose."""

    status: int = 500  # HTTP status the API answers with

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class InvalidInput(CairnError):
    """The caller gave something malformed (bad DAG-JSON, bad CID, wrong object shape)."""

    status = 400


class NotFound(CairnError):
    status = 404


class Unauthorized(CairnError):
    status = 401


class NodeNotRunning(CairnError):
    """No node runs for this CAIRN_HOME (or it does not answer)."""

    status = 503


class ConfigError(CairnError):
    status = 500
