"""Cairn: the node daemon and its core API."""

from node.support.errors import CairnError, ConfigError, InvalidInput, NodeNotRunning, NotFound, Unauthorized

__version__ = "0.1.0"

__all__ = [
    "CairnError",
    "ConfigError",
    "InvalidInput",
    "NodeNotRunning",
    "NotFound",
    "Unauthorized",
    "__version__",
]
