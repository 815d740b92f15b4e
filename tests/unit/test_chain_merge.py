"""Metadata chains (signatures, continuity) and merge strategies, without Kubo."""

from __future__ import annotations

import pyarrow as pa
import pytest

from node.adapters.identity import generate
from node.domain.model import MetadataBlock, Structure, block_of, decode, decode_object
from node.services.datasets import merge
from node.services.datasets.chain import build_version
from node.support.errors import InvalidInput, InvalidObject


def _chain(key=None, forge_at: int | None = None):  # type: ignore[no-untyped-def]
    owner = generate()
    forger = generate()
    st = Structure("parquet", (("a", "int64"),))
    st_blk, abs_blk = block_of(st), block_of(st.abstract())
    slice_cid = block_of(b"not really parquet", "raw").cid
    events = [
        {"kind": "Seed", "datasetId": owner.node_key, "datasetKind": "root"},
        {"kind": "SetDataSchema", "structure": st_blk.cid, "abstract": abs_blk.cid},
        {
            "kind": "AddData",
            "slices": [{"data": slice_cid, "rows": 2, "size": 10, "logicalHash": "f1e20aa"}],
            "offsets": [0, 1],
            "rows": 2,
            "logicalHash": "f1e20aa",
            "merge": {"strategy": "append", "primaryKey": []},
        },
    ]
    blocks, prev = [], None
    for seq, ev in enumerate(events):
        signer = forger if seq == forge_at else owner
        mb = MetadataBlock(prev, seq, "2026-01-01T00:00:00Z", ev).signed(signer.sign)
        blk = block_of(mb)
        blocks.append((blk.cid, decode_object(decode(blk.data))))
        prev = blk.cid
    return list(reversed(blocks)), {st_blk.cid: st}


def test_a_valid_chain_folds_into_a_version() -> None:
    blocks, structures = _chain()
    v = build_version(blocks[0][0], blocks, structures)
    assert v.rows == 2 and v.seq == 2 and v.structure is not None and v.slices[0].offset == 0


@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_block_signed_by_another_key_is_refused(at: int) -> None:
    blocks, structures = _chain(forge_at=at)
    with pytest.raises(InvalidObject, match="signature does not verify"):
        build_version(blocks[0][0], blocks, structures)


def test_a_chain_with_a_gap_is_refused() -> None:
    blocks, structures = _chain()
    with pytest.raises(InvalidObject):
        build_version(blocks[0][0], [blocks[0], blocks[2]], structures)


def test_ledger_skips_seen_keys_including_repeats_in_the_input() -> None:
    batch = pa.RecordBatch.from_pydict({"k": [1, 2, 2, 3], "v": ["a", "b", "c", "d"]})
    out = list(merge.ledger([batch], ["k"], seen={(1,)}))
    assert pa.Table.from_batches(out).to_pydict() == {"k": [2, 3], "v": ["b", "d"]}


def test_snapshot_cdc_against_folded_history() -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    first = pa.Table.from_batches(
        list(
            merge.snapshot(
                [pa.RecordBatch.from_pydict({"k": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema)], schema, ["k"], {}
            )
        )
    )
    assert first.column("op").to_pylist() == [0, 0, 0]
    state = merge.fold_state([first], ["k"])
    second = pa.Table.from_batches(
        list(
            merge.snapshot(
                [pa.RecordBatch.from_pydict({"k": [1, 2, 4], "v": ["a", "B", "d"]}, schema=schema)],
                schema,
                ["k"],
                state,
            )
        )
    )
    assert list(
        zip(second.column("op").to_pylist(), second.column("k").to_pylist(), second.column("v").to_pylist())
    ) == [(2, 2, "b"), (3, 2, "B"), (0, 4, "d"), (1, 3, "c")]
    assert merge.fold_state([first, second], ["k"]) == {(1,): (1, "a"), (2,): (2, "B"), (4,): (4, "d")}


def test_snapshot_refuses_duplicate_keys() -> None:
    schema = pa.schema([("k", pa.int64())])
    with pytest.raises(InvalidInput, match="twice"):
        list(merge.snapshot([pa.RecordBatch.from_pydict({"k": [1, 1]}, schema=schema)], schema, ["k"], {}))
