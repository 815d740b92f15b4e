"""The HTTP API of a node (aiohttp)."""

from node.faces.api.server import create_app

__all__ = ["create_app"]
