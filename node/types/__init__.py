"""Transform.Storage types on a node: Algorithms 1–4 (node.model.typecheck) over Kubo and the node's datasets."""

from node.types.service import TypeChecks

__all__ = ["TypeChecks"]
