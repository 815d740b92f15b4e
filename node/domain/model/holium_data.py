"""Holium data trees, built exactly as holium-rs builds them (DESIGN.md "Object rules").

Source: holium-rs ``crates/api/src/data/{data_tree,linked_data_tree}.rs`` and
``crates/api/src/data/importer/*`` (removed in commit f3a99c4; the CLI's test vectors live in
``crates/cli/tests/data/import.rs``):

* a scalar (null, bool, int, float, text, bytes) is a leaf: one plain CBOR block, codec ``cbor``
  (0x51), written by serde_cbor (shortest float form, see ``plaincbor``);
* a list is a DAG-CBOR (0x71) block holding the list of its children's links, in order;
* a map is a list of its *values*: holium-rs converts JSON and CBOR maps into serde_cbor's
  ``BTreeMap<Value, Value>`` and takes ``into_values()``, so values come in serde_cbor's key
  order — for text keys, length first then bytewise, the DAG-CBOR order — not file order;
* JSON numbers follow serde_json: an integer literal in [-2**63, 2**64-1] is an int, any other
  number (fraction, exponent, or an integer outside that range) is a float;
* a CSV file is the list of its records, each the list of its cells as text, the header row
  dropped (``csv::Reader::from_reader``'s default ``has_headers(true)``);
* a CBOR file is read as serde_cbor reads it (tags ignored, so ``c0 f6`` is just null).

The root CID of a tree is its root block's CID (the leaf itself for a scalar), e.g. ``[null]``
is ``bafyr4iaboxtdci2fq5i65vzoe4jzjeqsafdmh46mz6qzhyfszd4ocealaa``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from multiformats import CID

from node.domain.model.codec import Block, block_of
from node.domain.model.plaincbor import NINT64_MIN, UINT64_MAX, CborMap, decode_plain, sorted_pairs
from node.support.errors import EncodingError, InvalidInput

__all__ = ["DataTree", "data_tree", "import_bin", "import_cbor", "import_csv", "import_file", "import_json"]

_SCALARS = (type(None), bool, int, float, str, bytes)
_FORMATS = {".json": "json", ".csv": "csv", ".cbor": "cbor", ".bin": "bin"}


class DataTree(NamedTuple):
    """A data tree: its root CID and its blocks (deduplicated, children before parents)."""

    root: CID
    blocks: list[Block]


def data_tree(value: Any) -> DataTree:
    """Build the Holium data tree of a Python value (scalars, lists, maps)."""
    blocks: dict[CID, Block] = {}
    try:
        root = _build(value, blocks, "$")
    except RecursionError:
        raise InvalidInput("data is nested too deeply to build a data tree") from None
    return DataTree(root, list(blocks.values()))


def _build(v: Any, blocks: dict[CID, Block], path: str) -> CID:
    if isinstance(v, _SCALARS):
        if isinstance(v, int) and not isinstance(v, bool) and not NINT64_MIN <= v <= UINT64_MAX:
            raise InvalidInput(f"cannot store value at {path}: integer {v} does not fit in CBOR")
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidInput(f"cannot store value at {path}: {v} is not allowed (IPLD floats are finite)")
        block = block_of(v, "cbor")
    elif isinstance(v, (list, tuple)):
        links = [_build(x, blocks, f"{path}[{i}]") for i, x in enumerate(v)]
        block = block_of(links, "dag-cbor")
    elif isinstance(v, (dict, CborMap)):
        pairs = sorted_pairs(v)
        block = block_of([_build(x, blocks, f"{path}[{k!r}]") for k, x in pairs], "dag-cbor")
    elif isinstance(v, CID):
        raise InvalidInput(f"cannot store value at {path}: Holium data trees hold no links")
    else:
        raise InvalidInput(f"cannot store value at {path}: {type(v).__name__} is not a data value")
    blocks.setdefault(block.cid, block)
    return block.cid


def import_json(data: bytes) -> DataTree:
    """Data tree of a JSON document, read as serde_json reads it."""
    try:
        value = json.loads(bytes(data).decode("utf-8"), parse_int=_json_int, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"invalid JSON: not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"invalid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    _check_floats(value)
    return data_tree(value)


def _json_int(text: str) -> int | float:
    try:
        n = int(text)
    except ValueError:  # more digits than Python converts; no float holds it either
        raise InvalidInput("invalid JSON: number out of range") from None
    if -(2**63) <= n <= UINT64_MAX:
        return n
    try:
        return float(n)  # serde_json turns integers outside i64/u64 into f64
    except OverflowError:
        raise InvalidInput(f"invalid JSON: number {text[:20]}… is out of range") from None


def _no_constant(name: str) -> Any:
    raise InvalidInput(f"invalid JSON: {name} is not allowed")


def _check_floats(value: Any) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidInput("invalid JSON: number out of range for a 64-bit float")
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())


def import_csv(data: bytes) -> DataTree:
    """Data tree of a CSV file: a list of records (lists of cell strings), header dropped.

    Empty lines are skipped (as the csv crate does). Rows whose cell count differs from the
    header's are refused; holium-rs silently drops them (``filter_map(|r| r.ok())``).
    """
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"invalid CSV: not UTF-8 (byte {exc.start})") from None
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    except csv.Error as exc:
        raise InvalidInput(f"invalid CSV: {exc}") from None
    if not rows:
        return data_tree([])
    width = len(rows[0])
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != width:
            raise InvalidInput(f"invalid CSV: record {n} has {len(row)} fields, the header has {width}")
    return data_tree(rows[1:])


def import_cbor(data: bytes) -> DataTree:
    """Data tree of a CBOR file, read leniently as serde_cbor reads it (tags ignored)."""
    try:
        value = decode_plain(data, strict=False)
    except EncodingError as exc:
        raise InvalidInput(str(exc)) from None
    return data_tree(value)


def import_bin(data: bytes) -> DataTree:
    """Data tree of a binary file: one bytes leaf (holium-rs ``importer/bin.rs``)."""
    return data_tree(bytes(data))


_IMPORTERS = {"json": import_json, "csv": import_csv, "cbor": import_cbor, "bin": import_bin}


def import_file(path: str | Path, fmt: str | None = None) -> DataTree:
    """Import a file as a data tree; ``fmt`` defaults from the extension (.json/.csv/.cbor/.bin)."""
    p = Path(path)
    if fmt is None:
        fmt = _FORMATS.get(p.suffix.lower())
        if fmt is None:
            raise InvalidInput(
                f"cannot tell the format of {p.name}: use a .json, .csv, .cbor or .bin file, or name the format"
            )
    importer = _IMPORTERS.get(fmt.lower())
    if importer is None:
        raise InvalidInput(f"unknown data format {fmt!r}: use json, csv, cbor or bin")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {p}: {exc.strerror or exc}") from None
    return importer(data)
