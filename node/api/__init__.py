"""The HTTP API of a node (aiohttp)."""

from node.api.server import create_app

__all__ = ["create_app"]
