"""The `cairn` command line."""

from node.cli.main import main

__all__ = ["main"]
