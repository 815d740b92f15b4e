"""Logical hash: an encoding-independent BLAKE3-256 digest of Arrow data in row order.

Two tables with the same rows, in the same order, with the same column types, get the same
logical hash, whatever their physical form: Parquet compression, row-group and page sizes,
dictionary encoding, Arrow chunking and slicing, ``string`` vs ``large_string`` (vs
``string_view``), ``binary`` vs ``large_binary``, dictionary vs plain arrays, run-end encoded
vs plain, ``decimal32/64/128/256`` of the same precision and scale, ``list`` vs
``large_list``. Any changed cell, change of null-ness, change of a column's logical type,
reordering of rows or of columns changes the hash. Column *names* are not hashed (they
belong to the structure: two same-shaped datasets with other names collide on purpose);
struct field names are, as they are part of a column's type.

The algorithm, byte by byte, is specified in ``docs/hashing.md``; this module is its
reference implementation. Summary: every column is a tree of independent, incremental
BLAKE3 streams (validity: one byte per row; values: fixed-width little-endian bytes with
null slots zeroed and NaNs canonicalized, or u64 lengths plus concatenated bytes for
variable-width values; nested types recurse into children). The final digest is BLAKE3 over
``b"cairn-logical-hash/1\\0"``, the row count, the column count, and per column its
canonical type string and its stream digests. Streams are fed from Arrow buffers through
``pyarrow.compute`` (zero-copy where possible), never row by row in Python.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import blake3
import pyarrow as pa
import pyarrow.compute as pc

from node.support.errors import CairnError, InvalidInput

__all__ = [
    "ALGORITHM",
    "HEADER",
    "LogicalHash",
    "LogicalHasher",
    "canonical_type",
    "logical_hash",
]

ALGORITHM = "cairn-logical-hash/1"
HEADER = b"cairn-logical-hash/1\x00"
MULTIHASH_BLAKE3 = 0x1E  # multicodec "blake3"
DIGEST_SIZE = 32
_MULTIHASH_PREFIX = bytes([MULTIHASH_BLAKE3, DIGEST_SIZE])  # both < 0x80: one varint byte each

# Rows processed per step. Big chunks are cut into pieces of this many rows so that the
# temporaries compute kernels make (zero-filled copies, length arrays) stay in cache and
# memory stays bounded, whatever the size of the chunks the caller hands in.
_PIECE_ROWS = 1 << 18

_ONES = memoryview(b"\x01" * (1 << 20))
_ZEROS = memoryview(bytes(1 << 20))
_U64 = struct.Struct("<Q")

# Canonical NaN bit patterns (positive quiet NaN, no payload).
_NAN16 = 0x7E00
_NAN32 = 0x7FC00000
_NAN64 = 0x7FF8000000000000
_NAN_BITS = {2: _NAN16, 4: _NAN32, 8: _NAN64}
_UINT_OF_WIDTH = {1: pa.uint8(), 2: pa.uint16(), 4: pa.uint32(), 8: pa.uint64()}


# --------------------------------------------------------------------------- the result


@dataclass(frozen=True, slots=True)
class LogicalHash:
    """A logical hash: 32 BLAKE3 bytes.

    Printed (``str()``, ``.multibase``) as a multihash (blake3 ``0x1e``, length ``0x20``,
    digest) in multibase base16 lower case: ``f1e20`` + 64 hex digits — the form ODF uses
    for its logical hashes, distinct at a glance from CIDs (``b…``), which a logical hash is
    not (it names rows, not bytes one can fetch).
    """

    digest: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.digest, bytes) or len(self.digest) != DIGEST_SIZE:
            raise InvalidInput("a logical hash is 32 bytes")

    @property
    def hex(self) -> str:
        return self.digest.hex()

    @property
    def multihash(self) -> bytes:
        return _MULTIHASH_PREFIX + self.digest

    @property
    def multibase(self) -> str:
        return "f" + self.multihash.hex()

    def __str__(self) -> str:
        return self.multibase

    @classmethod
    def from_multibase(cls, text: str) -> LogicalHash:
        """Parse the multibase form: base16 (``f``/``F``) or base32 (``b``/``B``, RFC 4648,
        no padding) of a blake3-256 multihash."""
        if not isinstance(text, str) or len(text) < 2:
            raise InvalidInput(f"not a multibase logical hash: {text!r}")
        prefix, body = text[0], text[1:]
        try:
            if prefix in "fF":
                raw = bytes.fromhex(body)
            elif prefix in "bB":
                body = body.upper()
                raw = base64.b32decode(body + "=" * (-len(body) % 8))
            else:
                raise ValueError(f"unsupported multibase prefix {prefix!r}")
        except ValueError as e:
            raise InvalidInput(f"not a multibase logical hash: {text!r} ({e})") from None
        if raw[:2] != _MULTIHASH_PREFIX or len(raw) != 2 + DIGEST_SIZE:
            raise InvalidInput(f"not a blake3-256 multihash: {text!r}")
        return cls(raw[2:])


# --------------------------------------------------------------------------- canonical types

_SIMPLE_TYPES: dict[pa.DataType, str] = {
    pa.null(): "null",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "uint8",
    pa.uint16(): "uint16",
    pa.uint32(): "uint32",
    pa.uint64(): "uint64",
    pa.float16(): "float16",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.string(): "utf8",
    pa.large_string(): "utf8",
    pa.string_view(): "utf8",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.binary_view(): "binary",
    pa.date32(): "date32",
    pa.date64(): "date64",
}


def _quote(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


def canonical_type(type_: pa.DataType) -> str:
    """The canonical type string of an Arrow type (see docs/hashing.md, "Type strings").

    Encodings of one logical type share one string; an unsupported type raises InvalidInput.
    """
    simple = _SIMPLE_TYPES.get(type_)
    if simple is not None:
        return simple
    t = pa.types
    if t.is_dictionary(type_) or t.is_run_end_encoded(type_):
        return canonical_type(type_.value_type)
    if t.is_fixed_size_binary(type_) and not t.is_decimal(type_):
        return f"fixed_size_binary[{type_.byte_width}]"
    if t.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    if t.is_timestamp(type_):
        if type_.tz is None:
            return f"timestamp[{type_.unit}]"
        return f"timestamp[{type_.unit},tz={_quote(type_.tz)}]"
    if t.is_time32(type_) or t.is_time64(type_):
        return f"time{type_.bit_width}[{type_.unit}]"
    if t.is_duration(type_):
        return f"duration[{type_.unit}]"
    if t.is_map(type_):
        return f"map<{canonical_type(type_.key_type)},{canonical_type(type_.item_type)}>"
    if t.is_list(type_) or t.is_large_list(type_):
        return f"list<{canonical_type(type_.value_type)}>"
    if t.is_fixed_size_list(type_):
        return f"fixed_size_list<{canonical_type(type_.value_type)}>[{type_.list_size}]"
    if t.is_struct(type_):
        fields = ",".join(
            f"{_quote(type_.field(i).name)}:{canonical_type(type_.field(i).type)}" for i in range(type_.num_fields)
        )
        return f"struct<{fields}>"
    raise InvalidInput(f"logical hash: unsupported Arrow type {type_}")


# --------------------------------------------------------------------------- helpers


def _normalize(arr: pa.Array) -> pa.Array:
    """Bring an array to the one physical form its node hashes (no copy when already there)."""
    type_ = arr.type
    t = pa.types
    if t.is_dictionary(type_):
        return _normalize(arr.dictionary_decode())
    if t.is_run_end_encoded(type_):
        return _normalize(pc.run_end_decode(arr))
    if t.is_string_view(type_):
        return pc.cast(arr, pa.large_string())
    if t.is_binary_view(type_):
        return pc.cast(arr, pa.large_binary())
    if t.is_decimal(type_):
        p, s = type_.precision, type_.scale
        want = pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
        if type_ != want:
            return pc.cast(arr, want)
    return arr


def _fixed_view(arr: pa.Array, width: int) -> memoryview:
    """The bytes of ``arr``'s fixed-width values buffer for its own rows (honours slicing)."""
    buf = arr.buffers()[1]
    if buf is None:
        return memoryview(b"")
    start = arr.offset * width
    return memoryview(buf)[start : start + len(arr) * width]


def _feed_constant(h: blake3.blake3, const: memoryview, n: int) -> None:
    size = len(const)
    while n > 0:
        k = n if n < size else size
        h.update(const[:k])
        n -= k


def _feed_validity(h: blake3.blake3, arr: pa.Array) -> None:
    n = len(arr)
    nulls = arr.null_count
    if nulls == 0:
        _feed_constant(h, _ONES, n)
    elif nulls == n:
        _feed_constant(h, _ZEROS, n)
    else:
        h.update(_fixed_view(pc.cast(pc.is_valid(arr), pa.uint8()), 1))


def _feed_u64(h: blake3.blake3, lengths: pa.Array) -> None:
    """Feed an integer array (no nulls) as little-endian u64 values."""
    if lengths.type != pa.int64():
        lengths = pc.cast(lengths, pa.int64())
    h.update(_fixed_view(lengths, 8))


def _lengths(arr: pa.Array, length_fn: Callable[[pa.Array], pa.Array]) -> pa.Array:
    lengths = length_fn(arr)
    if arr.null_count:
        lengths = pc.fill_null(lengths, 0)
    return lengths


def _pieces(arr: pa.Array) -> Iterable[pa.Array]:
    n = len(arr)
    if n <= _PIECE_ROWS:
        if n:
            yield arr
        return
    for start in range(0, n, _PIECE_ROWS):
        yield arr.slice(start, _PIECE_ROWS)


def _new() -> blake3.blake3:
    # Single-threaded: the parallelism is across columns (see LogicalHasher.update), which
    # also spreads the compute kernels; BLAKE3's own threads cost more than they save on
    # the ~MiB-sized updates made here.
    return blake3.blake3()


# --------------------------------------------------------------------------- column nodes


class _Node:
    """One column (or nested child): a validity stream plus kind-specific streams."""

    __slots__ = ("validity",)

    def __init__(self) -> None:
        self.validity = _new()

    def update(self, arr: pa.Array) -> None:
        for piece in _pieces(arr):
            piece = _normalize(piece)
            _feed_validity(self.validity, piece)
            self._update(piece)

    def _update(self, arr: pa.Array) -> None:
        pass

    def digests(self) -> list[bytes]:
        return [self.validity.digest()]


class _NullNode(_Node):
    __slots__ = ()


class _FixedNode(_Node):
    """Fixed-width values: little-endian bytes, null slots zeroed, NaNs canonical."""

    __slots__ = ("is_float", "values", "width")

    def __init__(self, width: int, is_float: bool) -> None:
        super().__init__()
        self.values = _new()
        self.width = width
        self.is_float = is_float

    def _update(self, arr: pa.Array) -> None:
        w = self.width
        if w == 0:
            return
        if arr.null_count:
            uint = _UINT_OF_WIDTH.get(w)
            if uint is not None:
                zeroed = pc.fill_null(arr.view(uint), 0)
            else:
                fsb = pa.binary(w)
                zeroed = pc.fill_null(arr.view(fsb), pa.scalar(bytes(w), fsb))
            arr = zeroed.view(arr.type)
        if self.is_float and _has_nan(arr):
            uint = _UINT_OF_WIDTH[w]
            arr = pc.if_else(pc.is_nan(arr), pa.scalar(_NAN_BITS[w], uint), arr.view(uint))
        self.values.update(_fixed_view(arr, w))

    def digests(self) -> list[bytes]:
        return [self.validity.digest(), self.values.digest()]


def _has_nan(arr: pa.Array) -> bool:
    if arr.type == pa.float16():
        return bool(pc.any(pc.is_nan(arr)).as_py())
    # A sum is NaN or infinite when any value is NaN; a finite sum proves there is none,
    # and costs a third of is_nan + any. Otherwise look properly.
    total = pc.sum(arr).as_py()
    if total is None or (total - total) == 0.0:  # empty, or finite
        return False
    return bool(pc.any(pc.is_nan(arr)).as_py())


class _BoolNode(_Node):
    __slots__ = ("values",)

    def __init__(self) -> None:
        super().__init__()
        self.values = _new()

    def _update(self, arr: pa.Array) -> None:
        if arr.null_count:
            arr = pc.fill_null(arr, False)
        self.values.update(_fixed_view(pc.cast(arr, pa.uint8()), 1))

    def digests(self) -> list[bytes]:
        return [self.validity.digest(), self.values.digest()]


class _VarNode(_Node):
    """utf8 / binary: u64 length per row (null: 0), then the valid rows' bytes."""

    __slots__ = ("data", "lengths")

    def __init__(self) -> None:
        super().__init__()
        self.lengths = _new()
        self.data = _new()

    def _update(self, arr: pa.Array) -> None:
        lengths = _lengths(arr, pc.binary_length)
        start, end = _span(arr)
        if arr.null_count:
            # Arrow lets a null slot own a non-empty segment of the data buffer; drop such
            # bytes (rare) by rebuilding the array with nulls as empty values.
            total = pc.sum(lengths).as_py() or 0
            if total != end - start:
                empty = "" if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else b""
                arr = pc.fill_null(arr, pa.scalar(empty, arr.type))
                start, end = _span(arr)
                if total != end - start:  # pragma: no cover - would be an Arrow bug
                    raise CairnError("logical hash: could not compact a variable-width array")
        _feed_u64(self.lengths, lengths)
        if end > start:
            self.data.update(memoryview(arr.buffers()[2])[start:end])

    def digests(self) -> list[bytes]:
        return [self.validity.digest(), self.lengths.digest(), self.data.digest()]


def _span(arr: pa.Array) -> tuple[int, int]:
    """Byte range [start, end) of the data buffer that ``arr``'s rows cover."""
    n = len(arr)
    offsets = arr.buffers()[1]
    if n == 0 or offsets is None:
        return 0, 0
    fmt = "<q" if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else "<i"
    size = struct.calcsize(fmt)
    (start,) = struct.unpack_from(fmt, offsets, arr.offset * size)
    (end,) = struct.unpack_from(fmt, offsets, (arr.offset + n) * size)
    return start, end


class _ListNode(_Node):
    """list / large_list: lengths per row (null: 0), then the elements of valid rows."""

    __slots__ = ("child", "lengths")

    def __init__(self, value_type: pa.DataType) -> None:
        super().__init__()
        self.lengths = _new()
        self.child = _make_node(value_type)

    def _update(self, arr: pa.Array) -> None:
        _feed_u64(self.lengths, _lengths(arr, pc.list_value_length))
        self.child.update(arr.flatten())  # skips null rows, honours slicing

    def digests(self) -> list[bytes]:
        return [self.validity.digest(), self.lengths.digest(), *self.child.digests()]


class _FixedSizeListNode(_Node):
    """fixed_size_list: the elements of valid rows (lengths follow from the type)."""

    __slots__ = ("child",)

    def __init__(self, value_type: pa.DataType) -> None:
        super().__init__()
        self.child = _make_node(value_type)

    def _update(self, arr: pa.Array) -> None:
        self.child.update(arr.flatten())  # skips null rows, honours slicing

    def digests(self) -> list[bytes]:
        return [self.validity.digest(), *self.child.digests()]


class _MapNode(_Node):
    """map<K,V>: lengths per row (null: 0), then keys and values of valid rows' entries."""

    __slots__ = ("items", "keys", "lengths")

    def __init__(self, key_type: pa.DataType, item_type: pa.DataType) -> None:
        super().__init__()
        self.lengths = _new()
        self.keys = _make_node(key_type)
        self.items = _make_node(item_type)

    def _update(self, arr: pa.Array) -> None:
        as_list = pc.cast(arr, pa.list_(pa.field("entries", arr.values.type, nullable=False)))
        _feed_u64(self.lengths, _lengths(as_list, pc.list_value_length))
        key, item = as_list.flatten().flatten()
        self.keys.update(key)
        self.items.update(item)

    def digests(self) -> list[bytes]:
        return [
            self.validity.digest(),
            self.lengths.digest(),
            *self.keys.digests(),
            *self.items.digests(),
        ]


class _StructNode(_Node):
    """struct: each field as a child of the same rows (null where the struct is null)."""

    __slots__ = ("children",)

    def __init__(self, type_: pa.StructType) -> None:
        super().__init__()
        self.children = [_make_node(type_.field(i).type) for i in range(type_.num_fields)]

    def _update(self, arr: pa.Array) -> None:
        for node, child in zip(self.children, arr.flatten(), strict=True):
            node.update(child)  # flatten() merges the struct's validity into each field

    def digests(self) -> list[bytes]:
        out = [self.validity.digest()]
        for node in self.children:
            out.extend(node.digests())
        return out


def _clone(node: _Node) -> _Node:
    """``node`` and its children with copies of their streams (every field is a stream, a child node, a list of
    them or an immutable value)."""
    twin = object.__new__(type(node))
    for cls in type(node).__mro__:
        for name in getattr(cls, "__slots__", ()):
            value = getattr(node, name)
            if isinstance(value, _Node):
                value = _clone(value)
            elif isinstance(value, list):
                value = [_clone(c) for c in value]
            elif hasattr(value, "copy"):  # a blake3 stream
                value = value.copy()
            setattr(twin, name, value)
    return twin


def _make_node(type_: pa.DataType) -> _Node:
    t = pa.types
    if t.is_dictionary(type_) or t.is_run_end_encoded(type_):
        return _make_node(type_.value_type)
    if t.is_null(type_):
        return _NullNode()
    if t.is_boolean(type_):
        return _BoolNode()
    if t.is_floating(type_):
        return _FixedNode(type_.bit_width // 8, is_float=True)
    if t.is_decimal(type_):
        return _FixedNode(16 if type_.precision <= 38 else 32, is_float=False)
    if t.is_integer(type_) or (t.is_temporal(type_) and not t.is_interval(type_)) or t.is_fixed_size_binary(type_):
        return _FixedNode(type_.bit_width // 8, is_float=False)
    if (
        t.is_string(type_)
        or t.is_large_string(type_)
        or t.is_string_view(type_)
        or t.is_binary(type_)
        or t.is_large_binary(type_)
        or t.is_binary_view(type_)
    ):
        return _VarNode()
    if t.is_map(type_):
        return _MapNode(type_.key_type, type_.item_type)
    if t.is_list(type_) or t.is_large_list(type_):
        return _ListNode(type_.value_type)
    if t.is_fixed_size_list(type_):
        return _FixedSizeListNode(type_.value_type)
    if t.is_struct(type_):
        return _StructNode(type_)
    raise InvalidInput(f"logical hash: unsupported Arrow type {type_}")  # pragma: no cover


# --------------------------------------------------------------------------- the hasher

_PARALLEL_CELLS = 1 << 16  # below this many cells an update runs on the calling thread
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor | None:
    global _POOL
    workers = min(os.cpu_count() or 1, 8)
    if workers < 2:
        return None
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="cairn-logical-hash")
        return _POOL


def _feed_column(node: _Node, chunks: list[pa.Array]) -> None:
    for chunk in chunks:
        node.update(chunk)


class LogicalHasher:
    """Incremental logical hash over batches that follow one schema.

    ``update`` takes RecordBatches or Tables whose columns have, position by position, the
    same canonical types as ``schema`` (names are ignored; ``string`` may follow
    ``large_string``, dictionary may follow plain, …). ``finish`` returns the hash of all
    rows so far; it does not end the hasher (more updates may follow). One hasher is fed
    from one thread at a time; large updates hash their columns on a shared thread pool.
    """

    def __init__(self, schema: pa.Schema) -> None:
        if sys.byteorder != "little":  # pragma: no cover
            raise CairnError("logical hash: big-endian hosts are not supported")
        if not isinstance(schema, pa.Schema):
            raise InvalidInput("LogicalHasher needs a pyarrow Schema")
        self.schema = schema
        self.types = [canonical_type(f.type) for f in schema]
        self._nodes = [_make_node(f.type) for f in schema]
        self.rows = 0

    def update(self, data: pa.RecordBatch | pa.Table) -> None:
        if isinstance(data, pa.RecordBatch):
            columns = [[c] for c in data.columns]
        elif isinstance(data, pa.Table):
            columns = [c.chunks for c in data.columns]
        else:
            raise InvalidInput(f"logical hash: expected a RecordBatch or Table, got {type(data).__name__}")
        if len(columns) != len(self._nodes):
            raise InvalidInput(f"logical hash: {len(columns)} columns where the schema has {len(self._nodes)}")
        # Check every column before feeding any, so that a refused update leaves no trace.
        for i, (field, want) in enumerate(zip(data.schema, self.types, strict=True)):
            got = canonical_type(field.type)
            if got != want:
                raise InvalidInput(f"logical hash: column {i} is {got}, the schema says {want}")
        work = [(node, chunks) for node, chunks in zip(self._nodes, columns, strict=True)]
        pool = _pool() if len(work) > 1 and data.num_rows * len(work) >= _PARALLEL_CELLS else None
        if pool is None:
            for node, chunks in work:
                _feed_column(node, chunks)
        else:
            # Columns are independent streams: hash them side by side (pyarrow.compute and
            # blake3 release the GIL). Each column stays on one thread, in order.
            futures = [pool.submit(_feed_column, node, chunks) for node, chunks in work]
            wait(futures)  # all done before any error is raised: no thread left feeding
            for future in futures:
                future.result()
        self.rows += data.num_rows

    def copy(self) -> LogicalHasher:
        """An independent hasher in this one's state: the rows so far, more to follow (an appended version's hash
        resumes from its older version's, node.services.datasets.version_hashes)."""
        twin = LogicalHasher.__new__(LogicalHasher)
        twin.schema, twin.types, twin.rows = self.schema, list(self.types), self.rows
        twin._nodes = [_clone(n) for n in self._nodes]
        return twin

    def finish(self) -> LogicalHash:
        h = blake3.blake3()
        h.update(HEADER)
        h.update(_U64.pack(self.rows))
        h.update(_U64.pack(len(self._nodes)))
        for type_string, node in zip(self.types, self._nodes, strict=True):
            encoded = type_string.encode("utf-8")
            h.update(_U64.pack(len(encoded)))
            h.update(encoded)
            for d in node.digests():
                h.update(d)
        return LogicalHash(h.digest())


def logical_hash(
    data: pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch | pa.Table],
    schema: pa.Schema | None = None,
) -> LogicalHash:
    """Logical hash of a Table, a RecordBatch, a RecordBatchReader, or an iterable of
    batches/tables (in order). An empty iterable needs ``schema``."""
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        whole = LogicalHasher(schema if schema is not None else data.schema)
        whole.update(data)
        return whole.finish()
    if isinstance(data, pa.RecordBatchReader) and schema is None:
        schema = data.schema
    hasher = LogicalHasher(schema) if schema is not None else None
    for item in data:
        if hasher is None:
            if not isinstance(item, (pa.Table, pa.RecordBatch)):
                raise InvalidInput(f"logical hash: expected RecordBatches or Tables, got {type(item).__name__}")
            hasher = LogicalHasher(item.schema)
        hasher.update(item)
    if hasher is None:
        raise InvalidInput("logical hash: an empty stream of batches needs a schema")
    return hasher.finish()
