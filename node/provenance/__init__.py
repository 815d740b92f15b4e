"""Provenance of answers (issue 17; docs/provenance.md): lineage walks and offline verification."""

from node.provenance.lineage import Fetcher, LineageWalk
from node.provenance.verify import OfflineVerify

__all__ = ["Fetcher", "LineageWalk", "OfflineVerify"]
