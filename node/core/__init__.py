"""The core: ``Node``, the one API every face calls (``node.py``), and the composition root that builds it from
the settings (``wiring.py``)."""

from node.core.node import Node, Services
from node.core.processes import KuboWatch, WorkerStart

__all__ = ["KuboWatch", "Node", "Services", "WorkerStart"]
