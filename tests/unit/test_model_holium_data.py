"""Holium data trees: holium-rs test vectors and the structure of JSON/CSV/CBOR imports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node.domain.model import (
    CID,
    DataTree,
    block_of,
    cid_for,
    data_tree,
    decode,
    encode,
    import_bin,
    import_cbor,
    import_csv,
    import_file,
    import_json,
)
from node.support.errors import InvalidInput

NULL_LEAF = "bafir4idbvg7rb4h75xd5y52ytlrkwtfibmagzadomy3oig3aiegnr4f3yq"
LIST_OF_NULL = "bafyr4iaboxtdci2fq5i65vzoe4jzjeqsafdmh46mz6qzhyfszd4ocealaa"


def value_of(tree: DataTree, cid: CID | None = None) -> Any:
    """Rebuild the (map-free) value a tree holds, reading only the tree's own blocks."""
    blocks = {b.cid: b for b in tree.blocks}
    block = blocks[cid or tree.root]
    if block.cid.codec.code == 0x51:
        return block.decode()
    return [value_of(tree, c) for c in block.decode()]


# ----------------------------------------------------------------------- holium-rs vectors
# crates/cli/tests/data/import.rs (holium-rs, before commit fdd752b) and linked_data_tree.rs


def test_null_leaf() -> None:
    tree = data_tree(None)
    assert str(tree.root) == NULL_LEAF
    assert [b.data for b in tree.blocks] == [b"\xf6"]


def test_holium_rs_vectors() -> None:
    assert str(import_cbor(b"\xf6").root) == NULL_LEAF
    assert str(import_cbor(b"\xc0\xc0\xd8\x2a\xc0\xf6").root) == NULL_LEAF  # tags are ignored
    recursive = import_cbor(b"\x81\xf6")
    assert str(recursive.root) == LIST_OF_NULL
    assert (
        recursive.blocks[-1].data.hex()
        == "81d82a58250001511e20" + "61a9bf10f0ffedc7dc77589ae2ab4ca80b006c806e6636e41b60410cd8f0bbc4"
    )
    assert str(import_json(b"[null]").root) == LIST_OF_NULL
    dup = import_json(b'{\n  "k": [\n    [0, 0],\n    [\n      0,\n      [0, 0]\n    ],\n    null\n  ]\n}')
    assert str(dup.root) == "bafyr4ieqatdcyphkdor6farlisuliksatg2hfvirliy23tgbobq2ed3on4"
    assert NULL_LEAF in {str(b.cid) for b in dup.blocks}
    assert (
        str(import_bin(bytes.fromhex("1a14e417")).root) == "bafir4ibosdcgzkas225gir76lcfm5ijtb4auhg7w6e5rih4e2l6yaz62ka"
    )
    csv_tree = import_csv(b"header0,header1,header2\na0,a1,a2\nb0,b1,b2")
    assert str(csv_tree.root) == "bafyr4ifdnpmbxr6ikms7ksoeyiz32gzinpo3yyeohjj3rovbkb4jnufuzi"
    cids = {str(b.cid) for b in csv_tree.blocks}
    assert {
        "bafyr4ia3nxsms65abug5ivmzpgdp44ra2e2cecgaxl4bqrnpcnacrmnite",
        "bafyr4ibelcqzk2a5i3x7j5u3scko66zeovldlwdqtku2rw5th6efeplgvi",
    } <= cids


# ----------------------------------------------------------------------- structure


def test_blocks_are_deduplicated_children_first() -> None:
    tree = data_tree([[1, 1], [1, [1, 1]], None, [1, 1]])
    cids = [b.cid for b in tree.blocks]
    assert len(cids) == len(set(cids))
    assert cids[-1] == tree.root
    seen: set[CID] = set()
    for block in tree.blocks:
        if block.cid.codec.code == 0x71:
            assert set(block.decode()) <= seen
        seen.add(block.cid)
        block.verify()


def test_scalars_are_plain_cbor_and_lists_are_dag_cbor_links() -> None:
    tree = data_tree(["a", 1])
    root = {b.cid: b for b in tree.blocks}[tree.root]
    assert root.cid.codec.code == 0x71
    assert root.decode() == [block_of("a", "cbor").cid, block_of(1, "cbor").cid]
    assert data_tree([]).root == cid_for(encode([]))


def test_json_object_values_in_canonical_key_order() -> None:
    # serde_cbor's BTreeMap order: length first, then bytes; not the order in the file
    tree = import_json(b'{"b": "B", "aa": "AA", "a": "A", "\xc3\xa9": "E"}')
    assert value_of(tree) == ["A", "B", "AA", "E"]  # "é" is 2 UTF-8 bytes, after "aa"
    assert tree.root == data_tree({"a": "A", "b": "B", "é": "E", "aa": "AA"}).root


def test_json_numbers_follow_serde_json() -> None:
    tree = import_json(b"[1, 1.0, -0.0, 9223372036854775808, 18446744073709551616, -9223372036854775809, 1e2]")
    assert value_of(tree) == [1, 1.0, -0.0, 2**63, 2.0**64, -(2.0**63), 100.0]
    leaves = [b.data.hex() for b in tree.blocks if b.cid.codec.code == 0x51]
    assert "f93c00" in leaves  # 1.0 as a half float, like serde_cbor
    assert "1b8000000000000000" in leaves  # 2**63 stays an integer (u64)
    types = [type(v) for v in value_of(tree)]
    assert types == [int, float, float, int, float, float, float]


def test_json_duplicate_keys_last_wins() -> None:
    assert value_of(import_json(b'{"a": 1, "a": 2}')) == [2]


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"[1,", "invalid JSON: line 1 column 4"),
        (b"[NaN]", "NaN is not allowed"),
        (b"[1e400]", "out of range"),
        (b"\xff", "not UTF-8"),
        (b'["\\ud800"]', "lone surrogate"),
    ],
)
def test_bad_json(data: bytes, fragment: str) -> None:
    with pytest.raises(InvalidInput) as info:
        import_json(data)
    assert fragment in str(info.value)


def test_csv_rows_of_strings_header_dropped() -> None:
    tree = import_csv(b'id,name,note\r\n1,"Smith, J","say ""hi"""\r\n\r\n2,,\xc3\xa9\r\n')
    assert value_of(tree) == [["1", "Smith, J", 'say "hi"'], ["2", "", "é"]]


def test_csv_header_only_is_an_empty_list() -> None:
    assert import_csv(b"a,b\n").root == data_tree([]).root
    assert import_csv(b"").root == data_tree([]).root


def test_csv_ragged_rows_are_refused() -> None:
    with pytest.raises(InvalidInput, match="record 3 has 1 fields, the header has 2"):
        import_csv(b"a,b\n1,2\n3\n")


def test_cbor_import_matches_json_import() -> None:
    # {"b": [1, 2.5], "a": "x"} written in non-canonical CBOR (key order, float width)
    data = bytes.fromhex("a261628201fa4020000061616178")
    assert import_cbor(data).root == import_json(b'{"b": [1, 2.5], "a": "x"}').root


def test_cbor_import_is_lenient_like_serde_cbor() -> None:
    # indefinite-length list and text, undefined read as null, a bignum tag read as its bytes
    data = bytes.fromhex("9f7f61616162fff7c24101ff")
    assert value_of(import_cbor(data)) == ["ab", None, b"\x01"]


def test_cbor_import_orders_non_text_keys_like_serde_cbor() -> None:
    # keys -1, "a", 2, 1 -> serde_cbor order: 1, 2 (major 0), -1 (major 1), "a" (major 3)
    data = bytes.fromhex("a420616361616164026162016161")
    assert value_of(import_cbor(data)) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("data", [b"", b"\x82\x01", b"\xf6\xf6", b"\x1c", b"\x61\xff"])
def test_bad_cbor(data: bytes) -> None:
    with pytest.raises(InvalidInput, match="invalid CBOR"):
        import_cbor(data)


@pytest.mark.parametrize(
    "value, fragment",
    [
        ([cid_for(b"x")], "hold no links"),
        ({"a": float("nan")}, "nan is not allowed"),
        ([2**64], "does not fit"),
        ({"a": object()}, "object is not a data value"),
    ],
)
def test_data_tree_refuses(value: Any, fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        data_tree(value)


def test_import_file(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_bytes(b"[null]")
    (tmp_path / "d.csv").write_bytes(b"h\nv\n")
    (tmp_path / "d.cbor").write_bytes(b"\x81\xf6")
    (tmp_path / "d.txt").write_bytes(b"[null]")
    assert str(import_file(tmp_path / "d.json").root) == LIST_OF_NULL
    assert str(import_file(str(tmp_path / "d.cbor")).root) == LIST_OF_NULL
    assert import_file(tmp_path / "d.csv").root == data_tree([["v"]]).root
    assert str(import_file(tmp_path / "d.txt", "json").root) == LIST_OF_NULL
    with pytest.raises(InvalidInput, match=r"cannot tell the format of d\.txt"):
        import_file(tmp_path / "d.txt")
    with pytest.raises(InvalidInput, match="unknown data format 'xml'"):
        import_file(tmp_path / "d.json", "xml")
    with pytest.raises(InvalidInput, match="cannot read"):
        import_file(tmp_path / "missing.json")


def test_leaves_decode_back() -> None:
    tree = import_json(b'{"s": "text", "f": 0.1, "n": null, "t": true, "i": -7}')
    assert value_of(tree) == [0.1, -7, None, "text", True]  # keys f, i, n, s, t
    for block in tree.blocks:
        block.verify()
        assert encode(decode(block.data, block.cid.codec.code)) == block.data or block.cid.codec.code == 0x51
