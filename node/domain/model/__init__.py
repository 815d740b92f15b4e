"""Cairn's object model: CIDs, codecs, Holium kinds, selectors and data trees.

Everything that decides bytes on the wire lives here, so every peer computes the same CIDs
(DESIGN.md "Object rules"). Layers above import from this package, never the other way.
"""

from node.domain.model import codec, dagjson, holium_data, kinds, selectors
from node.domain.model.cid import (
    BLAKE3,
    CBOR,
    CID,
    DAG_CBOR,
    DAG_PB,
    RAW,
    CidText,
    cid_for,
    cid_str,
    parse_cid,
    same_cid,
    verify_block,
)
from node.domain.model.codec import INT64_MAX, INT64_MIN, MAX_BLOCK_BYTES, Block, block_of, check_ipld, decode, encode
from node.domain.model.dagjson import dumps, loads
from node.domain.model.engine import EngineProfile
from node.domain.model.holium_data import (
    DataTree,
    data_tree,
    import_bin,
    import_cbor,
    import_csv,
    import_file,
    import_json,
)
from node.domain.model.kinds import (
    KINDS,
    Connection,
    DryTransformation,
    Execution,
    Kind,
    ModuleBytecodeEnvelope,
    Pipeline,
    PipelineEdge,
    RecursiveDataEnvelope,
    ScalarDataEnvelope,
    decode_object,
    register_kind,
    validate,
)
from node.domain.model.metadata import EVENT_KINDS, MERGE_STRATEGIES, MetadataBlock
from node.domain.model.pipeline_run import PipelineRun, RunStep
from node.domain.model.query import Announcement, Failure, InputIdentity, Invocation, Query, Receipt
from node.domain.model.selectors import (
    ExploreIndex,
    ExploreRange,
    ExploreUnion,
    Matcher,
    Selector,
    SelectorEnvelope,
    selector_from_ipld,
)
from node.domain.model.structure import Structure

__all__ = [  # noqa: RUF022  grouped by the module each name comes from
    # modules
    "codec",
    "dagjson",
    "holium_data",
    "kinds",
    "selectors",
    # cid
    "CID",
    "DAG_CBOR",
    "CBOR",
    "RAW",
    "DAG_PB",
    "BLAKE3",
    "cid_for",
    "parse_cid",
    "same_cid",
    "CidText",
    "cid_str",
    "verify_block",
    # codec
    "Block",
    "encode",
    "decode",
    "block_of",
    "check_ipld",
    "INT64_MIN",
    "MAX_BLOCK_BYTES",
    "INT64_MAX",
    # dag-json
    "loads",
    "dumps",
    # errors
    "Kind",
    "KINDS",
    "register_kind",
    "decode_object",
    "validate",
    "ScalarDataEnvelope",
    "RecursiveDataEnvelope",
    "ModuleBytecodeEnvelope",
    "Execution",
    "DryTransformation",
    "Connection",
    "Pipeline",
    "PipelineEdge",
    # selectors
    "Selector",
    "Matcher",
    "ExploreIndex",
    "ExploreRange",
    "ExploreUnion",
    "SelectorEnvelope",
    "selector_from_ipld",
    # cairn kinds
    "Structure",
    "MetadataBlock",
    "EVENT_KINDS",
    "MERGE_STRATEGIES",
    "Query",
    "Invocation",
    "InputIdentity",
    "Receipt",
    "Announcement",
    "Failure",
    "EngineProfile",
    "PipelineRun",
    "RunStep",
    # holium data
    "DataTree",
    "data_tree",
    "import_json",
    "import_csv",
    "import_cbor",
    "import_bin",
    "import_file",
]
