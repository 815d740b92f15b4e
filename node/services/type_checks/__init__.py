"""Transform.Storage types on a node: Algorithms 1–4 (node.domain.model.typecheck) over Kubo and the node's datasets."""

from node.services.type_checks.checker import TypeChecks

__all__ = ["TypeChecks"]
