"""Datasets: ingest, structures, metadata chains, logical hashes, reading and pulling versions."""

from node.services.datasets.chain import SliceRef, Version, appends, build_version
from node.services.datasets.facade import AddResult, Datasets
from node.services.datasets.logical_hash import LogicalHash, LogicalHasher, canonical_type
from node.services.datasets.readers import InputLimits, ReadOptions, open_input
from node.services.datasets.transfer import PullResult, Pulls, block_of_dataset, pull, slice_of_dataset

__all__ = [
    "AddResult",
    "Datasets",
    "InputLimits",
    "LogicalHash",
    "LogicalHasher",
    "PullResult",
    "Pulls",
    "ReadOptions",
    "SliceRef",
    "Version",
    "appends",
    "block_of_dataset",
    "build_version",
    "canonical_type",
    "open_input",
    "pull",
    "slice_of_dataset",
]
