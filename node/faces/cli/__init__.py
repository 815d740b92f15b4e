"""The `cairn` command line."""

from node.faces.cli.main import main

__all__ = ["main"]
